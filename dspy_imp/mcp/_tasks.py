"""A tool call the server runs as a task (MCP 2025-11-25 tasks, experimental).

Theory of operation. A ``tools/call`` sent with ``task: {ttl}`` is answered at once with a
``CreateTaskResult``; the call then polls ``tasks/get`` (every ``pollInterval``, kept between
``MIN_POLL_SECONDS`` and ``MAX_POLL_SECONDS``) until the task is ``completed``, ``failed`` or
``cancelled`` or needs input (``input_required``), and reads its result with ``tasks/result``: a
``CallToolResult``, converted as a plain call's is (``_results``). On ``input_required`` the
``tasks/result`` request is sent at once, as the spec asks: the server's questions arrive during
it (``elicitation/create``) and are answered as a plain call's are. A call cancelled while its task
runs (its time bound, the deadline, Stop) sends ``tasks/cancel``, so the server stops the work too.

Which calls are tasks (``wants_task``): only on a 2025-11-25 session whose server declares
``capabilities.tasks.requests.tools.call`` (the spec forbids task augmentation otherwise); then a
tool whose ``execution.taskSupport`` is ``"required"`` always, an ``"optional"`` one under
``tasks="always"``, none under ``tasks="never"``.

The ``mcp`` SDK (2.3) defines the task types only: its ``ClientSession.send_request`` checks every
``tools/call`` answer as a ``CallToolResult``, so the task-augmented request is sent with the
session's raw dispatcher (``_raw_call``, the one use of the SDK's private names here). The task
methods (``tasks/get``, ``tasks/result``, ``tasks/cancel``) are not in its method tables and go
through ``send_request`` as they are.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any, Literal

import mcp_types as types
from mcp import Client

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
    try:
        while task.status not in TERMINAL and task.status != "input_required":
            await asyncio.sleep(poll_seconds(task))
            task = await client.session.send_request(
                types.GetTaskRequest(params=types.GetTaskRequestParams(task_id=task.task_id)), types.GetTaskResult
            )
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
