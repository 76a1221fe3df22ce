"""GenAI spans through the real OTLP/HTTP exporter to a collector on 127.0.0.1: the same spans arrive.

The collector is a tiny HTTP server that decodes each ``ExportTraceServiceRequest`` (protobuf) it is
sent at ``/v1/traces``, as an OpenTelemetry Collector's OTLP/HTTP receiver would.
"""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from typing import Any

import dspy
import pytest
import requests
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as ga

import dspy_imp
import dspy_imp.tracing
from dspy_imp.testing import ScriptedLM, call, reply

pytestmark = pytest.mark.block_network(allowed_hosts=[r"127\.0\.0\.1$"])


class _Receiver(http.server.BaseHTTPRequestHandler):
    received: list[ExportTraceServiceRequest]

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        type(self).received.append(request)
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        return None


@pytest.fixture
def collector() -> Iterator[tuple[str, list[ExportTraceServiceRequest]]]:
    received: list[ExportTraceServiceRequest] = []
    handler = type("Receiver", (_Receiver,), {"received": received})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1/traces", received
    server.shutdown()
    server.server_close()
    thread.join(timeout=5)


def _value(any_value: Any) -> Any:
    kind = any_value.WhichOneof("value")
    if kind == "array_value":
        return tuple(_value(v) for v in any_value.array_value.values)
    return getattr(any_value, kind)


def lookup(topic: str) -> str:
    """Look a topic up in the notes."""
    return f"notes on {topic}"


def test_the_otlp_collector_receives_the_same_spans(collector, run):
    endpoint, received = collector
    session = requests.Session()
    session.trust_env = False  # straight to 127.0.0.1, whatever proxy the environment names
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=endpoint, session=session, timeout=10)))
    dspy_imp.tracing.instrument(tracer_provider=provider)
    try:
        agent = dspy_imp.ReActV2("question -> answer", tools=[lookup])
        script = [
            reply(calls=[call("lookup", {"topic": "keys"}, id="c1")], usage=(10, 2)),
            reply("Here.", usage=(5, 1)),
        ]
        with dspy.context(lm=ScriptedLM(script)):
            run(agent, question="Where?")
    finally:
        dspy_imp.tracing.uninstrument()
        provider.shutdown()

    sent = {
        (s.name, s.context.span_id.to_bytes(8, "big"), s.parent.span_id.to_bytes(8, "big") if s.parent else b""): dict(
            s.attributes
        )
        for s in memory.get_finished_spans()
    }
    arrived = {
        (span.name, span.span_id, span.parent_span_id): {a.key: _value(a.value) for a in span.attributes}
        for request in received
        for resource in request.resource_spans
        for scope in resource.scope_spans
        for span in scope.spans
    }
    assert arrived == sent
    assert sorted(name for name, _, _ in arrived) == [
        "chat scripted",
        "chat scripted",
        "execute_tool lookup",
        "invoke_agent ReActV2",
    ]
    scopes = {s.scope.name for r in received for rs in r.resource_spans for s in rs.scope_spans}
    assert scopes == {"dspy_imp"}
    (tool,) = [attrs for (name, _, _), attrs in arrived.items() if name == "execute_tool lookup"]
    assert tool[ga.GEN_AI_TOOL_CALL_ID] == "c1"
