"""A served program's calls run as tasks (MCP 2025-11-25 tasks), driven by the ``mcp`` SDK's client
in memory and over streamable HTTP, and by ``dspy_imp.mcp``'s own client (``tasks="always"``).

The SDK's client (2.3) checks every ``tools/call`` answer as a ``CallToolResult``, so the
task-augmented call is sent through its raw dispatcher (``raw``, the SDK's private names, as
``dspy_imp.mcp._tasks`` does); the task methods go the same way, their answers asserted whole.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import subprocess
import threading
from collections.abc import Iterator
from typing import Any

import dspy
import mcp_types as types
import pytest
from mcp import Client
from mcp.client import ClientExtension, NotificationBinding
from mcp.shared.exceptions import MCPError

import dspy_imp
from dspy_imp import mcp
from dspy_imp.mcp import _served_tasks
from dspy_imp.mcp._served_tasks import DEFAULT_TTL_MS, LIST_PAGE, MAX_TASKS, MAX_TTL_MS, MIN_TTL_MS, RELATED
from dspy_imp.mcp._serving import META_KEY, ProgramServer
from dspy_imp.testing import ScriptedLM, call, reply
from tests import mcp_served_program as served_module
from tests.test_mcp_serving import ROOT, accept, command, environment, until, until_no_busy_thread

pytestmark = pytest.mark.block_network(allowed_hosts=[r"127\.0\.0\.1$"])

STAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
TERMINATION = {"reason": "submit", "cause": None, "finish_reason": None, "finished_by_tool": None}
CAPABILITY = {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}


@pytest.fixture(autouse=True)
def fresh_events() -> Iterator[None]:
    served_module.events.clear()
    served_module.release.clear()
    yield
    served_module.release.set()  # a sync tool left blocked by a cancel returns


def refunds() -> list[str]:
    """What ``refund`` saw (a sync ``wait`` an earlier test's cancel left behind may return meanwhile)."""
    return [event for event in served_module.events if event.startswith("refund")]


def serve(sync: bool = False) -> ProgramServer:
    program = served_module.sync_program if sync else served_module.program
    return program.as_mcp_server("repeat", sync=sync)


async def raw(client: Client, method: str, params: dict[str, Any]) -> dict[str, Any]:
    """One request as it goes on the wire, its answer as it came (SDK private names: see the module)."""
    session = client.session
    data: dict[str, Any] = {"method": method, "params": params}
    opts: Any = {}
    session._stamp(data, opts)
    return dict(await session._dispatcher.send_raw_request(method, data["params"], opts))


async def start(client: Client, question: str, *, ttl: int | None = 60_000, times: int = 1) -> dict[str, Any]:
    """The task-augmented call's answer, the ``CreateTaskResult``."""
    task = {} if ttl is None else {"ttl": ttl}
    return await raw(client, "tools/call", {"name": "repeat", "arguments": {"question": question, "times": times},
                                            "task": task})  # fmt: skip


def shape(task: dict[str, Any]) -> dict[str, Any]:
    """A task as the wire has it, its id and times (random, the clock's) checked and replaced."""
    assert isinstance(task["taskId"], str) and len(task["taskId"]) >= 43  # 256 random bits
    assert STAMP.match(task["createdAt"]) and STAMP.match(task["lastUpdatedAt"])
    assert task["lastUpdatedAt"] >= task["createdAt"]
    return {**task, "taskId": "<id>", "createdAt": "<time>", "lastUpdatedAt": "<time>"}


def wire(status: str, message: str | None = None, ttl: int = 60_000) -> dict[str, Any]:
    found: dict[str, Any] = {"taskId": "<id>", "status": status}
    if message is not None:
        found["statusMessage"] = message
    return {**found, "createdAt": "<time>", "lastUpdatedAt": "<time>", "ttl": ttl, "pollInterval": 500}


async def until_status(client: Client, task_id: str, status: str) -> dict[str, Any]:
    """``tasks/get`` (in loop turns, no clock) until the task has ``status``."""
    while (found := await raw(client, "tasks/get", {"taskId": task_id}))["status"] != status:
        await asyncio.sleep(0.01)
    return found


def answered(task_id: str, answer: str) -> dict[str, Any]:
    """``tasks/result`` of a completed task: the call's result, tied to the task."""
    text = json.dumps({"answer": answer, "length": len(answer)})
    return {"_meta": {META_KEY: TERMINATION, RELATED: {"taskId": task_id}}, "content": [{"text": text, "type": "text"}],
            "isError": False, "structuredContent": {"answer": answer, "length": len(answer)}}  # fmt: skip


def refused(task_id: str, text: str, termination: dict[str, Any] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {META_KEY: termination} if termination else {}
    return {"_meta": {**meta, RELATED: {"taskId": task_id}}, "content": [{"text": text, "type": "text"}],
            "isError": True}  # fmt: skip


class Told(ClientExtension):
    """What the server sent outside any answer: its ``notifications/tasks/status`` (the SDK's client
    delivers a notification its tables do not know only to an extension's binding; the identifier
    is this test's own) and its progress notifications (to ``message_handler``, once no request
    waits on the token)."""

    identifier = "com.example.tests/told"

    def __init__(self) -> None:
        self.statuses: list[dict[str, Any]] = []
        self.progress: list[dict[str, Any]] = []

    def notifications(self) -> list[NotificationBinding[Any]]:
        return [NotificationBinding(method="notifications/tasks/status", params_type=types.TaskStatusNotificationParams,
                                    handler=self._status)]  # fmt: skip

    async def _status(self, params: types.TaskStatusNotificationParams) -> None:
        self.statuses.append(params.model_dump(by_alias=True, mode="json", exclude_none=True))

    async def message(self, message: Any) -> None:
        if isinstance(message, types.ProgressNotification):
            self.progress.append(message.params.model_dump(by_alias=True, mode="json", exclude_none=True))

    def ended(self) -> bool:
        return bool(self.statuses) and self.statuses[-1]["status"] in ("completed", "failed", "cancelled")


async def until_told(told: Told) -> None:
    """Until the task's end was notified (it may come after the answer that ended the wait); bounded,
    so a server that sends none fails the test rather than hanging it (a bound, not an assertion)."""
    async with asyncio.timeout(60):
        await until(told.ended)


def runs(statuses: list[dict[str, Any]]) -> list[str]:
    """The statuses told, each run of one status once."""
    found = [t["status"] for t in statuses]
    return [status for n, status in enumerate(found) if n == 0 or found[n - 1] != status]


async def test_a_2025_11_25_client_is_told_of_tasks_and_a_2026_07_28_one_is_not() -> None:
    served = serve()
    async with Client(served.server, mode="legacy") as client:
        assert client.session.protocol_version == "2025-11-25"
        assert client.server_capabilities.tasks is not None
        assert client.server_capabilities.tasks.model_dump(by_alias=True, exclude_none=True) == CAPABILITY
        listed = await raw(client, "tools/list", {})
    assert listed["tools"][0]["execution"] == {"taskSupport": "optional"}
    async with Client(served.server) as modern:
        assert modern.session.protocol_version == "2026-07-28"
        assert modern.server_capabilities.tasks is None
        (tool,) = (await modern.list_tools()).tools
        assert tool.execution is None
        plain = await raw(modern, "tools/call", {"name": "repeat", "arguments": {"question": "hi", "times": 1},
                                                 "task": {"ttl": 1000}})  # fmt: skip
        assert plain["structuredContent"] == {"answer": "hi", "length": 2}  # a plain call: no task there
        with pytest.raises(MCPError) as unknown:
            await raw(modern, "tasks/get", {"taskId": "anything"})
    assert unknown.value.code == types.METHOD_NOT_FOUND
    assert served.tasks.tasks == {}


@pytest.mark.parametrize("sync", [False, True], ids=["async", "sync"])
async def test_a_call_as_a_task_is_created_at_once_and_its_result_read_when_it_ends(sync: bool) -> None:
    served = serve(sync)
    lm = (served_module.sync_program if sync else served_module.program).react.lm
    before = len(lm.requests)
    async with Client(served.server, mode="legacy") as client:
        created = await start(client, "hi", times=3)
        assert list(created) == ["task"]
        assert shape(created["task"]) == wire("working")
        task_id = created["task"]["taskId"]
        result = await raw(client, "tasks/result", {"taskId": task_id})  # waits until it ends
        got = await raw(client, "tasks/get", {"taskId": task_id})
    assert result == answered(task_id, "hi hi hi")
    assert shape(got) == wire("completed")
    assert len(lm.requests) == before + 1  # one turn, one request


@pytest.mark.parametrize("sync", [False, True], ids=["async", "sync"])
async def test_a_working_task_says_its_turns_last_step_and_cancel_stops_the_turn(sync: bool) -> None:
    before = set(threading.enumerate())
    served = serve(sync)
    async with Client(served.server, mode="legacy") as client:
        task_id = (await start(client, "wait now"))["task"]["taskId"]
        await until(lambda: "wait started" in served_module.events)
        working = await raw(client, "tasks/get", {"taskId": task_id})
        assert shape(working) == wire("working", "Calling wait({})")
        cancelled = await raw(client, "tasks/cancel", {"taskId": task_id})
        said = "the task was cancelled (tasks/cancel): its turn was stopped"
        assert shape(cancelled) == wire("cancelled", said)
        if not sync:
            assert "wait cancelled" in served_module.events  # the turn was stopped before the answer
        assert served.tasks.tasks[task_id].runner.done()  # type: ignore[union-attr]
        result = await raw(client, "tasks/result", {"taskId": task_id})
        with pytest.raises(MCPError) as again:
            await raw(client, "tasks/cancel", {"taskId": task_id})
        after = await raw(client, "tasks/get", {"taskId": task_id})
        plain = await client.call_tool("repeat", {"question": "hi", "times": 1})  # the session still answers
    assert result == refused(task_id, said)
    assert (again.value.code, again.value.message) == (
        types.INVALID_PARAMS, "Cannot cancel task: already in terminal status 'cancelled'"
    )  # fmt: skip
    assert shape(after) == wire("cancelled", said)
    assert plain.structured_content == {"answer": "hi", "length": 2}
    assert "wait released" not in served_module.events  # the sync turn stopped without its tool returning
    if sync:  # the tool's thread left behind returns now, not during the next test
        served_module.release.set()
        await until(lambda: "wait released" in served_module.events)
    await until_no_busy_thread(before)  # nothing of the cancelled task stays behind


@pytest.mark.parametrize("sync", [False, True], ids=["async", "sync"])
@pytest.mark.parametrize("action", ["accept", "decline"])
async def test_an_approval_pause_is_input_required_and_asked_during_tasks_result(sync: bool, action: str) -> None:
    asked: list[types.ElicitRequestParams] = []

    async def elicit(context: Any, params: Any) -> types.ElicitResult:
        asked.append(params)
        return types.ElicitResult(action=action, content={} if action == "accept" else None)  # type: ignore[arg-type]

    served = serve(sync)
    async with Client(served.server, mode="legacy", elicitation_callback=elicit) as client:
        task_id = (await start(client, "refund it"))["task"]["taskId"]
        waiting = await until_status(client, task_id, "input_required")
        assert asked == []  # asked only once the client reads the result
        result = await raw(client, "tasks/result", {"taskId": task_id})
        done = await raw(client, "tasks/get", {"taskId": task_id})
    assert shape(waiting) == wire("input_required", "waiting for approval: approve refund (read tasks/result)")
    (question,) = asked
    assert question.model_dump(by_alias=True, exclude_none=True) == {
        "_meta": {RELATED: {"taskId": task_id}},
        "mode": "form",
        "message": 'Approve the call refund({"amount": 5})?',
        "requestedSchema": {"type": "object", "properties": {}},
    }
    if action == "accept":
        assert refunds() == ["refund 5"]
        assert result == answered(task_id, "refund it: refunded 5")
    else:
        assert refunds() == []
        assert result["isError"] is False and "refunded" not in result["structuredContent"]["answer"]
    assert shape(done) == wire("completed")


@pytest.mark.parametrize("sync", [False, True], ids=["async", "sync"])
async def test_each_change_of_a_task_is_notified_and_its_steps_are_progress_with_the_calls_token(sync: bool) -> None:
    plain_lines: list[str | None] = []

    async def progress(done: float, total: float | None, message: str | None) -> None:
        plain_lines.append(message)

    served = serve(sync)
    told = Told()
    arguments = {"question": "refund it", "times": 1}
    async with Client(served.server, mode="legacy", elicitation_callback=accept, extensions=[told],
                      message_handler=told.message) as client:  # fmt: skip
        await client.call_tool("repeat", arguments, progress_callback=progress)  # the same turn, plainly
        asked = {"name": "repeat", "arguments": arguments, "task": {"ttl": 60_000}, "_meta": {"progressToken": "p-1"}}
        created = await raw(client, "tools/call", asked)
        task_id = created["task"]["taskId"]
        await until_status(client, task_id, "input_required")
        result = await raw(client, "tasks/result", {"taskId": task_id})
        await until_told(told)
        got = await raw(client, "tasks/get", {"taskId": task_id})
    assert result == answered(task_id, "refund it: refunded 5")
    assert told.statuses[-1] == got and shape(got) == wire("completed")  # the whole task, as tasks/get has it
    assert {t["taskId"] for t in told.statuses} == {task_id}
    assert all(set(t) <= set(got) | {"statusMessage"} for t in told.statuses)  # no ``_meta``: the spec's SHOULD NOT
    assert runs(told.statuses) == ["working", "input_required", "working", "completed"]
    waiting = [shape(t) for t in told.statuses if t["status"] == "input_required"]
    assert waiting == [wire("input_required", "waiting for approval: approve refund (read tasks/result)")]
    lines = [t["statusMessage"] for t in told.statuses if t["status"] == "working" and "statusMessage" in t]
    tasks_progress = [p for p in told.progress if p["progressToken"] == "p-1"]  # not the plain call's
    assert tasks_progress == [{"progressToken": "p-1", "progress": n, "message": line}
                              for n, line in enumerate(plain_lines, 1)]  # fmt: skip
    assert lines == plain_lines and lines[-1] == "Turn ended: submit"


async def test_without_a_progress_token_a_task_sends_no_progress_but_its_changes() -> None:
    told = Told()
    async with Client(serve().server, mode="legacy", extensions=[told], message_handler=told.message) as client:
        task_id = (await start(client, "hi", times=2))["task"]["taskId"]
        await raw(client, "tasks/result", {"taskId": task_id})
        await until_told(told)
        got = await raw(client, "tasks/get", {"taskId": task_id})
    assert told.progress == []
    assert told.statuses[-1] == got
    assert [(t["status"], t.get("statusMessage")) for t in told.statuses] == [
        ("working", "Request 1"), ("working", "Turn ended: submit"), ("completed", None)
    ]  # fmt: skip


@pytest.mark.parametrize("sync", [False, True], ids=["async", "sync"])
async def test_a_cancelled_task_is_notified_cancelled(sync: bool) -> None:
    before = set(threading.enumerate())
    told = Told()
    async with Client(serve(sync).server, mode="legacy", extensions=[told], message_handler=told.message) as client:
        task_id = (await start(client, "wait now"))["task"]["taskId"]
        await until(lambda: "wait started" in served_module.events)
        cancelled = await raw(client, "tasks/cancel", {"taskId": task_id})
        await until_told(told)
    assert told.statuses[-1] == cancelled
    assert runs(told.statuses) == ["working", "cancelled"]
    if sync:  # the tool's thread left behind returns now, not during the next test
        served_module.release.set()
        await until(lambda: "wait released" in served_module.events)
    await until_no_busy_thread(before)


async def test_a_requester_that_stops_reading_ends_its_tasks_notifications_not_the_task(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A send past ``SEND_SECONDS`` ends the task's sender (bounded: nothing more queues for it, its
    connection is let go); the task itself goes on and is read as ever."""
    caplog.set_level(logging.INFO, logger="dspy_imp.mcp")
    monkeypatch.setattr(_served_tasks, "SEND_SECONDS", 0.05)
    stuck: list[Any] = []

    class Stuck:  # a connection whose client reads nothing: its first notification never goes out
        async def send_notification(self, notification: Any) -> None:
            stuck.append(notification)
            await asyncio.Event().wait()

    outbox = _served_tasks._Outbox(Stuck(), "p-1", "t")
    outbox.line("Request 1")
    async with asyncio.timeout(60):  # a bound on the test, not an assertion
        await asyncio.wait({outbox.sender})  # ended by the send's bound, not by the task's end
    outbox.line("Turn ended: submit")
    outbox.status({"taskId": "t", "status": "completed", "createdAt": "x", "lastUpdatedAt": "x", "ttl": 1000})
    assert [n.params.message for n in stuck] == ["Request 1"]
    assert (outbox.session, list(outbox.queue)) == (None, [])
    assert any("requester not told any more" in r.getMessage() for r in caplog.records)


async def test_a_client_without_elicitation_has_its_approval_task_fail_at_once() -> None:
    async with Client(serve().server, mode="legacy") as client:
        task_id = (await start(client, "refund it"))["task"]["taskId"]
        failed = await until_status(client, task_id, "failed")
        result = await raw(client, "tasks/result", {"taskId": task_id})
    said = 'the turn needs approval of refund({"amount": 5}), and this client does not take elicitation requests'
    assert shape(failed) == wire("failed", said)
    termination = {"reason": "paused", "cause": None, "finish_reason": None, "finished_by_tool": None}
    assert result == refused(task_id, said, termination)
    assert refunds() == []


async def test_bad_arguments_fail_the_task_before_any_model_request() -> None:
    lm = served_module.program.react.lm
    before = len(lm.requests)
    async with Client(serve().server, mode="legacy") as client:
        created = await raw(client, "tools/call", {"name": "repeat", "arguments": {"question": "hi", "times": "many"},
                                                   "task": {}})  # fmt: skip
        task_id = created["task"]["taskId"]
        result = await raw(client, "tasks/result", {"taskId": task_id})
        failed = await raw(client, "tasks/get", {"taskId": task_id})
    said = "invalid arguments: argument `times`: Input should be a valid integer, unable to parse string as an integer"
    assert result == refused(task_id, said)
    assert shape(failed) == wire("failed", said, ttl=DEFAULT_TTL_MS)
    assert len(lm.requests) == before


async def test_a_turn_that_raises_fails_its_task_and_its_result_is_the_calls_json_rpc_error() -> None:
    async with Client(served_module.no_lm.as_mcp_server("bare").server, mode="legacy") as client:
        created = await raw(client, "tools/call", {"name": "bare", "arguments": {"question": "hi"}, "task": {}})
        task_id = created["task"]["taskId"]
        with pytest.raises(MCPError) as failed:
            await raw(client, "tasks/result", {"taskId": task_id})
        got = await raw(client, "tasks/get", {"taskId": task_id})
    assert failed.value.code == types.INTERNAL_ERROR
    assert failed.value.message.startswith("ReActV2 turn got no model response: ValueError: No LM is loaded.")
    assert shape(got) == wire("failed", failed.value.message, ttl=DEFAULT_TTL_MS)


@pytest.mark.parametrize("method", ["tasks/get", "tasks/result", "tasks/cancel"])
async def test_an_unknown_task_is_invalid_params(method: str) -> None:
    async with Client(serve().server, mode="legacy") as client:
        with pytest.raises(MCPError) as unknown:
            await raw(client, method, {"taskId": "not-a-task"})
    assert (unknown.value.code, unknown.value.message) == (
        types.INVALID_PARAMS, "Failed to retrieve task: Task not found (or its ttl elapsed)"
    )  # fmt: skip


@pytest.mark.parametrize(
    ("asked", "granted"), [(None, DEFAULT_TTL_MS), (10, MIN_TTL_MS), (5_000, 5_000), (10**12, MAX_TTL_MS)]
)
async def test_a_tasks_lifetime_is_bounded(asked: int | None, granted: int) -> None:
    async with Client(serve().server, mode="legacy") as client:
        created = await start(client, "hi", ttl=asked)
        await raw(client, "tasks/result", {"taskId": created["task"]["taskId"]})
    assert created["task"]["ttl"] == granted


async def test_a_task_is_let_go_when_its_ttl_elapsed_and_a_running_one_is_stopped(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="dspy_imp.mcp")
    served = serve()
    now = [1000.0]
    served.tasks.clock = lambda: now[0]
    async with Client(served.server, mode="legacy") as client:
        ended = (await start(client, "hi", ttl=5_000))["task"]["taskId"]
        await raw(client, "tasks/result", {"taskId": ended})
        running = (await start(client, "wait now", ttl=60_000))["task"]["taskId"]
        await until(lambda: "wait started" in served_module.events)
        now[0] += 5.0  # the first one's lifetime ends
        with pytest.raises(MCPError):
            await raw(client, "tasks/get", {"taskId": ended})
        assert shape(await raw(client, "tasks/get", {"taskId": running})) == wire("working", "Calling wait({})")
        waiter = asyncio.ensure_future(raw(client, "tasks/result", {"taskId": running}))
        waiting = f"task {running[:8]}… result read: waiting"
        await until(lambda: any(waiting in r.getMessage() for r in caplog.records))
        now[0] += 55.0  # the second one's ends while it runs
        listed = await raw(client, "tasks/list", {})
        stopped = await waiter
        await until(lambda: "wait cancelled" in served_module.events)  # its turn was stopped
    assert listed == {"tasks": []}
    assert stopped == refused(running, "the task's ttl elapsed: its turn was stopped")
    assert served.tasks.tasks == {}


async def test_tasks_list_lists_this_connections_tasks_a_page_at_a_time() -> None:
    served = serve()
    async with Client(served.server, mode="legacy") as client, Client(served.server, mode="legacy") as other:
        mine = [(await start(client, f"q{n}"))["task"]["taskId"] for n in range(LIST_PAGE + 3)]
        for task_id in mine:
            await raw(client, "tasks/result", {"taskId": task_id})
        theirs = (await start(other, "theirs"))["task"]["taskId"]
        first = await raw(client, "tasks/list", {})
        rest = await raw(client, "tasks/list", {"cursor": first["nextCursor"]})
        other_list = await raw(other, "tasks/list", {})
        by_id = await raw(other, "tasks/get", {"taskId": mine[0]})  # its id gives access from elsewhere
        with pytest.raises(MCPError) as bad:
            await raw(client, "tasks/list", {"cursor": "not-ours"})
    assert [t["taskId"] for t in first["tasks"]] == mine[:LIST_PAGE]
    assert [t["taskId"] for t in rest["tasks"]] == mine[LIST_PAGE:] and "nextCursor" not in rest
    assert [shape(t) for t in rest["tasks"]] == [wire("completed")] * 3
    assert [t["taskId"] for t in other_list["tasks"]] == [theirs]
    assert by_id["taskId"] == mine[0]
    assert bad.value.code == types.INVALID_PARAMS and "not a cursor this server gave" in bad.value.message


async def test_at_most_max_tasks_are_kept_the_oldest_ended_let_go_first() -> None:
    served = serve()
    async with Client(served.server, mode="legacy") as client:
        running = [(await start(client, "wait now"))["task"]["taskId"] for _ in range(MAX_TASKS)]
        with pytest.raises(MCPError) as full:
            await start(client, "hi")
        await raw(client, "tasks/cancel", {"taskId": running[0]})
        newest = (await start(client, "hi"))["task"]["taskId"]  # lets the cancelled one go
        result = await raw(client, "tasks/result", {"taskId": newest})
        with pytest.raises(MCPError):
            await raw(client, "tasks/get", {"taskId": running[0]})
        served.close()  # the running ones are stopped
        await until(lambda: served_module.events.count("wait cancelled") == MAX_TASKS)
    assert full.value.code == types.INTERNAL_ERROR
    assert full.value.message.startswith(f"this server keeps at most {MAX_TASKS} tasks and all of them run")
    assert result == answered(newest, "hi")
    assert served.tasks.tasks == {}


async def test_dspy_imp_calls_the_served_program_as_a_task() -> None:
    """``dspy_imp.mcp``'s client on the other side: ``tasks="always"`` runs the optional tool as a task."""
    served = serve()
    server = mcp.memory(served.server, mode="legacy", tasks="always")
    agent = dspy_imp.ReActV2("question -> answer", tools=[server])
    lm = ScriptedLM([reply(calls=[call("repeat", {"question": "hi", "times": 2}, id="c1")]), reply("done")])
    try:
        with dspy.context(lm=lm):
            pred = await agent.acall(question="Repeat hi twice")
    finally:
        server.close()
    (task,) = served.tasks.tasks.values()
    assert task.status == "completed"
    (result,) = pred.metadata.history.messages[-2]["tool_call_results"]
    assert (result["id"], result["result"], result["error"]) == ("c1", {"answer": "hi hi", "length": 5}, False)
    assert pred.answer == "done"


@pytest.mark.parametrize("sync", [False, True], ids=["async", "sync"])
async def test_with_tasks_off_nothing_says_tasks_and_a_call_with_task_runs_inline(sync: bool) -> None:
    program = served_module.sync_program if sync else served_module.program
    served = program.as_mcp_server("repeat", sync=sync, tasks=False)
    assert served.tool().execution is None
    async with Client(served.server, mode="legacy") as client:
        assert client.session.protocol_version == "2025-11-25"
        assert client.server_capabilities.tasks is None
        listed = await raw(client, "tools/list", {})
        inline = await start(client, "hi", times=2)  # the spec: a server without the capability ignores ``task``
        refused = []
        for method in ("tasks/get", "tasks/result", "tasks/cancel", "tasks/list"):
            with pytest.raises(MCPError) as unknown:
                await raw(client, method, {} if method == "tasks/list" else {"taskId": "anything"})
            refused.append((method, unknown.value.code))
    assert "execution" not in listed["tools"][0]
    text = '{"answer": "hi hi", "length": 5}'
    assert inline == {"_meta": {META_KEY: TERMINATION}, "content": [{"text": text, "type": "text"}], "isError": False,
                      "structuredContent": {"answer": "hi hi", "length": 5}}  # fmt: skip
    assert refused == [(m, types.METHOD_NOT_FOUND) for m in ("tasks/get", "tasks/result", "tasks/cancel", "tasks/list")]
    assert served.tasks.tasks == {}


async def test_dspy_imp_calls_a_server_with_tasks_off_plainly_even_under_always() -> None:
    served = served_module.program.as_mcp_server("repeat", tasks=False)
    server = mcp.memory(served.server, mode="legacy", tasks="always")
    agent = dspy_imp.ReActV2("question -> answer", tools=[server])
    lm = ScriptedLM([reply(calls=[call("repeat", {"question": "hi", "times": 2}, id="c1")]), reply("done")])
    try:
        with dspy.context(lm=lm):
            pred = await agent.acall(question="Repeat hi twice")
    finally:
        server.close()
    (result,) = pred.metadata.history.messages[-2]["tool_call_results"]
    assert (result["id"], result["result"], result["error"]) == ("c1", {"answer": "hi hi", "length": 5}, False)
    assert served.tasks.tasks == {}  # no task was made: the tool says nothing of tasks


def test_a_bad_tasks_option_is_refused_naming_it() -> None:
    with pytest.raises(dspy_imp.ConfigurationError, match=r"`tasks` must be True .* or False .*, got 'no'"):
        served_module.program.as_mcp_server("repeat", tasks="no")  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def http_url_no_tasks() -> Iterator[str]:
    server = subprocess.Popen(
        command("tests.mcp_served_program:program", "--http", "--no-tasks"),
        cwd=ROOT,
        env=environment(),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert server.stdout is not None
        line = server.stdout.readline()
        assert "serving program on http://127.0.0.1:" in line, line
        yield line.split(" on ", 1)[1].strip()
    finally:
        server.terminate()
        server.wait(timeout=30)
        if server.stdout is not None:
            server.stdout.close()


async def test_served_with_no_tasks_over_streamable_http(http_url_no_tasks: str) -> None:
    async with Client(http_url_no_tasks, mode="legacy") as client:
        assert client.server_capabilities.tasks is None
        (tool,) = (await client.list_tools()).tools
        inline = await raw(client, "tools/call", {"name": "program", "arguments": {"question": "yo", "times": 2},
                                                  "task": {"ttl": 60_000}})  # fmt: skip
        with pytest.raises(MCPError) as unknown:
            await raw(client, "tasks/get", {"taskId": "anything"})
    assert tool.execution is None
    assert inline["structuredContent"] == {"answer": "yo yo", "length": 5} and "task" not in inline
    assert unknown.value.code == types.METHOD_NOT_FOUND


@pytest.fixture(scope="module")
def http_url() -> Iterator[str]:
    server = subprocess.Popen(
        command("tests.mcp_served_program:program", "--http"),
        cwd=ROOT,
        env=environment(),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert server.stdout is not None
        line = server.stdout.readline()
        assert "serving program on http://127.0.0.1:" in line, line
        yield line.split(" on ", 1)[1].strip()
    finally:
        server.terminate()
        server.wait(timeout=30)
        if server.stdout is not None:
            server.stdout.close()


async def test_tasks_over_streamable_http(http_url: str) -> None:
    asked: list[dict[str, Any]] = []

    async def elicit(context: Any, params: Any) -> types.ElicitResult:
        asked.append(params.model_dump(by_alias=True, exclude_none=True))
        return types.ElicitResult(action="accept", content={})

    async with Client(http_url, mode="legacy", elicitation_callback=elicit) as client:
        assert client.server_capabilities.tasks is not None
        plain = await raw(client, "tools/call", {"name": "program", "arguments": {"question": "yo", "times": 2},
                                                 "task": {"ttl": 60_000}})  # fmt: skip
        plain_id = plain["task"]["taskId"]
        plain_result = await raw(client, "tasks/result", {"taskId": plain_id})
        approval = await raw(client, "tools/call", {"name": "program",
                                                    "arguments": {"question": "refund it", "times": 1},
                                                    "task": {"ttl": 60_000}})  # fmt: skip
        approval_id = approval["task"]["taskId"]
        await until_status(client, approval_id, "input_required")
        approved = await raw(client, "tasks/result", {"taskId": approval_id})  # asked on its stream
        listed = await raw(client, "tasks/list", {})
    async with Client(http_url, mode="legacy") as other:  # another connection: its id reads it
        again = await raw(other, "tasks/result", {"taskId": plain_id})
        theirs = await raw(other, "tasks/list", {})
    assert shape(plain["task"]) == wire("working")
    assert plain_result == again == answered(plain_id, "yo yo")
    assert asked == [{"_meta": {RELATED: {"taskId": approval_id}}, "mode": "form",
                      "message": 'Approve the call refund({"amount": 5})?',
                      "requestedSchema": {"type": "object", "properties": {}}}]  # fmt: skip
    assert approved == answered(approval_id, "refund it: refunded 5")
    assert [t["taskId"] for t in listed["tasks"]] == [plain_id, approval_id]
    assert theirs == {"tasks": []}


async def test_a_tasks_changes_and_progress_reach_the_client_over_streamable_http(http_url: str) -> None:
    """Sent on the connection's own channel: over streamable HTTP the client's GET stream (which the
    SDK's client opens after the handshake; what is sent before it is open has no stream to go to,
    so only what follows the approval, many round trips later, is asserted)."""
    told = Told()
    arguments = {"question": "refund it", "times": 1}
    async with Client(http_url, mode="legacy", elicitation_callback=accept, extensions=[told],
                      message_handler=told.message) as client:  # fmt: skip
        asked = {"name": "program", "arguments": arguments, "task": {}, "_meta": {"progressToken": "p-http"}}
        created = await raw(client, "tools/call", asked)
        task_id = created["task"]["taskId"]
        await until_status(client, task_id, "input_required")
        result = await raw(client, "tasks/result", {"taskId": task_id})
        await until_told(told)
        got = await raw(client, "tasks/get", {"taskId": task_id})
    assert result == answered(task_id, "refund it: refunded 5")
    assert told.statuses[-1] == got and shape(got) == wire("completed", ttl=DEFAULT_TTL_MS)
    resumed = ['Calling refund({"amount": 5})', "refund returned: refunded 5", "Request 1", "Turn ended: submit"]
    ending = [(t["status"], t.get("statusMessage")) for t in told.statuses[-6:]]
    assert ending == [("working", None), *(("working", line) for line in resumed), ("completed", None)]
    tasks_progress = [p for p in told.progress if p["progressToken"] == "p-http"]
    assert [p["message"] for p in tasks_progress[-4:]] == resumed
    assert [p["progress"] for p in tasks_progress] == list(range(1, len(tasks_progress) + 1))
