"""MCP tasks (2025-11-25, experimental): a tool call the server runs as a task, polled with
``tasks/get``, read with ``tasks/result``, cancelled with ``tasks/cancel``.

The server (``tests/mcp_task_server.py``) is an in-process low-level server talking JSON-RPC over
memory streams (``mcp.memory(..., mode="legacy")``: a 2025-11-25 session, where tasks live). What it
received is asserted whole. Every turn runs through both drivers (the ``run`` fixture).
"""

from __future__ import annotations

import asyncio
import re
from typing import Any
from unittest.mock import ANY

import dspy
import mcp_types as types
import pytest
from mcp_task_server import TaskServer
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from streaming_helpers import statuses, stream_items
from test_genai_spans import spans  # noqa: F401 (the in-memory exporter fixture, written once)

import dspy_imp
from dspy_imp import mcp
from dspy_imp._records.errors import ConfigurationError
from dspy_imp.mcp import _notices, _tasks
from dspy_imp.mcp._tasks import MAX_POLL_SECONDS, MIN_POLL_SECONDS, TASK_TTL_MS, poll_seconds
from dspy_imp.testing import ScriptedLM, call, reply

TASK = {"ttl": TASK_TTL_MS}


def answer(text: str) -> Any:
    return reply(f"[[ ## answer ## ]]\n{text}\n\n[[ ## completed ## ]]")


def calling(name: str, args: dict[str, Any]) -> ScriptedLM:
    return ScriptedLM([reply("calling", calls=[call(name, args, id="c1")]), answer("done")])


def tool_messages(lm: ScriptedLM) -> list[dict[str, Any]]:
    return [m for m in lm.requests[1].messages if m["role"] == "tool"]


def results(pred: Any) -> list[dict[str, Any]]:
    (entry,) = [e for e in pred.metadata.history.messages if e.get("tool_call_results")]
    return [{k: r[k] for k in ("id", "result", "error")} for r in entry["tool_call_results"]]


def turn(run: Any, served: TaskServer, name: str, args: dict[str, Any], **options: Any) -> tuple[ScriptedLM, Any]:
    server = mcp.memory(served.server, mode="legacy", **{k: v for k, v in options.items() if k != "tool_timeouts"})
    timeouts = {"tool_timeouts": options["tool_timeouts"]} if "tool_timeouts" in options else {}
    agent = dspy_imp.ReActV2("question -> answer", tools=[server], **timeouts)
    lm = calling(name, args)
    try:
        with dspy.context(lm=lm):
            pred = run(agent, question="q")
    finally:
        server.close()
    return lm, pred


def test_a_required_task_tool_is_called_as_a_task_polled_and_its_result_read(run: Any) -> None:
    served = TaskServer()
    lm, pred = turn(run, served, "crunch", {"n": 3})
    assert tool_messages(lm) == [{"role": "tool", "tool_call_id": "c1", "content": "crunched 3"}]
    assert results(pred) == [{"id": "c1", "result": "crunched 3", "error": False}]
    assert served.requests() == [
        ("tools/call", {"name": "crunch", "arguments": {"n": 3}, "task": TASK}),
        ("tasks/get", {"taskId": "task-1"}),  # working
        ("tasks/get", {"taskId": "task-1"}),  # completed
        ("tasks/result", {"taskId": "task-1"}),
    ]


def test_a_failed_task_is_an_error_observation_with_the_servers_result(run: Any) -> None:
    served = TaskServer()
    lm, pred = turn(run, served, "flaky", {"n": 1})
    (message,) = tool_messages(lm)
    assert "disk full" in message["content"]
    assert results(pred)[0]["error"] is True
    assert served.requests() == [
        ("tools/call", {"name": "flaky", "arguments": {"n": 1}, "task": TASK}),
        ("tasks/get", {"taskId": "task-1"}),  # failed
        ("tasks/result", {"taskId": "task-1"}),  # its isError result
    ]


