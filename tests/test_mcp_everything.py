"""``@modelcontextprotocol/server-everything`` from npm (the reference server), over stdio and over
streamable HTTP (its own process on 127.0.0.1), through turns.

Installed by ``.ci/run`` (``npm ci --prefix tests/npm``, pinned by ``tests/npm/package-lock.json``);
started with this machine's Node. Each of its tools that needs nothing the client does not offer
yet (MCP tasks) runs through a turn, sync and async, and what it returns is checked as
the model reads it: text, structured content, images as the provider's media parts, resource
references and links.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dspy
import pytest
from local_process import listening

import dspy_imp
from dspy_imp import mcp
from dspy_imp.testing import ScriptedLM, call, reply

SERVER = Path(__file__).parent / "npm" / "node_modules" / ".bin" / "mcp-server-everything"


pytestmark = pytest.mark.block_network(allowed_hosts=[r"127\.0\.0\.1$"])  # its HTTP server is local


@pytest.fixture(scope="module", params=["stdio", "http"])
def everything(request: pytest.FixtureRequest) -> Iterator[mcp.Server]:
    assert SERVER.exists(), f"{SERVER} is missing: run `npm ci --prefix tests/npm` (.ci/run does)"
    if request.param == "stdio":
        server = mcp.stdio(str(SERVER), ["stdio"], name="everything")
        yield server
        server.close()
        return
    with listening(
        lambda port: [str(SERVER), "streamableHttp"], env=lambda port: {**os.environ, "PORT": str(port)}
    ) as port:
        server = mcp.http(f"http://127.0.0.1:{port}/mcp", name="everything")
        yield server
        server.close()


GZIP_INPUT = "data:text/plain;base64," + base64.b64encode(b"hello " * 20).decode()

CALLS: dict[str, tuple[dict[str, Any], Any]] = {
    "echo": ({"message": "hi"}, "Echo: hi"),
    "get-sum": ({"a": 2, "b": 3}, "The sum of 2 and 3 is 5."),
    "get-env": ({}, "PATH"),
    "get-tiny-image": ({}, "image"),
    "get-annotated-message": ({"messageType": "error", "includeImage": True}, "image"),
    "get-resource-reference": ({"resourceType": "Text", "resourceId": 1}, "[resource demo://resource/"),
    "get-resource-links": ({"count": 2}, "[resource link: "),
    "get-structured-content": ({"location": "New York"}, {"temperature", "conditions", "humidity"}),
    "gzip-file-as-resource": ({"name": "hello.txt.gz", "data": GZIP_INPUT, "outputType": "resourceLink"}, "hello"),
    "toggle-simulated-logging": ({}, "logging"),
    "toggle-subscriber-updates": ({}, "simulated resource update"),
    "trigger-long-running-operation": ({"duration": 0.2, "steps": 2}, "completed"),
}
NOT_YET = {"simulate-research-query"}  # it requires task augmentation (MCP tasks), which no client here offers


def test_every_tool_the_server_offers_is_known_here(everything: Any) -> None:
    assert {tool.name for tool in everything.list_tools()} == set(CALLS) | NOT_YET


@pytest.mark.parametrize("name", sorted(CALLS))
def test_each_tool_runs_through_a_turn(run: Any, everything: Any, name: str) -> None:
    args, expected = CALLS[name]
    agent = dspy_imp.ReActV2("question -> answer", tools=[everything])
    lm = ScriptedLM([reply("calling", calls=[call(name, args, id="c1")]), reply("done")])
    with dspy.context(lm=lm):
        pred = run(agent, question="q")
    result = next(r for e in pred.metadata.history.messages for r in e.get("tool_call_results") or ())
    assert result["error"] is False, result["result"]
    value = result["result"]
    if expected == "image":  # the medium reaches the next request as the provider's image part
        assert any(isinstance(part, dspy.Image) for part in value)
        parts = [p for m in lm.requests[1].messages if isinstance(m["content"], list) for p in m["content"]]
        assert any(p.get("type") == "image_url" and p["image_url"]["url"].startswith("data:image/png") for p in parts)
    elif isinstance(expected, set):
        assert set(value) == expected
    else:
        text = value if isinstance(value, str) else " ".join(map(str, value))
        assert expected in text, text
