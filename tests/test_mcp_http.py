"""An MCP server over streamable HTTP (``tests/mcp_http_server.py``, its own process on 127.0.0.1)."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dspy
import pytest
from local_process import listening
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from test_genai_spans import spans  # noqa: F401 (the in-memory exporter fixture, written once)

import dspy_imp
from dspy_imp import mcp
from dspy_imp.testing import ScriptedLM, call, reply

pytestmark = pytest.mark.block_network(allowed_hosts=[r"127\.0\.0\.1$"])

HERE = Path(__file__).parent


def served(transport: str) -> Iterator[str]:
    """``tests/mcp_http_server.py`` in its own process on 127.0.0.1, over ``transport``; its URL."""
    argv = lambda port: [sys.executable, str(HERE / "mcp_http_server.py"), str(port), transport]  # noqa: E731
    with listening(argv) as port:
        yield f"http://127.0.0.1:{port}/{'sse' if transport == 'sse' else 'mcp'}"


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    yield from served("streamable-http")


@pytest.fixture(scope="module")
def sse_url() -> Iterator[str]:
    """A legacy server: the SDK's own HTTP+SSE transport (``MCPServer.run("sse")``)."""
    yield from served("sse")


def whoami(run: Any, server: mcp.Server) -> Any:
    """What the server's ``whoami`` answered, through a turn."""
    agent = dspy_imp.ReActV2("question -> answer", tools=[server])
    with dspy.context(lm=ScriptedLM([reply("who", calls=[call("whoami", {}, id="c1")]), reply("done")])):
        pred = run(agent, question="who am I?")
    (entry,) = [e for e in pred.metadata.history.messages if e.get("tool_call_results")]
    return entry["tool_call_results"][0]["result"]


def test_a_turn_calls_a_streamable_http_server_with_its_headers(run: Any, url: str) -> None:
    server = mcp.http(url, headers={"Authorization": "Bearer s3cret"}, prefix="crm")
    agent = dspy_imp.ReActV2("question -> answer", tools=[server])
    lm = ScriptedLM([reply("who", calls=[call("crm_whoami", {}, id="c1")]), reply("done")])
    with dspy.context(lm=lm):
        pred = run(agent, question="who am I?")
    assert lm.requests[0].tool_names == ["crm_whoami"]
    entry = next(e for e in pred.metadata.history.messages if e.get("tool_call_results"))
    assert entry["tool_call_results"][0]["result"] == "Bearer s3cret"
    server.close()


def test_an_http_calls_span_names_the_session_the_server_gave(
    run: Any,
    url: str,
    spans: InMemorySpanExporter,  # noqa: F811
) -> None:
    server = mcp.http(url, prefix="crm", mode="legacy")  # 2026-07-28 has no sessions
    agent = dspy_imp.ReActV2("question -> answer", tools=[server])
    lm = ScriptedLM([reply("who", calls=[call("crm_whoami", {}, id="c1")]), reply("done")])
    with dspy.context(lm=lm):
        run(agent, question="who am I?")
    (span,) = [s for s in spans.get_finished_spans() if s.name == "execute_tool crm_whoami"]
    attributes = dict(span.attributes or {})
    assert attributes["network.transport"] == "tcp"
    assert isinstance(server.session_id, str) and len(server.session_id) >= 16
    assert attributes["mcp.session.id"] == server.session_id
    server.close()


def test_with_no_transport_given_an_sse_server_is_reached_by_the_specs_fallback(
    run: Any,
    sse_url: str,
    spans: InMemorySpanExporter,  # noqa: F811
) -> None:
    server = mcp.http(sse_url, headers={"Authorization": "Bearer old"})
    assert server.transport is None  # not chosen before its first session
    assert whoami(run, server) == "Bearer old"
    assert server.transport == "sse" and server.sessions_opened == 1
    (span,) = [s for s in spans.get_finished_spans() if s.name == "execute_tool whoami"]
    attributes = dict(span.attributes or {})
    assert attributes["dspy_imp.mcp.transport"] == "sse"
    assert attributes["mcp.session.id"] == server.session_id  # the one its endpoint names
    server.close()
    assert whoami(run, server) == "Bearer old"  # the next session goes to SSE straight away
    assert server.transport == "sse" and server.sessions_opened == 2
    server.close()


def test_a_streamable_http_server_does_not_fall_back(run: Any, url: str) -> None:
    server = mcp.http(url, headers={"Authorization": "Bearer new"})
    assert whoami(run, server) == "Bearer new"
    assert server.transport == "streamable-http" and server.sessions_opened == 1
    server.close()


def test_a_transport_given_is_the_only_one_tried(sse_url: str) -> None:
    server = mcp.http(sse_url, transport="streamable-http")
    with pytest.raises(mcp.ServerUnavailable, match="could not be opened") as raised:
        server.list_tools()
    assert "over SSE" not in str(raised.value)
    assert server.transport == "streamable-http"


def test_a_url_that_is_neither_names_both_attempts(url: str) -> None:
    nowhere = url.replace("/mcp", "/nothing")  # 404 to the POST, and to the GET
    server = mcp.http(nowhere, name="nowhere")
    with pytest.raises(mcp.ServerUnavailable) as raised:
        server.list_tools()
    assert str(raised.value).startswith(
        "MCP server 'nowhere' could not be opened over SSE, after HTTP 404 to a streamable HTTP POST: "
    )
    assert server.transport is None  # neither settled: the next opening starts from streamable HTTP again


def test_an_mcpservers_url_with_no_type_falls_back_too(run: Any, sse_url: str, tmp_path: Path) -> None:
    config = {"mcpServers": {"old": {"url": sse_url}, "older": {"type": "http", "url": sse_url}}}
    (tmp_path / "mcp.json").write_text(json.dumps(config))
    for server in mcp.from_config(tmp_path / "mcp.json", environ={}):
        assert whoami(run, server) == "none"
        assert server.transport == "sse"
        server.close()