@pytest.mark.parametrize(("n", "value", "error"), [(5, {"total": 5}, False), (-1, None, True)])
def test_a_tasks_structured_result_is_checked_against_the_output_schema(
    run: Any, n: int, value: Any, error: bool
) -> None:
    served = TaskServer()
    lm, pred = turn(run, served, "shaped", {"n": n})
    (result,) = results(pred)
    assert result["error"] is error
    if error:
        assert "Invalid structured content" in tool_messages(lm)[0]["content"]
    else:
        assert result["result"] == value
    assert served.requests() == [
        ("tools/call", {"name": "shaped", "arguments": {"n": n}, "task": TASK}),
        ("tasks/get", {"taskId": "task-1"}),
        ("tasks/result", {"taskId": "task-1"}),
    ]


def test_a_call_cut_short_by_its_time_bound_cancels_the_task_on_the_server(run: Any) -> None:
    served = TaskServer()
    _, pred = turn(run, served, "forever", {"n": 1}, tool_timeouts=0.3)  # a bound, not an assertion
    assert results(pred)[0]["error"] is True
    assert served.cancelled.wait(30)  # the server's event: tasks/cancel reached it
    received = served.requests()
    assert received[0] == ("tools/call", {"name": "forever", "arguments": {"n": 1}, "task": TASK})
    assert received[-1] == ("tasks/cancel", {"taskId": "task-1"})
    assert {method for method, _ in received[1:-1]} <= {"tasks/get"}  # polled while it worked
    assert all(params == {"taskId": "task-1"} for _, params in received[1:])


def test_a_call_cut_short_by_the_deadline_cancels_the_task_on_the_server(run: Any) -> None:
    served = TaskServer()
    server = mcp.memory(served.server, mode="legacy")
    agent = dspy_imp.ReActV2("question -> answer", tools=[server])
    try:
        with dspy.context(lm=calling("forever", {"n": 1})), dspy_imp.deadline(seconds=2):  # a bound
            pred = run(agent, question="q")
    finally:
        server.close()
    assert pred.metadata.termination_reason != "answered"
    assert served.cancelled.wait(30)
    received = served.requests()
    assert received[0] == ("tools/call", {"name": "forever", "arguments": {"n": 1}, "task": TASK})
    assert received[-1] == ("tasks/cancel", {"taskId": "task-1"})


@pytest.mark.parametrize(
    ("tasks", "sent", "text"),
    [
        ("auto", {"name": "maybe", "arguments": {"n": 2}}, "plain"),
        ("never", {"name": "maybe", "arguments": {"n": 2}}, "plain"),
        ("always", {"name": "maybe", "arguments": {"n": 2}, "task": TASK}, "as a task"),
    ],
)
def test_an_optional_task_tool_is_a_task_only_under_always(run: Any, tasks: str, sent: Any, text: str) -> None:
    served = TaskServer()
    lm, _ = turn(run, served, "maybe", {"n": 2}, tasks=tasks)
    assert tool_messages(lm) == [{"role": "tool", "tool_call_id": "c1", "content": text}]
    expected = [("tools/call", sent)]
    if "task" in sent:
        expected += [("tasks/get", {"taskId": "task-1"}), ("tasks/result", {"taskId": "task-1"})]
    assert served.requests() == expected


@pytest.mark.parametrize(("capability", "tasks"), [(False, "auto"), (True, "never")])
def test_no_task_without_the_servers_capability_or_under_never(run: Any, capability: bool, tasks: str) -> None:
    served = TaskServer(tasks_capability=capability)
    lm, pred = turn(run, served, "crunch", {"n": 3}, tasks=tasks)
    assert served.requests() == [("tools/call", {"name": "crunch", "arguments": {"n": 3}})]  # plain: refused
    assert "runs only as a task" in tool_messages(lm)[0]["content"]
    assert results(pred)[0]["error"] is True


def test_a_task_needing_input_is_answered_by_the_elicit_callback(run: Any) -> None:
    asked: list[tuple[str, dict[str, Any]]] = []

    def elicit(message: str, schema: dict[str, Any]) -> dict[str, Any]:
        asked.append((message, schema))
        return {"colour": "red"}

    served = TaskServer()
    lm, _ = turn(run, served, "ask", {"n": 1}, elicit=elicit)
    assert tool_messages(lm) == [{"role": "tool", "tool_call_id": "c1", "content": "painted red"}]
    assert asked == [("Which colour?", {"type": "object", "properties": {"colour": {"type": "string"}}})]
    assert served.requests() == [
        ("tools/call", {"name": "ask", "arguments": {"n": 1}, "task": TASK}),
        ("tasks/get", {"taskId": "task-1"}),  # input_required
        ("tasks/result", {"taskId": "task-1"}),  # the question came during it
    ]


