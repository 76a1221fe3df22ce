"""Every tool call the model made fires DSPy's tool callbacks, sync and async.

A call that runs fires them from its own ``dspy.Tool``; a call decided without running a tool
(refused by the policy, unknown, malformed, rejected arguments, ``submit``, not run by a last
request) is reported through a stand-in ``dspy.Tool`` with the call's name and arguments,
which returns what ``submit`` accepted or raises ``ToolCallRejected`` carrying the observation
the model read (or why the call was not run); a ``finish_on`` hook's rejection of a result
follows the tool's own events as ``<name>.finish_on``.
So every callback-based tracer (MLflow, DSPy's status messages, your own) sees the same.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import dspy
from dspy.streaming import StatusMessage
from dspy.utils.callback import BaseCallback
from helpers import SubmitSig

import dspy_imp
from dspy_imp.testing import ScriptedLM, call, reply


class Recorder(BaseCallback):
    """Records tool and module events as plain tuples."""

    def __init__(self) -> None:
        self.events: list[tuple[Any, ...]] = []
        self.starts: dict[str, str] = {}

    def on_tool_start(self, call_id: str, instance: Any, inputs: dict[str, Any]) -> None:
        self.starts[call_id] = instance.name
        self.events.append(("start", instance.name, dict(inputs.get("kwargs", {}))))

    def on_tool_end(self, call_id: str, outputs: Any, exception: Exception | None = None) -> None:
        name = self.starts.pop(call_id)
        if exception is not None:
            self.events.append(("error", name, type(exception).__name__, str(exception)))
        else:
            self.events.append(("end", name, outputs))

    def on_module_start(self, call_id: str, instance: Any, inputs: dict[str, Any]) -> None:
        if isinstance(instance, dspy.Predict):
            self.events.append(("predict", sorted(inputs.get("kwargs", inputs))))

    def tools(self) -> list[tuple[Any, ...]]:
        return [e for e in self.events if e[0] != "predict"]


def lookup(topic: str) -> str:
    """Look a topic up."""
    return f"notes on {topic}"


def delete(topic: str) -> str:
    """Delete a topic."""
    raise AssertionError("refused by the policy, never runs")


def read_only(name: str, args: dict[str, Any]) -> bool | str:
    return "notes are read-only" if name == "delete" else True


def test_every_call_of_a_step_fires_start_and_end_in_call_order(run):
    lm = ScriptedLM(
        [
            reply(
                calls=[
                    call("lookup", {"topic": "keys"}, id="c1"),
                    call("delete", {"topic": "keys"}, id="c2"),
                    call("lookup", {"topic": 7}, id="c3"),
                    call("lookup", {}, id="c4"),
                    call("peek", {"at": "desk"}, id="c5"),
                    call("submit", {"answer": "mat", "confidence": "very"}, id="c7"),
                ]
            ),
            reply(calls=[call("submit", {"answer": "Under the mat.", "confidence": 0.9}, id="c8")]),
        ]
    )
    recorder = Recorder()
    agent = dspy_imp.ReActV2(SubmitSig, tools=[lookup, delete], tool_policy=read_only)
    with dspy.context(lm=lm, callbacks=[recorder]):
        pred = run(agent, intent="where is the key?")

    assert pred.metadata.termination_reason == "submit"
    rejected = "ToolCallRejected"
    assert recorder.tools() == [
        ("start", "lookup", {"topic": "keys"}),
        ("end", "lookup", "notes on keys"),
        ("start", "delete", {"topic": "keys"}),
        ("error", "delete", rejected, "Error: delete is not allowed: notes are read-only"),
        ("start", "lookup", {"topic": 7}),
        ("error", "lookup", rejected, "Error: invalid arguments: topic 7 is not of type 'string'"),
        ("start", "lookup", {}),
        ("error", "lookup", rejected, "Error: missing required arguments: topic"),
        ("start", "peek", {"at": "desk"}),
        ("error", "peek", rejected, "Error: there is no tool named peek."),
        ("start", "submit", {"answer": "mat", "confidence": "very"}),
        ("error", "submit", rejected, recorder.tools()[11][3]),
        ("start", "submit", {"answer": "Under the mat.", "confidence": 0.9}),
        ("end", "submit", {"answer": "Under the mat.", "confidence": 0.9}),
    ]
    assert recorder.tools()[11][3].startswith("Error: ") and "confidence" in recorder.tools()[11][3]


def test_a_call_that_names_no_tool_is_reported_with_what_the_model_wrote(run):
    def written(calls: list[dict[str, Any]]) -> str:
        return f"[[ ## next_thought ## ]]\nok\n\n[[ ## tool_calls ## ]]\n{json.dumps(calls)}\n\n[[ ## completed ## ]]"

    lm = ScriptedLM(
        [reply(written([{"command": "cat"}])), reply(written([{"name": "submit", "arguments": _ANSWER}]))],
        native=False,
    )
    recorder = Recorder()
    with dspy.context(lm=lm, callbacks=[recorder]):
        run(dspy_imp.ReActV2(SubmitSig, tools=[lookup]), intent="read")
    assert recorder.tools()[:2] == [
        ("start", "<malformed call>", {"received": {"command": "cat"}}),
        ("error", "<malformed call>", "ToolCallRejected", "Error: the tool call could not be read."),
    ]


def test_the_rejection_names_its_kind(run):
    lm = ScriptedLM(
        [reply(calls=[call("delete", {"topic": "keys"}, id="c1")]), reply(calls=[call("submit", _ANSWER, id="c2")])]
    )
    seen: list[Exception] = []

    class Keep(BaseCallback):
        def on_tool_end(self, call_id: str, outputs: Any, exception: Exception | None = None) -> None:
            if exception is not None:
                seen.append(exception)

    agent = dspy_imp.ReActV2(SubmitSig, tools=[lookup, delete], tool_policy=read_only)
    with dspy.context(lm=lm, callbacks=[Keep()]):
        run(agent, intent="where?")
    (error,) = seen
    assert isinstance(error, dspy_imp.ToolCallRejected)
    assert error.kind == "tool_denied"


_ANSWER = {"answer": "Under the mat.", "confidence": 0.9}


def test_a_renderer_s_text_is_the_observation(run):
    lm = ScriptedLM([reply(calls=[call("peek", {}, id="c1")]), reply(calls=[call("submit", _ANSWER, id="c2")])])
    recorder = Recorder()
    agent = dspy_imp.ReActV2(
        SubmitSig, tools=[lookup], tool_result_renderer=lambda c, r: f"[{c.name}] {'failed' if r.error else 'ok'}"
    )
    with dspy.context(lm=lm, callbacks=[recorder]):
        run(agent, intent="where?")
    assert recorder.tools()[1] == ("error", "peek", "ToolCallRejected", "[peek] failed")


def send(text: str) -> str:
    """Send the reply."""
    return "sent"


def test_a_finish_on_tool_fires_its_events(run):
    lm = ScriptedLM([reply(calls=[call("send", {"text": "hi"}, id="c1")])])
    recorder = Recorder()
    agent = dspy_imp.ReActV2(
        "message -> reply",
        tools=[send],
        finish="tools",
        finish_on={"send": lambda a, r, i: dspy_imp.Finish(reply="hi")},
    )
    with dspy.context(lm=lm, callbacks=[recorder]):
        pred = run(agent, message="hello")
    assert pred.metadata.termination_reason == "finished_by_tool"
    assert recorder.tools() == [("start", "send", {"text": "hi"}), ("end", "send", "sent")]


def test_a_call_of_the_forced_submit_that_was_not_run_is_reported_saying_why(run):
    lm = ScriptedLM(
        [
            reply("thinking"),
            reply("still thinking"),
            reply(calls=[call("lookup", {"topic": "x"}, id="c1"), call("submit", _ANSWER, id="c2")]),
        ]
    )
    recorder, kinds = Recorder(), Kinds()
    agent = dspy_imp.ReActV2(SubmitSig, tools=[lookup], finish="submit")
    with dspy.context(lm=lm, callbacks=[recorder, kinds]):
        pred = run(agent, intent="where?")
    assert pred.metadata.termination_reason == "forced_submit"
    assert pred.metadata.unexecuted_tool_calls == ({"id": "c1", "name": "lookup", "args": {"topic": "x"}},)
    assert recorder.tools() == [  # in call order; the model read nothing of lookup, nothing was recorded
        ("start", "lookup", {"topic": "x"}),
        ("error", "lookup", "ToolCallRejected", "lookup was not run: the forced submit request runs only submit."),
        ("start", "submit", _ANSWER),
        ("end", "submit", _ANSWER),
    ]
    assert kinds.seen == ["unexecuted"]
    assert [r["id"] for r in pred.metadata.history.messages[-1]["tool_call_results"]] == ["c2"]


def test_calls_of_the_last_text_request_that_were_not_run_are_reported_saying_why(run):
    def log(line: str) -> str:
        """Write a log line."""
        raise AssertionError("not in last_request_tools: must not run")

    lm = ScriptedLM(
        [
            reply(
                "bye",
                calls=[
                    call("send", {"text": "Paris"}, id="r1"),
                    call("log", {"line": "x"}, id="g1"),
                    call("peek", {}, id="g2"),
                ],
            )
        ]
    )
    recorder, kinds = Recorder(), Kinds()
    agent = dspy_imp.ReActV2("message -> reply", tools=[send, log], max_iters=0, last_request_tools=["send"])
    with dspy.context(lm=lm, callbacks=[recorder, kinds]):
        pred = run(agent, message="hello")
    assert pred.metadata.termination_reason == "last_text"
    assert [c["id"] for c in pred.metadata.unexecuted_tool_calls] == ["g1", "g2"]
    why = "was not run: the last-text request runs only last_request_tools (send)."
    assert recorder.tools() == [
        ("start", "send", {"text": "Paris"}),
        ("end", "send", "sent"),
        ("start", "log", {"line": "x"}),
        ("error", "log", "ToolCallRejected", f"log {why}"),
        ("start", "peek", {}),
        ("error", "peek", "ToolCallRejected", f"peek {why}"),
    ]
    assert kinds.seen == ["unexecuted", "unexecuted"]


class Kinds(BaseCallback):
    """The kinds of the ``ToolCallRejected`` errors tools ended with."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    def on_tool_end(self, call_id: str, outputs: Any, exception: Exception | None = None) -> None:
        if isinstance(exception, dspy_imp.ToolCallRejected):
            self.seen.append(exception.kind)


