"""A consumer that closes a sync ``dspy.streamify`` stream stops the turn at its next effect, with
the history kept (issue 23, point 10); a consumer that reads to the end sees what DSPy hands it."""

from __future__ import annotations

import asyncio
import importlib
import threading
from typing import Any

import dspy
import pytest
from dspy.streaming import StatusMessage
from helpers import TA

import dspy_imp
from dspy_imp import StatusMessageProvider
from dspy_imp.testing import ScriptedLM, call, reply

LOOK = reply(calls=[call("look", {"where": "shelf"}, id="c1")])


class Recorded(dspy_imp.ReActV2):
    """Keeps what stopped its turn, and says when the turn is over (its thread outlives the stream)."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.stops: list[BaseException] = []
        self.over = threading.Event()

    def forward(self, **kwargs: Any) -> Any:
        try:
            return super().forward(**kwargs)
        except BaseException as stop:
            self.stops.append(stop)
            raise
        finally:
            self.over.set()

    async def aforward(self, **kwargs: Any) -> Any:
        try:
            return await super().aforward(**kwargs)
        except BaseException as stop:
            self.stops.append(stop)
            raise
        finally:
            self.over.set()


class Waiting:
    """``look``, which returns only once the test has closed the stream."""

    def __init__(self) -> None:
        self.__name__ = "look"
        self.__doc__ = "Look at a thing"
        self.runs: list[str] = []
        self.closed = threading.Event()
        self.two = threading.Event()  # two runs have started

    def __call__(self, where: str = "here") -> dict[str, bool]:
        self.runs.append(where)
        if len(self.runs) == 2:
            self.two.set()
        assert self.closed.wait(30), "the test closes the stream"
        return {"seen": True}


def test_closing_after_the_first_status_line_stops_the_turn():
    look = Waiting()
    agent = Recorded(TA, tools=[look])
    lm = ScriptedLM([LOOK, LOOK, LOOK, reply("On the shelf.")])
    with dspy.context(lm=lm):
        stream = dspy.streamify(agent, status_message_provider=StatusMessageProvider(), async_streaming=False)(
            intent="keys?"
        )
        first = next(item for item in stream if isinstance(item, StatusMessage))  # raw chunks pass first
        stream.close()
    look.closed.set()
    assert agent.over.wait(30), "the turn ends"

    assert first.message == 'Calling look({"where": "shelf"})'
    assert len(lm.requests) == 1  # before: all four requests
    assert look.runs == ["shelf"]  # before: three runs
    (stop,) = agent.stops
    assert isinstance(stop, dspy_imp.StreamClosed)
    (entry,) = stop.dspy_imp_history.messages  # what ran is kept: the call and its result
    assert entry["intent"] == "keys?"
    assert entry["tool_calls"] == [{"id": "c1", "name": "look", "args": {"where": "shelf"}}]
    assert [(r["name"], r["result"], r["error"]) for r in entry["tool_call_results"]] == [
        ("look", {"seen": True}, False)
    ]


def test_reading_to_the_end_is_as_before(how):
    look = Waiting()
    look.closed.set()
    lm = ScriptedLM([LOOK, reply("On the shelf.")])
    with dspy.context(lm=lm):
        streamed = dspy.streamify(
            dspy_imp.ReActV2(TA, tools=[look]),
            status_message_provider=StatusMessageProvider(),
            is_async_program=how == "async",
            async_streaming=False,
        )
        items = list(streamed(intent="keys?"))
    assert getattr(importlib.import_module("dspy.streaming.streamify").apply_sync_streaming, "dspy_imp_closing", False)
    assert [i.message for i in items if isinstance(i, StatusMessage)] == [
        'Calling look({"where": "shelf"})',
        'look returned: {"seen": true}',
        "Turn ended: answered",
    ]
    assert isinstance(items[-1], dspy_imp.Prediction) and items[-1].answer == "On the shelf."
    assert len(lm.requests) == 2


def test_a_program_error_still_reaches_a_sync_consumer():
    class Broken(dspy.Module):
        def forward(self, **kwargs: Any) -> Any:
            raise RuntimeError("broken")

    dspy_imp.ReActV2(TA)  # installs the closing sync stream
    with pytest.raises(RuntimeError, match="broken"):
        list(dspy.streamify(Broken(), async_streaming=False)(x=1))


def test_closing_during_a_parallel_batch_stops_the_turn_after_it():
    look = Waiting()
    agent = Recorded(TA, tools=[look], parallel_tools=True)
    both = reply(calls=[call("look", {"where": "shelf"}, id="c1"), call("look", {"where": "desk"}, id="c2")])
    lm = ScriptedLM([both, both, reply("On the shelf.")])
    with dspy.context(lm=lm):
        stream = dspy.streamify(agent, async_streaming=False)(intent="keys?")
        next(item for item in stream if isinstance(item, StatusMessage))
        assert look.two.wait(30), "both calls of the batch run"
        stream.close()
    look.closed.set()
    assert agent.over.wait(30), "the turn ends"

    assert len(lm.requests) == 1
    assert sorted(look.runs) == ["desk", "shelf"]  # the batch already running finishes
    (stop,) = agent.stops
    assert isinstance(stop, dspy_imp.StreamClosed)
    (entry,) = stop.dspy_imp_history.messages
    assert [r["id"] for r in entry["tool_call_results"]] == ["c1", "c2"]


def test_an_async_consumer_that_closes_stops_a_sync_program_too():
    look = Waiting()
    agent = Recorded(TA, tools=[look])
    lm = ScriptedLM([LOOK, LOOK, LOOK, reply("On the shelf.")])

    async def consume() -> None:
        stream = dspy.streamify(agent)(intent="keys?")
        async for item in stream:
            if isinstance(item, StatusMessage):
                break
        await stream.aclose()

    with dspy.context(lm=lm):
        asyncio.run(consume())
    look.closed.set()
    assert agent.over.wait(30), "the turn ends"

    assert len(lm.requests) == 1  # before: the turn went on in the thread DSPy abandons
    assert look.runs == ["shelf"]
    (stop,) = agent.stops
    assert isinstance(stop, dspy_imp.StreamClosed)
    assert [r["id"] for r in stop.dspy_imp_history.messages[0]["tool_call_results"]] == ["c1"]