def test_under_elicit_pause_a_tasks_question_pauses_the_turn_and_the_answer_finishes_it(run: Any) -> None:
    served = TaskServer()
    server = mcp.memory(served.server, mode="legacy", elicit="pause")
    agent = dspy_imp.ReActV2("question -> answer", tools=[server])
    with dspy.context(lm=ScriptedLM([reply("calling", calls=[call("ask", {"n": 1}, id="c1")])])):
        pred = run(agent, question="q")
    assert pred.metadata.termination_reason == "paused"
    ((pending,),) = [pred.metadata.pending_calls]
    assert (pending["kind"], pending["message"]) == ("elicitation", "Which colour?")
    assert served.cancelled.wait(30)  # the paused call's task is cancelled on the server
    lm = ScriptedLM([answer("done")])
    with dspy.context(lm=lm):
        run(agent, history=pred.metadata.history, approvals={"c1": {"colour": "blue"}})
    assert [m for m in lm.requests[0].messages if m["role"] == "tool"] == [
        {"role": "tool", "tool_call_id": "c1", "content": "painted blue"}
    ]
    first = [
        ("tools/call", {"name": "ask", "arguments": {"n": 1}, "task": TASK}),
        ("tasks/get", {"taskId": "task-1"}),
        ("tasks/result", {"taskId": "task-1"}),
        ("tasks/cancel", {"taskId": "task-1"}),
    ]
    again = [
        ("tools/call", {"name": "ask", "arguments": {"n": 1}, "task": TASK}),  # the call made again, a new task
        ("tasks/get", {"taskId": "task-2"}),
        ("tasks/result", {"taskId": "task-2"}),  # its question answered with the saved answer
    ]
    assert served.requests() == first + again
    server.close()


def test_the_task_id_is_on_the_execute_tool_span(run: Any, spans: InMemorySpanExporter) -> None:  # noqa: F811
    served = TaskServer()
    turn(run, served, "crunch", {"n": 3})
    (span,) = [s for s in spans.get_finished_spans() if s.name == "execute_tool crunch"]
    attributes = dict(span.attributes or {})
    assert attributes["dspy_imp.mcp.task.id"] == "task-1"
    assert attributes["dspy_imp.mcp.tool"] == "crunch"
    assert attributes["mcp.protocol.version"] == "2025-11-25"


def test_the_poll_interval_is_kept_within_bounds() -> None:
    def task(interval: int | None) -> types.Task:
        return types.Task(task_id="t", status="working", created_at="x", last_updated_at="x", ttl=None,
                          poll_interval=interval)  # fmt: skip

    assert poll_seconds(task(1)) == MIN_POLL_SECONDS
    assert poll_seconds(task(1_000)) == 1.0
    assert poll_seconds(task(3_600_000)) == MAX_POLL_SECONDS
    assert poll_seconds(task(None)) == 0.5


@pytest.mark.parametrize("maker", [lambda **k: mcp.memory(TaskServer().server, **k), lambda **k: mcp.stdio("x", **k)])
def test_a_bad_tasks_option_names_it(maker: Any) -> None:
    with pytest.raises(ConfigurationError, match=r"`tasks` must be 'auto', 'always' or 'never', got 'sometimes'"):
        maker(tasks="sometimes")


# -- notifications/tasks/status ---------------------------------------------------------------------


@pytest.fixture
def no_poll(monkeypatch: pytest.MonkeyPatch) -> None:
    """The client's longest poll an hour, as ``watched`` suggests: only a status notification can
    end the wait (the call's time bound would end it first, failing the test)."""
    monkeypatch.setattr(_tasks, "MAX_POLL_SECONDS", 3_600.0)


