"""A program served as an MCP server: one tool, the program's signature, on the official ``mcp`` SDK.

``agent.as_mcp_server(name)`` (and ``python -m dspy_imp.mcp serve module:program``) builds a
``ProgramServer``: an SDK low-level ``Server`` with one tool whose input schema is the signature's
input fields (their annotations, as pydantic writes JSON Schema) and whose ``outputSchema`` is its
output fields. A call runs one turn:

- **Arguments** come from an untrusted client: bounded (``MAX_ARGUMENT_CHARS`` of JSON) and
  validated against the schema before any model request; a bad one is an ``isError`` result naming
  the field.
- **Progress**: each step of the turn (a request, a tool call, its result, the end) is a
  ``notifications/progress`` with the status line ``StatusMessageProvider`` writes for it, sent only
  when the client gave a ``progressToken`` (the SDK drops it otherwise).
- **Cancellation**: the SDK cancels the handler on ``notifications/cancelled``; an async turn's task
  is cancelled with it, a sync turn (``sync=True``, run in a worker thread) is stopped through its
  observer as the web app's Stop stops one (``_drivers.stopping``).
- **Approvals**: a turn that pauses for approval asks the client with ``elicitation/create``
  (accept approves the call as shown, decline or cancel refuses it) and resumes; a client without
  the elicitation capability gets an error result naming the calls. On a 2026-07-28 connection,
  where a server sends no request during a call, the call answers ``InputRequiredResult`` (one
  elicitation per pending call) and the paused turn waits here, under a random ``requestState``,
  for the client's retry with its answers (``input_responses``): the history never leaves this
  process, a state is answered once, with the arguments of the call that paused, and at most
  ``MAX_WAITING`` are kept (the oldest let go first).
- **Result**: a turn with an answer is ``structuredContent`` (its outputs) and a text block (the
  same JSON); one without (incomplete, blocked) is an ``isError`` result saying how it ended. Both
  carry the termination metadata in ``_meta["dspy-imp/termination"]``.
- **Tasks** (MCP 2025-11-25, experimental): the server declares ``capabilities.tasks`` and the tool
  ``execution.taskSupport: "optional"``; a call that carries ``task`` is answered at once with a
  ``CreateTaskResult`` and its turn runs on, in this process's memory (``_served_tasks``): its
  status (``tasks/get``), its result (``tasks/result``, where an approval pause is asked),
  ``tasks/cancel`` (Stop) and ``tasks/list``; its changes are notified to the client
  (``notifications/tasks/status``), its steps sent as progress when the call gave a
  ``progressToken``. Only on a 2025-11-25 connection (the 2026-07-28 protocol moved tasks to an
  extension): on a later one the call is a plain call. ``tasks=False`` turns them off: no
  capability, no task method, every call plain.
- **Authorization** (streamable HTTP): ``http_app(auth=BearerAuth(...))`` has every request carry
  a valid OAuth bearer token with the scopes asked (``_serving_auth``, on the SDK's resource-server
  pieces); the program's tools read the token with the SDK's ``get_access_token()``, and a task,
  or a turn paused for a 2026-07-28 client's answers, is bound to the principal whose token
  created it. Over stdio there is no token.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import json
import logging
import re
import secrets
import socket
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, cast

import anyio
import anyio.to_thread
import dspy
import mcp_types as types
import pydantic
from mcp.server import Server as LowLevelServer
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.jsonrpc_dispatcher import progress_token_from_params
from mcp.shared.message import ServerMessageMetadata
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from dspy_imp._records.errors import ConfigurationError
from dspy_imp._routes.hosted_types import HostedCall
from dspy_imp._watch.events import (
    HostedToolCall,
    RequestStarted,
    SubAgentEvent,
    ToolEnded,
    ToolStarted,
    TurnEvent,
    observing,
)
from dspy_imp._watch.status import StatusMessageProvider, short
from dspy_imp.mcp import _served_tasks
from dspy_imp.mcp._serving_auth import BearerAuth, Principal, principal, protect

logger = logging.getLogger("dspy_imp.mcp")

MAX_ARGUMENT_CHARS = 1_000_000
"""The most characters a call's arguments may take as JSON (more is an error result, no turn)."""
MAX_BODY = 1_000_000
"""The largest HTTP request body read, in bytes (the SDK answers a bigger one 413)."""
META_KEY = "dspy-imp/termination"
"""Where a result's ``_meta`` holds how the turn ended."""
LOOPBACK = ("127.0.0.1", "localhost", "[::1]")
MAX_WAITING = 256
"""The most turns kept paused for a 2026-07-28 client's answers at once (the oldest is let go first)."""

