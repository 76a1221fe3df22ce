"""MCP tasks (2025-11-25, experimental): a tool call the server runs as a task, polled with
``tasks/get``, read with ``tasks/result``, cancelled with ``tasks/cancel``.

The server (``tests/mcp_task_server.py``) is an in-process low-level server talking JSON-RPC over
memory streams (``mcp.memory(..., mode="legacy")``: a 2025-11-25 session, where tasks live). What it
received is asserted whole. Every turn runs through both drivers (the ``run`` fixture).
"""

from __future__ import annotations

from typing import Any

import dspy
import mcp_types as types
import pytest
from mcp_task_server import TaskServer
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from test_genai_spans import spans  # noqa: F401 (the in-memory exporter fixture, written once)

import dspy_imp
from dspy_imp import mcp
from dspy_imp._records.errors import ConfigurationError
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