def test_a_finish_on_hook_that_rejects_the_result_is_reported_after_the_tool_s_own_events(run):
    def exploding(args: dict[str, Any], result: Any, inputs: dict[str, Any]) -> None:
        raise RuntimeError("hook exploded")

    lm = ScriptedLM(
        [
            reply(calls=[call("send", {"text": "hi"}, id="c1")]),
            reply(calls=[call("send", {"text": "ho"}, id="c2")]),
            reply("Done."),
        ]
    )
    hooks = iter([exploding, lambda a, r, i: dspy_imp.Finish()])  # then: outputs the task rejects
    recorder, kinds = Recorder(), Kinds()
    agent = dspy_imp.ReActV2("message -> reply", tools=[send], finish_on={"send": lambda *a: next(hooks)(*a)})
    with dspy.context(lm=lm, callbacks=[recorder, kinds]):
        pred = run(agent, message="hello")
    assert pred.metadata.termination_reason == "answered"
    observations = [r["result"] for m in pred.metadata.history.messages[:2] for r in m["tool_call_results"]]
    assert observations[0] == "send failed: hook exploded"
    events = recorder.tools()
    assert events[:4] == [
        ("start", "send", {"text": "hi"}),
        ("end", "send", "sent"),  # the tool itself ran fine
        ("start", "send.finish_on", {"text": "hi"}),
        ("error", "send.finish_on", "ToolCallRejected", "Error: send failed: hook exploded"),
    ]
    assert events[4:] == [
        ("start", "send", {"text": "ho"}),
        ("end", "send", "sent"),
        ("start", "send.finish_on", {"text": "ho"}),
        ("error", "send.finish_on", "ToolCallRejected", f"Error: {observations[1]}"),
    ]
    assert kinds.seen == ["tool_error", "missing_output_fields"]