_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_PROVIDER = StatusMessageProvider()


class _Lines(Protocol):
    """Where a turn's status lines go: progress notifications, or a task's ``statusMessage``."""

    def put(self, line: str) -> None: ...


@dataclass(frozen=True)
class _Waiting:
    """A turn paused for approval on a 2026-07-28 connection, until the client retries with answers."""

    history: Any
    pending: tuple[dict[str, Any], ...]
    arguments: dict[str, Any]
    """The call's arguments: the retry must repeat them."""
    principal: Principal | None
    """Whose token the call carried (``None`` without OAuth): the retry must carry that principal's."""


class ProgramServer:
    """A program as an MCP server with one tool (``agent.as_mcp_server(...)``).

    ``server`` is the SDK's low-level ``Server`` (give it to ``mcp.Client`` in a test);
    ``run_stdio()`` serves it over stdio, ``http_app()`` is its streamable-HTTP ASGI app with
    Host and Origin checked (and, with ``auth=``, OAuth bearer tokens required), ``run_http()``
    serves that on 127.0.0.1 by default. ``tasks`` holds
    the calls run as tasks (``close()`` stops the ones still running); with ``tasks=False``
    (``serves_tasks`` false) no call runs as one: the server declares no ``capabilities.tasks``,
    its tool no ``execution``, answers no task method, and runs a call that carries ``task`` as a
    plain call (as the spec has a server without the capability do).
    """

    def __init__(
        self,
        agent: Any,
        name: str,
        *,
        tool: str | None = None,
        description: str | None = None,
        sync: bool = False,
        tasks: bool = True,
    ):
        if not isinstance(name, str) or not name.strip():
            raise ConfigurationError(f"`name` must be the server's name, a non-empty string; got {name!r}")
        tool_name = tool if tool is not None else name
        if not isinstance(tool_name, str) or not _NAME.match(tool_name):
            raise ConfigurationError(
                f"the tool's name must be 1 to 64 letters, digits, `_` or `-`; got {tool_name!r} (pass `tool=`)"
            )
        if not isinstance(tasks, bool):
            raise ConfigurationError(f"`tasks` must be True (calls may run as tasks) or False (never), got {tasks!r}")
        self.agent = agent
        self.name = name
        self.tool_name = tool_name
        self.sync = bool(sync)
        self.description = description or agent.signature.instructions or f"Run the program {name}"
        self.inputs = _fields_model(agent.signature.input_fields, f"{tool_name}_input", forbid=True)
        self.outputs = _fields_model(agent.signature.output_fields, f"{tool_name}_output", forbid=False)
        self._waiting: OrderedDict[str, _Waiting] = OrderedDict()
        self.serves_tasks = tasks  # whether a 2025-11-25 client may run a call as a task (the class doc)
        self.tasks = _served_tasks.ServedTasks(self._decide)
        served = _Served(name, on_list_tools=self._list_tools, on_call_tool=self._call_tool)
        served.serves_tasks = tasks
        self.server: LowLevelServer[Any] = served
        if tasks:
            self.server.middleware.append(self._task_call)
            self.server.add_request_handler("tasks/get", types.GetTaskRequestParams, self.tasks.get)
            self.server.add_request_handler("tasks/result", types.GetTaskPayloadRequestParams, self.tasks.result)
            self.server.add_request_handler("tasks/cancel", types.CancelTaskRequestParams, self.tasks.cancel)
            self.server.add_request_handler("tasks/list", types.PaginatedRequestParams, self.tasks.list)

    def tool(self) -> types.Tool:
        """The one tool: the signature's inputs as its input schema, its outputs as its ``outputSchema``;
        it may run as a task (``execution.taskSupport: "optional"``, on a 2025-11-25 connection),
        unless the server was built with ``tasks=False`` (no ``execution``: never a task)."""
        return types.Tool(
            name=self.tool_name,
            description=self.description,
            input_schema=self.inputs.model_json_schema(),
            output_schema=self.outputs.model_json_schema(),
            execution=types.ToolExecution(task_support="optional") if self.serves_tasks else None,
        )

    async def _list_tools(self, ctx: Any, params: Any) -> types.ListToolsResult:
        tool = self.tool()
        if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:  # no tasks there: nothing to say of them
            tool = tool.model_copy(update={"execution": None})
        return types.ListToolsResult(tools=[tool])

    async def _call_tool(
        self, ctx: Any, params: types.CallToolRequestParams
    ) -> types.CallToolResult | types.InputRequiredResult:
        prepared = self._prepare(params)
        if isinstance(prepared, types.CallToolResult):
            return prepared
        kwargs, arguments = prepared
        progress = _Progress(ctx)
        try:
            return await self._run(kwargs, arguments, progress, lambda pending: self._decide(ctx, pending))
        except asyncio.CancelledError:
            logger.info("%s: the client cancelled the call; the turn was stopped", self.name)
            raise
        finally:
            await progress.close()

    async def _task_call(self, ctx: Any, call_next: Any) -> Any:
        """Middleware: a ``tools/call`` that asks to run as a task (a 2025-11-25 connection, past its
        handshake) is answered with a ``CreateTaskResult``, its turn run on by ``tasks``; any other
        request goes on to the SDK (which would check the task's answer as a ``CallToolResult``)."""
        raw = ctx.params
        if (
            ctx.method != "tools/call"
            or not isinstance(raw, Mapping)
            or raw.get("task") is None
            or ctx.protocol_version in MODERN_PROTOCOL_VERSIONS
            or ctx.session.client_params is None
        ):
            return await call_next(ctx)
        try:
            params = types.CallToolRequestParams.model_validate(raw, by_name=False)
        except pydantic.ValidationError:
            return await call_next(ctx)  # malformed: the SDK refuses it as any malformed call
        assert params.task is not None
        prepared = self._prepare(params)

        async def work(ask: _served_tasks.Ask, lines: _Lines) -> types.CallToolResult:
            if isinstance(prepared, types.CallToolResult):  # bad arguments: the task fails with them
                return prepared
            kwargs, arguments = prepared

            async def decide(pending: Sequence[dict[str, Any]]) -> dict[str, Any] | str:
                refused = _refusal(ctx, pending)  # said at once, not left waiting for a tasks/result
                return refused if refused is not None else await ask(pending)

            result = await self._run(kwargs, arguments, lines, decide)
            assert isinstance(result, types.CallToolResult)  # ``decide`` always decides
            return result

        return self.tasks.create(ctx, params.task.ttl, work, progress_token=progress_token_from_params(raw))

    def _prepare(
        self, params: types.CallToolRequestParams
    ) -> tuple[dict[str, Any], dict[str, Any]] | types.CallToolResult:
        """The turn's arguments and the call's (validated, bounded; a retry's resumed turn), or the
        error result a bad call is."""
        if params.name != self.tool_name:
            return _error(f"unknown tool {params.name!r}: this server has one tool, {self.tool_name!r}")
        arguments = params.arguments or {}
        try:
            size = len(json.dumps(arguments, ensure_ascii=False))
        except (TypeError, ValueError):
            return _error("the arguments are not JSON")
        if size > MAX_ARGUMENT_CHARS:
            return _error(f"the arguments take {size} characters as JSON; at most {MAX_ARGUMENT_CHARS} are read")
        try:
            values = self.inputs.model_validate(arguments)
        except pydantic.ValidationError as invalid:
            return _error(_invalid(invalid))
        kwargs = {name: getattr(values, name) for name in self.agent.signature.input_fields}
        kwargs = {k: v for k, v in kwargs.items() if v is not None}
        if params.request_state is not None:  # a 2026-07-28 client's retry, with its answers
            resumed = self._resumed(params, arguments)
            if isinstance(resumed, str):
                return _error(resumed)
            kwargs = resumed
        return kwargs, arguments

    async def _run(
        self,
        kwargs: dict[str, Any],
        arguments: dict[str, Any],
        progress: _Lines,
        decide: Callable[[Sequence[dict[str, Any]]], Awaitable[dict[str, Any] | str | None]],
    ) -> types.CallToolResult | types.InputRequiredResult:
        """The call's turn, each approval pause decided by ``decide`` (``None``: asked in the result)."""
        prediction = await self._turn(kwargs, progress)
        while prediction.metadata.termination_reason == "paused":
            decisions = await decide(prediction.metadata.pending_calls)
            if decisions is None:
                return self._ask_later(prediction.metadata, arguments)
            if isinstance(decisions, str):
                return _error(decisions, _termination(prediction.metadata))
            prediction = await self._turn({"history": prediction.metadata.history, "approvals": decisions}, progress)
        return self._result(prediction)

    async def _turn(self, kwargs: dict[str, Any], progress: _Lines) -> Any:
        """One call of the program, its events sent as progress; stopped when the handler is cancelled."""
        observer = _Observer(asyncio.get_running_loop(), progress)
        prediction = await self._play(kwargs, observer)
        ended = _PROVIDER.turn_end_status_message(
            prediction.metadata.termination_reason, prediction.metadata.termination_cause
        )
        if ended:
            progress.put(ended)
        return prediction

    async def _play(self, kwargs: dict[str, Any], observer: _Observer) -> Any:
        with observing(observer):
            if not self.sync:
                return await self.agent.acall(**kwargs)
            context = contextvars.copy_context()  # the observer and DSPy's settings, in the worker thread
            work = asyncio.ensure_future(anyio.to_thread.run_sync(context.run, functools.partial(self.agent, **kwargs)))
            try:
                return await asyncio.shield(work)
            except asyncio.CancelledError:  # the client's cancel: stop the sync turn, wait for it to stop
                observer.halt()
                with anyio.CancelScope(shield=True):
                    await asyncio.wait({work})
                raise

    async def _decide(
        self, ctx: Any, pending: Sequence[dict[str, Any]], meta: dict[str, Any] | None = None
    ) -> dict[str, Any] | str | None:
        """The client's decision on each pending call, asked with ``elicitation/create`` (its ``_meta``
        ``meta``: a task's, to tie it to the task); why none can be; or ``None``: ask in the call's
        result instead (a 2026-07-28 connection, ``_ask_later``)."""
        refused = _refusal(ctx, pending)
        if refused is not None:
            return refused
        if not ctx.session.can_send_request:  # 2026-07-28: no request mid-call, the result asks
            return None
        decisions: dict[str, Any] = {}
        for call in pending:
            form = types.ElicitRequestFormParams(
                message=_question(call),
                requested_schema={"type": "object", "properties": {}},
                _meta=cast(types.RequestParamsMeta, meta) if meta else None,
            )
            answer = await ctx.session.send_request(
                types.ElicitRequest(params=form),
                types.ElicitResult,
                metadata=ServerMessageMetadata(related_request_id=ctx.request_id),
            )
            decisions[call["id"]] = _shown(call) if answer.action == "accept" else False
        return decisions

    def _ask_later(self, metadata: Any, arguments: dict[str, Any]) -> types.InputRequiredResult:
        """The paused turn kept under a new random state, and the client asked in the call's result:
        one form elicitation per pending call (``approval-<n>``), answered when it retries."""
        state = secrets.token_urlsafe(32)
        pending = tuple(metadata.pending_calls)
        self._waiting[state] = _Waiting(metadata.history, pending, arguments, principal())
        while len(self._waiting) > MAX_WAITING:
            self._waiting.popitem(last=False)
        asked: types.InputRequests = {
            f"approval-{index}": types.ElicitRequest(
                params=types.ElicitRequestFormParams(
                    message=_question(call), requested_schema={"type": "object", "properties": {}}
                )
            )
            for index, call in enumerate(pending)
        }
        return types.InputRequiredResult(input_requests=asked, request_state=state)

    def _resumed(self, params: types.CallToolRequestParams, arguments: dict[str, Any]) -> dict[str, Any] | str:
        """The paused turn a retry names and the client's decisions, as the program's resume arguments;
        or why it cannot resume. Accept approves a call as it was shown; anything else refuses it."""
        waiting = self._waiting.pop(params.request_state or "", None)
        if waiting is not None and waiting.principal is not None and waiting.principal != principal():
            self._waiting[params.request_state or ""] = waiting  # another's token: not spent, not shown
            waiting = None
        if waiting is None:
            return "no turn waits under this requestState (it was answered already, or let go): call the tool again"
        if waiting.arguments != arguments:
            self._waiting[params.request_state or ""] = waiting  # a mistaken retry does not spend it
            return "the retry's arguments are not those of the call that paused"
        answers = params.input_responses or {}
        decisions: dict[str, Any] = {}
        for index, call in enumerate(waiting.pending):
            answer = answers.get(f"approval-{index}")
            accepted = isinstance(answer, types.ElicitResult) and answer.action == "accept"
            decisions[call["id"]] = _shown(call) if accepted else False
        return {"history": waiting.history, "approvals": decisions}

    def _result(self, prediction: Any) -> types.CallToolResult:
        metadata = prediction.metadata
        termination = _termination(metadata)
        if not metadata.complete:
            why = f" ({metadata.termination_cause})" if metadata.termination_cause else ""
            return _error(f"the turn ended {metadata.termination_reason}{why} without an answer", termination)
        outputs = {name: getattr(prediction, name, None) for name in self.agent.signature.output_fields}
        try:
            structured = self.outputs.model_validate(outputs).model_dump(mode="json")
        except pydantic.ValidationError as invalid:
            return _error(f"the program's outputs do not fit its signature: {_invalid(invalid)}", termination)
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=json.dumps(structured, ensure_ascii=False))],
            structured_content=structured,
            _meta={META_KEY: termination},
        )

    async def run_stdio(self) -> None:
        """Serve over this process's stdin and stdout until the client closes them."""
        from mcp.server.stdio import stdio_server

        try:
            async with stdio_server() as (read, write):
                await self.server.run(read, write, self.server.create_initialization_options())
        finally:
            self.tasks.close()

    def close(self) -> None:
        """Stop the turns of the tasks still running and let every task go."""
        self.tasks.close()

    def http_app(
        self,
        *,
        hosts: Sequence[str] = (),
        origins: Sequence[str] = (),
        path: str = "/mcp",
        auth: BearerAuth | None = None,
    ) -> Any:
        """The streamable-HTTP ASGI app at ``path``, Host and Origin checked (DNS rebinding).

        A request's ``Host`` must be a loopback name (with any port) or one of ``hosts``; a
        browser's ``Origin`` must be ``http(s)://`` one of those names, or one of ``origins``.
        The SDK's ``TransportSecuritySettings`` does the checking (421 for a Host, 403 for an
        Origin), with the rule the web app keeps.

        With ``auth`` (a ``BearerAuth``), every request to ``path`` needs a valid OAuth bearer
        token with its scopes (401 ``invalid_token``, 403 ``insufficient_scope``, each with the
        ``WWW-Authenticate`` challenge MCP's authorization asks), and the Protected Resource
        Metadata is served at ``auth.metadata_url``'s path; all by the ``mcp`` SDK's pieces."""
        _check_auth(auth)
        app = self.server.streamable_http_app(
            streamable_http_path=path,
            transport_security=security(hosts, origins),
            max_request_body_size=MAX_BODY,
            auth=auth.settings() if auth is not None else None,
            token_verifier=auth.verifier if auth is not None else None,
        )
        return protect(app, auth, path, self.name) if auth is not None else app

    def run_http(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        hosts: Sequence[str] = (),
        origins: Sequence[str] = (),
        auth: BearerAuth | None = None,
    ) -> None:
        """Serve ``http_app()`` with uvicorn on ``host:port`` (``0``: a free port), printing the URL;
        ``auth`` as ``http_app``'s."""
        import uvicorn

        _check_auth(auth)  # refused before the port is taken
        listener = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
        listener.bind((host, port))
        listener.listen(128)
        bound = listener.getsockname()[1]
        shown = f"[{host}]" if ":" in host else host
        names = list(hosts) if host in ("127.0.0.1", "::1", "localhost") else [host, *hosts]
        print(f"dspy-imp mcp: serving {self.name} on http://{shown}:{bound}/mcp", flush=True)
        app = self.http_app(hosts=names, origins=origins, auth=auth)
        uvicorn.Server(uvicorn.Config(app, log_level="warning")).run(sockets=[listener])


