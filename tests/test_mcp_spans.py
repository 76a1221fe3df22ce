"""An MCP tool's ``execute_tool`` span carries OpenTelemetry's MCP attributes next to the GenAI ones."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import dspy
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as ga
from opentelemetry.semconv._incubating.attributes import mcp_attributes as ma
from test_genai_spans import spans  # noqa: F401 (the in-memory exporter fixture, written once)

import dspy_imp
from dspy_imp import mcp
from dspy_imp.testing import ScriptedLM, call, reply

HERE = Path(__file__).parent


def test_an_mcp_calls_span(run: Any, spans: InMemorySpanExporter, tmp_path: Path) -> None:  # noqa: F811
    server = mcp.stdio(
        sys.executable, [str(HERE / "mcp_test_server.py")], env={"MCP_TEST_MARKS": str(tmp_path / "m")},
        name="test", prefix="t",
    )  # fmt: skip
    agent = dspy_imp.ReActV2("question -> answer", tools=[server])
    with dspy.context(lm=ScriptedLM([reply("echo", calls=[call("t_echo", {"text": "x"}, id="c1")]), reply("ok")])):
        run(agent, question="q")
    (span,) = [s for s in spans.get_finished_spans() if s.name == "execute_tool t_echo"]
    attributes = dict(span.attributes or {})
    assert attributes[ga.GEN_AI_TOOL_NAME] == "t_echo"
    assert attributes[ma.MCP_METHOD_NAME] == "tools/call"
    assert attributes[ma.MCP_PROTOCOL_VERSION] == "2026-07-28"
    assert attributes["network.transport"] == "pipe"
    assert attributes["dspy_imp.mcp.server"] == "test"
    assert attributes["dspy_imp.mcp.tool"] == "echo"
    assert attributes["jsonrpc.request.id"].isdigit()  # the id of the tools/call request on the wire
    assert "mcp.session.id" not in attributes  # stdio has no session id
    server.close()
