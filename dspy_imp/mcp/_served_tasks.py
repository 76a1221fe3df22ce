"""A served program's tool calls run as tasks (MCP 2025-11-25 tasks, experimental): the serving side.

Theory of operation. A ``tools/call`` that carries ``task: {ttl}`` (on a 2025-11-25 connection,
whose server declared ``capabilities.tasks``) is answered at once with a ``CreateTaskResult``; its
turn runs on in the background, here, in this process's memory. The client asks how it goes
(``tasks/get``), reads the result (``tasks/result``, which waits until the task ended), stops it
(``tasks/cancel``) or lists the tasks it created (``tasks/list``). The ``mcp`` SDK (2.3) defines
the task types only: the program's server (``_serving.ProgramServer``) answers the task-augmented
call in a middleware, ahead of the SDK's ``tools/call`` handler (which checks every answer as a
``CallToolResult``), and serves the task methods with ``add_request_handler`` (they are not in the
SDK's method tables, so their results are not sieved).

A task's statuses:

- ``working`` while the turn runs; its ``statusMessage`` is the turn's last status line
  (``Calling refund({"amount": 5})``), what a plain call sends as progress.
- ``input_required`` while the turn waits for approval: the client reads ``tasks/result``, as the
  spec asks, and the approval is asked during it (``elicitation/create``, tied to the task with
  ``_meta["io.modelcontextprotocol/related-task"]``); then ``working`` again.
- ``completed`` (a result with the answer), ``failed`` (an ``isError`` result, its text the
  ``statusMessage``; or the turn raised: ``tasks/result`` is then a JSON-RPC error), or
  ``cancelled`` (``tasks/cancel``, or the task's ``ttl`` elapsed: the turn is stopped, as a
  plain call's ``notifications/cancelled`` stops it).

Bounds: a task lives ``ttl`` from its creation (asked by the client, kept between
``MIN_TTL_MS`` and ``MAX_TTL_MS``; ``DEFAULT_TTL_MS`` when it asks none), then it is let go,
stopped first if it still runs. At most ``MAX_TASKS`` are kept; a new one past that lets the
oldest ended one go, and is refused when all of them run. Nothing outlives the process.

Telling the requester. Each change of a task's status or ``statusMessage`` is sent to the
connection that created it as ``notifications/tasks/status`` (the whole task, as ``tasks/get``
has it; no ``_meta``, as the spec asks), and when its call carried a ``progressToken`` each status
line of the turn is a ``notifications/progress`` with that token too (the spec keeps the token
valid for the task's lifetime), as a plain call's would be. Both are optional in the spec, so a
client that polls misses nothing. They go out on the connection's own channel (its stream; on
streamable HTTP the GET stream), in order, from one sender per task (``_Outbox``), which ends
once the task's end was sent. Bounded: at most ``MAX_QUEUED`` notifications wait (the oldest let
go; the end, the last, is kept), and a send that takes longer than ``SEND_SECONDS`` ends the
sender (the client reads the rest with ``tasks/get``).

Access. A task's id gives access to it: 256 random bits (``secrets.token_urlsafe(32)``), never
listed to another connection. ``tasks/get``, ``tasks/result`` and ``tasks/cancel`` take the id from
any connection to this server (a client that reconnects reads its result); ``tasks/list`` lists
only the tasks created on the connection that asks. When the server requires OAuth tokens
(``_serving_auth``), a task is also bound to the principal whose token created it (client, issuer,
subject: ``principal_components``, as the SDK binds a session): a request with another principal's
token is told no such task exists. Without tokens there is no authorization context to bind to.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import secrets
import time
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, cast

import mcp_types as types
from mcp.shared.exceptions import MCPError
from mcp_types import INTERNAL_ERROR, INVALID_PARAMS, METHOD_NOT_FOUND, methods
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from dspy_imp.mcp._serving_auth import Principal, principal

logger = logging.getLogger("dspy_imp.mcp")

RELATED = "io.modelcontextprotocol/related-task"
"""The ``_meta`` key that ties a message to its task."""
MAX_TASKS = 100
"""The most tasks kept at once, running and ended (a new one lets the oldest ended one go)."""
DEFAULT_TTL_MS = 600_000
"""A task's lifetime when the client asks none (milliseconds, from its creation)."""
MIN_TTL_MS = 1_000
"""The shortest lifetime granted (a shorter ``ttl`` is raised to it)."""
MAX_TTL_MS = 3_600_000
"""The longest lifetime granted (a longer ``ttl``, or none, is cut to it; never unlimited)."""
POLL_INTERVAL_MS = 500
"""The ``pollInterval`` suggested to the client."""
LIST_PAGE = 20
"""The most tasks one ``tasks/list`` answer holds (then a ``nextCursor``)."""
CANCEL_SECONDS = 10.0
"""The longest ``tasks/cancel`` waits for the turn to stop before it answers (it is cancelled either way)."""
MAX_QUEUED = 200
"""The most notifications of one task waiting to go out to its requester (the oldest let go)."""
SEND_SECONDS = 10.0
"""The longest one notification to a task's requester may take to send; a longer one ends its sender."""
TERMINAL = frozenset({"completed", "failed", "cancelled"})
CANCELLED = "the task was cancelled (tasks/cancel): its turn was stopped"
EXPIRED = "the task's ttl elapsed: its turn was stopped"
CLOSED = "the server closed: the task's turn was stopped"
STOPPED = "the task's turn was stopped"

