"""The typed events a turn sends an observer (what ``dspy_imp.web`` encodes), and that watching a
turn this way changes nothing else: ``dspy.streamify`` streams as before beside it. A sub-agent's
call is reported as a call of its caller, and its turn's events come wrapped (``SubAgentEvent``)."""

from __future__ import annotations

import contextvars
import functools
from typing import Any

import anyio.to_thread
import dspy
import pytest
from dspy.streaming import StreamResponse

import dspy_imp
from dspy_imp._records.outcomes import Reply
from dspy_imp._watch.events import (
    ReasoningDelta,
    RequestEnded,
    RequestStarted,
    SubAgentEvent,
    TextDelta,
    ToolEnded,
    ToolStarted,
    observing,
)
from dspy_imp.testing import ScriptedLM, call, reply


def lookup(city: str) -> str:
    """Find a city's station."""
    return f"station-{city.lower()}"


def script() -> list[Any]:
    return [
        reply(calls=[call("lookup", {"city": "Paris"}, id="c1"), call("nope", {}, id="c2")], reasoning="Look first."),
        reply("Sunny in Paris."),
    ]


async def test_an_observer_sees_each_request_its_text_and_each_call_with_its_recorded_id() -> None:
    seen: list[Any] = []
    agent = dspy_imp.ReActV2("city -> answer", tools=[lookup])
    with dspy.context(lm=ScriptedLM(script())), observing(seen.append):
        pred = await agent.acall(city="Paris")
    ended = [e for e in seen if isinstance(e, RequestEnded)]
    assert [type(e) for e in seen if not isinstance(e, RequestEnded)] == [
        RequestStarted,
        ReasoningDelta,
        ToolStarted,
        ToolEnded,
        ToolStarted,
        ToolEnded,
        RequestStarted,
        TextDelta,
    ]
    assert seen[0] == RequestStarted(1, "step", "text")
    assert seen[1] == ReasoningDelta(1, "Look first.")
    assert seen[3] == ToolStarted("c1", "lookup", {"city": "Paris"})
    assert seen[4] == ToolEnded("c1", "lookup", "station-paris", False)
    unknown = seen[6]
    assert isinstance(unknown, ToolEnded) and unknown.call_id == "c2" and unknown.error
    assert seen[-2] == TextDelta(2, "Sunny in Paris.")
    assert [e.number for e in ended] == [1, 2] and all(isinstance(e.outcome, Reply) for e in ended)
    recorded = pred.metadata.history.messages[0]
    assert [c["id"] for c in recorded["tool_calls"]] == ["c1", "c2"]
    assert recorded["tool_call_results"][1]["result"] == unknown.value  # what the model read


def test_without_an_observer_nothing_is_watched() -> None:
    from dspy_imp._watch.streaming import Watch

    assert Watch.of(dspy_imp.ReActV2("city -> answer", tools=[lookup])) is None


async def test_streamify_streams_as_before_beside_an_observer() -> None:
    agent = dspy_imp.ReActV2("city -> answer", tools=[lookup])
    seen: list[Any] = []
    listened = dspy.streamify(agent, stream_listeners=[dspy_imp.StreamListener("answer")], is_async_program=True)
    raw = dspy.streamify(agent, is_async_program=True)
    with observing(seen.append):
        with dspy.context(lm=ScriptedLM(script())):
            items = [item async for item in listened(city="Paris")]
        with dspy.context(lm=ScriptedLM(script())):
            chunks = [item async for item in raw(city="Paris")]
    answer = "".join(i.chunk for i in items if isinstance(i, StreamResponse))
    assert answer == items[-1].answer == "Sunny in Paris."
    assert [e.text for e in seen if isinstance(e, TextDelta)] == ["Sunny in Paris.", "Sunny in Paris."]
    # No listener: the LM's raw chunks pass through to the consumer, as DSPy streams any program.
    assert any(getattr(c, "choices", None) for c in chunks[:-1]) and isinstance(chunks[-1], dspy.Prediction)


@pytest.mark.parametrize("sync", [False, True], ids=["async", "sync"])
async def test_a_sub_agents_call_is_its_callers_and_its_events_name_the_agent_and_the_call(sync: bool) -> None:
    coder = dspy_imp.ReActV2("task -> code", tools=[lookup])
    researcher = dspy_imp.ReActV2("question -> findings", tools=[coder.as_tool(name="coder")])
    triage = dspy_imp.ReActV2("ticket -> reply", tools=[researcher.as_tool(name="researcher")])
    triage.react.lm = ScriptedLM([reply(calls=[call("researcher", {"question": "where?"}, id="p1")]), reply("Lyon.")])
    researcher.react.lm = ScriptedLM([reply(calls=[call("coder", {"task": "t"}, id="r1")]), reply("In Lyon.")])
    coder.react.lm = ScriptedLM([reply(calls=[call("lookup", {"city": "Lyon"}, id="c1")]), reply("print(1)")])
    seen: list[Any] = []
    with observing(seen.append):
        if sync:  # observed, a sync turn runs in a worker thread (as the web app runs it)
            await anyio.to_thread.run_sync(contextvars.copy_context().run, functools.partial(triage, ticket="Where?"))
        else:
            await triage.acall(ticket="Where?")
    own = [e for e in seen if not isinstance(e, SubAgentEvent)]
    assert [e for e in own if isinstance(e, ToolStarted | ToolEnded)] == [
        ToolStarted("p1", "researcher", {"question": "where?"}),
        ToolEnded("p1", "researcher", "In Lyon.", False),  # what the triage's model read
    ]
    assert [e.number for e in own if isinstance(e, RequestStarted)] == [1, 2]
    nested = [(e.agent, e.call_id, e.event) for e in seen if isinstance(e, SubAgentEvent)]
    calls = [(agent, path, e) for agent, path, e in nested if isinstance(e, ToolStarted | ToolEnded)]
    assert calls == [
        ("researcher", "p1", ToolStarted("r1", "coder", {"task": "t"})),
        ("researcher/coder", "p1/r1", ToolStarted("c1", "lookup", {"city": "Lyon"})),
        ("researcher/coder", "p1/r1", ToolEnded("c1", "lookup", "station-lyon", False)),
        ("researcher", "p1", ToolEnded("r1", "coder", "print(1)", False)),
    ]
    numbers = [(agent, e.number) for agent, _, e in nested if isinstance(e, RequestStarted)]
    assert numbers == [("researcher", 1), ("researcher/coder", 1), ("researcher/coder", 2), ("researcher", 2)]
