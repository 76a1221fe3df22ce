"""A tiny MCP server (stdio) with an inventory tool, for examples/mcp_tools.py.

python examples/mcp_server.py   # speaks MCP on stdin/stdout; the example starts it itself
"""

from __future__ import annotations

from mcp.server.mcpserver import MCPServer

STOCK = {"widget": 12, "gadget": 0, "gizmo": 3}

server = MCPServer("inventory")


@server.tool()
def check_stock(item: str) -> str:
    """How many of an item are in stock."""
    if item not in STOCK:
        return f"unknown item {item!r}; known items: {', '.join(sorted(STOCK))}"
    return f"{STOCK[item]} {item}(s) in stock"


@server.tool()
def reorder(item: str, quantity: int) -> str:
    """Order more of an item from the supplier."""
    return f"ordered {quantity} {item}(s); arriving in 3 days"


if __name__ == "__main__":
    server.run("stdio")
