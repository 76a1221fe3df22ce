"""``dspy.Evaluate(num_threads=8)`` over a program with two stdio MCP servers, then exit.

Run by tests/test_mcp_stdio.py as its own process: prints one JSON line (the score, the sessions
each server opened, the server processes alive before exit) and exits without closing the
servers, so the exit hook of ``dspy_imp.mcp`` must end them.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import dspy

import dspy_imp
from dspy_imp import mcp
from dspy_imp.testing import ScriptedLM, call, reply

HERE = Path(__file__).parent


def respond(request: Any) -> Any:
    tool_messages = [m for m in request.messages if m["role"] == "tool"]
    if not tool_messages:
        word = request.messages[-1]["content"].rsplit("word ", 1)[-1].split()[0]
        return reply(
            "both",
            calls=[
                call("time_get_current_time", {"timezone": "UTC"}, id="t1"),
                call("test_echo", {"text": word}, id="t2"),
            ],
        )
    echoed = tool_messages[-1]["content"]
    return reply(f"[[ ## answer ## ]]\n{echoed}\n\n[[ ## completed ## ]]")


def children() -> list[int]:
    found: list[int] = []
    for task in Path("/proc/self/task").iterdir():
        try:
            found.extend(int(pid) for pid in (task / "children").read_text().split())
        except FileNotFoundError:  # a thread that ended since the listing: it has no children
            continue
    return sorted(found)


def main(marks: str) -> None:
    clock = mcp.stdio(sys.executable, ["-m", "mcp_server_time", "--local-timezone=UTC"], name="time", prefix="time")
    test = mcp.stdio(
        sys.executable, [str(HERE / "mcp_test_server.py")], env={"MCP_TEST_MARKS": marks}, name="test", prefix="test"
    )
    agent = dspy_imp.ReActV2("question -> answer", tools=[clock, test], parallel_tools=True)
    devset = [
        dspy.Example(question=f"Say the word w{i} please", answer=f"w{i}").with_inputs("question") for i in range(16)
    ]
    evaluate = dspy.Evaluate(
        devset=devset, metric=lambda ex, pred, trace=None: pred.answer == ex.answer, num_threads=8,
        display_progress=False, provide_traceback=True,
    )  # fmt: skip
    with dspy.context(lm=ScriptedLM(respond)):
        result = evaluate(agent)
    report = {"score": result.score, "sessions": [clock.sessions_opened, test.sessions_opened], "children": children()}
    print(json.dumps(report))


if __name__ == "__main__":
    main(sys.argv[1])
