"""Tools from MCP servers (``pip install -e ".[mcp]"``): a server is a toolset in ``tools=[...]``.

``dspy_imp.mcp.stdio(command, args)`` starts a server this process talks to over stdio,
``dspy_imp.mcp.http(url, headers=, auth=)`` reaches one over streamable HTTP (or SSE; OAuth 2.1
with ``dspy_imp.mcp.OAuth``), ``dspy_imp.mcp.memory(server)``
serves an ``mcp`` SDK server object in this process (tests), and ``dspy_imp.mcp.from_config(path)``
reads the ``mcpServers`` JSON of Claude Desktop, Cursor and VS Code. ``agent.as_mcp_server(name)``
(or ``python -m dspy_imp.mcp serve module:program``) serves a program as one, over HTTP with OAuth
bearer tokens required when given a ``dspy_imp.mcp.BearerAuth``. Built on the official ``mcp``
SDK. See ``docs/mcp.md``.

Example:
    ```python
    time = dspy_imp.mcp.stdio("uvx", ["mcp-server-time"])
    agent = dspy_imp.ReActV2("question -> answer", tools=[time, lookup])
    with time:
        agent(question="What time is it in Tokyo?")
    ```
"""

from dspy_imp._records.errors import require_extra

require_extra('dspy_imp.mcp needs its extra: pip install -e ".[mcp]" (from a clone)', "mcp", "re2")

from dspy_imp._program.toolsets import Listing, Toolset
from dspy_imp.mcp._auth import OAuth
from dspy_imp.mcp._config import from_config
from dspy_imp.mcp._results import ServerToolError
from dspy_imp.mcp._server import Server, ServerDisconnected, ServerUnavailable
from dspy_imp.mcp._servers import Approval, Elicit, ElicitUrl, http, memory, stdio
from dspy_imp.mcp._serving import ProgramServer
from dspy_imp.mcp._serving_auth import BearerAuth
from dspy_imp.mcp._tasks import TaskMode
from dspy_imp.mcp._tools import McpTool

__all__ = [
    "Approval",
    "BearerAuth",
    "Elicit",
    "ElicitUrl",
    "Listing",
    "McpTool",
    "OAuth",
    "ProgramServer",
    "Server",
    "ServerDisconnected",
    "ServerToolError",
    "ServerUnavailable",
    "TaskMode",
    "Toolset",
    "from_config",
    "http",
    "memory",
    "stdio",
]
