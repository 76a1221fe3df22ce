"""A stdio MCP server for the tests (``python tests/mcp_test_server.py``), on the ``mcp`` SDK.

Tools: ``echo``, ``pid`` (this process's id), ``die`` (the process exits mid-call), ``garbage``
(a line that is not JSON-RPC on stdout, then a flood of log notifications, then an answer), ``hang``
(waits until cancelled; its start, then a cancellation reaching the handler, are written to the
file named by ``MCP_TEST_MARKS``, so a test sees the client's ``notifications/cancelled``).
"""

from __future__ import annotations

import os
import sys

import anyio
from mcp.server.mcpserver import Context, MCPServer

server = MCPServer("test-server")


@server.tool()
def echo(text: str) -> str:
    """Return the text."""
    return text


@server.tool()
def pid() -> int:
    """This server's process id."""
    return os.getpid()


@server.tool()
def die() -> str:
    """End this server's process in the middle of the call."""
    os._exit(3)


@server.tool()
async def garbage(ctx: Context) -> str:
    """Write a line that is not JSON-RPC to stdout and flood the client with log messages, then answer."""
    sys.stdout.write("this is not JSON-RPC\n")
    sys.stdout.flush()
    for index in range(500):
        await ctx.info(f"flood {index}")
    return "survived"


@server.tool()
async def hang(tag: str) -> str:
    """Wait until cancelled."""
    with open(os.environ["MCP_TEST_MARKS"], "a", encoding="utf-8") as marks:
        marks.write(f"started {tag}\n")
    try:
        await anyio.sleep_forever()
    except anyio.get_cancelled_exc_class():
        with open(os.environ["MCP_TEST_MARKS"], "a", encoding="utf-8") as marks:
            marks.write(f"cancelled {tag}\n")
        raise
    return "never"


if __name__ == "__main__":
    server.run("stdio")
