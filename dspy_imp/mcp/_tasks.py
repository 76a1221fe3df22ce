"""A tool call the server runs as a task (MCP 2025-11-25 tasks, experimental).

Theory of operation. A ``tools/call`` sent with ``task: {ttl}`` is answered at once with a
``CreateTaskResult``; the call then waits for the task to be ``completed``, ``failed`` or
``cancelled`` or to need input (``input_required``), and reads its result with ``tasks/result``: a
``CallToolResult``, converted as a plain call's is (``_results``). It waits on the server's
``notifications/tasks/status`` for the task (``Statuses``: optional in the spec), polling
``tasks/get`` when none came within ``pollInterval`` (kept between ``MIN_POLL_SECONDS`` and
``MAX_POLL_SECONDS``): a notified end wakes it at once, a notified change of a task still working
is told as a poll's is (``TOLD``: a status line of the call) and the wait for the poll goes on.
The notifications are the server's word (untrusted): one for a task no call of the session waits
on is kept only until its call knows the id (at most ``MAX_EARLY``, the oldest let go), and each
call holds at most ``MAX_NOTIFIED`` of its task's between two looks, so a flood costs a dict
lookup per notification and grows nothing (the SDK's queue for them holds 256, the oldest
dropped). On ``input_required`` the ``tasks/result`` request is sent at once, as the spec asks:
the server's questions arrive during it (``elicitation/create``) and are answered as a plain
call's are. A call cancelled while its task runs (its time bound, the deadline, Stop) sends
``tasks/cancel``, so the server stops the work too.

Which calls are tasks (``wants_task``): only on a 2025-11-25 session whose server declares
``capabilities.tasks.requests.tools.call`` (the spec forbids task augmentation otherwise); then a
tool whose ``execution.taskSupport`` is ``"required"`` always, an ``"optional"`` one under
``tasks="always"``, none under ``tasks="never"``.

The ``mcp`` SDK (2.3) defines the task types only: its ``ClientSession.send_request`` checks every
``tools/call`` answer as a ``CallToolResult``, so the task-augmented request is sent with the
session's raw dispatcher (``_raw_call``, the one use of the SDK's private names here). The task
methods (``tasks/get``, ``tasks/result``, ``tasks/cancel``) are not in its method tables and go
through ``send_request`` as they are, and so does ``tasks/list`` (``list_tasks``). Nor does it
dispatch ``notifications/tasks/status``: ``Statuses.binding`` is the SDK's hook for a notification
its tables do not know (a ``NotificationBinding``), installed by ``_server._Client``.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
from collections import OrderedDict, deque
from collections.abc import Callable, Iterator
from typing import Any, Literal

import mcp_types as types
from mcp import Client
from mcp.client import NotificationBinding

from dspy_imp._records.errors import ConfigurationError

TaskMode = Literal["auto", "always", "never"]
"""What ``tasks=`` takes: ``"auto"`` (a tool whose ``execution.taskSupport`` is ``"required"`` is
called as a task), ``"always"`` (one whose support is ``"optional"`` too), ``"never"`` (no call is)."""
TASK_MODES = ("auto", "always", "never")
TASK_TTL_MS = 3_600_000
"""The ``ttl`` asked for a task (milliseconds): how long the server keeps it and its result."""
MIN_POLL_SECONDS = 0.05
"""The shortest wait between two ``tasks/get`` (a server suggesting less is polled this often)."""
MAX_POLL_SECONDS = 5.0
"""The longest wait between two ``tasks/get`` (a server suggesting more is polled this often)."""
DEFAULT_POLL_SECONDS = 0.5
"""The wait between two ``tasks/get`` when the server suggests none."""
CANCEL_SECONDS = 10.0
"""The longest ``tasks/cancel`` may take, sent after the call was cancelled."""
TASKS_VERSION = "2025-11-25"
"""The protocol version whose sessions run tool calls as tasks (later ones moved tasks to an extension)."""
TERMINAL = frozenset({"completed", "failed", "cancelled"})
STATUS_METHOD = "notifications/tasks/status"
MAX_EARLY = 32
"""The most task ids whose status notification came before their call knew them (kept, the oldest
let go: a server naming ids no call waits on fills no more than this)."""
MAX_NOTIFIED = 16
"""The most status notifications of one task held for its call between two of its looks (the
oldest let go: a flood the call cannot keep up with is thinned, its end always kept)."""
MAX_LIST_PAGES = 100
"""The most pages of a ``tasks/list`` read."""

TOLD: contextvars.ContextVar[Callable[[str, str | None], None] | None] = contextvars.ContextVar(
    "dspy_imp_mcp_task_told", default=None
)
"""Where the current call tells its task's changes of status (``status``, ``statusMessage``): the
call's status lines (set by ``_server.Server._send``); ``None``: nobody to tell."""


