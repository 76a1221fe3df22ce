"""A stdio MCP server whose tools write past a message's bound (``python tests/mcp_flood_server.py``).

Tools: ``pid`` (this process's id), ``echo``, ``long_line(size)`` (a line of ``size`` bytes that is not
JSON-RPC on the wire, then an answer), ``endless_line(size)`` (``size`` bytes with no newline, then
it waits forever: the line never ends). With ``MCP_FLOOD_AT_START=size`` it writes a line that long
before it serves at all. The ``mcp`` SDK points fd 1 elsewhere while it serves, so the tools write to
a copy of the wire taken before it does.
"""

from __future__ import annotations

import os

import anyio
from mcp.server.mcpserver import MCPServer

WIRE = os.dup(1)
server = MCPServer("flood")


def write(data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(WIRE, view) :]


@server.tool()
def pid() -> int:
    """This server's process id."""
    return os.getpid()


@server.tool()
def echo(text: str) -> str:
    """Return the text."""
    return text


@server.tool()
def long_line(size: int) -> str:
    """Write one line of ``size`` bytes to the wire, then answer."""
    write(b"x" * size + b"\n")
    return "after the long line"


@server.tool()
async def endless_line(size: int) -> str:
    """Write ``size`` bytes with no newline, then wait forever."""
    chunk = b"y" * 65536
    for _ in range(size // len(chunk) + 1):
        write(chunk)
    await anyio.sleep_forever()
    return "never"


if __name__ == "__main__":
    if os.environ.get("MCP_FLOOD_AT_START"):
        write(b"z" * int(os.environ["MCP_FLOOD_AT_START"]) + b"\n")
    server.run("stdio")