def test_the_step_predictor_gets_no_lm_or_config_among_its_inputs(run):
    lm = ScriptedLM([reply(calls=[call("submit", _ANSWER, id="c1")])], num_retries=2)
    recorder = Recorder()
    seen_lms: list[Any] = []

    class LMs(BaseCallback):
        def on_lm_start(self, call_id: str, instance: Any, inputs: dict[str, Any]) -> None:
            seen_lms.append(
                (instance.num_retries, inputs["kwargs"].get("tool_choice"), inputs["kwargs"]["temperature"])
            )

    agent = dspy_imp.ReActV2(SubmitSig, tools=[lookup], config={"temperature": 0.2})
    with dspy.context(lm=lm, callbacks=[recorder, LMs()]), dspy_imp.deadline(seconds=600):
        run(agent, intent="where?")
    assert [e for e in recorder.events if e[0] == "predict"] == [("predict", ["history", "intent", "tools"])]
    assert seen_lms == [(0, "auto", 0.2)]  # under a deadline: an LM without DSPy retries; the request's options
    assert lm.requests[0].options["temperature"] == 0.2


def test_dspys_status_messages_of_a_streamed_turn_name_every_call():
    lm = ScriptedLM(
        [
            reply(calls=[call("lookup", {"topic": "keys"}, id="c1"), call("delete", {"topic": "keys"}, id="c2")]),
            reply(calls=[call("submit", _ANSWER, id="c3")]),
        ]
    )
    agent = dspy_imp.ReActV2(SubmitSig, tools=[lookup, delete], tool_policy=read_only)
    streamed = dspy.streamify(agent)

    async def statuses() -> list[str]:
        return [item.message async for item in streamed(intent="where?") if isinstance(item, StatusMessage)]

    with dspy.context(lm=lm):
        messages = asyncio.run(statuses())
    assert [m for m in messages if m.startswith("Calling tool")] == [
        "Calling tool lookup...",
        "Calling tool delete...",
        "Calling tool submit...",
    ]


