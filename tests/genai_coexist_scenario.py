"""Run turns with MLflow, OpenInference and dspy_imp's GenAI spans all on, in a fresh interpreter.

    python tests/genai_coexist_scenario.py ORDER STORE

ORDER is ``before`` (``dspy_imp`` imported and instrumented before the other tracers are set up)
or ``after``. Prints, as JSON, each tracer's spans per turn (sync and async): names, kinds, and
the request ids. Used by ``tests/test_genai_coexist.py``.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

ORDER, STORE = sys.argv[1], sys.argv[2]

from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402

EXPORTER = InMemorySpanExporter()
PROVIDER = TracerProvider()  # the user's provider: OpenInference and dspy_imp both write to it
PROVIDER.add_span_processor(SimpleSpanProcessor(EXPORTER))


def instrument_genai() -> None:
    import dspy_imp.tracing

    dspy_imp.tracing.instrument(tracer_provider=PROVIDER)


def instrument_others() -> Any:
    import mlflow
    from openinference.instrumentation.dspy import DSPyInstrumentor

    mlflow.set_tracking_uri(f"file://{STORE.rstrip('/')}/mlruns")
    mlflow.dspy.autolog()
    DSPyInstrumentor().instrument(tracer_provider=PROVIDER)
    return mlflow


if ORDER == "before":
    instrument_genai()
    mlflow = instrument_others()
else:
    mlflow = instrument_others()
    instrument_genai()

import dspy  # noqa: E402

import dspy_imp  # noqa: E402
from dspy_imp.testing import ScriptedLM, call, reply  # noqa: E402


def lookup(topic: str) -> str:
    """Look a topic up in the notes."""
    return f"notes on {topic}"


def run(mode: str) -> dict[str, Any]:
    agent = dspy_imp.ReActV2("question -> answer", tools=[lookup])
    script = [reply(calls=[call("lookup", {"topic": "keys"}, id="c1")], usage=(10, 2)), reply("Here.", usage=(5, 1))]
    with dspy.context(lm=ScriptedLM(script)):
        if mode == "sync":
            agent(question="Where?")
        else:
            asyncio.run(agent.acall(question="Where?"))
    otel = sorted(EXPORTER.get_finished_spans(), key=lambda s: s.start_time or 0)
    EXPORTER.clear()
    mlflow.flush_trace_async_logging()
    trace = mlflow.get_trace(mlflow.get_last_active_trace_id())
    return {
        "mode": mode,
        "otel": [
            {
                "scope": s.instrumentation_scope.name if s.instrumentation_scope else None,
                "name": s.name,
                "kind": (s.attributes or {}).get("openinference.span.kind"),
                "response_id": (s.attributes or {}).get("gen_ai.response.id"),
                "ending": (s.attributes or {}).get("dspy_imp.termination.reason"),
                "parent": next(
                    (i for i, p in enumerate(otel) if s.parent and p.context.span_id == s.parent.span_id), None
                ),
            }
            for s in otel
        ],
        "mlflow": [{"name": s.name, "type": s.span_type} for s in trace.data.spans],
    }


print(json.dumps([run("sync"), run("async")]))