class _Served(LowLevelServer[Any]):
    """The SDK's low-level server, declaring ``capabilities.tasks`` (task-augmented ``tools/call``,
    ``tasks/list``, ``tasks/cancel``) to a 2025-11-25 client when it serves tasks; a 2026-07-28 one
    is told nothing of tasks."""

    serves_tasks = True

    def get_capabilities(self, *args: Any, **kwargs: Any) -> types.ServerCapabilities:
        found = super().get_capabilities(*args, **kwargs)
        if self.serves_tasks and kwargs.get("protocol_version") not in MODERN_PROTOCOL_VERSIONS:
            found.tasks = _served_tasks.capability()
        return found


def _check_auth(auth: Any) -> None:
    if auth is not None and not isinstance(auth, BearerAuth):
        raise ConfigurationError(f"`auth` must be a dspy_imp.mcp.BearerAuth or None, got {auth!r:.80}")


def _refusal(ctx: Any, pending: Sequence[dict[str, Any]]) -> str | None:
    """Why a paused turn's calls cannot be decided by this client (external tools; no elicitation)."""
    named = ", ".join(f"{c['name']}({short(c['args'])})" for c in pending)
    if any(c.get("kind") != "approval" for c in pending):
        return f"the turn paused for results an MCP client cannot give (external tools): {named}"
    capabilities = ctx.session.client_capabilities
    if capabilities is None or capabilities.elicitation is None:
        return f"the turn needs approval of {named}, and this client does not take elicitation requests"
    return None


