"""Print the GenAI span tree of a sample turn, as docs/observability.md shows it.

    python docs/generate/genai_trace.py [--otlp http://127.0.0.1:4318/v1/traces]

With ``--otlp``, the spans also go to that OTLP/HTTP endpoint (a local collector or backend).

A real run (``dspy_imp.testing.ScriptedLM`` as the model, an in-memory exporter): a triage agent
asks a ``researcher`` sub-agent, whose step calls ``lookup`` (runs) and ``delete`` (refused by its
policy), then answers.
"""

from __future__ import annotations

import json
import os
import sys

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import dspy
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import dspy_imp
import dspy_imp.tracing
from dspy_imp.testing import ScriptedLM, call, reply

exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
if "--otlp" in sys.argv:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    endpoint = sys.argv[sys.argv.index("--otlp") + 1]
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=endpoint)))
dspy_imp.tracing.instrument(tracer_provider=provider)


def lookup(query: str) -> str:
    """Look an order up."""
    return "order 7: shipped from Lyon"


def delete(query: str) -> str:
    """Delete an order."""
    return "deleted"


researcher = dspy_imp.ReActV2(
    "question -> findings", tools=[lookup, delete], tool_policy=lambda name, args: name != "delete" or "read-only"
)
researcher.set_lm(
    ScriptedLM(
        [
            reply(
                calls=[call("lookup", {"query": "7"}, id="k1"), call("delete", {"query": "7"}, id="k2")], usage=(30, 3)
            ),
            reply("Order 7 shipped from Lyon.", usage=(40, 4)),
        ],
        model="anthropic/claude-sonnet-4-5",
    )
)
triage = dspy_imp.ReActV2("ticket -> reply", tools=[researcher.as_tool(name="researcher")])
script = [
    reply(calls=[call("researcher", {"question": "where is order 7?"}, id="p1")], usage=(100, 10)),
    reply("It shipped from Lyon.", usage=(200, 20)),
]
with dspy.context(lm=ScriptedLM(script, model="openai/gpt-4.1")), dspy_imp.tracing.conversation("ticket-4711"):
    triage(ticket="Where is my order?")

spans = sorted(exporter.get_finished_spans(), key=lambda s: s.start_time or 0)
children: dict[int | None, list] = {}
for span in spans:
    children.setdefault(span.parent.span_id if span.parent else None, []).append(span)


def show(span, depth: int) -> None:
    pad = "  " * depth
    print(f"{pad}{span.name} [{span.kind.name}] {span.status.status_code.name}")
    for key, value in (span.attributes or {}).items():
        print(f"{pad}    {key} = {json.dumps(value if not isinstance(value, tuple) else list(value))}")
    for child in children.get(span.context.span_id, []):
        show(child, depth + 1)


for root in children[None]:
    show(root, 0)
