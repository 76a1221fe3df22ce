"""A caller and its sub-agent traced by OpenInference (an in-memory OpenTelemetry exporter).

Prints each span's path from the root (LM and adapter spans left out) as JSON, for
``test_agents_as_tools.py``; a tracer instruments the whole process, so this runs on its own.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

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
from dspy_imp.testing import ScriptedLM, call, reply  # noqa: E402


def lookup(query: str) -> str:
    """Look something up."""
    return f"found {query}"


def main() -> None:
    child = dspy_imp.ReActV2("question -> findings", tools=[lookup])
    child.set_lm(ScriptedLM([reply(calls=[call("lookup", {"query": "x"}, id="k1")]), reply("X.")]))
    parent = dspy_imp.ReActV2("ticket -> reply", tools=[child.as_tool(name="researcher")])
    lm = ScriptedLM([reply(calls=[call("researcher", {"question": "x?"}, id="p1")]), reply("Done.")])
    with dspy.context(lm=lm):
        if sys.argv[1] == "sync":
            parent(ticket="t")
        else:
            asyncio.run(parent.acall(ticket="t"))
    spans = {s.context.span_id: s for s in EXPORTER.get_finished_spans()}

    def path(span: Any) -> str:
        parent = spans.get(span.parent.span_id) if span.parent else None
        return span.name if parent is None else f"{path(parent)} > {span.name}"

    print(json.dumps(sorted(path(s) for s in spans.values() if not s.name.startswith(("Scripted", "ReActAdapter")))))


if __name__ == "__main__":
    main()
