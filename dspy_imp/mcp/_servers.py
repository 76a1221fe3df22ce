"""The ways to reach an MCP server: ``stdio`` (a command this process starts), ``http`` (streamable
HTTP, or SSE for legacy servers; OAuth through ``_auth``), ``memory`` (an ``mcp`` SDK server object
in this process, for tests)."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import dspy
import httpx2
import mcp_types as types
from mcp import StdioServerParameters
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client
from mcp.server import Server as LowLevelServer
from mcp.server.mcpserver import MCPServer

from dspy_imp._records.errors import ConfigurationError
from dspy_imp.mcp._auth import OAuth, http_auth
from dspy_imp.mcp._server import Server, note_fault, stderr_sink
from dspy_imp.mcp._stdio import MAX_MESSAGE_BYTES, bounded_stdio_client

Approval = bool | Iterable[str] | Callable[[types.Tool], bool]
"""What ``needs_approval=`` takes: ``True`` (every tool of the server), tool names, or a predicate on
the server's ``mcp.types.Tool`` (its annotations: ``readOnlyHint``, ``destructiveHint``...)."""

TRANSPORTS = ("streamable-http", "sse")
"""What ``mcp.http(transport=)`` takes."""


def stdio(
    command: str,
    args: Iterable[str] = (),
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    max_message_bytes: int = MAX_MESSAGE_BYTES,
    name: str | None = None,
    include: Iterable[str] | None = None,
    exclude: Iterable[str] = (),
    prefix: str | None = None,
    needs_approval: Approval = False,
    timeout: float | None = None,
    mode: str = "auto",
    elicit: Callable[[str, dict[str, Any]], Any] | None = None,
    sampling: dspy.BaseLM | None = None,
) -> Server:
    """An MCP server this process starts and talks to over its stdin and stdout.

    Args:
        command: The program to run (``"uvx"``, ``"npx"``, a path).
        args: Its arguments.
        env: Environment variables added to the few the SDK passes on (``HOME``, ``PATH``, ...);
            the rest of this process's environment is not passed.
        cwd: Its working directory.
        max_message_bytes: The longest message (one line of its stdout) read from it, 32 MiB by
            default, enforced as it is read: a server that writes a longer one (or bytes with no
            newline past it) has its session ended, the call waiting on it failed with an error
            naming the limit, and its process stopped. The next call starts it again.
        name: How errors and logs name the server (by default the command's file name).
        include: Only these of its tools (by the server's names); by default all.
        exclude: Its tools left out (by the server's names).
        prefix: Put before each tool's name (``prefix_name``), to keep two servers' tools apart.
        needs_approval: ``True`` (every call waits for a person), the server's tool names, or
            ``callable(tool) -> bool`` on the server's ``mcp.types.Tool`` (its annotations:
            ``lambda t: not (t.annotations and t.annotations.read_only_hint)``).
        timeout: Seconds one call may take (the program's ``tool_timeouts`` for a tool wins).
        mode: The ``mcp`` SDK's protocol negotiation: ``"auto"``, ``"legacy"`` or a version.
        elicit: ``callable(message, schema)`` answering the server's requests for input
            (``elicitation/create``): a dict accepts (the schema's defaults filled in for fields it
            leaves out), ``None`` declines. Sync (run in a worker thread) or async. By default the
            client offers no elicitation.
        sampling: A ``dspy.LM`` answering the server's requests for a completion
            (``sampling/createMessage``) during a call of its tools: counted in the turn's usage (as
            ``"sampling"``) and bounded by its usage limits and deadline. By default the client
            offers no sampling.
    """
    command = _check_text(command, "command")
    arguments = _strings(args, "args")
    environment = None if env is None else _mapping(env, "env")
    directory = None if cwd is None else Path(cwd)
    parameters = StdioServerParameters(command=command, args=arguments, env=environment, cwd=directory)
    if isinstance(max_message_bytes, bool) or not isinstance(max_message_bytes, int) or max_message_bytes < 1:
        raise ConfigurationError(
            f"MCP server `max_message_bytes` must be a positive number of bytes, got {max_message_bytes!r}"
        )

    def target() -> Any:
        return bounded_stdio_client(parameters, errlog=stderr_sink(), limit=max_message_bytes, fault=note_fault)

    server = Server(
        name or Path(command).name, target, include=include, exclude=exclude, prefix=prefix,
        needs_approval=needs_approval, timeout=timeout, mode=mode, elicit=elicit, sampling=sampling,
    )  # fmt: skip
    server.connects_to, server.network_transport = parameters, "pipe"
    return server


