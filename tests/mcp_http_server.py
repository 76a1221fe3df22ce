"""An HTTP MCP server for the tests: ``python tests/mcp_http_server.py PORT`` serves streamable HTTP
at ``http://127.0.0.1:PORT/mcp``; ``python tests/mcp_http_server.py PORT sse`` serves the legacy
HTTP+SSE transport at ``http://127.0.0.1:PORT/sse``. Its tool ``whoami`` answers the ``Authorization``
header it was sent."""

from __future__ import annotations

import sys

from mcp.server.mcpserver import Context, MCPServer

server = MCPServer("http-test")


@server.tool()
def whoami(ctx: Context) -> str:
    """The Authorization header of this request."""
    request = ctx.request_context.request
    return request.headers.get("authorization", "none") if request is not None else "no request"


if __name__ == "__main__":
    transport = sys.argv[2] if len(sys.argv) > 2 else "streamable-http"
    server.run(transport, host="127.0.0.1", port=int(sys.argv[1]))