Decisions = dict[str, Any] | str
"""A paused turn's decisions (call id -> the approval, or ``False``), or why none can be had."""
Ask = Callable[[Sequence[dict[str, Any]]], Awaitable[Decisions]]
Decide = Callable[[Any, Sequence[dict[str, Any]], dict[str, Any]], Awaitable["Decisions | None"]]
"""How the server asks a connection for a paused turn's decisions (``ProgramServer._decide``)."""


def _stamp() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def granted_ttl(asked: int | None) -> int:
    """The lifetime granted for a ``ttl`` asked (milliseconds): bounded, never unlimited."""
    if asked is None:
        return DEFAULT_TTL_MS
    return min(max(int(asked), MIN_TTL_MS), MAX_TTL_MS)


@dataclass(eq=False)
class _Question:
    """A paused turn's pending calls, waiting for a ``tasks/result`` to ask them."""

    pending: tuple[dict[str, Any], ...]
    answered: asyncio.Future[Decisions]
    asking: bool = False


@dataclass(eq=False)
class ServedTask:
    """One task: its wire fields, its turn, what it ended with."""

    task_id: str
    owner: Any
    """The connection that created it (its ``initialize`` params, the same object for every request)."""
    principal: Principal | None
    """Who created it, when the server requires OAuth tokens (the token's client, issuer and
    subject, as the SDK binds a session); only requests with that principal find it."""
    seq: int
    version: str
    """The protocol version of the connection that created it (its result is shaped for it)."""
    ttl_ms: int
    ends_at: float
    """When its lifetime ends, on the store's clock."""
    created_at: str = field(default_factory=_stamp)
    last_updated_at: str = ""
    status: str = "working"
    status_message: str | None = None
    result: dict[str, Any] | None = None
    """``tasks/result`` of an ended task: the ``CallToolResult`` as it goes on the wire."""
    error: types.ErrorData | None = None
    """Or the JSON-RPC error the call would have been (the turn raised)."""
    runner: asyncio.Task[None] | None = None
    question: _Question | None = None
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    timer: asyncio.TimerHandle | None = None
    outbox: _Outbox | None = None
    """What its requester is told as it goes (``notifications/tasks/status``, progress)."""

    def __post_init__(self) -> None:
        self.last_updated_at = self.created_at

    def wire(self) -> dict[str, Any]:
        found: dict[str, Any] = {"taskId": self.task_id, "status": self.status}
        if self.status_message is not None:
            found["statusMessage"] = self.status_message
        found |= {"createdAt": self.created_at, "lastUpdatedAt": self.last_updated_at, "ttl": self.ttl_ms,
                  "pollInterval": POLL_INTERVAL_MS}  # fmt: skip
        return found


