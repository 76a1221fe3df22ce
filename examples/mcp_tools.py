"""An agent whose tools come from two MCP servers, sync and async.

`dspy_imp.mcp.stdio(...)` is an MCP server this process starts; given in `tools=[...]` beside
function tools, its tools are listed at the start of each turn and called through one session per
server (opened on first use, closed by `with`/`async with` or at exit). The servers here run
locally over stdio: `examples/mcp_server.py` (an inventory) and `mcp-server-time` from PyPI, under
a `clock` prefix. Needs the `examples` extra (`pip install -e ".[examples]"`). See docs/mcp.md.

    python examples/mcp_tools.py          # offline, scripted model; the MCP servers run locally
    python examples/mcp_tools.py --live   # DSPY_IMP_MODEL, e.g. openai/gpt-4o-mini
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import dspy
from _shared import choose_model, show_turn

import dspy_imp
from dspy_imp import mcp
from dspy_imp.testing import call, reply

INVENTORY = mcp.stdio(sys.executable, [str(Path(__file__).with_name("mcp_server.py"))], name="inventory")
CLOCK = mcp.stdio(sys.executable, ["-m", "mcp_server_time", "--local-timezone=UTC"], name="time", prefix="clock")

CONVERT = {"source_timezone": "UTC", "time": "09:00", "target_timezone": "Asia/Tokyo"}
SCRIPT = [
    # the sync turn
    reply(calls=[call("check_stock", {"item": "gadget"}, id="c1")]),
    reply(calls=[call("reorder", {"item": "gadget", "quantity": 20}, id="c2")]),
    reply("Gadgets were out of stock, so I ordered 20; they arrive in 3 days."),
    # the async turn
    reply(calls=[call("clock_convert_time", CONVERT, id="c3")]),
    reply("The supplier's 09:00 UTC call is at 18:00 in Tokyo."),
]


def build() -> dspy_imp.ReActV2:
    return dspy_imp.ReActV2("request -> answer", tools=[INVENTORY, CLOCK])


async def later(agent: dspy_imp.ReActV2, lm: dspy.LM) -> dspy.Prediction:
    # The same sessions, from this event loop (`async with INVENTORY, CLOCK:` would open and close
    # them here, for a program that is async only).
    with dspy.context(lm=lm):
        return await agent.acall(request="When is the supplier's 09:00 UTC call in Tokyo?")


def main() -> None:
    lm, _ = choose_model(__doc__, SCRIPT)
    agent = build()
    with INVENTORY, CLOCK:  # opened here, closed (the processes ended) when the block ends
        names = [tool.name for tool in INVENTORY.list_tools()] + [f"clock_{t.name}" for t in CLOCK.list_tools()]
        print(f"tools from the MCP servers: {names}")
        request = "Make sure we have gadgets in stock."
        print(f"sync request: {request}")
        with dspy.context(lm=lm):
            show_turn(agent(request=request))
        print("async request: the supplier's call")
        show_turn(asyncio.run(later(agent, lm)))
        print(f"sessions opened: inventory {INVENTORY.sessions_opened}, time {CLOCK.sessions_opened}")


if __name__ == "__main__":
    main()