def _question(call: dict[str, Any]) -> str:
    return f"Approve the call {call['name']}({short(call['args'], 400)})?"


def _shown(call: dict[str, Any]) -> dict[str, Any]:
    """An approval of the call as it was shown (it binds to that call: id, name and arguments)."""
    return {"id": call["id"], "name": call["name"], "args": dict(call["args"])}


def security(hosts: Sequence[str], origins: Sequence[str]) -> TransportSecuritySettings:
    """Host and Origin rules as the web app keeps them: loopback names answer for one another, any
    port; more names only when given; an origin is one of those names or one configured."""
    if isinstance(hosts, str) or isinstance(origins, str):
        raise ConfigurationError("`hosts` and `origins` must be lists of names, not one string")
    names = [*LOOPBACK, *(h.strip().lower() for h in hosts if h.strip())]
    allowed_hosts = [pattern for n in names for pattern in (n, f"{n}:*")]
    allowed_origins = [f"{scheme}://{n}{port}" for n in names for scheme in ("http", "https") for port in ("", ":*")]
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=allowed_hosts,
        allowed_origins=[*allowed_origins, *(o.rstrip("/") for o in origins)],
    )


class _Progress:
    """A call's progress notifications, sent in order by one task (events come from any thread)."""

    def __init__(self, ctx: Any):
        self.ctx = ctx
        self.queue: asyncio.Queue[str | None] = asyncio.Queue()
        self.count = 0
        self.task = asyncio.ensure_future(self._send())

    def put(self, line: str) -> None:
        self.queue.put_nowait(line)

    async def _send(self) -> None:
        while (line := await self.queue.get()) is not None:
            self.count += 1
            try:
                await self.ctx.session.report_progress(self.count, None, line)
            except Exception as error:  # a closed stream: the call's own result says the rest
                logger.debug("dspy_imp.mcp: progress not sent: %r", error)

    async def close(self) -> None:
        self.queue.put_nowait(None)
        with anyio.CancelScope(shield=True):
            await asyncio.wait({self.task})


