"""An HTTP MCP server that answers in JSON bodies, not event streams, for the tests:
``python tests/mcp_json_server.py PORT`` serves streamable HTTP with ``json_response=True`` at
``http://127.0.0.1:PORT/mcp``. Tools: ``echo``, ``big(size)`` (a text of ``size`` characters, so a
body a little longer than that)."""

from __future__ import annotations

import sys

from mcp.server.mcpserver import MCPServer

server = MCPServer("json-test")


@server.tool()
def echo(text: str) -> str:
    """Return the text."""
    return text


@server.tool()
def big(size: int) -> str:
    """A text of ``size`` characters."""
    return "z" * size


if __name__ == "__main__":
    server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[1]), json_response=True)