@pytest.mark.parametrize("first", [False, True], ids=["after-the-answer", "before-the-answer"])
def test_a_status_notification_ends_the_wait_and_the_result_is_read(run: Any, no_poll: None, first: bool) -> None:
    served = TaskServer()
    args = {"n": 4, "first": first}
    lm, _ = turn(run, served, "watched", args, tool_timeouts=120)  # a bound, not an assertion
    assert tool_messages(lm) == [{"role": "tool", "tool_call_id": "c1", "content": "watched 4"}]
    assert served.requests() == [
        ("tools/call", {"name": "watched", "arguments": args, "task": TASK}),
        ("tasks/result", {"taskId": "task-1"}),  # no tasks/get: the notification ended the wait
    ]


@pytest.mark.parametrize(
    ("end", "text", "read"),
    [
        ("failed", "watched 1", True),  # the failed task's isError result, read with tasks/result
        ("cancelled", "the server cancelled the task 'task-1': done", False),
    ],
)
def test_a_notified_failure_or_cancellation_ends_the_call_as_a_polled_one(
    run: Any, no_poll: None, end: str, text: str, read: bool
) -> None:
    served = TaskServer()
    args = {"n": 1, "end": end}
    lm, pred = turn(run, served, "watched", args, tool_timeouts=120)
    assert text in tool_messages(lm)[0]["content"]
    assert results(pred)[0]["error"] is True
    expected = [("tools/call", {"name": "watched", "arguments": args, "task": TASK})]
    assert served.requests() == expected + ([("tasks/result", {"taskId": "task-1"})] if read else [])


def test_a_notified_change_of_a_working_task_is_a_status_line_of_the_call(how: str, no_poll: None) -> None:
    served = TaskServer()
    server = mcp.memory(served.server, mode="legacy")
    agent = dspy_imp.ReActV2("question -> answer", tools=[server], tool_timeouts=120)
    with dspy.context(lm=calling("watched", {"n": 2, "updates": 3})):
        lines = statuses(stream_items(agent, how, [], question="q"))
    server.close()
    start = next(i for i, line in enumerate(lines) if line.startswith("Calling watched"))
    assert lines[start + 1 : start + 5] == [
        "watched: [info] dspy_imp: task working: step 0",
        "watched: [info] dspy_imp: task working: step 1",
        "watched: [info] dspy_imp: task working: step 2",
        "watched returned: watched 2",  # its end is not a line of its own: the result is
    ]


@pytest.mark.parametrize(
    ("log_level", "shown"), [(None, True), ("debug", True), ("info", True), ("notice", False), ("error", False)]
)
def test_a_tasks_status_lines_are_dropped_below_the_servers_log_level(
    how: str, no_poll: None, log_level: str | None, shown: bool
) -> None:
    """A task's status lines are the call's log lines at ``info``: ``log_level=`` filters them as it
    filters the server's own log messages."""
    served = TaskServer()
    server = mcp.memory(served.server, mode="legacy", log_level=log_level)
    agent = dspy_imp.ReActV2("question -> answer", tools=[server], tool_timeouts=120)
    with dspy.context(lm=calling("watched", {"n": 2, "updates": 2})):
        lines = statuses(stream_items(agent, how, [], question="q"))
    server.close()
    start = next(i for i, line in enumerate(lines) if line.startswith("Calling watched"))
    told = ["watched: [info] dspy_imp: task working: step 0", "watched: [info] dspy_imp: task working: step 1"]
    assert lines[start + 1 :][: 3 if shown else 1] == [*(told if shown else []), "watched returned: watched 2"]