class _Watch:
    """One call's wait on its task: the statuses notified since it last looked (at most
    ``MAX_NOTIFIED``, the oldest let go), and an event set when one comes."""

    def __init__(self) -> None:
        self.notified: deque[types.Task] = deque(maxlen=MAX_NOTIFIED)
        self.event = asyncio.Event()

    def note(self, task: types.Task) -> None:
        self.notified.append(task)
        self.event.set()

    def take(self) -> list[types.Task]:
        self.event.clear()
        taken = list(self.notified)
        self.notified.clear()
        return taken


class Statuses:
    """A session's ``notifications/tasks/status``, for the calls waiting on its tasks (see the module)."""

    def __init__(self) -> None:
        self._waiting: dict[str, _Watch] = {}
        self._early: OrderedDict[str, types.Task] = OrderedDict()

    def binding(self) -> NotificationBinding[types.TaskStatusNotificationParams]:
        """The SDK's delivery of the notification to ``note`` (validated; its queue bounded)."""
        return NotificationBinding(method=STATUS_METHOD, params_type=types.TaskStatusNotificationParams,
                                   handler=self._on_status)  # fmt: skip

    async def _on_status(self, params: types.TaskStatusNotificationParams) -> None:
        self.note(params)

    def note(self, task: types.Task) -> None:
        """A status the server notified: to the call waiting on the task, else kept a while (bounded)."""
        watch = self._waiting.get(task.task_id)
        if watch is not None:
            watch.note(task)
            return
        self._early[task.task_id] = task
        self._early.move_to_end(task.task_id)
        while len(self._early) > MAX_EARLY:
            self._early.popitem(last=False)

    @contextlib.contextmanager
    def watching(self, task_id: str) -> Iterator[_Watch]:
        """The call's wait on ``task_id``, for as long as the block runs (a status notified before it
        started is in it at once)."""
        watch = _Watch()
        early = self._early.pop(task_id, None)
        if early is not None:
            watch.note(early)
        self._waiting[task_id] = watch
        try:
            yield watch
        finally:
            if self._waiting.get(task_id) is watch:
                del self._waiting[task_id]

    @property
    def kept(self) -> int:
        """How many task ids it holds now: the calls' waits, and the ids notified before their call knew them."""
        return len(self._waiting) + len(self._early)


def check_mode(value: Any) -> TaskMode:
    if value not in TASK_MODES:
        raise ConfigurationError(f"MCP server `tasks` must be 'auto', 'always' or 'never', got {value!r}")
    mode: TaskMode = value
    return mode


def wants_task(client: Client, mode: TaskMode, support: str | None) -> bool:
    """Whether a call of a tool with ``execution.taskSupport`` ``support`` is sent as a task."""
    if mode == "never" or support not in ("required", "optional"):
        return False
    if support == "optional" and mode != "always":
        return False
    try:
        if client.session.protocol_version != TASKS_VERSION:
            return False
        tasks = client.server_capabilities.tasks
    except RuntimeError:  # the session closed meanwhile: the call fails as a plain one would
        return False
    requests = tasks.requests if tasks is not None else None
    tools = requests.tools if requests is not None else None
    return tools is not None and tools.call is not None


def poll_seconds(task: types.Task) -> float:
    """The wait before the next ``tasks/get``: the server's ``pollInterval``, bounded."""
    if task.poll_interval is None:
        return DEFAULT_POLL_SECONDS
    return min(max(task.poll_interval / 1000, MIN_POLL_SECONDS), MAX_POLL_SECONDS)


async def call_as_task(
    client: Client,
    name: str,
    arguments: dict[str, Any],
    progress: Any,
    started: Callable[[str], None],
    cancelling: set[asyncio.Future[None]],
    *,
    ttl: int = TASK_TTL_MS,
) -> types.CallToolResult:
    """The tool's call as a task: created, polled, its result read; cancelled on the server when
    this is cancelled. ``started(task_id)`` is told the task's id once the server created it;
    ``cancelling`` holds the ``tasks/cancel`` requests in flight (the server's close waits for them:
    a caller that stopped waiting may close the session at once)."""
    created = await _raw_call(client, name, arguments, progress, ttl)
    if isinstance(created, types.CallToolResult):  # a server that ran it at once, as a plain call
        if not created.is_error:
            await client.session.validate_tool_result(name, created)
        return created
    task: types.Task = created.task
    started(task.task_id)
    statuses: Statuses | None = getattr(client, "task_statuses", None)  # ``_server._Client``'s
    told = Told(task, TOLD.get())
    try:
        with statuses.watching(task.task_id) if statuses is not None else contextlib.nullcontext() as watch:
            while task.status not in TERMINAL and task.status != "input_required":
                task = await _next(client, task, watch, told)
        if task.status == "cancelled":
            raise RuntimeError(f"the server cancelled the task {task.task_id!r}{_why(task)}")
        try:
            result = await client.session.send_request(
                types.GetTaskPayloadRequest(params=types.GetTaskPayloadRequestParams(task_id=task.task_id)),
                types.CallToolResult,
            )
        except Exception as error:
            if task.status == "failed":  # no result to read: the task's own words are the error
                raise RuntimeError(f"the task {task.task_id!r} failed{_why(task)}") from error
            raise
        if not result.is_error:  # checked against the tool's output schema, as the SDK checks a plain call's
            await client.session.validate_tool_result(name, result)
        return result
    except asyncio.CancelledError:
        if task.status not in TERMINAL:  # our wait ends: the server's work is stopped too
            canceller = asyncio.ensure_future(_cancel(client, task.task_id))
            cancelling.add(canceller)
            canceller.add_done_callback(cancelling.discard)
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.shield(canceller)
        raise


