"""An MCP server over streamable HTTP (``tests/mcp_http_server.py``, its own process on 127.0.0.1)."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dspy
import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from test_genai_spans import spans  # noqa: F401 (the in-memory exporter fixture, written once)

import dspy_imp
from dspy_imp import mcp
from dspy_imp.testing import ScriptedLM, call, reply

pytestmark = pytest.mark.block_network(allowed_hosts=[r"127\.0\.0\.1$"])

HERE = Path(__file__).parent


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    server = subprocess.Popen(
        [sys.executable, str(HERE / "mcp_http_server.py"), str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        end = time.monotonic() + 60  # a hang guard while it starts
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=5).close()
                break
            except OSError:
                if time.monotonic() > end or server.poll() is not None:
                    raise
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        server.terminate()
        server.wait(timeout=30)


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
