"""Each request's span says its kind, and a text answer is labelled as the answer.

Read from OpenInference's spans (an in-memory OpenTelemetry exporter), sync and async; the
same attributes reach MLflow's spans (``tests/test_tracing.py``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import dspy
import pytest
from helpers import TA, SubmitSig
from openinference.instrumentation.dspy import DSPyInstrumentor
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import dspy_imp
from dspy_imp.testing import ScriptedLM, call, reply

KIND = "dspy_imp.request.kind"


_METHODS = ("forward", "aforward", "__call__", "acall")
_ABSENT = object()


def _patchable() -> list[type]:
    from dspy.utils import DummyLM

    return [dspy.LM, DummyLM, dspy.Predict, *dspy.Predict.__subclasses__(), dspy.Retrieve, dspy.Module]


@pytest.fixture(scope="module")
def _instrumented() -> Iterator[InMemorySpanExporter]:
    """OpenInference instrumented once for this module, then DSPy's classes restored.

    ``uninstrument()`` alone is not enough: it unwraps every ``__wrapped__`` down to the bottom,
    through DSPy's own ``with_callbacks`` wrappers, and DSPy's callbacks would stop firing for
    the rest of the session. So the classes' methods are put back as they were.
    """
    classes = [*_patchable(), dspy.ColBERTv2, dspy.Adapter, dspy.Tool]
    saved = {(cls, name): vars(cls).get(name, _ABSENT) for cls in classes for name in _METHODS}
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    instrumentor = DSPyInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    try:
        yield exporter
    finally:
        instrumentor.uninstrument()
        for (cls, name), method in saved.items():
            if method is not _ABSENT:
                setattr(cls, name, method)
            elif name in vars(cls):
                delattr(cls, name)


@pytest.fixture
def spans(_instrumented: InMemorySpanExporter) -> Iterator[InMemorySpanExporter]:
    _instrumented.clear()
    yield _instrumented


def requests(exporter: InMemorySpanExporter) -> list[tuple[str, dict[str, Any]]]:
    """``(kind, attributes)`` of every span that carries a request kind, in start order."""
    found: list[ReadableSpan] = [s for s in exporter.get_finished_spans() if KIND in (s.attributes or {})]
    found.sort(key=lambda s: s.start_time or 0)
    return [(str((s.attributes or {})[KIND]), dict(s.attributes or {})) for s in found]


def test_a_text_answer_is_labelled_as_the_answer(run, spans):
    lm = ScriptedLM([reply(calls=[call("lookup", {"topic": "keys"}, id="c1")]), reply("Under the mat.")])
    with dspy.context(lm=lm):
        pred = run(dspy_imp.ReActV2(TA, tools=[lookup]), intent="where?")
    assert pred.answer == "Under the mat."
    (step, _), (answer, attributes) = requests(spans)
    assert (step, answer) == ("step", "step")
    assert attributes["dspy_imp.reply.answer"] == '{"answer": "Under the mat."}'
    assert "dspy_imp.reply.answer" not in requests(spans)[0][1]


def test_the_last_text_request_is_named_and_its_text_is_the_answer(run, spans):
    lm = ScriptedLM([reply(calls=[call("lookup", {"topic": "keys"}, id="c1")]), reply("From my notes: the mat.")])
    with dspy.context(lm=lm):
        pred = run(dspy_imp.ReActV2(TA, tools=[lookup], max_iters=1), intent="where?")
    assert pred.metadata.termination_reason == "last_text"
    kinds = requests(spans)
    assert [k for k, _ in kinds] == ["step", "last_text"]
    assert kinds[1][1]["dspy_imp.reply.answer"] == '{"answer": "From my notes: the mat."}'


EXTRACTED = "[[ ## reasoning ## ]]\nIt said so.\n\n[[ ## answer ## ]]\nParis\n\n[[ ## confidence ## ]]\n0.8\n\n"


def test_the_extraction_request_is_named(run, spans):
    lm = ScriptedLM([reply("thinking"), reply("still thinking"), reply(EXTRACTED + "[[ ## completed ## ]]")])
    with dspy.context(lm=lm):
        pred = run(dspy_imp.ReActV2(SubmitSig, tools=[]), intent="capital of France?")
    assert pred.metadata.termination_reason == "extracted"
    assert [k for k, _ in requests(spans)] == ["step", "forced_submit", "extraction"]
    names = [s.name for s in spans.get_finished_spans() if (s.attributes or {}).get(KIND) == "extraction"]
    assert names == [f"Extractor.{'forward' if run.mode == 'sync' else 'aforward'}"]


UNREADABLE = "[[ ## answer ## ]]\nhm\n\n[[ ## tool_calls ## ]]\n42\n\n[[ ## completed ## ]]"


def test_the_json_fallback_is_named_on_its_own_span_and_on_the_request(run, spans):
    lm = ScriptedLM(
        [reply(UNREADABLE), reply('{"answer": "From memory: a cat.", "tool_calls": []}')],
        native=False,
    )
    with dspy.context(lm=lm):
        pred = run(dspy_imp.ReActV2(TA, tools=[lookup]), intent="what?")
    assert pred.metadata.termination_reason == "answered"
    (step, attributes), (fallback, _) = requests(spans)
    assert (step, fallback) == ("step", "json_fallback")
    assert attributes["dspy_imp.request.json_fallback"] is True


def test_instrumenting_with_dspy_imp_imported_traces_plain_dspy_programs(spans):
    lm = ScriptedLM([reply("[[ ## answer ## ]]\ncat\n\n[[ ## completed ## ]]")])
    with dspy.context(lm=lm):
        dspy.Predict("question -> answer")(question="what?")
    names = {s.name for s in spans.get_finished_spans()}
    assert {"Predict.forward", "ChatAdapter.__call__", "ScriptedLM.__call__"} <= names


def test_every_predict_subclass_of_dspy_imp_resolves_on_dspy():
    ours = [c for c in dspy.Predict.__subclasses__() if c.__module__.startswith("dspy_imp")]
    assert ours
    assert all(getattr(dspy, c.__name__) is c for c in ours)


def lookup(topic: str) -> str:
    """Look a topic up."""
    return f"notes on {topic}"


def test_a_paused_turn_is_not_complete_and_lists_its_pending_calls(run, spans):
    def render_chart(kind: str) -> str:
        """Render a chart in the user's browser."""
        raise AssertionError("runs in the browser")

    lm = ScriptedLM([reply(calls=[call("render_chart", {"kind": "bar"}, id="c1")])])
    agent = dspy_imp.ReActV2("request -> reply", tools=[render_chart], external_tools=["render_chart"])
    with dspy.context(lm=lm):
        pred = run(agent, request="Chart my sales.")
    assert pred.metadata.termination_reason == "paused"
    (turn,) = [s for s in spans.get_finished_spans() if s.name.startswith("ReActV2.")]
    attributes = dict(turn.attributes or {})
    assert attributes["dspy_imp.termination.reason"] == "paused"
    assert attributes["dspy_imp.termination.complete"] is False
    pending = json.loads(str(attributes["dspy_imp.termination.pending_calls"]))
    assert [(c["id"], c["name"], c["kind"]) for c in pending] == [("c1", "render_chart", "external")]


def test_a_context_policy_names_its_summary_request_and_says_what_it_applied(run, spans):
    prior = [
        {"intent": f"q{i}", "answer": f"answer {i} " * 20, "tool_calls": [], "tool_call_results": []} for i in range(3)
    ]
    context = dspy_imp.Context(trigger=34, target=24, window=1000, counter=lambda m, t, model: len(str(m)) // 10)
    lm = ScriptedLM([reply("Three questions, answered."), reply("Here.")])
    with dspy.context(lm=lm):
        pred = run(dspy_imp.ReActV2(TA, tools=[lookup], context=context), intent="where?", history=prior)
    (summary, summary_attributes), (step, attributes) = requests(spans)
    assert (summary, step) == ("summary", "step")
    assert json.loads(attributes["dspy_imp.request.context"]) == pred.metadata.context[-1]
    assert "dspy_imp.request.context" not in summary_attributes