class Told:
    """A call's task's changes of status told (``TOLD``): each new ``(status, statusMessage)`` of a task
    still working, polled or notified; the one it was created with, and its end, are not."""

    def __init__(self, task: types.Task, tell: Callable[[str, str | None], None] | None):
        self._last = (task.status, task.status_message)
        self._tell = tell

    def __call__(self, task: types.Task) -> None:
        now = (task.status, task.status_message)
        if now == self._last or task.status in TERMINAL:
            return
        self._last = now
        if self._tell is not None:
            self._tell(*now)


async def _next(client: Client, task: types.Task, watch: _Watch | None, told: Told) -> types.Task:
    """The task's next state: the first end (or need of input) a status notification tells within the
    poll interval, else ``tasks/get``'s when it has passed. A notified change of a working task is
    told, and the wait for the poll goes on."""
    loop = asyncio.get_running_loop()
    until = loop.time() + poll_seconds(task)
    while watch is not None and (left := until - loop.time()) > 0:
        try:
            async with asyncio.timeout(left):
                await watch.event.wait()
        except TimeoutError:
            break
        for notified in watch.take():
            if notified.status in TERMINAL or notified.status == "input_required":
                return notified  # its result is read with ``tasks/result``, as a polled end's is
            told(notified)
    if watch is None:
        await asyncio.sleep(poll_seconds(task))
    polled: types.Task = await client.session.send_request(
        types.GetTaskRequest(params=types.GetTaskRequestParams(task_id=task.task_id)), types.GetTaskResult
    )
    told(polled)
    return polled


async def list_tasks(client: Client, label: str) -> list[types.Task]:
    """The server's tasks (``tasks/list``, every page, at most ``MAX_LIST_PAGES``), on a 2025-11-25
    session whose server declares ``capabilities.tasks.list``; else a ``RuntimeError`` naming it."""
    version = client.session.protocol_version
    tasks = client.server_capabilities.tasks
    if version != TASKS_VERSION or tasks is None or tasks.list is None:
        where = "its server does not declare" if version == TASKS_VERSION else f"a {version} session has no"
        raise RuntimeError(
            f"{label} cannot list its tasks: {where} the `tasks.list` capability (tasks/list is "
            f"on {TASKS_VERSION} sessions of servers that declare it)"
        )
    found: list[types.Task] = []
    cursor: str | None = None
    for _ in range(MAX_LIST_PAGES):
        params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
        page = await client.session.send_request(types.ListTasksRequest(params=params), types.ListTasksResult)
        found.extend(page.tasks)
        cursor = page.next_cursor
        if not cursor:
            break
    return found


async def _cancel(client: Client, task_id: str) -> None:
    """``tasks/cancel``, bounded; a server that refuses it (a task already ended) is let be."""
    with contextlib.suppress(Exception):
        async with asyncio.timeout(CANCEL_SECONDS):
            await client.session.send_request(
                types.CancelTaskRequest(params=types.CancelTaskRequestParams(task_id=task_id)), types.CancelTaskResult
            )


async def _raw_call(
    client: Client, name: str, arguments: dict[str, Any], progress: Any, ttl: int
) -> types.CreateTaskResult | types.CallToolResult:
    """The task-augmented ``tools/call``: its answer, a ``CreateTaskResult``, or a ``CallToolResult``
    from a server that ran it at once.

    SDK private names (``ClientSession._stamp``, ``._dispatcher``): its ``send_request`` validates a
    ``tools/call`` answer as a ``CallToolResult`` and would refuse the ``CreateTaskResult`` the spec
    has the server answer; the stamp (the protocol-version header) and the send are what
    ``send_request`` does before that check."""
    session = client.session
    request = types.CallToolRequest(
        params=types.CallToolRequestParams(name=name, arguments=arguments, task=types.TaskMetadata(ttl=ttl))
    )
    data = request.model_dump(by_alias=True, mode="json", exclude_none=True)
    opts: Any = {}
    session._stamp(data, opts)
    if progress is not None:
        opts["on_progress"] = progress
    raw = await session._dispatcher.send_raw_request("tools/call", data.get("params"), opts)
    if isinstance(raw, dict) and "task" in raw:
        return types.CreateTaskResult.model_validate(raw, by_name=False)
    return types.CallToolResult.model_validate(raw, by_name=False)


def _why(task: types.Task) -> str:
    return f": {task.status_message}" if task.status_message else ""
