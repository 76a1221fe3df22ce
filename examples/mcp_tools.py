"""An agent whose tools come from an MCP server.

`dspy.Tool.from_mcp_tool` turns each tool an MCP server lists into a `dspy.Tool`; the agent uses
them like any other tool. MCP tools are asynchronous, so the turn runs with `await agent.acall(...)`.
The server here is `examples/mcp_server.py`, started over stdio (needs the `examples` extra,
`pip install -e ".[examples]"`, for the `mcp` package).

    python examples/mcp_tools.py          # offline, scripted model; the MCP server runs locally
    python examples/mcp_tools.py --live   # DSPY_IMP_MODEL, e.g. openai/gpt-4o-mini
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import dspy
from _shared import choose_model, show_turn
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

import dspy_imp
from dspy_imp.testing import call, reply

SERVER = StdioServerParameters(command=sys.executable, args=[str(Path(__file__).with_name("mcp_server.py"))])

SCRIPT = [
    reply(calls=[call("check_stock", {"item": "gadget"}, id="c1")]),
    reply(calls=[call("reorder", {"item": "gadget", "quantity": 20}, id="c2")]),
    reply("Gadgets were out of stock, so I ordered 20; they arrive in 3 days."),
]


async def run(lm: dspy.LM, request: str) -> dspy.Prediction:
    async with stdio_client(SERVER) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        listed = await session.list_tools()
        tools = [dspy.Tool.from_mcp_tool(session, tool) for tool in listed.tools]
        print(f"tools from the MCP server: {[tool.name for tool in tools]}")
        agent = dspy_imp.ReActV2("request -> answer", tools=tools)
        with dspy.context(lm=lm):
            return await agent.acall(request=request)


def main() -> None:
    lm, _ = choose_model(__doc__, SCRIPT)
    request = "Make sure we have gadgets in stock."
    print(f"request: {request}")
    pred = asyncio.run(run(lm, request))
    show_turn(pred)


if __name__ == "__main__":
    main()
