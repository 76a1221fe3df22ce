"""An MCP server as a toolset: its session, its tool list, its calls.

Theory of operation. A ``Server`` holds at most one session (the ``mcp`` SDK's ``Client``) at a
time, on the MCP layer's own loop (``_loop``), shared by every caller in the process. The session
is opened on first use (a turn's start lists the tools) by an *owner* task that enters the SDK's
context managers and keeps them open until the server is closed (``close``, ``with``/``async
with``, or interpreter exit), since the SDK's transports must be entered and left by one task.

- **Tools**: listed once, kept in a cache, listed again when the server says its list changed
  (``notifications/tools/list_changed``, or a ``subscriptions/listen`` event on a 2026-07-28
  session) or after a new session; a turn keeps the tools it started with.
- **Calls**: each a request on the session, awaited from the caller's loop (``_loop.arun``), so a
  cancelled call (a tool's time bound, the deadline, Stop) cancels the request and the SDK sends
  ``notifications/cancelled``. A server that answers ``isError: true`` is an error observation
  (``ServerToolError``); a protocol error is the call's exception, an error observation too. A
  tool the server runs as a task (2025-11-25) is created, waited on (its status notifications,
  else polled) and read by ``_tasks``; a cancelled one sends ``tasks/cancel`` as well.
- **Questions** (``elicitation/create``, a form or a URL to open; a call refused with -32042):
  answered by the ``elicit`` and ``elicit_url`` callbacks (``_elicit``), or, under
  ``elicit="pause"``, raised as ``AsksInput`` so the turn pauses (``_turn.elicitation``); the
  resumed call finishes with the answer (``_pausing``: a 2026-07-28 round's retry, or an older
  session's call made again, its questions answered with the saved answers).
- **A session that dies** (a stdio server's process ended, a connection closed): the call it died
  in fails (``ServerDisconnected``, an error observation); the session is let go, and the next use
  opens a new one (a stdio server is started again). The stream from the server is watched
  (``_transport.Watched``), so a server that died while idle is replaced before the next request
  is sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import os
import sys
import warnings
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal, TypeVar

import anyio
import dspy
import mcp_types as types
from mcp import Client
from mcp.server import Server as LowLevelServer
from mcp.server.mcpserver import MCPServer
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

from dspy_imp._program.toolsets import Listing, Toolset
from dspy_imp._records.errors import ConfigurationError
from dspy_imp._watch.events import calling
from dspy_imp.mcp import _loop, _sampling, _transport
from dspy_imp.mcp._elicit import PAUSE as PAUSE
from dspy_imp.mcp._elicit import Questions
from dspy_imp.mcp._elicit import check as check_elicit
from dspy_imp.mcp._elicit import message as _message
from dspy_imp.mcp._elicit import modes as elicitation_modes
from dspy_imp.mcp._notices import Logs, Notices, check_level, one_line
from dspy_imp.mcp._notices import progress_line as progress_line
from dspy_imp.mcp._pausing import AsTask, Pauses, Resume
from dspy_imp.mcp._results import result_value
from dspy_imp.mcp._tasks import (
    CANCEL_SECONDS,
    STATUS_METHOD,
    TOLD,
    Statuses,
    TaskMode,
    call_as_task,
    check_mode,
    list_tasks,
    wants_task,
)
from dspy_imp.mcp._tools import McpTool, build
from dspy_imp.mcp._transport import OpeningClock
from dspy_imp.mcp._transport import waiting_on_a_person as waiting_on_a_person

logger = logging.getLogger("dspy_imp")
T = TypeVar("T")

CONNECT_SECONDS = 60.0
"""The longest a session may take to open (a stdio server to start and answer ``initialize``)."""
LIST_SECONDS = 60.0
"""The longest listing the tools may take."""
CLOSE_SECONDS = 15.0
"""The longest closing a session may take (the SDK bounds a stdio server's shutdown itself)."""
MAX_PAGES = 100
"""The most pages of a tool listing read."""
MAX_INSTRUCTIONS_CHARS = 4_000
"""The longest server ``instructions`` added to a program's (``add_instructions=True``); the rest is cut."""

_SAMPLING_TOOLS = types.SamplingCapability(tools=types.SamplingToolsCapability())
"""The sampling capability a client with ``sampling=`` declares: with ``tools`` (2025-11-25, SEP-1577)."""
_GONE = (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream)


class ServerUnavailable(Exception):
    """An MCP server could not be reached: its session would not open, or its tools not be listed."""


class ServerDisconnected(Exception):
    """An MCP server's session ended during a call (its process died, its connection closed); the
    next call opens a new session."""


@dataclass
class _Session:
    client: Client
    closing: asyncio.Event
    owner: asyncio.Task[None]
    ended: asyncio.Event
    """Set when the transport's stream from the server ends (a stdio server's process exited)."""
    fault: list[str]
    """Why the transport ended the session, when it did (``_transport.note_fault``: a stdio message over its
    limit); read into the error of the calls it failed."""

    def alive(self) -> bool:
        return not self.owner.done() and not self.ended.is_set()

    def ended_because(self, otherwise: str) -> str:
        """What the session's end is called in an error: the transport's reason, else ``otherwise``."""
        return self.fault[0] if self.fault else otherwise


class Server(Toolset):
    """An MCP server whose tools a ``dspy_imp.ReActV2`` offers (build one with ``dspy_imp.mcp.stdio``,
    ``http`` or ``memory``). Give it in ``tools=[...]``; see ``docs/mcp.md``."""

    def __init__(
        self,
        name: str,
        target: Callable[[], Any],
        *,
        include: Iterable[str] | None = None,
        exclude: Iterable[str] = (),
        prefix: str | None = None,
        needs_approval: bool | Iterable[str] | Callable[[types.Tool], bool] = False,
        timeout: float | None = None,
        mode: str = "auto",
        connect_timeout: float = CONNECT_SECONDS,
        elicit: Callable[[str, dict[str, Any]], Any] | Literal["pause"] | None = None,
        elicit_url: Callable[[str, str], Any] | None = None,
        sampling: dspy.BaseLM | None = None,
        log_level: str | None = None,
        add_instructions: bool = False,
        tasks: TaskMode = "auto",
    ):
        self.name = _text(name, "name")
        self.label = f"MCP server {self.name!r}"
        self._target = target
        self.include = None if include is None else _names(include, "include")
        self.exclude = _names(exclude, "exclude")
        self.prefix = None if prefix is None else _text(prefix, "prefix")
        self.needs_approval = _approval(needs_approval)
        self.timeout = _seconds(timeout, "timeout")
        self.connect_timeout = _seconds(connect_timeout, "connect_timeout")
        if mode not in ("auto", "legacy") and not (isinstance(mode, str) and mode[:1].isdigit()):
            raise ConfigurationError(f"`mode` must be 'auto', 'legacy' or a protocol version, got {mode!r}")
        self.mode = mode
        check_elicit(elicit, elicit_url)
        self.elicit = elicit
        self.elicit_url = elicit_url
        if sampling is not None and not isinstance(sampling, dspy.BaseLM):
            raise ConfigurationError(f"MCP server `sampling` must be a dspy.LM (or None), got {sampling!r}")
        self.sampling = sampling
        self._pauses = Pauses(self.name, self.label)  # its calls under ``elicit="pause"`` (``_pausing``)
        self._questions = Questions(self.label, elicit, elicit_url, self._pauses)  # answered (``_elicit``)
        self.log_level = check_level(log_level)
        self._logs = Logs(self.label, self.log_level)  # its log messages, to the calls in flight (``_notices``)
        if not isinstance(add_instructions, bool):
            raise ConfigurationError(f"MCP server `add_instructions` must be True or False, got {add_instructions!r}")
        self.add_instructions = add_instructions
        self.tasks = check_mode(tasks)  # which calls are sent as tasks (``_tasks.wants_task``)
        self._cancelling: set[asyncio.Future[None]] = set()  # ``tasks/cancel`` in flight, awaited by a close
        self._asking: list[contextvars.Context] = []
        """The contexts of the calls in flight, oldest first: a sampling request is answered in the
        oldest's (its turn's usage limits, deadline and usage)."""
        self.network_transport: str | None = None
        """OpenTelemetry's ``network.transport`` of its calls: ``"pipe"`` (stdio), ``"tcp"`` (HTTP)."""
        self.session_id: str | None = None
        """The session id a streamable HTTP server gave the open session (``Mcp-Session-Id``), for
        the spans' ``mcp.session.id``; None on stdio and before the server names one."""
        self.transport: str | None = None
        """What its sessions travel over: ``"stdio"``, ``"streamable-http"``, ``"sse"`` or ``"memory"``;
        ``None`` for an HTTP server given no ``transport=`` until its first session chooses (``http``)."""
        self.falls_back: Callable[[], str | None] | None = None
        """Asked when a session fails to open: whether to open it once more another way (an HTTP
        server's SSE fallback), saying how (``"over SSE, after ..."``), or ``None`` (set by ``http``)."""
        self.connects_to: Any = None
        """What it reaches: the ``mcp.StdioServerParameters`` of a stdio server, an HTTP server's URL, an
        in-process server object (set by ``stdio``, ``http``, ``memory``)."""
        self.sessions_opened = 0
        """How many sessions it has opened (a restarted server counts again)."""
        self._session: _Session | None = None
        self._ending: set[asyncio.Task[None]] = set()
        self._opening: asyncio.Lock | None = None
        self._cache: dict[str, McpTool] | None = None
        self._changes = 0
        self._pid = os.getpid()

    def __repr__(self) -> str:
        return f"<dspy_imp.mcp.Server {self.name!r}>"

    # -- what a turn asks (``_program.toolsets``) ----------------------------------------------

    def listing(self) -> Listing:
        return _loop.run(self._listing())

    async def alisting(self) -> Listing:
        return await _loop.arun(self._listing())

    # -- the session, from any thread or loop --------------------------------------------------

    def open(self) -> Server:
        """Open the session now (else it opens on first use)."""
        _loop.run(self._client())
        return self

    async def aopen(self) -> Server:
        await _loop.arun(self._client())
        return self

    def close(self) -> None:
        """Close the session (a stdio server's process ends); the next use opens a new one."""
        _loop.run(self.aclose_here())

    async def aclose(self) -> None:
        await _loop.arun(self.aclose_here())

    def __enter__(self) -> Server:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> Server:
        return await self.aopen()

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def list_tools(self) -> list[types.Tool]:
        """The server's tools as it lists them (every one, before ``include``/``exclude``), listed now."""
        return _loop.run(self._fetch())

    async def alist_tools(self) -> list[types.Tool]:
        return await _loop.arun(self._fetch())

    @property
    def connected(self) -> bool:
        """Whether a session is open now (``False`` before first use, after ``close``, or once its
        server died: the next use opens another)."""
        session = self._session
        return session is not None and session.alive()

    @property
    def instructions(self) -> str | None:
        """The ``instructions`` the server sent when its session opened (``None`` before it opened).
        Untrusted text: added to a program's instructions only with ``add_instructions=True``
        (marked as this server's, and cut at ``MAX_INSTRUCTIONS_CHARS``)."""
        session = self._session
        try:
            return session.client.instructions if session is not None else None
        except RuntimeError:  # the session closed meanwhile
            return None

    def list_resources(self) -> list[types.Resource]:
        """The server's resources (every page), listed now."""
        return _loop.run(self._ask(lambda client: _paged(client.list_resources, "resources")))

    async def alist_resources(self) -> list[types.Resource]:
        return await _loop.arun(self._ask(lambda client: _paged(client.list_resources, "resources")))

    def read_resource(self, uri: str) -> list[types.TextResourceContents | types.BlobResourceContents]:
        """The contents of the resource at ``uri``."""
        return _loop.run(self._ask(lambda client: _contents(client, uri)))

    async def aread_resource(self, uri: str) -> list[types.TextResourceContents | types.BlobResourceContents]:
        return await _loop.arun(self._ask(lambda client: _contents(client, uri)))

    def list_prompts(self) -> list[types.Prompt]:
        """The server's prompts (every page), listed now."""
        return _loop.run(self._ask(lambda client: _paged(client.list_prompts, "prompts")))

    async def alist_prompts(self) -> list[types.Prompt]:
        return await _loop.arun(self._ask(lambda client: _paged(client.list_prompts, "prompts")))

    def get_prompt(self, name: str, arguments: Mapping[str, str] | None = None) -> types.GetPromptResult:
        """The prompt ``name`` filled with ``arguments`` (its messages: untrusted text)."""
        return _loop.run(self._ask(lambda client: client.get_prompt(name, dict(arguments or {}))))

    async def aget_prompt(self, name: str, arguments: Mapping[str, str] | None = None) -> types.GetPromptResult:
        return await _loop.arun(self._ask(lambda client: client.get_prompt(name, dict(arguments or {}))))

    def list_tasks(self) -> list[types.Task]:
        """The server's tasks (``tasks/list``, every page), listed now: on a 2025-11-25 session of a
        server that declares the ``tasks.list`` capability, else a ``RuntimeError`` naming it."""
        return _loop.run(self._ask(lambda client: list_tasks(client, self.label)))

    async def alist_tasks(self) -> list[types.Task]:
        return await _loop.arun(self._ask(lambda client: list_tasks(client, self.label)))

    # -- on the layer's loop -------------------------------------------------------------------

    async def _ask(self, ask: Callable[[Client], Awaitable[T]]) -> T:
        """``ask(client)`` on the session; a session found dead is opened again, once."""
        for attempt in (1, 2):
            session = await self._live()
            try:
                return await ask(session.client)
            except (MCPError, *_GONE) as error:
                if not _gone(error):
                    raise
                self._let_go(session.client)
                if attempt == 2:
                    why = session.ended_because("closed its session during the request")
                    raise ServerDisconnected(f"{self.label} {why}") from error
        raise AssertionError("unreachable")

    durable = True

    def record(self, listing: Listing) -> dict[str, Any]:
        """The listing's tools as the server listed them (JSON), and the instructions it added to the
        turn's (``add_instructions=True``), for a durable turn's record."""
        tools = [_tool_record(tool) for tool in listing.tools.values()]
        return {"tools": tools, "instructions": [list(pair) for pair in listing.instructions]}

    def revive(self, record: Any) -> Listing:
        """A recorded listing, its tools calling this server (with no request to it: a replayed turn
        that calls none of them sends nothing), with the instructions recorded (a recovered turn's
        prompts are the first run's, though no session is open yet). A record of an earlier version
        (the tools alone, a list) gets the open session's, as it did then."""
        tools = record if isinstance(record, list) else record["tools"]
        remotes = [types.Tool.model_validate(data) for data in tools]
        listing = self._listed(build(remotes, self.prefix, self._keeps, self._call, self.label, self._traced))
        if isinstance(record, list):
            return listing
        added = tuple((str(whose), str(text)) for whose, text in record["instructions"])
        return replace(listing, instructions=added)

    async def _listing(self) -> Listing:
        return self._listed(await self._tools())

    def _listed(self, tools: dict[str, McpTool]) -> Listing:
        for tool in tools.values():  # its model calls are the turn's (``_drivers.tools``)
            tool.counts_model_calls = self.sampling is not None
        approval = frozenset(name for name, tool in tools.items() if self.needs_approval(tool.remote))
        timeouts = {name: self.timeout for name in tools} if self.timeout is not None else {}
        return Listing(tools, approval, timeouts, self._instructions_added())

    def _instructions_added(self) -> tuple[tuple[str, str], ...]:
        """With ``add_instructions=True``, the open session's instructions (cut), named by the server."""
        text = self.instructions if self.add_instructions else None
        if not text or not text.strip():
            return ()
        kept = text.strip()
        if len(kept) > MAX_INSTRUCTIONS_CHARS:
            kept = f"{kept[:MAX_INSTRUCTIONS_CHARS]}\n[{len(kept) - MAX_INSTRUCTIONS_CHARS:,} more characters left out]"
        return ((self.label, kept),)

    async def _tools(self) -> dict[str, McpTool]:
        if self._cache is not None:
            return self._cache
        changes = self._changes
        remotes = await self._fetch()
        tools = build(remotes, self.prefix, self._keeps, self._call, self.label, self._traced)
        if changes == self._changes:  # no change announced meanwhile: the next turn may reuse it
            self._cache = tools
        return tools

    def _traced(self) -> dict[str, Any]:
        """Its calls' span attributes now (read from the caller's thread: plain attribute reads)."""
        session = self._session
        try:
            version = session.client.session.protocol_version if session is not None else None
        except RuntimeError:  # the session closed meanwhile
            version = None
        found = {"dspy_imp.mcp.server": self.name, "network.transport": self.network_transport,
                 "mcp.protocol.version": version, "mcp.session.id": self.session_id,
                 "dspy_imp.mcp.transport": self.transport}  # fmt: skip
        return {key: value for key, value in found.items() if value is not None}

    def _keeps(self, name: str) -> bool:
        return (self.include is None or name in self.include) and name not in self.exclude

    async def _fetch(self) -> list[types.Tool]:
        for attempt in (1, 2):  # a session found dead is opened again, once
            session = await self._live()
            try:
                with anyio.fail_after(LIST_SECONDS):
                    return await self._pages(session.client)
            except TimeoutError:
                raise ServerUnavailable(f"{self.label} did not list its tools within {LIST_SECONDS:g} s") from None
            except (MCPError, *_GONE) as error:
                if not _gone(error):
                    raise ServerUnavailable(f"{self.label} refused to list its tools: {error}") from error
                self._let_go(session.client)
                if attempt == 2:
                    why = session.ended_because("closed its session while listing its tools")
                    raise ServerUnavailable(f"{self.label} {why}") from error
        raise AssertionError("unreachable")

    async def _pages(self, client: Client) -> list[types.Tool]:
        remotes: list[types.Tool] = []
        cursor: str | None = None
        for _ in range(MAX_PAGES):
            page = await client.list_tools(cursor=cursor)
            remotes.extend(page.tools)
            cursor = page.next_cursor
            if not cursor:
                break
        return remotes

    async def _call(self, tool: types.Tool, arguments: dict[str, Any], resume: Resume | None = None) -> Any:
        """A tool's call, from the caller's loop: sent on the layer's loop, its result read here. The
        server's progress notifications and log messages during it are told to the turn (status
        lines of a ``dspy.streamify`` stream, events of its observer), bounded (``_notices``).
        ``resume``: a call that paused on a question (``elicit="pause"``), finished with the answer."""
        notices = Notices(tool.name, dspy.settings.send_stream, calling(), self.log_level)
        asking = contextvars.copy_context()  # where a sampling request during the call is answered
        self._asking.append(asking)
        self._logs.started(notices)
        sent: list[Any] = []
        task_ids: list[str] = []
        support = tool.execution.task_support if tool.execution is not None else None
        try:
            async with notices.relaying():
                progress = notices.progress if notices.live else None
                told = notices.task_status if notices.live else None
                result = await _loop.arun(
                    self._send(
                        tool.name, arguments, progress, sent, resume, support=support, task_ids=task_ids, told=told
                    )
                )
        finally:
            self._logs.ended(notices)
            self._asking.remove(asking)
            _transport.annotate(sent, task_ids)
        return result_value(result, tool.output_schema)

    async def _send(
        self,
        remote_name: str,
        arguments: dict[str, Any],
        progress: Any = None,
        sent: list[Any] | None = None,
        resume: Resume | None = None,
        *,
        support: str | None = None,
        task_ids: list[str] | None = None,
        told: Callable[[str, str | None], None] | None = None,
    ) -> types.CallToolResult:
        token = _transport.SENT.set(sent)  # the requests this call writes are noted (``_transport.Sending``)
        tasks = _transport.TASKS.set(task_ids)  # and the tasks its server creates (``task_started``)
        telling = TOLD.set(told)  # and where their changes of status are told (``_tasks.Told``)
        try:
            return await self._sent(remote_name, arguments, progress, resume, support)
        finally:
            TOLD.reset(telling)
            _transport.TASKS.reset(tasks)
            _transport.SENT.reset(token)

    async def _sent(
        self,
        remote_name: str,
        arguments: dict[str, Any],
        progress: Any,
        resume: Resume | None = None,
        support: str | None = None,
    ) -> types.CallToolResult:
        session = await self._live()
        try:
            if self.elicit == PAUSE:
                as_task = self._as_task(session.client, remote_name, arguments, progress, support)
                return await self._pauses.call(session.client, remote_name, arguments, progress, resume, as_task)
            try:
                return await self._one(session.client, remote_name, arguments, progress, support)
            except MCPError as error:
                if error.code != types.URL_ELICITATION_REQUIRED or self.elicit_url is None:
                    raise
                await self._questions.urls_opened(error)  # every URL opened: the call once more
            return await self._one(session.client, remote_name, arguments, progress, support)
        except (MCPError, *_GONE) as error:
            if not _gone(error):
                raise
            self._let_go(session.client)
            why = session.ended_because("closed its session during the call")
            raise ServerDisconnected(f"{self.label} {why} (it is started again on the next call)") from error

    async def _one(
        self, client: Client, name: str, arguments: dict[str, Any], progress: Any, support: str | None
    ) -> types.CallToolResult:
        """One ``tools/call``: as a task when the tool and the session say so (``_tasks``), else plain."""
        as_task = self._as_task(client, name, arguments, progress, support)
        if as_task is not None:
            return await as_task()
        return await client.call_tool(name, arguments, progress_callback=progress)

    def _as_task(
        self, client: Client, name: str, arguments: dict[str, Any], progress: Any, support: str | None
    ) -> AsTask | None:
        """The call made as a task, when the tool and the session say so (``_tasks.wants_task``), else None."""
        if not wants_task(client, self.tasks, support):
            return None
        return lambda: call_as_task(client, name, arguments, progress, _transport.task_started, self._cancelling)

    async def _client(self) -> Client:
        return (await self._live()).client

    async def _live(self) -> _Session:
        """The open session, opened (again) when there is none or its server died."""
        if self._pid != os.getpid():  # a forked child: the parent's session lives on a loop not here
            self._session, self._ending, self._opening, self._cache = None, set(), None, None
            self._cancelling = set()
            self._pid = os.getpid()
        session = self._session
        if session is not None and session.alive():
            return session
        if self._opening is None:
            self._opening = asyncio.Lock()
        async with self._opening:
            session = self._session
            if session is not None and session.alive():
                return session
            if session is not None:  # its server died while idle: let it go, open another
                self._let_go(session.client)
            self._session = session = await self._connect()
            self._cache = None  # a new session: its tools are listed again
            self.sessions_opened += 1
            _loop.on_exit(self)
            return session

    async def _connect(self) -> _Session:
        try:
            return await self._opened()
        except ServerUnavailable:
            another = self.falls_back() if self.falls_back is not None else None
            if another is None:
                raise
        return await self._opened(f" {another}")

    async def _opened(self, how: str = "") -> _Session:
        """A session opened (``how``: the way, when it is not the first one tried, for the errors)."""
        ready: asyncio.Future[Client] = asyncio.get_running_loop().create_future()
        closing, ended = asyncio.Event(), asyncio.Event()
        clock, fault = OpeningClock(), list[str]()
        owner = asyncio.create_task(self._own(ready, closing, ended, clock, fault), name=f"dspy_imp.mcp {self.name}")
        try:
            while True:  # the bound does not count the time a person takes to sign in (OAuth)
                left = self.connect_timeout - clock.elapsed()
                if left <= 0 and not clock.paused:
                    raise TimeoutError
                try:
                    client = await asyncio.wait_for(asyncio.shield(ready), max(left, 0.5))
                    break
                except TimeoutError:
                    continue
        except BaseException as error:
            closing.set()
            owner.cancel()
            await asyncio.gather(owner, return_exceptions=True)
            if isinstance(error, asyncio.CancelledError):
                raise
            if isinstance(error, TimeoutError):
                raise ServerUnavailable(f"{self.label} did not open{how} within {self.connect_timeout:g} s") from None
            raise ServerUnavailable(f"{self.label} could not be opened{how}: {_message(error)}") from error
        return _Session(client, closing, owner, ended, fault)

    async def _own(
        self,
        ready: asyncio.Future[Client],
        closing: asyncio.Event,
        ended: asyncio.Event,
        clock: OpeningClock,
        fault: list[str],
    ) -> None:
        """The session's owner: enters the SDK's context managers, holds them until ``closing``. The
        transport's tasks start from here, so they see ``clock`` (``waiting_on_a_person``) and
        ``fault`` (``_transport.note_fault``)."""
        _transport.OPENING.set(clock)
        _transport.FAULT.set(fault)
        try:
            target = self._target()
            if not isinstance(target, MCPServer | LowLevelServer):  # a transport: its end is watched
                target = _transport.watched(target, ended)
            modes = self.elicitation_modes
            client = _Client(
                target,
                mode=self.mode,
                message_handler=self._on_message,
                cache=None,
                elicitation_callback=self._on_elicit if modes else None,
                elicitation_modes=modes,
                sampling_callback=self._on_sample if self.sampling is not None else None,
                sampling_capabilities=_SAMPLING_TOOLS if self.sampling is not None else None,
                logging_callback=self._logs,
                log_level=self.log_level,  # a 2026-07-28 session's opt-in (older ones: ``_set_level``)
            )
            async with client, anyio.create_task_group() as group:
                await self._set_level(client)
                capabilities = client.server_capabilities.tools
                if capabilities is not None and capabilities.list_changed:
                    group.start_soon(self._listen, client)
                ready.set_result(client)
                await closing.wait()
                group.cancel_scope.cancel()
        except BaseException as error:  # the session's own end: reported to whoever waits to open it
            if not ready.done():
                if isinstance(error, Exception):
                    ready.set_exception(error)
                else:
                    ready.cancel()
            else:
                logger.debug("dspy_imp.mcp: %s: session ended: %r", self.label, error)
            if not isinstance(error, Exception):
                raise

    async def _set_level(self, client: Client) -> None:
        """``log_level=`` on a session of the handshake: ``logging/setLevel``, when the server declares
        the logging capability (a refusal is logged, and the session goes on)."""
        if self.log_level is None or client.server_capabilities.logging is None:
            return
        if client.session.protocol_version not in HANDSHAKE_PROTOCOL_VERSIONS:
            return
        try:
            with anyio.fail_after(LIST_SECONDS), warnings.catch_warnings():
                warnings.simplefilter("ignore", MCPDeprecationWarning)  # deprecated on 2026-07-28 only
                await client.set_logging_level(self.log_level)
        except (MCPError, TimeoutError) as error:
            why = one_line(str(error))
            logger.warning("dspy_imp.mcp: %s refused `log_level` %r: %s", self.label, self.log_level, why)

    async def _listen(self, client: Client) -> None:
        """A 2026-07-28 session's change events (earlier ones send notifications: ``_on_message``)."""
        with contextlib.suppress(Exception):
            async with client.listen(tools_list_changed=True) as events:
                async for _event in events:
                    self._changed()

    @property
    def elicitation_modes(self) -> tuple[str, ...]:
        """The elicitation modes its client declares: ``"form"`` with ``elicit=``, ``"url"`` with
        ``elicit_url=`` or ``elicit="pause"`` (which pauses on both)."""
        return elicitation_modes(self.elicit, self.elicit_url)

    async def _on_elicit(self, context: Any, params: Any) -> types.ElicitResult | types.ErrorData:
        """A server's ``elicitation/create``: answered by its callbacks, or paused (``_elicit.Questions``)."""
        return await self._questions.answer(context, params)

    async def _on_sample(self, context: Any, params: types.CreateMessageRequestParams) -> Any:
        """A server's ``sampling/createMessage``, answered by the ``sampling`` LM in a worker thread,
        in the context of the oldest call in flight to this server: the turn's usage limits and
        deadline bound it, and its usage is the turn's (``"sampling"``). None in flight: refused. Its
        tools and messages are checked and translated by ``_sampling``; a request it refuses, or a
        failure, is an error the server reads."""
        if not self._asking:
            return types.ErrorData(code=types.INVALID_REQUEST, message="sampling is answered only during a tool call")
        lm = self.sampling
        assert lm is not None
        asking = self._asking[0].copy()
        try:
            return await asyncio.to_thread(asking.run, _sampling.sample, lm, params)
        except _sampling.Refused as refused:  # the server's request broke a rule: nothing was sent
            return refused.error
        except Exception as error:  # a limit reached, the deadline passed, the LM failed: the server reads why
            return types.ErrorData(code=types.INTERNAL_ERROR, message=f"the sampling failed: {_message(error)}")

    async def _on_message(self, message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            self._changed()
        elif isinstance(message, types.ElicitCompleteNotification):  # the person's answer is what goes on
            logger.debug("dspy_imp.mcp: %s: URL elicitation %r completed", self.label, message.params.elicitation_id)

    def _changed(self) -> None:
        self._changes += 1
        self._cache = None

    def _let_go(self, client: Client) -> None:
        """A dead session: its owner told to end (in the background), the next use opens another."""
        session = self._session
        if session is None or session.client is not client:
            return
        self._session = None
        session.closing.set()
        self._ending.add(session.owner)
        session.owner.add_done_callback(self._ending.discard)

    async def aclose_here(self) -> None:
        """Close the session, on the layer's loop (``close``, ``with``, interpreter exit), once the
        ``tasks/cancel`` requests in flight are answered (bounded)."""
        if self._cancelling:
            await asyncio.wait(set(self._cancelling), timeout=CANCEL_SECONDS)
        session, self._session = self._session, None
        owners = set(self._ending)
        if session is not None:
            session.closing.set()
            owners.add(session.owner)
        if owners:
            _, pending = await asyncio.wait(owners, timeout=CLOSE_SECONDS)
            for owner in pending:
                owner.cancel()
        self._cache = None


def _tool_record(tool: Any) -> dict[str, Any]:
    dumped: dict[str, Any] = tool.remote.model_dump(mode="json", by_alias=True, exclude_none=True)
    return dumped


async def _paged(list_page: Callable[..., Awaitable[Any]], field: str) -> list[Any]:
    items: list[Any] = []
    cursor: str | None = None
    for _ in range(MAX_PAGES):
        page = await list_page(cursor=cursor)
        items.extend(getattr(page, field))
        cursor = page.next_cursor
        if not cursor:
            break
    return items


async def _contents(client: Client, uri: str) -> list[types.TextResourceContents | types.BlobResourceContents]:
    return list((await client.read_resource(uri)).contents)


@dataclass
class _Client(Client):
    """The SDK's ``Client``, declaring only the elicitation modes its server can answer
    (``elicitation_modes``): the SDK declares both ``form`` and ``url`` for any elicitation callback;
    and delivering the server's ``notifications/tasks/status`` to ``task_statuses`` (``_tasks``).

    SDK private names (``Client._build_session``, ``ClientSession._build_capabilities``,
    ``ClientSession._notification_bindings``): the elicitation ad has no public option; the override
    edits the ad the SDK builds, at each version it builds one for (``initialize``,
    ``server/discover``, a 2026-07-28 request's ``_meta``). The sampling ad has one
    (``sampling_capabilities``: ``sampling.tools`` with ``sampling=``, ``_own``). A notification
    binding is public only as an extension's, which would advertise an extension identifier we do
    not implement: the binding is added to the session's before it starts (its queue is made when it
    is entered)."""

    elicitation_modes: tuple[str, ...] = ()
    task_statuses: Statuses = field(default_factory=Statuses)

    async def _build_session(self, exit_stack: Any) -> Any:
        session = await super()._build_session(exit_stack)
        session._notification_bindings = {**session._notification_bindings, STATUS_METHOD: self.task_statuses.binding()}
        built = session._build_capabilities
        modes = self.elicitation_modes

        def declared(version: str) -> types.ClientCapabilities:
            capabilities = built(version)
            if capabilities.elicitation is None:
                return capabilities
            kinds = types.ElicitationCapability(
                form=types.FormElicitationCapability() if "form" in modes else None,
                url=types.UrlElicitationCapability() if "url" in modes else None,
            )
            return capabilities.model_copy(update={"elicitation": kinds})

        session._build_capabilities = declared  # type: ignore[method-assign]
        return session


def _gone(error: BaseException) -> bool:
    """Whether ``error`` says the session is over (not a request's own failure)."""
    return isinstance(error, _GONE) or (isinstance(error, MCPError) and error.code == types.CONNECTION_CLOSED)


def _text(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ConfigurationError(f"MCP server `{where}` must be a non-blank string, got {value!r}")
    return value


def _names(value: Any, where: str) -> frozenset[str]:
    if isinstance(value, str | bytes | Mapping) or not isinstance(value, Iterable):
        raise ConfigurationError(f"MCP server `{where}` must be a list of tool names, got {value!r}")
    names = list(value)
    for name in names:
        if not isinstance(name, str):
            raise ConfigurationError(f"MCP server `{where}` must be a list of tool names, got {name!r} in it")
    return frozenset(names)


def _approval(value: Any) -> Callable[[types.Tool], bool]:
    if isinstance(value, bool):
        return lambda tool: value
    if callable(value):
        return lambda tool: bool(value(tool))
    try:
        names = _names(value, "needs_approval")
    except ConfigurationError:
        raise ConfigurationError(
            "MCP server `needs_approval` must be True, False, a list of the server's tool names, or "
            f"callable(tool) -> bool; got {value!r}"
        ) from None
    return lambda tool: tool.name in names


def _seconds(value: Any, where: str) -> Any:
    if value is None and where == "timeout":
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ConfigurationError(f"MCP server `{where}` must be a positive number of seconds, got {value!r}")
    return float(value)


def stderr_sink() -> Any:
    """Where a stdio server's stderr goes: this process's stderr when it is a real file, else nowhere."""
    try:
        sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):
        return open(os.devnull, "w")  # held by the server's process for its life
    return sys.stderr