class _Observer:
    """A turn's events as progress lines; ``stopped()`` and ``until_stopped()`` let a sync turn be stopped."""

    def __init__(self, loop: asyncio.AbstractEventLoop, progress: _Lines):
        self.loop = loop
        self.progress = progress
        self.halted = asyncio.Event()
        self.asked = False

    def __call__(self, event: TurnEvent) -> None:
        line = _line(event)
        if line:
            self.loop.call_soon_threadsafe(self.progress.put, line)

    def stopped(self) -> bool:
        return self.asked

    def halt(self) -> None:
        self.asked = True
        self.halted.set()

    async def until_stopped(self) -> None:
        await self.halted.wait()


def _line(event: TurnEvent) -> str | None:
    """The status line of one event (``StatusMessageProvider``'s words), a sub-agent's prefixed."""
    if isinstance(event, SubAgentEvent):
        inner = _line(event.event)
        return f"{event.agent}: {inner}" if inner else None
    if isinstance(event, RequestStarted):
        return _PROVIDER.request_status_message(event.kind, 0) or f"Request {event.number}"
    if isinstance(event, ToolStarted):
        return f"Calling {event.name}({short(event.args)})"
    if isinstance(event, ToolEnded):
        return f"{event.name} {'failed' if event.error else 'returned'}: {short(event.value)}"
    if isinstance(event, HostedToolCall):  # a call the provider ran in the reply: its status line
        call = HostedCall(event.call_id, event.name or "", event.args, event.result, event.error, event.provider)
        return _PROVIDER.hosted_tool_status_message(call)
    return None


