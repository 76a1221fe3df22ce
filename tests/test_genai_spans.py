"""Spans in the OpenTelemetry GenAI conventions (``dspy_imp.tracing.instrument``): the tree and attributes
of each kind of turn, sync and async, every key read from ``opentelemetry-semantic-conventions``."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from typing import Any

import dspy
import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as ga
from opentelemetry.semconv._incubating.metrics import gen_ai_metrics as gm
from opentelemetry.semconv.attributes.error_attributes import ERROR_TYPE
from opentelemetry.trace import StatusCode

import dspy_imp
import dspy_imp.tracing
from dspy_imp.testing import ScriptedLM, call, fail, reply

OP = ga.GenAiOperationNameValues


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    dspy_imp.tracing.instrument(tracer_provider=provider)
    yield exporter
    dspy_imp.tracing.uninstrument()


def lookup(topic: str) -> str:
    """Look a topic up in the notes."""
    return f"notes on {topic}"


def tree(exporter: InMemorySpanExporter) -> list[Any]:
    """``(name, [children...])`` of each root, children in start order."""
    finished = sorted(exporter.get_finished_spans(), key=lambda s: s.start_time)
    by_parent: dict[Any, list[Any]] = {}
    for span in finished:
        by_parent.setdefault(span.parent.span_id if span.parent else None, []).append(span)

    def node(span: Any) -> Any:
        children = by_parent.get(span.context.span_id, [])
        return (span.name, [node(c) for c in children]) if children else span.name

    return [node(root) for root in by_parent.get(None, [])]


def named(exporter: InMemorySpanExporter, name: str) -> list[Any]:
    return sorted((s for s in exporter.get_finished_spans() if s.name == name), key=lambda s: s.start_time)


def chat_attributes(number: int, kind: str, usage: tuple[int, int], finish: str) -> dict[str, Any]:
    return {
        ga.GEN_AI_OPERATION_NAME: OP.CHAT.value,
        ga.GEN_AI_PROVIDER_NAME: ga.GenAiProviderNameValues.OPENAI.value,
        ga.GEN_AI_REQUEST_MODEL: "scripted",
        ga.GEN_AI_RESPONSE_MODEL: "scripted",
        ga.GEN_AI_RESPONSE_ID: f"scripted-{number}",
        ga.GEN_AI_RESPONSE_FINISH_REASONS: (finish,),
        ga.GEN_AI_USAGE_INPUT_TOKENS: usage[0],
        ga.GEN_AI_USAGE_OUTPUT_TOKENS: usage[1],
        ga.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS: 0,
        ga.GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS: 0,
        ga.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS: 0,
        "dspy_imp.request.kind": kind,
    }


def tool_attributes(name: str, call_id: str, outcome: str, description: str, **extra: Any) -> dict[str, Any]:
    return {
        ga.GEN_AI_OPERATION_NAME: OP.EXECUTE_TOOL.value,
        ga.GEN_AI_TOOL_NAME: name,
        ga.GEN_AI_TOOL_CALL_ID: call_id,
        ga.GEN_AI_TOOL_TYPE: "function",
        ga.GEN_AI_TOOL_DESCRIPTION: description,
        "dspy_imp.tool.outcome": outcome,
        **extra,
    }


def agent_attributes(name: str, usage: tuple[int, int], **ending: Any) -> dict[str, Any]:
    return {
        ga.GEN_AI_OPERATION_NAME: OP.INVOKE_AGENT.value,
        ga.GEN_AI_AGENT_NAME: name,
        ga.GEN_AI_PROVIDER_NAME: ga.GenAiProviderNameValues.OPENAI.value,
        ga.GEN_AI_REQUEST_MODEL: "scripted",
        ga.GEN_AI_USAGE_INPUT_TOKENS: usage[0],
        ga.GEN_AI_USAGE_OUTPUT_TOKENS: usage[1],
        ga.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS: 0,
        ga.GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS: 0,
        ga.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS: 0,
        **ending,
    }


def test_an_answered_turn_is_an_agent_span_over_its_requests_and_calls(spans, run):
    agent = dspy_imp.ReActV2("question -> answer", tools=[lookup])
    script = [
        reply(calls=[call("lookup", {"topic": "keys"}, id="c1")], usage=(10, 2)),
        reply("Under the mat.", usage=(20, 3)),
    ]
    with dspy.context(lm=ScriptedLM(script)):
        run(agent, question="Where is the key?")

    assert tree(spans) == [("invoke_agent ReActV2", ["chat scripted", "execute_tool lookup", "chat scripted"])]
    first, second = named(spans, "chat scripted")
    assert dict(first.attributes) == chat_attributes(1, "step", (10, 2), "tool_call")
    assert dict(second.attributes) == chat_attributes(2, "step", (20, 3), "stop")
    (tool,) = named(spans, "execute_tool lookup")
    assert dict(tool.attributes) == tool_attributes("lookup", "c1", "returned", "Look a topic up in the notes.")
    (turn,) = named(spans, "invoke_agent ReActV2")
    usage = {"requests": {"step": 2}, "input_tokens": 30, "output_tokens": 5, "total_tokens": 35}
    assert dict(turn.attributes) == agent_attributes(
        "ReActV2",
        (30, 5),
        **{
            "dspy_imp.termination.reason": "answered",
            "dspy_imp.termination.complete": True,
            "dspy_imp.termination.finish_reason": "stop",
            "dspy_imp.usage": json.dumps({**usage, "cached_tokens": 0, "cache_write_tokens": 0, "reasoning_tokens": 0}),
        },
    )
    assert {s.status.status_code for s in spans.get_finished_spans()} == {StatusCode.UNSET}
    assert ga.GEN_AI_INPUT_MESSAGES not in first.attributes  # content is opt-in


def test_a_paused_turn_and_its_resumption_are_two_agent_spans(spans, run):
    agent = dspy_imp.ReActV2("question -> answer", tools=[lookup], needs_approval=["lookup"])
    lm = ScriptedLM(
        [reply(calls=[call("lookup", {"topic": "keys"}, id="c1")], usage=(10, 2)), reply("Found.", usage=(20, 3))]
    )
    with dspy.context(lm=lm):
        paused = run(agent, question="Where is the key?")
        run(agent, history=paused.metadata.history, approvals={"c1": True})

    assert tree(spans) == [
        ("invoke_agent ReActV2", ["chat scripted"]),
        ("invoke_agent ReActV2", ["execute_tool lookup", "chat scripted"]),
    ]
    first, second = named(spans, "invoke_agent ReActV2")
    assert first.attributes["dspy_imp.termination.reason"] == "paused"
    assert first.attributes["dspy_imp.termination.complete"] is False
    assert json.loads(first.attributes["dspy_imp.termination.pending_calls"])[0]["id"] == "c1"
    assert second.attributes["dspy_imp.termination.reason"] == "answered"
    (tool,) = named(spans, "execute_tool lookup")
    assert tool.attributes[ga.GEN_AI_TOOL_CALL_ID] == "c1"
    assert tool.attributes["dspy_imp.tool.outcome"] == "returned"


def test_a_sub_agent_turn_nests_inside_the_tool_span_that_called_it(spans, run):
    child = dspy_imp.ReActV2("question -> findings", tools=[lookup])
    child.set_lm(
        ScriptedLM(
            [reply(calls=[call("lookup", {"topic": "order 7"}, id="k1")], usage=(30, 3)), reply("Lyon.", usage=(40, 4))]
        )
    )
    parent = dspy_imp.ReActV2("ticket -> answer", tools=[child.as_tool(name="researcher", description="Research.")])
    ask = reply(calls=[call("researcher", {"question": "where is order 7?"}, id="p1")], usage=(100, 10))
    with dspy.context(lm=ScriptedLM([ask, reply("It is in Lyon.", usage=(200, 20))])):
        run(parent, ticket="Where is my order?")

    assert tree(spans) == [
        (
            "invoke_agent ReActV2",
            [
                "chat scripted",
                (
                    "execute_tool researcher",
                    [("invoke_agent researcher", ["chat scripted", "execute_tool lookup", "chat scripted"])],
                ),
                "chat scripted",
            ],
        )
    ]
    (tool,) = named(spans, "execute_tool researcher")
    assert dict(tool.attributes) == tool_attributes("researcher", "p1", "returned", "Research.")
    (inner,) = named(spans, "invoke_agent researcher")
    assert inner.attributes[ga.GEN_AI_USAGE_INPUT_TOKENS] == 70
    (outer,) = named(spans, "invoke_agent ReActV2")
    assert outer.attributes[ga.GEN_AI_USAGE_INPUT_TOKENS] == 370  # the sub-agent's requests counted in


def test_parallel_calls_are_sibling_tool_spans_under_the_turn(spans, run):
    agent = dspy_imp.ReActV2("question -> answer", tools=[lookup], parallel_tools=True)
    calls = [call("lookup", {"topic": "a"}, id="c1"), call("lookup", {"topic": "b"}, id="c2")]
    with dspy.context(lm=ScriptedLM([reply(calls=calls, usage=(10, 2)), reply("Both.", usage=(20, 3))])):
        run(agent, question="a and b?")

    (root,) = tree(spans)
    assert root[0] == "invoke_agent ReActV2"
    assert sorted(root[1]) == ["chat scripted", "chat scripted", "execute_tool lookup", "execute_tool lookup"]
    assert sorted(s.attributes[ga.GEN_AI_TOOL_CALL_ID] for s in named(spans, "execute_tool lookup")) == ["c1", "c2"]


class Answer(dspy.Signature):
    """Answer the question, with a confidence."""

    question: str = dspy.InputField()
    answer: str = dspy.OutputField()
    confidence: float = dspy.OutputField()


def test_an_incomplete_turn_marks_refused_and_unexecuted_calls(spans, run):
    refuse_submit = lambda name, args: "not now" if name == "submit" else True  # noqa: E731
    agent = dspy_imp.ReActV2(Answer, tools=[lookup], tool_policy=refuse_submit)
    forced = reply(
        calls=[call("submit", {"answer": "mat", "confidence": 0.5}, id="s1"), call("lookup", {"topic": "k"}, id="s2")]
    )
    with dspy.context(lm=ScriptedLM([reply("I think it is under the mat.", usage=(8, 1)), forced])):
        pred = run(agent, question="Where is the key?")

    assert pred.metadata.termination_reason == "incomplete"
    (turn,) = named(spans, "invoke_agent Answer")
    assert turn.attributes["dspy_imp.termination.reason"] == "incomplete"
    assert turn.attributes["dspy_imp.termination.complete"] is False
    (submit,) = named(spans, "execute_tool submit")
    assert submit.attributes["dspy_imp.tool.outcome"] == "refused"
    assert submit.attributes["dspy_imp.tool.error_kind"] == "tool_denied"
    assert submit.status.status_code is StatusCode.ERROR and submit.attributes[ERROR_TYPE] == "tool_denied"
    (skipped,) = named(spans, "execute_tool lookup")
    assert skipped.attributes["dspy_imp.tool.outcome"] == "unexecuted"


def test_a_failed_turn_is_an_error_agent_span_over_error_request_spans(spans, run):
    agent = dspy_imp.ReActV2("question -> answer", tools=[lookup])
    with dspy.context(lm=ScriptedLM([fail.server_error(), fail.server_error()])), pytest.raises(dspy_imp.StepError):
        run(agent, question="Where is the key?")

    (root,) = tree(spans)
    assert root[0] == "invoke_agent ReActV2" and set(root[1]) == {"chat scripted"}
    (turn,) = named(spans, "invoke_agent ReActV2")
    assert turn.status.status_code is StatusCode.ERROR
    assert turn.attributes["dspy_imp.termination.reason"] == "step_error"
    assert turn.attributes[ERROR_TYPE]
    for request in named(spans, "chat scripted"):
        assert request.status.status_code is StatusCode.ERROR
        assert request.attributes[ERROR_TYPE] == "LMServerError"
        assert ga.GEN_AI_RESPONSE_MODEL not in request.attributes
        assert ga.GEN_AI_USAGE_INPUT_TOKENS not in request.attributes  # no usage, not 0


def test_content_is_captured_only_when_asked_redacted_and_without_media_bytes(run):
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    dspy_imp.tracing.instrument(tracer_provider=provider, capture_content=True)
    pixel = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="

    def secret(topic: str) -> str:
        """Read a note."""
        return "token: sk-live-abcdefghijklmnopqrstuv"

    try:
        agent = dspy_imp.ReActV2("question: str, photo: dspy.Image -> answer", tools=[secret])
        script = [reply(calls=[call("secret", {"topic": "k"}, id="c1")]), reply("Done.")]
        with dspy.context(lm=ScriptedLM(script)):
            run(agent, question="What is it?", photo=dspy.Image(f"data:image/png;base64,{pixel}"))
    finally:
        dspy_imp.tracing.uninstrument()

    everything = json.dumps([dict(s.attributes) for s in exporter.get_finished_spans()])
    assert pixel not in everything and "sk-live" not in everything
    first, second = sorted(
        (s for s in exporter.get_finished_spans() if s.name.startswith("chat")), key=lambda s: s.start_time
    )
    sent = json.loads(first.attributes[ga.GEN_AI_INPUT_MESSAGES])
    assert {"type": "blob", "modality": "image", "content": "[media omitted]"} in sent[-1]["parts"]
    assert json.loads(first.attributes[ga.GEN_AI_OUTPUT_MESSAGES]) == [
        {
            "role": "assistant",
            "parts": [{"type": "tool_call", "id": "c1", "name": "secret", "arguments": {"topic": "k"}}],
            "finish_reason": "tool_call",
        }
    ]
    assert json.loads(second.attributes[ga.GEN_AI_INPUT_MESSAGES])[-1]["role"] == "tool"
    (tool,) = [s for s in exporter.get_finished_spans() if s.name == "execute_tool secret"]
    assert tool.attributes[ga.GEN_AI_TOOL_CALL_ARGUMENTS] == '{"topic": "k"}'
    assert "[REDACTED]" in tool.attributes[ga.GEN_AI_TOOL_CALL_RESULT]


def test_the_client_metrics_carry_the_conventions_attributes(run):
    reader = InMemoryMetricReader()
    meters = MeterProvider(metric_readers=[reader])
    dspy_imp.tracing.instrument(tracer_provider=TracerProvider(), meter_provider=meters)
    try:
        agent = dspy_imp.ReActV2("question -> answer", tools=[lookup])
        with dspy.context(lm=ScriptedLM([reply("Here.", usage=(12, 4))])):
            run(agent, question="Where?")
    finally:
        dspy_imp.tracing.uninstrument()

    data = reader.get_metrics_data()
    found = {m.name: m for rm in data.resource_metrics for sm in rm.scope_metrics for m in sm.metrics}
    base = {
        ga.GEN_AI_OPERATION_NAME: OP.CHAT.value,
        ga.GEN_AI_PROVIDER_NAME: "openai",
        ga.GEN_AI_REQUEST_MODEL: "scripted",
        ga.GEN_AI_RESPONSE_MODEL: "scripted",
    }
    tokens = {
        p.attributes[ga.GEN_AI_TOKEN_TYPE]: (p.sum, dict(p.attributes))
        for p in found[gm.GEN_AI_CLIENT_TOKEN_USAGE].data.data_points
    }
    assert tokens == {
        "input": (12, {**base, ga.GEN_AI_TOKEN_TYPE: "input"}),
        "output": (4, {**base, ga.GEN_AI_TOKEN_TYPE: "output"}),
    }
    (duration,) = found[gm.GEN_AI_CLIENT_OPERATION_DURATION].data.data_points
    assert dict(duration.attributes) == base and duration.count == 1
    assert found[gm.GEN_AI_CLIENT_OPERATION_DURATION].unit == "s"
    # The conventions' explicit bucket boundaries, not the SDK's defaults (made for milliseconds).
    assert list(duration.explicit_bounds) == [0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12,
                                              10.24, 20.48, 40.96, 81.92]  # fmt: skip
    (point, *_) = found[gm.GEN_AI_CLIENT_TOKEN_USAGE].data.data_points
    assert list(point.explicit_bounds) == [1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576,
                                           4194304, 16777216, 67108864]  # fmt: skip


def test_a_conversation_id_labels_the_turn_and_its_requests(spans, run):
    agent = dspy_imp.ReActV2("question -> answer")
    with dspy.context(lm=ScriptedLM([reply("Here.")])), dspy_imp.tracing.conversation("ticket-4711"):
        run(agent, question="Where?")
    for span in spans.get_finished_spans():
        assert span.attributes[ga.GEN_AI_CONVERSATION_ID] == "ticket-4711"


def test_bad_options_name_the_option():
    with pytest.raises(dspy_imp.ConfigurationError, match="capture_content"):
        dspy_imp.tracing.instrument(capture_content="yes")  # type: ignore[arg-type]
    with pytest.raises(dspy_imp.ConfigurationError, match="tracer_provider"):
        dspy_imp.tracing.instrument(tracer_provider=object())
    with pytest.raises(dspy_imp.ConfigurationError, match="conversation_id"), dspy_imp.tracing.conversation(""):
        pass


def test_nothing_is_emitted_when_not_instrumented(run):
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    dspy_imp.tracing.instrument(tracer_provider=provider)
    dspy_imp.tracing.uninstrument()
    with dspy.context(lm=ScriptedLM([reply("Here.")])):
        run(dspy_imp.ReActV2("question -> answer"), question="Where?")
    assert exporter.get_finished_spans() == ()


def test_a_timed_out_call_is_an_error_tool_span_marked_timed_out(spans, run):
    release = threading.Event()

    def search(query: str) -> str:
        """Search the web."""
        release.wait(30)  # blocks until the test is over: the 0.05 s bound passes first, whatever the machine
        return "late"

    agent = dspy_imp.ReActV2("question -> answer", tools=[search], tool_timeouts={"search": 0.05})
    try:
        with dspy.context(lm=ScriptedLM([reply(calls=[call("search", {"query": "cats"}, id="c1")]), reply("None.")])):
            run(agent, question="Cats?")
    finally:
        release.set()

    (tool,) = named(spans, "execute_tool search")
    assert tool.attributes["dspy_imp.tool.outcome"] == "timed_out"
    assert tool.status.status_code is StatusCode.ERROR and tool.attributes[ERROR_TYPE] == "ToolTimedOut"
    (turn,) = named(spans, "invoke_agent ReActV2")
    assert turn.status.status_code is StatusCode.UNSET and turn.attributes["dspy_imp.termination.reason"] == "answered"


def test_an_interrupted_turn_ends_its_spans_as_errors(spans, run):
    def halt(topic: str) -> str:
        """Stop everything."""
        raise KeyboardInterrupt

    agent = dspy_imp.ReActV2("question -> answer", tools=[halt])
    lm = ScriptedLM([reply(calls=[call("halt", {"topic": "x"}, id="c1")])])
    with dspy.context(lm=lm), pytest.raises(KeyboardInterrupt):
        run(agent, question="Stop?")

    assert tree(spans) == [("invoke_agent ReActV2", ["chat scripted", "execute_tool halt"])]
    (tool,) = named(spans, "execute_tool halt")
    (turn,) = named(spans, "invoke_agent ReActV2")
    for span in (tool, turn):
        assert span.status.status_code is StatusCode.ERROR and span.attributes[ERROR_TYPE] == "KeyboardInterrupt"


def test_a_streamed_turn_has_the_same_spans_once(spans, run):
    agent = dspy_imp.ReActV2("question -> answer", tools=[lookup])
    script = [reply(calls=[call("lookup", {"topic": "keys"}, id="c1")]), reply("Under the mat.")]

    listeners = [dspy_imp.StreamListener("answer")]

    async def consume() -> Any:
        return [item async for item in dspy.streamify(agent, stream_listeners=listeners)(question="?")]

    with dspy.context(lm=ScriptedLM(script)):
        if run.mode == "sync":
            stream = dspy.streamify(agent, stream_listeners=listeners, async_streaming=False)
            items = list(stream(question="?"))
        else:
            items = asyncio.run(consume())
    assert items[-1].answer == "Under the mat."

    assert tree(spans) == [("invoke_agent ReActV2", ["chat scripted", "execute_tool lookup", "chat scripted"])]
