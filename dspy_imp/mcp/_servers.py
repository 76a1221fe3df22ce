"""The ways to reach an MCP server: ``stdio`` (a command this process starts), ``http`` (streamable
HTTP, or SSE for legacy servers; OAuth through ``_auth``), ``memory`` (an ``mcp`` SDK server object
in this process, for tests)."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Literal

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
from dspy_imp.mcp._bounded import Bounded
from dspy_imp.mcp._server import Server, stderr_sink
from dspy_imp.mcp._stdio import bounded_stdio_client
from dspy_imp.mcp._tasks import TaskMode
from dspy_imp.mcp._transport import note_fault

Approval = bool | Iterable[str] | Callable[[types.Tool], bool]
"""What ``needs_approval=`` takes: ``True`` (every tool of the server), tool names, or a predicate on
the server's ``mcp.types.Tool`` (its annotations: ``readOnlyHint``, ``destructiveHint``...)."""

Elicit = Callable[[str, dict[str, Any]], Any] | Literal["pause"] | None
"""What ``elicit=`` takes: ``callable(message, schema)`` answering a server's requests for input,
``"pause"`` (the turn pauses, the caller answers like an approval), or ``None`` (no elicitation)."""

ElicitUrl = Callable[[str, str], Any] | None
"""What ``elicit_url=`` takes: ``callable(message, url)`` answering a server's requests to have a
person open a URL (``mode: "url"``): ``True`` accepts, ``False`` or ``None`` declines, ``"cancel"``
cancels; or ``None`` (no URL elicitation, unless ``elicit="pause"``)."""

TRANSPORTS = ("streamable-http", "sse")
"""What ``mcp.http(transport=)`` takes (or ``None``: streamable HTTP, falling back to SSE)."""
FALLBACK_STATUSES = frozenset({400, 404, 405})
"""The answers to a streamable HTTP ``POST`` that say the URL is an older HTTP+SSE server's: the
spec's backwards-compatibility rule then has the client ``GET`` it as an SSE stream."""


