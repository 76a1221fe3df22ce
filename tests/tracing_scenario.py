"""Run traced turns in a fresh interpreter and print their span trees as JSON.

    python tests/tracing_scenario.py TRACER ORDER [STORE]

TRACER is ``mlflow`` (``mlflow.dspy.autolog()`` into a local file store under STORE) or
``openinference`` (``DSPyInstrumentor`` into an in-memory OpenTelemetry exporter). ORDER is
``before`` (``dspy_imp`` imported before the tracer is set up) or ``after``. The turns:

- ``recovered`` (sync, async, and streamed with ``dspy.streamify``): a step calls ``lookup``
  (runs), ``delete`` (refused by the policy), ``lookup`` with a bad argument and ``peek``
  (unknown); the next step fails; the forced submit is refused by the provider, and the
  ``"required"`` retry submits.
- ``incomplete``: a text-only step, then a forced ``submit`` the policy refuses, beside a
  ``lookup`` call the forced request does not run.
- ``step_error``: a failed step, then a failed forced submit (``StepError``).

Used by ``tests/test_tracing.py`` and to render the trace in ``docs/observability.md``.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

TRACER, ORDER = sys.argv[1], sys.argv[2]
TEXT = "--text" in sys.argv  # print the turns as text trees (docs/observability.md) instead of JSON

if ORDER == "before":
    import dspy_imp

if TRACER == "mlflow":
    import mlflow

    mlflow.set_tracking_uri(f"file://{sys.argv[3].rstrip('/')}/mlruns")
    mlflow.dspy.autolog()
else:
    from openinference.instrumentation.dspy import DSPyInstrumentor
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    EXPORTER = InMemorySpanExporter()
    PROVIDER = TracerProvider()
    PROVIDER.add_span_processor(SimpleSpanProcessor(EXPORTER))
    DSPyInstrumentor().instrument(tracer_provider=PROVIDER)

import dspy  # noqa: E402

import dspy_imp  # noqa: E402
from dspy_imp.testing import ScriptedLM, call, fail, reply  # noqa: E402


class Answer(dspy.Signature):
    """Answer the question, with a confidence."""

    question: str = dspy.InputField()
    answer: str = dspy.OutputField()
    confidence: float = dspy.OutputField()


def lookup(topic: str) -> str:
    """Look a topic up in the notes."""
    return f"notes on {topic}: the key is under the mat"


def delete(topic: str) -> str:
    """Delete a topic from the notes."""
    raise AssertionError("never runs: the policy refuses it")


def policy(refused: set[str]) -> Any:
    return lambda name, args: "notes are read-only" if name in refused else True


def recovered_script() -> list[Any]:
    return [
        reply(
            calls=[
                call("lookup", {"topic": "keys"}, id="c1"),
                call("delete", {"topic": "keys"}, id="c2"),
                call("lookup", {"topic": 7}, id="c3"),
                call("peek", {}, id="c4"),
            ],
            usage=(100, 20),
        ),
        fail.server_error(),
        fail.tool_choice_refused(),
        reply(calls=[call("submit", {"answer": "Under the mat.", "confidence": 0.9}, id="c5")], usage=(150, 10)),
    ]


def run_turn(name: str, mode: str) -> dict[str, Any]:
    script = {
        "recovered": recovered_script(),
        "incomplete": [
            reply("I think it is under the mat.", usage=(80, 8)),
            reply(
                calls=[
                    call("submit", {"answer": "Under the mat.", "confidence": 0.5}, id="s1"),
                    call("lookup", {"topic": "keys"}, id="s2"),
                ],
                usage=(90, 9),
            ),
        ],
        "step_error": [fail.server_error(), fail.server_error()],
    }[name]
    lm = ScriptedLM(script)
    refused = {"delete", "submit"} if name == "incomplete" else {"delete"}
    agent = dspy_imp.ReActV2(Answer, tools=[lookup, delete], tool_policy=policy(refused))
    outcome: dict[str, Any] = {"turn": name, "mode": mode}
    with dspy.context(lm=lm):
        try:
            pred = call_agent(agent, mode, question="Where is the key?")
            outcome["termination_reason"] = pred.metadata.termination_reason
        except dspy_imp.StepError as exc:
            outcome["raised"] = type(exc).__name__
    outcome["spans"] = collect()
    return outcome


def call_agent(agent: Any, mode: str, **inputs: Any) -> Any:
    if mode == "sync":
        return agent(**inputs)
    if mode == "async":
        return asyncio.run(agent.acall(**inputs))
    return asyncio.run(streamed(agent, **inputs))


async def streamed(agent: Any, **inputs: Any) -> Any:
    """``dspy.streamify``: status messages on the way, the prediction last."""
    prediction = None
    async for item in dspy.streamify(agent)(**inputs):
        if isinstance(item, dspy.Prediction):
            prediction = item
    return prediction


def collect() -> list[dict[str, Any]]:
    return collect_mlflow() if TRACER == "mlflow" else collect_openinference()


def collect_mlflow() -> list[dict[str, Any]]:
    mlflow.flush_trace_async_logging()
    trace = mlflow.get_trace(mlflow.get_last_active_trace_id())  # read back from the file store
    spans = sorted(trace.data.spans, key=lambda s: s.start_time_ns)
    index = {s.span_id: i for i, s in enumerate(spans)}
    return [
        {
            "name": s.name,
            "type": s.span_type,
            "status": s.status.status_code.value
            if hasattr(s.status.status_code, "value")
            else str(s.status.status_code),
            "parent": index.get(s.parent_id),
            "attributes": {k: v for k, v in s.attributes.items() if k.startswith(("dspy_imp.", "mlflow.chat"))},
            "inputs": s.inputs,
            "outputs": s.outputs,
            "error": next((e.attributes.get("exception.message") for e in s.events if e.name == "exception"), None),
        }
        for s in spans
    ]


def collect_openinference() -> list[dict[str, Any]]:
    spans = sorted(EXPORTER.get_finished_spans(), key=lambda s: s.start_time or 0)
    EXPORTER.clear()
    index = {s.context.span_id: i for i, s in enumerate(spans)}
    return [
        {
            "name": s.name,
            "type": (s.attributes or {}).get("openinference.span.kind"),
            "status": s.status.status_code.name,
            "parent": index.get(s.parent.span_id) if s.parent else None,
            "attributes": {
                k: _decoded(v) for k, v in (s.attributes or {}).items() if k.startswith(("dspy_imp.", "llm.token"))
            },
            "inputs": _decoded((s.attributes or {}).get("input.value")),
            "outputs": _decoded((s.attributes or {}).get("output.value")),
            "error": next((e.attributes.get("exception.message") for e in s.events if e.name == "exception"), None),
        }
        for s in spans
    ]


def _decoded(value: Any) -> Any:
    if isinstance(value, str) and value[:1] in "{[":
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def render(turn: dict[str, Any]) -> str:
    """One line per span, indented under its parent: name [type] STATUS, then what it says."""
    spans, lines = turn["spans"], [f"# {turn['turn']} turn ({turn['mode']})"]

    def depth(i: int) -> int:
        return 0 if spans[i]["parent"] is None else 1 + depth(spans[i]["parent"])

    for i, span in enumerate(spans):
        pad = "  " * depth(i)
        lines.append(f"{pad}{span['name']} [{span['type']}] {span['status']}")
        notes = dict(span["attributes"])
        notes.update({"error": span["error"]} if span["error"] else {})
        lines += [f"{pad}    {k} = {json.dumps(v, ensure_ascii=False)}" for k, v in notes.items()]
    return "\n".join(lines)


def main() -> None:
    turns = [run_turn("recovered", mode) for mode in ("sync", "async", "streamed")]
    turns += [run_turn("incomplete", "sync"), run_turn("step_error", "sync")]
    if TEXT:
        print("\n\n".join(render(t) for t in turns if t["mode"] == "sync"))
    else:
        print(json.dumps(turns, default=str))


if __name__ == "__main__":
    main()
