"""Parallel tools: turn wall time with slow tools, sequential against ``parallel_tools=True``.

The scripted model asks for K calls of a tool that sleeps, in one reply, then submits; the
engine answers at once, so the turn's wall time is the tools' (sync call: a thread pool;
``acall``: tasks).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import dspy

import dspy_imp
from dspy_imp.testing import ScriptedLM, call, reply

DELAY = 0.05


def slow(where: str) -> str:
    """Look somewhere, slowly."""
    time.sleep(DELAY)
    return f"nothing at {where}"


async def aslow(where: str) -> str:
    """Look somewhere, slowly (async)."""
    await asyncio.sleep(DELAY)
    return f"nothing at {where}"


def _script(calls: int) -> ScriptedLM:
    return ScriptedLM(
        [
            reply(calls=[call("look", {"where": f"place {i}"}, id=f"c{i}") for i in range(calls)]),
            reply(calls=[call("submit", {"answer": "found"}, id="s")]),
        ]
    )


def turn_ms(calls: int, parallel: bool, asynchronous: bool) -> float:
    tool = dspy.Tool(aslow if asynchronous else slow, name="look")
    agent = dspy_imp.ReActV2("question -> answer", tools=[tool], parallel_tools=parallel, finish="submit")
    with dspy.context(lm=_script(calls)):
        start = time.perf_counter()
        if asynchronous:
            prediction: Any = asyncio.run(agent.acall(question="where?"))
        else:
            prediction = agent(question="where?")
        elapsed = time.perf_counter() - start
    assert prediction.answer == "found", prediction
    return elapsed * 1e3


def parallel(calls_list: list[int]) -> list[dict[str, Any]]:
    rows = []
    for calls in calls_list:
        for asynchronous in (False, True):
            row = {
                "calls": calls,
                "tool_ms": DELAY * 1e3,
                "mode": "acall" if asynchronous else "call",
                "sequential_ms": turn_ms(calls, False, asynchronous),
                "parallel_ms": turn_ms(calls, True, asynchronous),
            }
            rows.append(row)
    return rows


if __name__ == "__main__":
    for row in parallel([1, 4, 8]):
        print(row)