def test_results_a_host_supplied_are_reported_when_the_turn_resumes(run):
    def render_chart(kind: str) -> str:
        """Render a chart in the user's browser."""
        raise AssertionError("runs in the browser")

    lm = ScriptedLM(
        [
            reply(
                calls=[call("render_chart", {"kind": "bar"}, id="c1"), call("render_chart", {"kind": "pie"}, id="c2")]
            ),
            reply("Here are your charts."),
        ]
    )
    recorder = Recorder()
    agent = dspy_imp.ReActV2("request -> reply", tools=[render_chart], external_tools=["render_chart"])
    with dspy.context(lm=lm, callbacks=[recorder]):
        paused = run(agent, request="Chart my sales.")
        assert recorder.tools() == []  # a paused step runs nothing
        results = {"c1": {"shown": "bar.png"}, "c2": RuntimeError("the tab was closed")}
        run(agent, history=paused.metadata.history, results=results)
    assert recorder.tools() == [
        ("start", "render_chart", {"kind": "bar"}),
        ("end", "render_chart", {"shown": "bar.png"}),
        ("start", "render_chart", {"kind": "pie"}),
        ("error", "render_chart", "ToolCallRejected", "Error: render_chart failed: the tab was closed"),
    ]


def test_parallel_tools_fire_their_events_and_decided_calls_follow_in_call_order(run):
    lm = ScriptedLM(
        [
            reply(
                calls=[
                    call("lookup", {"topic": "a"}, id="c1"),
                    call("delete", {"topic": "a"}, id="c2"),
                    call("lookup", {"topic": "b"}, id="c3"),
                ]
            ),
            reply(calls=[call("submit", _ANSWER, id="c4")]),
        ]
    )
    recorder = Recorder()
    agent = dspy_imp.ReActV2(SubmitSig, tools=[lookup, delete], tool_policy=read_only, parallel_tools=True)
    with dspy.context(lm=lm, callbacks=[recorder]):
        run(agent, intent="where?")
    events = recorder.tools()
    ran = sorted(e[2]["topic"] for e in events if e[:2] == ("start", "lookup"))
    assert ran == ["a", "b"]
    assert events[4:] == [
        ("start", "delete", {"topic": "a"}),
        ("error", "delete", "ToolCallRejected", "Error: delete is not allowed: notes are read-only"),
        ("start", "submit", _ANSWER),
        ("end", "submit", _ANSWER),
    ]