def stdio(
    command: str,
    args: Iterable[str] = (),
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    max_message_bytes: int = 33_554_432,  # MAX_MESSAGE_BYTES, 32 MiB (a literal: the API reference shows it)
    name: str | None = None,
    include: Iterable[str] | None = None,
    exclude: Iterable[str] = (),
    prefix: str | None = None,
    needs_approval: Approval = False,
    timeout: float | None = None,
    mode: str = "auto",
    elicit: Elicit = None,
    elicit_url: ElicitUrl = None,
    sampling: dspy.BaseLM | None = None,
    log_level: str | None = None,
    add_instructions: bool = False,
    tasks: TaskMode = "auto",
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
            leaves out), ``None`` declines. Sync (run in a worker thread) or async. Or ``"pause"``:
            the turn pauses with the call pending (kind ``"elicitation"``, the server's message and
            form in ``pred.metadata.pending_calls``) and the caller answers it like an approval,
            ``approvals={id: {...}}`` (see ``docs/mcp.md#elicitation``); a request to open a URL
            pauses the same way (``mode`` ``"url"``, answered ``True``, ``False`` or ``"cancel"``). By
            default the client offers no elicitation.
        elicit_url: ``callable(message, url)`` answering the server's requests to have the person
            open a URL (MCP 2025-11-25 URL mode: an OAuth sign-in, a payment) and its tool calls
            refused until one is opened (``URLElicitationRequiredError``, -32042, after which the
            call is made once more). The URL is the server's untrusted text: show it, let the
            person open it, never fetch it; only ``http``/``https`` URLs with no credentials reach
            the callback. ``True``: the person opened it (accept); ``False`` or ``None``: declined;
            ``"cancel"``: dismissed. Sync (run in a worker thread) or async. The client declares
            the ``url`` elicitation capability only with this or ``elicit="pause"``.
        sampling: A ``dspy.LM`` answering the server's requests for a completion
            (``sampling/createMessage``) during a call of its tools: counted in the turn's usage (as
            ``"sampling"``) and bounded by its usage limits and deadline. The client then declares
            ``sampling`` with ``tools`` (2025-11-25): a request's tools and ``toolChoice`` reach the
            model, and its tool calls go back as ``tool_use`` blocks. By default the client offers
            no sampling.
        log_level: The least severe of the server's log messages (``notifications/message``) to
            ask for and show: ``"debug"``, ``"info"``, ``"notice"``, ``"warning"``, ``"error"``,
            ``"critical"``, ``"alert"`` or ``"emergency"``. Sent as ``logging/setLevel`` when the
            session opens (on a 2025 session, to a server that declares logging), or as the
            per-request opt-in of a 2026-07-28 session; messages below it are dropped. ``None``
            (default): nothing is asked, and what the server sends anyway is shown. A message
            during a call is a status line of the turn's stream and an event of the web app's;
            every one goes to the ``dspy_imp.mcp`` logger (bounded; ``docs/mcp.md``).
        add_instructions: Add the ``instructions`` the server sends when its session opens to the
            program's instructions, in each request of a turn that lists its tools, marked as the
            server's untrusted text (cut at 4,000 characters). Off by default; never saved with
            the program.
        tasks: Which calls the server runs as tasks (MCP 2025-11-25, experimental; on a session
            of that version whose server declares task-augmented ``tools/call``): ``"auto"``
            (default) the tools whose ``execution.taskSupport`` is ``"required"``, ``"always"``
            those whose support is ``"optional"`` too, ``"never"`` none. A task's call polls
            ``tasks/get`` and reads ``tasks/result``; a call cut short (its time bound, the
            deadline, Stop) sends ``tasks/cancel`` (``docs/mcp.md#tasks``).
    """
    command = _check_text(command, "command")
    arguments = _strings(args, "args")
    environment = None if env is None else _mapping(env, "env")
    directory = None if cwd is None else Path(cwd)
    parameters = StdioServerParameters(command=command, args=arguments, env=environment, cwd=directory)
    _check_bytes(max_message_bytes)

    def target() -> Any:
        return bounded_stdio_client(parameters, errlog=stderr_sink(), limit=max_message_bytes, fault=note_fault)

    server = Server(
        name or Path(command).name, target, include=include, exclude=exclude, prefix=prefix,
        needs_approval=needs_approval, timeout=timeout, mode=mode, elicit=elicit, elicit_url=elicit_url,
        sampling=sampling,
        log_level=log_level, add_instructions=add_instructions, tasks=tasks,
    )  # fmt: skip
    server.connects_to, server.network_transport, server.transport = parameters, "pipe", "stdio"
    return server


def http(
    url: str,
    *,
    headers: Mapping[str, str] | None = None,
    auth: OAuth | httpx2.Auth | None = None,
    transport: str | None = None,
    max_message_bytes: int = 33_554_432,  # MAX_MESSAGE_BYTES, as stdio's
    name: str | None = None,
    include: Iterable[str] | None = None,
    exclude: Iterable[str] = (),
    prefix: str | None = None,
    needs_approval: Approval = False,
    timeout: float | None = None,
    mode: str = "auto",
    elicit: Elicit = None,
    elicit_url: ElicitUrl = None,
    sampling: dspy.BaseLM | None = None,
    log_level: str | None = None,
    add_instructions: bool = False,
    tasks: TaskMode = "auto",
) -> Server:
    """An MCP server at ``url`` over streamable HTTP, or over SSE for a legacy server.

    Args:
        url: The server's endpoint (``https://host/mcp``; for SSE, its event stream: ``.../sse``).
        headers: Sent with every request (an ``Authorization`` header, say).
        auth: ``dspy_imp.mcp.OAuth(...)`` (OAuth 2.1, run by the ``mcp`` SDK when the server
            answers ``401``), or any ``httpx2.Auth`` (an ``mcp.client.auth`` provider such as
            ``ClientCredentialsOAuthProvider``). One per server: its tokens outlive a session.
        transport: ``"streamable-http"``, ``"sse"`` (the 2024-11-05 HTTP+SSE transport of older
            servers: a ``GET`` event stream and ``POST``s to the endpoint it names), or ``None``
            (default): streamable HTTP, and when the server answers its first session's ``POST``s
            with 400, 404 or 405 and never with success, SSE at the same URL, as the spec's
            backwards-compatibility rule has a client do. The choice is kept for the server's later
            sessions, and shown as ``server.transport``.
        max_message_bytes: The longest answer to one request read from it (a JSON body), 32 MiB by
            default, enforced as it is read: a longer one ends that call with an error naming the
            limit, and the session goes on. An event stream is read event by event, each at most
            1 MiB (the ``mcp`` SDK's bound).

    The other arguments are those of ``stdio``.
    """
    url = _check_text(url, "url")
    if not url.startswith(("http://", "https://")):
        raise ConfigurationError(f"MCP server `url` must be an http:// or https:// URL, got {url!r}")
    sent = {} if headers is None else _mapping(headers, "headers")
    authority = http_auth(auth)
    if transport is not None and transport not in TRANSPORTS:
        raise ConfigurationError(
            f"MCP server `transport` must be one of {TRANSPORTS!r} (or None: either), got {transport!r}"
        )
    _check_bytes(max_message_bytes)
    way = _HttpWay(url, sent, authority, max_message_bytes)
    remote = Server(
        name or url, way.target, include=include, exclude=exclude, prefix=prefix,
        needs_approval=needs_approval, timeout=timeout, mode=mode, elicit=elicit, elicit_url=elicit_url,
        sampling=sampling,
        log_level=log_level, add_instructions=add_instructions, tasks=tasks,
    )  # fmt: skip
    remote.connects_to, remote.network_transport, remote.transport = url, "tcp", transport
    remote.falls_back = way.falls_back
    way.server = remote
    return remote


class _HttpWay:
    """How an HTTP server's sessions are opened: its one ``httpx2.Auth`` (made on first use: it holds
    the tokens across sessions), its transport, and the choice of one when none was given.

    With no ``transport=`` (``server.transport`` is None), a session is opened over streamable HTTP
    and the answers to its ``POST``s to the URL are watched. One that succeeds settles it: streamable
    HTTP, for this and every later session. If the opening fails after a ``POST`` was answered 400,
    404 or 405 and none succeeded, ``falls_back`` says so and the server opens the session once more,
    over SSE (the spec's backwards-compatibility rule: ``GET`` the URL, expecting an SSE stream whose
    first event is ``endpoint``). An SSE stream that names its endpoint settles SSE; one that does
    not leaves the choice open, so the next opening starts again from streamable HTTP.
    """

    def __init__(self, url: str, headers: dict[str, str], authority: Callable[[str], httpx2.Auth] | None, limit: int):
        self.url, self.headers, self.authority, self.limit = url, headers, authority, limit
        self.endpoint = httpx2.URL(url)
        self.server: Server | None = None
        self.refused: list[int] = []
        """The fallback statuses the opening session's ``POST``s got (while none succeeded)."""
        self._auth: httpx2.Auth | None = None
        self._sse_next = False

    def auth(self) -> httpx2.Auth | None:
        if self.authority is not None and self._auth is None:
            self._auth = self.authority(self.url)
        return self._auth

    def falls_back(self) -> str | None:
        """After a session failed to open: whether the next opening goes over SSE (how, and why, for the
        errors), when the rule says so; else ``None``."""
        server = self.server
        if server is None or server.transport is not None or not self.refused:
            return None
        self._sse_next = True
        return f"over SSE, after HTTP {self.refused[-1]} to a streamable HTTP POST"

    def _named(self, found: str) -> None:
        if self.server is not None:
            self.server.session_id = found[:256]  # untrusted text: bounded

    async def _noted(self, response: httpx2.Response) -> None:
        """Every response: the session id the server names (the SDK keeps it on its transport and yields
        only the streams, so it is read here, for the spans' ``mcp.session.id``), and, while the
        transport is not settled, what a ``POST`` to the URL was answered."""
        found = response.headers.get("mcp-session-id")
        if found:
            self._named(found)
        server = self.server
        if server is None or server.transport is not None:
            return
        if response.request.method == "POST" and response.request.url == self.endpoint:
            if response.is_success:  # a streamable HTTP server: no fallback, now or later
                server.transport = "streamable-http"
            elif response.status_code in FALLBACK_STATUSES:
                self.refused.append(response.status_code)

    @asynccontextmanager
    async def target(self) -> AsyncIterator[Any]:
        server = self.server
        assert server is not None, "set by mcp.http"
        server.session_id = None  # a new session: the server names it in its first answer
        if server.transport == "sse" or self._sse_next:
            self._sse_next = False
            async with sse_client(
                self.url, headers=self.headers, timeout=30.0, sse_read_timeout=300.0, auth=self.auth(),
                on_session_created=self._named,
            ) as streams:  # fmt: skip
                server.transport = "sse"  # the stream named its endpoint: an HTTP+SSE server
                yield streams
            return
        self.refused.clear()
        async with (
            httpx2.AsyncClient(
                headers=self.headers,
                timeout=httpx2.Timeout(30.0, read=300.0),
                auth=self.auth(),
                event_hooks={"response": [self._noted]},
                transport=Bounded(httpx2.AsyncHTTPTransport(), self.limit, server.label),
            ) as client,  # fmt: skip
            streamable_http_client(self.url, http_client=client) as streams,
        ):
            yield streams


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
    elicit: Elicit = None,
    elicit_url: ElicitUrl = None,
    sampling: dspy.BaseLM | None = None,
    log_level: str | None = None,
    add_instructions: bool = False,
    tasks: TaskMode = "auto",
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
        needs_approval=needs_approval, timeout=timeout, mode=mode, elicit=elicit, elicit_url=elicit_url,
        sampling=sampling,
        log_level=log_level, add_instructions=add_instructions, tasks=tasks,
    )  # fmt: skip
    served.connects_to, served.transport = server, "memory"
    return served


def _check_bytes(value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigurationError(f"MCP server `max_message_bytes` must be a positive number of bytes, got {value!r}")


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
