"""An agent with an MCP server served by the web app (``dspy_imp.web``): its tools run in AG-UI turns,
sync and async, beside a client's declared tools."""

from __future__ import annotations

import pytest
from mcp.server.mcpserver import MCPServer
from web_helpers import agui_events, verify_agui
from web_scenarios import client, run_input, with_lm

import dspy_imp
import dspy_imp.web
from dspy_imp import mcp
from dspy_imp.testing import call, reply

pytestmark = pytest.mark.parametrize("sync", [False, True], ids=["async", "sync"])

BROWSER = {"name": "browser_time", "description": "The user's clock.", "parameters": {"type": "object"}}


def shipping() -> MCPServer:
    server = MCPServer("shipping")

    @server.tool()
    def track(order_id: str) -> str:
        """Where an order is."""
        return f"order {order_id} left the depot"

    return server


async def test_an_mcp_tool_runs_in_a_web_turn_beside_client_tools(sync: bool) -> None:
    server = mcp.memory(shipping())
    agent = dspy_imp.ReActV2("question -> answer", tools=[server])
    lm = with_lm(agent, [reply(calls=[call("track", {"order_id": "42"}, id="m1")]), reply("It left the depot.")])
    app = dspy_imp.web.app(agent, sync=sync, client_tools=True)
    async with client(app) as http:
        response = await http.post("/ag-ui", json=run_input("Where is 42?", tools=[BROWSER]))
    assert response.status_code == 200, response.text
    events = agui_events(response.text)
    verify_agui(events)
    assert lm.requests[0].tool_names == ["browser_time", "track"]  # the held tools (the client's), then the server's
    results = [e["content"] for e in events if e["type"] == "TOOL_CALL_RESULT"]
    assert results == ["order 42 left the depot"]
    assert any(e["type"] == "TEXT_MESSAGE_CONTENT" and "depot" in e["delta"] for e in events)
    server.close()
