"""Issue 23, point 6: a tool raising a ``BaseException`` never loses the history.

A library's own ``BaseException`` subclass, or a ``CancelledError`` a library raised on its own,
is the call's failure: an observation, and the turn goes on. The caller's own cancellation and
``KeyboardInterrupt`` propagate, carrying the history recorded so far as ``dspy_imp_history``.
"""

from __future__ import annotations

import asyncio
from typing import Any

import dspy
import pytest

import dspy_imp
from dspy_imp.testing import ScriptedLM, call, reply

CHARGED: list[int] = []


class LibraryAbort(BaseException):
    """A library's own BaseException subclass."""


def charge(amount: int) -> str:
    """Charge the card."""
    CHARGED.append(amount)
    return "charged"


def library_abort() -> str:
    """A tool whose library raises its own BaseException."""
    raise LibraryAbort("gave up")


def library_cancelled() -> str:
    """A tool whose library raises CancelledError on its own."""
    raise asyncio.CancelledError("the library's own")


async def alibrary_cancelled() -> str:
    """An async tool whose library raises CancelledError on its own."""
    raise asyncio.CancelledError("the library's own")


def interrupted() -> str:
    """A tool interrupted by the user (Ctrl-C)."""
    raise KeyboardInterrupt


@pytest.fixture(autouse=True)
def _no_charges() -> None:
    CHARGED.clear()


def _script(tool: str) -> ScriptedLM:
    return ScriptedLM(
        [
            reply(calls=[call("charge", {"amount": 5}, id="c1")]),
            reply(calls=[call(tool, {}, id="t1"), call("charge", {"amount": 7}, id="c2")]),
            reply("done"),
        ]
    )


@pytest.mark.parametrize(
    ("tool", "expected"),
    [
        (library_abort, "library_abort failed: gave up"),
        (library_cancelled, "library_cancelled failed: the library's own"),
    ],
)
@pytest.mark.parametrize("parallel", [False, True])
def test_a_tools_own_base_exception_is_an_observation(run, tool, expected, parallel):
    agent = dspy_imp.ReActV2("request -> answer", tools=[charge, tool], parallel_tools=parallel)
    lm = _script(tool.__name__)
    with dspy.context(lm=lm):
        pred = run(agent, request="Charge, then go on.")
    assert pred.answer == "done" and CHARGED == [5, 7]
    failed, charged = pred.metadata.history.messages[1]["tool_call_results"]
    assert (failed["error"], failed["result"], charged["result"]) == (True, expected, "charged")


@pytest.mark.parametrize("parallel", [False, True])
def test_an_async_tools_own_cancelled_error_is_an_observation(parallel):
    agent = dspy_imp.ReActV2("request -> answer", tools=[charge, alibrary_cancelled], parallel_tools=parallel)
    lm = _script("alibrary_cancelled")
    with dspy.context(lm=lm):
        pred = asyncio.run(agent.acall(request="Charge, then go on."))
    failed, _charged = pred.metadata.history.messages[1]["tool_call_results"]
    assert (failed["error"], failed["result"]) == (True, "alibrary_cancelled failed: the library's own")
    assert pred.answer == "done" and CHARGED == [5, 7]


def test_a_keyboard_interrupt_propagates_with_the_history(run):
    agent = dspy_imp.ReActV2("request -> answer", tools=[charge, interrupted])
    lm = _script("interrupted")
    with dspy.context(lm=lm), pytest.raises(KeyboardInterrupt) as raised:
        run(agent, request="Charge, then go on.")
    history = raised.value.dspy_imp_history
    assert len(history.messages) == 1 and CHARGED == [5]  # the step in progress is not recorded
    assert history.messages[0]["tool_calls"][0]["name"] == "charge"
    assert history.messages[0]["tool_call_results"][0]["result"] == "charged"


def test_cancelling_the_callers_task_propagates_with_the_history():
    started = asyncio.Event()

    async def slow() -> str:
        """A slow tool."""
        started.set()
        await asyncio.sleep(60)
        return "late"

    agent = dspy_imp.ReActV2("request -> answer", tools=[charge, slow])
    lm = _script("slow")

    async def scenario() -> Any:
        with dspy.context(lm=lm):
            task = asyncio.create_task(agent.acall(request="Charge, then wait."))
            await started.wait()
            task.cancel()
            with pytest.raises(asyncio.CancelledError) as raised:
                await task
            return raised.value

    cancelled = asyncio.run(scenario())
    history = cancelled.dspy_imp_history
    assert [m["tool_calls"][0]["name"] for m in history.messages] == ["charge"]
    assert CHARGED == [5]
