"""A stdio MCP server for the durable tests: ``mark(tag)`` appends ``tag`` to the file named by
``MCP_TEST_MARKS``, so a test counts the calls that reached a server (whichever process ran it)."""

from __future__ import annotations

import os

from mcp.server.mcpserver import MCPServer

server = MCPServer("marks")


@server.tool()
def mark(tag: str) -> str:
    """Write the tag down."""
    with open(os.environ["MCP_TEST_MARKS"], "a", encoding="utf-8") as marks:
        marks.write(f"{tag}\n")
    return f"marked {tag}"


if __name__ == "__main__":
    server.run("stdio")
