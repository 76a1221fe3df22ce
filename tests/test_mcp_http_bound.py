"""An HTTP server's JSON answer is bounded before it is parsed (``mcp.http(max_message_bytes=)``):
``tests/mcp_json_server.py``, its own process on 127.0.0.1, answering in JSON bodies."""

from __future__ import annotations

import inspect
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dspy
import pytest
from local_process import listening

import dspy_imp
from dspy_imp import mcp
from dspy_imp.mcp._stdio import MAX_MESSAGE_BYTES
from dspy_imp.testing import ScriptedLM, call, reply

pytestmark = pytest.mark.block_network(allowed_hosts=[r"127\.0\.0\.1$"])

HERE = Path(__file__).parent


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    with listening(lambda port: [sys.executable, str(HERE / "mcp_json_server.py"), str(port)]) as port:
        yield f"http://127.0.0.1:{port}/mcp"


def results(pred: Any) -> list[dict[str, Any]]:
    return [r for e in pred.metadata.history.messages for r in e.get("tool_call_results") or []]


def test_a_json_answer_over_the_bound_ends_only_its_call(run: Any, url: str) -> None:
    server = mcp.http(url, name="json", max_message_bytes=100_000)
    agent = dspy_imp.ReActV2("question -> answer", tools=[server])
    lm = ScriptedLM(
        [
            reply("big", calls=[call("big", {"size": 20_000}, id="c1")]),
            reply("bigger", calls=[call("big", {"size": 200_000}, id="c2")]),
            reply("echo", calls=[call("echo", {"text": "still here"}, id="c3")]),
            reply("done"),
        ]
    )
    try:
        with dspy.context(lm=lm):
            pred = run(agent, question="q")
    finally:
        server.close()
    small, large, echoed = results(pred)
    assert small == {**small, "error": False, "result": "z" * 20_000}
    assert large["error"] is True
    assert (
        "MCP server 'json' answered with a body longer than 100,000 bytes (`max_message_bytes`); "
        "it was not read further" in large["result"]
    )
    assert echoed == {**echoed, "error": False, "result": "still here"}
    assert server.sessions_opened == 1  # the session went on


def test_the_http_bound_defaults_to_the_stdio_bound() -> None:
    assert inspect.signature(mcp.http).parameters["max_message_bytes"].default == MAX_MESSAGE_BYTES
    for bad in (0, -1, True, "1"):
        with pytest.raises(dspy_imp.ConfigurationError, match="`max_message_bytes` must be a positive number"):
            mcp.http("http://127.0.0.1:1/mcp", max_message_bytes=bad)  # type: ignore[arg-type]