class _Outbox:
    """What a task's requester is told, in order, by one sender (see the module): the turn's status
    lines as ``notifications/progress`` (only when its call gave a ``progressToken``) and the task's
    changes as ``notifications/tasks/status``. The sender ends once it sent the task's end."""

    def __init__(self, session: Any, token: str | int | None, label: str):
        self.session = session
        """The ``ServerSession`` of the request that created the task: its connection's own channel."""
        self.token = token
        self.label = label
        self.queue: deque[tuple[str, Any]] = deque(maxlen=MAX_QUEUED)
        self.count = 0
        self.wake = asyncio.Event()
        self.sender = asyncio.ensure_future(self._send())

    def line(self, line: str) -> None:
        if self.token is not None:
            self._put(("progress", line))

    def status(self, wire: dict[str, Any]) -> None:
        self._put(("status", wire))

    def _put(self, item: tuple[str, Any]) -> None:
        if not self.sender.done():
            self.queue.append(item)  # past ``MAX_QUEUED`` the oldest is let go: the end, the newest, stays
            self.wake.set()

    async def _send(self) -> None:
        try:
            await self._sending()
        finally:  # ended: nothing more is told, and the connection is not held for the task's lifetime
            self.queue.clear()
            self.session = None

    async def _sending(self) -> None:
        while True:
            await self.wake.wait()
            self.wake.clear()
            while self.queue:
                kind, item = self.queue.popleft()
                if kind == "progress":
                    self.count += 1
                    params = types.ProgressNotificationParams(
                        progress_token=cast("str | int", self.token), progress=self.count, message=item
                    )
                    if not await self._out(types.ProgressNotification(params=params)):
                        return
                    continue
                told = types.TaskStatusNotification(params=types.TaskStatusNotificationParams.model_validate(item))
                # The SDK keeps the task types out of its notification union (types-only); its send
                # writes any notification model as it dumps.
                if not await self._out(cast("types.ServerNotification", told)) or item["status"] in TERMINAL:
                    return

    async def _out(self, notification: types.ServerNotification) -> bool:
        """One notification on the connection's own channel; ``False`` when it could not be sent in time."""
        try:
            async with asyncio.timeout(SEND_SECONDS):
                await self.session.send_notification(notification)
        except TimeoutError:
            logger.info("dspy_imp.mcp: task %s… requester not told any more: a notification took over %g s",
                        self.label, SEND_SECONDS)  # fmt: skip
            return False
        except Exception as error:  # a closed connection: the task goes on, its client reads it with tasks/get
            logger.debug("dspy_imp.mcp: task %s… notification not sent: %r", self.label, error)
        return True


class _Status:
    """A task's status lines: the turn's progress, as the ``statusMessage`` while it works, and as
    progress notifications when its call asked for them."""

    def __init__(self, store: ServedTasks, task: ServedTask):
        self.store = store
        self.task = task

    def put(self, line: str) -> None:
        if self.task.outbox is not None:
            self.task.outbox.line(line)
        if self.task.status == "working":
            self.store.update(self.task, message=line)


Work = Callable[[Ask, _Status], Awaitable[types.CallToolResult]]
"""A task's turn: given how to ask for approval and where its status lines go, its result."""


