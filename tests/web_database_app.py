"""One web instance on a ``DatabaseStore``, for the multi-process tests (``test_web_database_instances``).

    python tests/web_database_app.py URL PORT FOLDER [LEASE]

The agent's model answers from the request alone (so any instance can take any turn): a tool
result is answered with text; a message asking for a refund calls ``refund`` (it needs approval);
any other message calls ``wait`` with the message as its name. ``wait`` writes ``started-NAME`` in
FOLDER, then waits until ``release-NAME`` exists there (the test releases it: nothing here depends
on the machine's speed). The store's clock is the real one plus the seconds in ``FOLDER/clock``,
so the test can move an instance past a dead instance's lease at once. LEASE is the store's lease
in seconds (30 by default; ``default``: the store's own default).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import uvicorn

import dspy_imp
import dspy_imp.web
from dspy_imp.testing import ScriptedLM, call, reply

URL, PORT, FOLDER = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3])


def wait(name: str) -> str:
    """Wait until the test releases ``name``."""
    (FOLDER / f"started-{name}").write_text("")
    end = time.monotonic() + 120
    while not (FOLDER / f"release-{name}").exists() and time.monotonic() < end:
        time.sleep(0.02)
    return f"{name} done"


def refund(order_id: str) -> str:
    """Refund an order."""
    (FOLDER / f"refunded-{order_id}").open("a").write(f"{PORT}\n")
    return f"order {order_id} refunded"


def answer(request: Any) -> Any:
    last = request.messages[-1]
    if last["role"] == "tool":
        return reply(f"finished: {last['content']}")
    text = str(last["content"])
    word = text.split("message ## ]]")[-1].split("[[")[0].strip() if "message ## ]]" in text else text.strip()
    ident = f"c{len(request.messages)}"
    if word.startswith("refund"):
        return reply(calls=[call("refund", {"order_id": "42"}, id=ident)])
    return reply(calls=[call("wait", {"name": word}, id=ident)])


def clock() -> float:
    offset = FOLDER / "clock"
    return time.time() + (float(offset.read_text()) if offset.exists() else 0.0)


agent = dspy_imp.ReActV2("message -> reply", tools=[wait, refund], needs_approval=[refund])
agent.set_lm(ScriptedLM(answer))
LEASE = sys.argv[4] if len(sys.argv) > 4 else "30"
store = (
    dspy_imp.web.DatabaseStore(URL, clock=clock)
    if LEASE == "default"
    else dspy_imp.web.DatabaseStore(URL, lease=float(LEASE), clock=clock)
)

if __name__ == "__main__":
    uvicorn.run(dspy_imp.web.app(agent, store=store), host="127.0.0.1", port=PORT, log_level="warning")