def http(
    url: str,
    *,
    headers: Mapping[str, str] | None = None,
    auth: OAuth | httpx2.Auth | None = None,
    transport: str = "streamable-http",
    name: str | None = None,
    include: Iterable[str] | None = None,
    exclude: Iterable[str] = (),
    prefix: str | None = None,
    needs_approval: Approval = False,
    timeout: float | None = None,
    mode: str = "auto",
    elicit: Callable[[str, dict[str, Any]], Any] | None = None,
    sampling: dspy.BaseLM | None = None,
) -> Server:
    """An MCP server at ``url`` over streamable HTTP, or over SSE for a legacy server.

    Args:
        url: The server's endpoint (``https://host/mcp``; for SSE, its event stream: ``.../sse``).
        headers: Sent with every request (an ``Authorization`` header, say).
        auth: ``dspy_imp.mcp.OAuth(...)`` (OAuth 2.1, run by the ``mcp`` SDK when the server
            answers ``401``), or any ``httpx2.Auth`` (an ``mcp.client.auth`` provider such as
            ``ClientCredentialsOAuthProvider``). One per server: its tokens outlive a session.
        transport: ``"streamable-http"`` (default) or ``"sse"`` (the 2024-11-05 HTTP+SSE
            transport of older servers: a ``GET`` event stream and ``POST``s to the endpoint it
            names).

    The other arguments are those of ``stdio``.
    """
    url = _check_text(url, "url")
    if not url.startswith(("http://", "https://")):
        raise ConfigurationError(f"MCP server `url` must be an http:// or https:// URL, got {url!r}")
    sent = {} if headers is None else _mapping(headers, "headers")
    authority = http_auth(auth)
    if transport not in TRANSPORTS:
        raise ConfigurationError(f"MCP server `transport` must be one of {TRANSPORTS!r}, got {transport!r}")
    made: list[httpx2.Auth] = []

    def authorizer() -> httpx2.Auth | None:
        """The server's one ``httpx2.Auth``, made on first use (it holds the tokens across sessions)."""
        if authority is None:
            return None
        if not made:
            made.append(authority(url))
        return made[0]

    @asynccontextmanager
    async def target() -> AsyncIterator[Any]:
        if transport == "sse":
            async with sse_client(
                url, headers=sent, timeout=30.0, sse_read_timeout=300.0, auth=authorizer()
            ) as streams:
                yield streams
            return
        timeout_ = httpx2.Timeout(30.0, read=300.0)
        remote.session_id = None  # a new session: the server names it in its first answer

        async def noted(response: httpx2.Response) -> None:
            # the SDK keeps the session id on its transport and yields only the streams: read it where
            # the server sends it, for the spans' ``mcp.session.id`` (untrusted text: bounded)
            found = response.headers.get("mcp-session-id")
            if found:
                remote.session_id = found[:256]

        async with (
            httpx2.AsyncClient(
                headers=sent, timeout=timeout_, auth=authorizer(), event_hooks={"response": [noted]}
            ) as client,
            streamable_http_client(url, http_client=client) as streams,
        ):
            yield streams

    remote = Server(
        name or url, target, include=include, exclude=exclude, prefix=prefix,
        needs_approval=needs_approval, timeout=timeout, mode=mode, elicit=elicit, sampling=sampling,
    )  # fmt: skip
    remote.connects_to, remote.network_transport = url, "tcp"
    return remote


def memory(
    server: MCPServer | LowLevelServer[Any],
    *,
    name: str | None = None,
    include: Iterable[str] | None = None,
    exclude: Iterable[str] = (),
    prefix: str | None = None,
    needs_approval: Approval = False,
    timeout: float | None = None,
    mode: str = "auto",
    elicit: Callable[[str, dict[str, Any]], Any] | None = None,
    sampling: dspy.BaseLM | None = None,
) -> Server:
    """An ``mcp`` SDK server object (``mcp.server.mcpserver.MCPServer`` or a low-level ``Server``)
    served in this process, on the MCP layer's loop: for tests and examples. ``mode="legacy"``
    talks JSON-RPC to it over memory streams, as to a server elsewhere; ``"auto"`` calls it
    directly. The other arguments are those of ``stdio``."""
    if not isinstance(server, MCPServer | LowLevelServer):
        raise ConfigurationError(f"mcp.memory takes an mcp SDK server (MCPServer or Server), got {server!r}")
    default = getattr(server, "name", None) or "memory"
    served = Server(
        name or default, lambda: server, include=include, exclude=exclude, prefix=prefix,
        needs_approval=needs_approval, timeout=timeout, mode=mode, elicit=elicit, sampling=sampling,
    )  # fmt: skip
    served.connects_to = server
    return served


def _check_text(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ConfigurationError(f"MCP server `{where}` must be a non-blank string, got {value!r}")
    return value


def _strings(value: Any, where: str) -> list[str]:
    if isinstance(value, str | bytes | Mapping) or not isinstance(value, Iterable):
        raise ConfigurationError(f"MCP server `{where}` must be a list of strings, got {value!r}")
    items = list(value)
    if not all(isinstance(item, str) for item in items):
        raise ConfigurationError(f"MCP server `{where}` must be a list of strings, got {items!r}")
    return items


def _mapping(value: Any, where: str) -> dict[str, str]:
    if not isinstance(value, Mapping) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise ConfigurationError(f"MCP server `{where}` must be a dict of strings to strings, got {value!r}")
    return dict(value)
