"""Event-loop lag of the web app under concurrent turns (a measurement, not a test).

    python -m benchmarks.web_loop_lag [--turns 200] [--rounds 3] [--store memory|sqlite|URL]

In one process: the app (``dspy_imp.web.app``) over ASGI, served (its lifespan started up first and
shut down last, as a server runs it), ``--turns`` conversations at once, each
running ``--rounds`` turns of a tool call (an async tool that waits 0.5 s, standing in for a
model's latency) then a 40-word answer, with a scripted model (answers from the request alone),
after one warm-up turn.
Meanwhile a probe sleeps 10 ms in a loop and records how late it wakes: the p50/p99/max of that
overshoot is the lag every stream on the loop feels. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import tempfile
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx

import dspy_imp
import dspy_imp.web
from dspy_imp.testing import ScriptedLM, call, reply

ANSWER = " ".join(f"word{n}" for n in range(40))


async def wait() -> str:
    """Wait as a model would."""
    await asyncio.sleep(0.5)
    return "waited"


def answer(request: Any) -> Any:
    if request.messages[-1]["role"] == "tool":
        return reply(ANSWER)
    return reply(calls=[call("wait", {}, id=f"c{len(request.messages)}")])


async def probe(lags: list[float], stop: asyncio.Event) -> None:
    while not stop.is_set():
        start = time.perf_counter()
        await asyncio.sleep(0.01)
        lags.append((time.perf_counter() - start - 0.01) * 1000)


async def conversation(http: httpx.AsyncClient, key: str, rounds: int) -> list[str]:
    """The errors of one conversation's turns: a status, or a RUN_ERROR's code."""
    errors = []
    for n in range(rounds):
        body = {"threadId": key, "runId": f"r{n}", "messages": [{"id": f"u{n}", "role": "user", "content": "Go"}]}
        response = await http.post("/ag-ui", json=body)
        if response.status_code != 200:
            errors.append(str(response.status_code))
        elif "RUN_FINISHED" not in response.text:
            errors.append(response.text.rsplit('"message":', 1)[-1][:160])
    return errors


@contextlib.asynccontextmanager
async def served(app: Any) -> AsyncIterator[None]:
    """The app's ASGI lifespan around the run, as a server runs it: started up, then shut down."""
    inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    told: asyncio.Queue[str] = asyncio.Queue()

    async def send(message: dict[str, Any]) -> None:
        await told.put(message["type"])

    await inbox.put({"type": "lifespan.startup"})
    scope = {"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}}
    task = asyncio.ensure_future(app(scope, inbox.get, send))
    if (said := await told.get()) != "lifespan.startup.complete":
        raise RuntimeError(f"the app did not start: {said}")
    try:
        yield
    finally:
        await inbox.put({"type": "lifespan.shutdown"})
        await task


async def main(turns: int, rounds: int, store_name: str) -> dict[str, Any]:
    agent = dspy_imp.ReActV2("message -> reply", tools=[wait])
    agent.set_lm(ScriptedLM(answer))
    if store_name == "memory":
        store: Any = dspy_imp.web.MemoryStore()
    elif store_name == "sqlite":
        store = dspy_imp.web.DatabaseStore(f"sqlite:///{tempfile.mkdtemp()}/lag.db")
    else:
        store = dspy_imp.web.DatabaseStore(store_name)
    app = dspy_imp.web.app(agent, store=store, max_turns=max(turns, 1))
    lags: list[float] = []
    stop = asyncio.Event()
    transport = httpx.ASGITransport(app=app)
    async with served(app), httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1", timeout=600) as http:
        await conversation(http, "warm-up", 1)  # the first turn's one-time costs (imports, caches) not counted
        probing = asyncio.ensure_future(probe(lags, stop))
        started = time.perf_counter()
        told = await asyncio.gather(*(conversation(http, f"c{n}", rounds) for n in range(turns)))
        errors = [e for one in told for e in one]
        took = time.perf_counter() - started
        stop.set()
        await probing
    if hasattr(store, "close"):
        store.close()
    cuts = statistics.quantiles(lags, n=100)
    return {
        "store": store_name if store_name in ("memory", "sqlite") else "url",
        "conversations": turns,
        "turns": turns * rounds,
        "errors": errors[:5],
        "error_count": len(errors),
        "turns_per_s": round(turns * rounds / took, 1),
        "lag_ms": {"p50": round(cuts[49], 1), "p99": round(cuts[98], 1), "max": round(max(lags), 1)},
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m benchmarks.web_loop_lag", description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=200, help="conversations at once")
    parser.add_argument("--rounds", type=int, default=3, help="turns per conversation")
    parser.add_argument("--store", default="memory", help="memory, sqlite, or a DatabaseStore URL")
    options = parser.parse_args()
    print(json.dumps(asyncio.run(main(options.turns, options.rounds, options.store))))