def test_unknown_task_ids_and_a_flood_of_statuses_are_bounded(no_poll: None) -> None:
    served = TaskServer()
    server = mcp.memory(served.server, mode="legacy")
    agent = dspy_imp.ReActV2("question -> answer", tools=[server], tool_timeouts=120)
    args = {"n": 5, "updates": _notices.MAX_LOGS + 20, "ghosts": _tasks.MAX_EARLY + 8}
    with dspy.context(lm=calling("watched", args)):
        lines = statuses(stream_items(agent, "sync", [], question="q"))
    kept = server._session.client.task_statuses.kept  # type: ignore[union-attr, attr-defined]
    server.close()
    assert kept == _tasks.MAX_EARLY  # the ids no call waits on: the newest kept, no more
    streamed = {"progressToken": ANY}  # a streamed call asks for progress
    assert served.requests() == [
        ("tools/call", {"name": "watched", "arguments": args, "task": TASK, "_meta": streamed}),
        ("tasks/result", {"taskId": "task-1"}),
    ]
    start = next(i for i, line in enumerate(lines) if line.startswith("Calling watched"))
    end = lines.index("watched returned: watched 5")
    told = lines[start + 1 : end]
    steps = [int(line.rsplit(" ", 1)[1]) for line in told if line.startswith("watched: [info] dspy_imp: task working")]
    assert 0 < len(steps) <= _notices.MAX_LOGS and steps == sorted(set(steps))  # bounded, in order, once each
    assert not [line for line in told if "ghost" in line]
    if len(steps) == _notices.MAX_LOGS:  # past the call's bound of lines, counted
        assert told[-1].startswith("watched: [warning] dspy_imp: ") and told[-1].endswith(" left out")


def test_the_statuses_of_tasks_no_call_waits_on_are_let_go_oldest_first() -> None:
    statuses_ = _tasks.Statuses()

    def task(task_id: str, status: str) -> types.Task:
        return types.Task(task_id=task_id, status=status, created_at="x", last_updated_at="x", ttl=None)  # type: ignore[arg-type]

    for index in range(_tasks.MAX_EARLY + 1):
        statuses_.note(task(f"t{index}", "working"))
    statuses_.note(task("t1", "completed"))  # the newest status of an id kept
    assert statuses_.kept == _tasks.MAX_EARLY
    with statuses_.watching("t0") as gone, statuses_.watching("t1") as early:
        assert gone.take() == []  # let go: its call polls
        assert [t.status for t in early.take()] == ["completed"]
        for _ in range(_tasks.MAX_NOTIFIED + 5):
            statuses_.note(task("t1", "working"))
        statuses_.note(task("t1", "completed"))
        taken = early.take()
        assert len(taken) == _tasks.MAX_NOTIFIED and taken[-1].status == "completed"  # the end is kept
    assert statuses_.kept == _tasks.MAX_EARLY - 1  # t1 went to its call, t0 was let go before


# -- tasks/list -------------------------------------------------------------------------------------


def listed(how: str, server: mcp.Server) -> list[types.Task]:
    return server.list_tasks() if how == "sync" else asyncio.run(server.alist_tasks())


@pytest.mark.parametrize("how", ["sync", "async"])
def test_list_tasks_reads_every_page(how: str) -> None:
    served = TaskServer(page_size=1)
    for name in ("crunch", "flaky"):
        turn(lambda agent, **kwargs: agent(**kwargs), served, name, {"n": 1})
    served.received.clear()
    server = mcp.memory(served.server, mode="legacy")
    try:
        tasks = listed(how, server)
    finally:
        server.close()
    assert [(t.task_id, t.status, t.status_message) for t in tasks] == [
        ("task-1", "completed", None),
        ("task-2", "failed", "disk full"),
    ]
    assert served.requests() == [("tasks/list", {}), ("tasks/list", {"cursor": "1"})]


@pytest.mark.parametrize("how", ["sync", "async"])
@pytest.mark.parametrize(
    ("served", "mode", "why"),
    [
        (lambda: TaskServer(list_capability=False), "legacy", "its server does not declare the `tasks.list`"),
        (lambda: TaskServer(tasks_capability=False), "legacy", "its server does not declare the `tasks.list`"),
        (lambda: TaskServer(), "auto", "a 2026-07-28 session has no the `tasks.list`"),
    ],
)
def test_list_tasks_without_the_capability_names_it_and_sends_nothing(
    how: str, served: Any, mode: str, why: str
) -> None:
    task_server = served()
    server = mcp.memory(task_server.server, mode=mode)
    try:
        with pytest.raises(RuntimeError, match=rf"MCP server 'tasks' cannot list its tasks: {re.escape(why)}"):
            listed(how, server)
    finally:
        server.close()
    assert task_server.requests("tasks/list") == []
