"""Under ``acall`` no sync tool runs on the event loop's thread: single or parallel, with or without
``tool_timeouts``, the loop keeps answering while the tool blocks; its status lines still reach a
``dspy.streamify`` stream, in the sync and the async call.

The loop test runs ``acall`` only: a sync call has no event loop to keep answering (its tool runs in
the caller's own thread, or a worker when it has a bound). Nothing here waits on the wall clock: a
tool blocks until the test, running on the loop, releases it.
"""

from __future__ import annotations

import asyncio
import threading

import dspy
import pytest
from helpers import TA
from streaming_helpers import statuses, stream_items

import dspy_imp
from dspy_imp.testing import ScriptedLM, call, reply


class Blocking:
    """A sync tool that blocks its thread until released (at most 10 s: a tool on the loop's thread
    would keep the test from releasing it, and then returns ``"never released"``)."""

    def __init__(self, name: str) -> None:
        self.__name__ = name
        self.__doc__ = "Look it up."
        self.started = threading.Event()
        self.release = threading.Event()
        self.threads: list[int] = []

    def __call__(self, query: str) -> str:
        self.threads.append(threading.get_ident())
        self.started.set()
        return f"{self.__name__} found {query}" if self.release.wait(10) else "never released"


CASES = {
    "single": (["search"], False, None),
    "single, bounded": (["search"], False, {"search": 30}),
    "parallel": (["search", "browse"], True, None),
    "parallel, bounded": (["search", "browse"], True, 30),
}


def scripted(names: list[str]) -> ScriptedLM:
    calls = [call(name, {"query": name[0]}, id=f"c{i}") for i, name in enumerate(names, 1)]
    return ScriptedLM([reply(calls=calls), reply("Done.")])


def tool_messages(request) -> list[tuple[str, str]]:
    return [(m["tool_call_id"], m["content"]) for m in request.messages if m["role"] == "tool"]


async def until(condition) -> None:
    while not condition():
        await asyncio.sleep(0.001)


@pytest.mark.parametrize("case", CASES)
def test_the_loop_keeps_answering_while_a_sync_tool_blocks(case):
    names, parallel, timeouts = CASES[case]
    tools = [Blocking(name) for name in names]
    lm = scripted(names)
    agent = dspy_imp.ReActV2(TA, tools=tools, parallel_tools=parallel, tool_timeouts=timeouts)
    ticks = {"while blocked": 0}

    async def main() -> tuple[dspy.Prediction, int]:
        count = 0

        async def ticker() -> None:
            nonlocal count
            while True:
                count += 1
                await asyncio.sleep(0)

        async def releaser() -> None:
            await until(lambda: all(tool.started.is_set() for tool in tools))  # every tool blocks its thread
            blocked_at = count
            await until(lambda: count >= blocked_at + 3)
            ticks["while blocked"] = count - blocked_at
            for tool in tools:
                tool.release.set()

        ticking, releasing = asyncio.create_task(ticker()), asyncio.create_task(releaser())
        try:
            async with asyncio.timeout(30):
                with dspy.context(lm=lm):
                    pred = await agent.acall(intent="x")
                await releasing
        finally:
            ticking.cancel()
            for tool in tools:
                tool.release.set()
        return pred, threading.get_ident()

    pred, loop_thread = asyncio.run(main())
    assert pred.answer == "Done."
    assert tool_messages(lm.requests[1]) == [(f"c{i}", f"{n} found {n[0]}") for i, n in enumerate(names, 1)]
    assert ticks["while blocked"] >= 3  # the loop ran the ticker while every tool was blocked
    assert [len(tool.threads) for tool in tools] == [1] * len(tools)
    assert loop_thread not in {thread for tool in tools for thread in tool.threads}
    lm.assert_complete()


def quick(name: str):
    def tool(query: str) -> str:
        return f"{name} found {query}"

    tool.__name__, tool.__doc__ = name, "Look it up."
    return tool


@pytest.mark.parametrize("case", CASES)
def test_a_sync_tools_status_lines_reach_the_stream(how, case):
    names, parallel, timeouts = CASES[case]
    lm = scripted(names)
    agent = dspy_imp.ReActV2(TA, tools=[quick(n) for n in names], parallel_tools=parallel, tool_timeouts=timeouts)
    with dspy.context(lm=lm):
        items = stream_items(agent, how, [], intent="x")
    lines = statuses(items)  # "Calling ..." is DSPy's line, sent from the thread the tool ran in
    said = [f'Calling {n}({{"query": "{n[0]}"}})' for n in names] + [f"{n} returned: {n} found {n[0]}" for n in names]
    assert sorted(lines[:-1]) == sorted(said)  # a parallel batch's lines come in the order its calls run
    assert lines[-1] == "Turn ended: answered"
    lm.assert_complete()


@pytest.mark.parametrize("timeouts", [None, {"search": 30}])
def test_a_tools_own_timeout_error_is_its_failure_not_a_timeout(run, timeouts):
    def search(query: str) -> str:
        """Look it up."""
        raise TimeoutError("the index did not answer")

    lm = ScriptedLM([reply(calls=[call("search", {"query": "s"}, id="c1")]), reply("Done.")])
    agent = dspy_imp.ReActV2(TA, tools=[search], tool_timeouts=timeouts)
    with dspy.context(lm=lm):
        pred = run(agent, intent="x")
    [step, _] = pred.metadata.history.messages
    [result] = step["tool_call_results"]
    assert (result["error"], result["error_kind"]) == (True, "tool_error")
    assert "the index did not answer" in result["result"]
    assert tool_messages(lm.requests[1]) == [("c1", f"Error: {result['result']}")]
    lm.assert_complete()