def _fields_model(fields: dict[str, Any], title: str, *, forbid: bool) -> type[pydantic.BaseModel]:
    """A pydantic model of a signature's fields: their annotations, their descriptions, required."""
    definitions: dict[str, Any] = {}
    for name, field in fields.items():
        extra = field.json_schema_extra or {}
        desc = extra.get("desc") if isinstance(extra, dict) else None
        shown = desc if isinstance(desc, str) and desc and not desc.startswith("${") else None
        annotation = field.annotation if field.annotation is not None else str
        if annotation is dspy.History:
            raise ConfigurationError(f"input `{name}` is a dspy.History: a served program's inputs are JSON values")
        definitions[name] = (annotation, pydantic.Field(..., description=shown))
    config = pydantic.ConfigDict(extra="forbid" if forbid else "ignore", arbitrary_types_allowed=False)
    try:
        return pydantic.create_model(title, __config__=config, **definitions)
    except (pydantic.PydanticSchemaGenerationError, TypeError) as error:
        raise ConfigurationError(f"the signature's fields have no JSON Schema: {error}") from error


def _invalid(invalid: pydantic.ValidationError) -> str:
    """The validation errors, each naming its field: ``argument `count`: Input should be a valid integer``."""
    lines = []
    for error in invalid.errors()[:10]:
        where = ".".join(str(part) for part in error.get("loc", ())) or "(the arguments)"
        lines.append(f"argument `{where}`: {error.get('msg')}")
    return "invalid arguments: " + "; ".join(lines)


def _termination(metadata: Any) -> dict[str, Any]:
    return {
        "reason": metadata.termination_reason,
        "cause": metadata.termination_cause,
        "finish_reason": metadata.finish_reason,
        "finished_by_tool": metadata.finished_by_tool,
    }


def _error(message: str, termination: dict[str, Any] | None = None) -> types.CallToolResult:
    meta = {META_KEY: termination} if termination is not None else None
    return types.CallToolResult(content=[types.TextContent(type="text", text=message)], is_error=True, _meta=meta)
