"""GenAI spans of durable turns (DBOS, embedded SQLite): each step's span is emitted when the step is
performed, never again when DBOS replays its record."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from dbos import DBOS
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import dspy_imp
import dspy_imp.tracing
from dspy_imp import durable
from dspy_imp.testing import ScriptedLM, call, reply

EXPORTER = InMemorySpanExporter()


def look(thing: str) -> dict[str, Any]:
    """Look at a thing."""
    return {"seen": thing}


PROGRAM = dspy_imp.ReActV2("question -> answer", tools=[look], finish="submit")
AGENT: list[durable.DurableAgent] = []


@pytest.fixture(scope="module", autouse=True)
def dbos(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    folder = tmp_path_factory.mktemp("dbos-genai")
    url = f"sqlite:///{folder}/sys.sqlite"
    DBOS(config=durable.config("dspy-imp-genai-tests", system_database_url=url, log_level="ERROR"))
    AGENT.append(durable.DurableAgent(PROGRAM, name="genai-look"))
    DBOS.launch()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(EXPORTER))
    dspy_imp.tracing.instrument(tracer_provider=provider)
    yield
    dspy_imp.tracing.uninstrument()
    DBOS.destroy(destroy_registry=True)


def names() -> Counter[str]:
    return Counter(span.name for span in EXPORTER.get_finished_spans())


def script() -> list[Any]:
    return [
        reply(calls=[call("look", {"thing": "shelf"}, id="c1")], usage=(10, 1)),
        reply(calls=[call("submit", {"answer": "on the shelf"}, id="c2")], usage=(20, 2)),
    ]


def test_a_replayed_step_emits_no_span_and_a_performed_one_emits_one(run: Any) -> None:
    workflow = f"genai-{run.mode}"
    EXPORTER.clear()
    PROGRAM.set_lm(ScriptedLM(script()))
    run(AGENT[0], question="Where?", workflow_id=workflow)
    once = {"invoke_agent ReActV2": 1, "chat scripted": 2, "execute_tool look": 1, "execute_tool submit": 1}
    assert names() == once

    EXPORTER.clear()  # every step replayed from its record: the turn performs nothing, emits nothing
    steps = DBOS.list_workflow_steps(workflow)
    replayed = durable.TurnHandle(DBOS.fork_workflow(workflow, len(steps) + 1)).result()
    assert replayed.answer == "on the shelf"
    assert names() == {}

    EXPORTER.clear()  # the second request on: only what runs again has spans, under one agent span
    second = [s["function_id"] for s in steps if s["function_name"].startswith("dspy_imp.request")][1]
    PROGRAM.set_lm(ScriptedLM(script()[1:]))
    again = durable.TurnHandle(DBOS.fork_workflow(workflow, second)).result()
    assert again.answer == "on the shelf"
    assert names() == {"invoke_agent ReActV2": 1, "chat scripted": 1, "execute_tool submit": 1}
    (agent,) = [s for s in EXPORTER.get_finished_spans() if s.name == "invoke_agent ReActV2"]
    assert all(s.parent.span_id == agent.context.span_id for s in EXPORTER.get_finished_spans() if s is not agent)
    assert agent.attributes["dspy_imp.termination.reason"] == "submit"


def test_a_finished_workflow_id_returns_its_record_without_spans(run: Any) -> None:
    workflow = f"genai-finished-{run.mode}"
    PROGRAM.set_lm(ScriptedLM(script()))
    run(AGENT[0], question="Where?", workflow_id=workflow)
    EXPORTER.clear()
    pred = run(AGENT[0], question="Where?", workflow_id=workflow)
    assert pred.answer == "on the shelf" and names() == {}