class ServedTasks:
    """The tasks of one served program, in this process's memory (see the module)."""

    def __init__(self, decide: Decide, *, clock: Callable[[], float] = time.monotonic):
        self.decide = decide
        self.clock = clock
        """The clock lifetimes are counted on (seconds; ``time.monotonic``)."""
        self.tasks: OrderedDict[str, ServedTask] = OrderedDict()
        self._seq = itertools.count(1)

    # The task-augmented call.

    def create(
        self, ctx: Any, ttl: int | None, work: Work, *, progress_token: str | int | None = None
    ) -> dict[str, Any]:
        """A new task running ``work``, as the ``CreateTaskResult`` the call answers; its changes are
        told to ``ctx``'s connection, its status lines as progress with ``progress_token`` (if any)."""
        self.purge()
        if len(self.tasks) >= MAX_TASKS:
            ended = next((task for task in self.tasks.values() if task.status in TERMINAL), None)
            if ended is None:
                raise MCPError(
                    INTERNAL_ERROR,
                    f"this server keeps at most {MAX_TASKS} tasks and all of them run: wait for one "
                    "to end, or cancel one (tasks/cancel)",
                )
            self._drop(ended)
        granted = granted_ttl(ttl)
        task = ServedTask(
            task_id=secrets.token_urlsafe(32), owner=ctx.session.client_params, principal=principal(),
            seq=next(self._seq),
            version=ctx.protocol_version, ttl_ms=granted, ends_at=self.clock() + granted / 1000,
        )  # fmt: skip
        self.tasks[task.task_id] = task
        task.outbox = _Outbox(ctx.session, progress_token, task.task_id[:8])
        loop = asyncio.get_running_loop()
        task.timer = loop.call_later(granted / 1000, self.purge)
        task.runner = asyncio.ensure_future(self._run(task, work))
        logger.info("dspy_imp.mcp: task %s… created (ttl %d ms)", task.task_id[:8], granted)
        return {"task": task.wire()}

    async def _run(self, task: ServedTask, work: Work) -> None:
        try:
            result = await work(lambda pending: self._ask(task, pending), _Status(self, task))
            # the result as the call would have answered it, shaped for the connection's protocol
            wire = methods.serialize_server_result(
                "tools/call", task.version, result.model_dump(by_alias=True, mode="json", exclude_none=True)
            )
        except asyncio.CancelledError:  # tasks/cancel, its lifetime's end, or the server closing
            if task.status not in TERMINAL:
                self._end(task, "cancelled", STOPPED, result=_stopped(STOPPED))
            return
        except Exception as error:  # the call would have been a JSON-RPC error: the task's result is
            logger.exception("dspy_imp.mcp: task %s… failed", task.task_id[:8])
            said = str(error) or type(error).__name__  # as the plain call's JSON-RPC error says it
            self._end(task, "failed", said, error=types.ErrorData(code=INTERNAL_ERROR, message=said))
            return
        if task.status in TERMINAL:  # cancelled meanwhile: it stays cancelled
            return
        if result.is_error:
            text = next((c.text for c in result.content if isinstance(c, types.TextContent)), "the call failed")
            self._end(task, "failed", text, result=wire)
        else:
            self._end(task, "completed", None, result=wire)

    async def _ask(self, task: ServedTask, pending: Sequence[dict[str, Any]]) -> Decisions:
        """The turn's decisions, asked during a ``tasks/result``: ``input_required`` until then."""
        question = _Question(tuple(pending), asyncio.get_running_loop().create_future())
        task.question = question
        asked = "; ".join(f"approve {call['name']}" for call in pending)
        self.update(task, status="input_required", message=f"waiting for approval: {asked} (read tasks/result)")
        try:
            return await question.answered
        finally:
            task.question = None
            if task.status == "input_required":
                self.update(task, status="working", message=None)

    # The task methods.

    async def get(self, ctx: Any, params: types.GetTaskRequestParams) -> dict[str, Any]:
        return self._find(ctx, params.task_id).wire()

    async def result(self, ctx: Any, params: types.GetTaskPayloadRequestParams) -> dict[str, Any]:
        """What the call would have answered, once the task ended; a pending approval is asked here."""
        task = self._find(ctx, params.task_id)
        if task.status not in TERMINAL:
            logger.debug("dspy_imp.mcp: task %s… result read: waiting for it to end", task.task_id[:8])
        while task.status not in TERMINAL:
            changed = task.changed
            question = task.question
            if question is not None and not question.asking and not question.answered.done():
                question.asking = True
                try:
                    decided = await self.decide(ctx, question.pending, {RELATED: {"taskId": task.task_id}})
                except BaseException:
                    question.asking = False  # the next tasks/result asks again
                    raise
                if not question.answered.done():
                    question.answered.set_result(
                        decided if decided is not None else "this connection cannot be asked for approval"
                    )
                continue
            await changed.wait()
        if task.error is not None:
            raise MCPError(task.error.code, task.error.message)
        assert task.result is not None
        meta = {**(task.result.get("_meta") or {}), RELATED: {"taskId": task.task_id}}
        return {**task.result, "_meta": meta}

    async def cancel(self, ctx: Any, params: types.CancelTaskRequestParams) -> dict[str, Any]:
        task = self._find(ctx, params.task_id)
        if task.status in TERMINAL:
            raise MCPError(INVALID_PARAMS, f"Cannot cancel task: already in terminal status '{task.status}'")
        self._end(task, "cancelled", CANCELLED, result=_stopped(CANCELLED))
        logger.info("dspy_imp.mcp: task %s… cancelled by the client", task.task_id[:8])
        if task.runner is not None and not task.runner.done():
            task.runner.cancel()
            with contextlib.suppress(TimeoutError):  # answered either way: it is cancelled
                await asyncio.wait_for(asyncio.shield(task.runner), CANCEL_SECONDS)
        return task.wire()

    async def list(self, ctx: Any, params: types.PaginatedRequestParams) -> dict[str, Any]:
        """The tasks this connection created, oldest first, ``LIST_PAGE`` at a time."""
        self._check(ctx)
        self.purge()
        after = 0
        if params.cursor is not None:
            if not params.cursor.isdigit():
                raise MCPError(INVALID_PARAMS, f"tasks/list: not a cursor this server gave: {params.cursor!r}")
            after = int(params.cursor)
        owner = ctx.session.client_params
        mine = [t for t in self.tasks.values() if owner is not None and t.owner is owner and t.seq > after]
        page = mine[:LIST_PAGE]
        found: dict[str, Any] = {"tasks": [task.wire() for task in page]}
        if len(mine) > LIST_PAGE:
            found["nextCursor"] = str(page[-1].seq)
        return found

    # Keeping them.

    def update(self, task: ServedTask, *, status: str | None = None, message: str | None = None) -> None:
        if status is not None:
            task.status = status
        task.status_message = message
        task.last_updated_at = _stamp()
        changed, task.changed = task.changed, asyncio.Event()
        changed.set()  # every waiter looks again
        if task.outbox is not None:
            task.outbox.status(task.wire())

    def _end(
        self,
        task: ServedTask,
        status: str,
        message: str | None,
        *,
        result: dict[str, Any] | None = None,
        error: types.ErrorData | None = None,
    ) -> None:
        task.result, task.error = result, error
        if task.question is not None and not task.question.answered.done():
            task.question.answered.cancel()
        self.update(task, status=status, message=message)
        logger.info("dspy_imp.mcp: task %s… %s", task.task_id[:8], status)

    def purge(self) -> None:
        """Let go of every task whose lifetime ended (one still running is stopped first)."""
        now = self.clock()
        for task in [t for t in self.tasks.values() if t.ends_at <= now]:
            if task.status not in TERMINAL:
                self._end(task, "cancelled", EXPIRED, result=_stopped(EXPIRED))
            self._drop(task)

    def _drop(self, task: ServedTask) -> None:
        self.tasks.pop(task.task_id, None)
        if task.timer is not None:
            task.timer.cancel()
        if task.runner is not None and not task.runner.done():
            task.runner.cancel()

    def close(self) -> None:
        """Stop every running task and let them all go (the server is closing)."""
        for task in list(self.tasks.values()):
            if task.status not in TERMINAL:
                self._end(task, "cancelled", CLOSED, result=_stopped(CLOSED))
            self._drop(task)

    def _find(self, ctx: Any, task_id: str) -> ServedTask:
        self._check(ctx)
        self.purge()
        task = self.tasks.get(task_id)
        if task is None or (task.principal is not None and task.principal != principal()):
            raise MCPError(INVALID_PARAMS, "Failed to retrieve task: Task not found (or its ttl elapsed)")
        return task

    @staticmethod
    def _check(ctx: Any) -> None:
        if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:  # tasks are the 2025-11-25 protocol's
            raise MCPError(METHOD_NOT_FOUND, "Method not found", ctx.method)


def _stopped(said: str) -> dict[str, Any]:
    """``tasks/result`` of a task stopped before it ended: an error result saying so."""
    return {"content": [{"type": "text", "text": said}], "isError": True}


def capability() -> types.ServerTasksCapability:
    """What a served program declares: ``tasks/list``, ``tasks/cancel``, task-augmented ``tools/call``."""
    return types.ServerTasksCapability(
        list=types.TasksListCapability(),
        cancel=types.TasksCancelCapability(),
        requests=types.ServerTasksRequestsCapability(
            tools=types.TasksToolsCapability(call=types.TasksCallCapability())
        ),
    )
