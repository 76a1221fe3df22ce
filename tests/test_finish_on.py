"""Reference §12 L and §11: ``finish_on`` hooks end a turn through a tool.

A hook runs after its tool's call executed successfully, with the string-keyed arguments,
the tool's result and the call's inputs; ``dspy_imp.Finish(**outputs)`` ends the turn with
those outputs (validated like ``submit``), anything else lets the loop go on.
"""

from __future__ import annotations

from typing import Any

import dspy
import pytest
from helpers import SubmitSig, assistant, inputs, tool

import dspy_imp
from dspy_imp.testing import ScriptedLM, call, reply


class QA(dspy.Signature):
    """Answer the question."""

    question: str = dspy.InputField()
    answer: str = dspy.OutputField()


class Outbox:
    """The reference ``reply`` tool: returns "sent: TEXT" and keeps what it sent."""

    def __init__(self) -> None:
        self.sent: list[str] = []
        self.__name__ = "reply"
        self.__doc__ = "Reply to the person."

    def __call__(self, text: str) -> str:
        self.sent.append(text)
        return f"sent: {text}"


class Hook:
    """A recording hook that answers with ``verdict(args, result, inputs)``."""

    def __init__(self, verdict: Any) -> None:
        self.verdict = verdict
        self.calls: list[tuple[Any, Any, Any]] = []

    def __call__(self, args: Any, result: Any, inputs: Any) -> Any:
        self.calls.append((args, result, inputs))
        return self.verdict(args, result, inputs)


def finish_with_text(args: dict[str, Any], result: Any, inputs: dict[str, Any]) -> dspy_imp.Finish:
    return dspy_imp.Finish(answer=args["text"])


def without_times(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    for result in results:
        assert isinstance(result.pop("returned_at"), str)
    return results


# -- L1 -----------------------------------------------------------------------------------------


def test_l1_a_finishing_hook_ends_the_run_and_records_the_call(run):
    outbox, hook = Outbox(), Hook(finish_with_text)
    lm = ScriptedLM([reply("answering", calls=[call("reply", {"text": "Paris"}, id="r1")])])
    agent = dspy_imp.ReActV2(QA, tools=[outbox], finish_on={"reply": hook})
    with dspy.context(lm=lm):
        pred = run(agent, question="Capital of France?")

    assert len(lm.requests) == 1
    assert (lm.requests[0].tool_names, lm.requests[0].tool_choice) == (["reply"], "auto")
    assert pred.answer == "Paris" and list(pred.keys()) == ["answer"]
    meta = pred.metadata
    assert (meta.termination_reason, meta.termination_cause, meta.finished_by_tool) == (
        "finished_by_tool",
        None,
        "reply",
    )
    assert (meta.complete, meta.finish_reason, meta.unexecuted_tool_calls) == (True, None, ())
    assert outbox.sent == ["Paris"]
    [entry] = meta.history.messages
    entry = dict(entry)
    entry["tool_call_results"] = without_times([dict(r) for r in entry["tool_call_results"]])
    assert entry == {  # the hook's outputs are not written into the entry
        "question": "Capital of France?",
        "next_thought": "answering",
        "tool_calls": [{"id": "r1", "name": "reply", "args": {"text": "Paris"}}],
        "tool_call_results": [{"id": "r1", "name": "reply", "result": "sent: Paris", "error": False}],
    }
    lm.assert_complete()


# -- L2 -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("verdict", [None, "finish", True, {"answer": "Paris"}], ids=repr)
def test_l2_anything_but_finish_lets_the_loop_go_on(run, verdict):
    outbox, hook = Outbox(), Hook(lambda a, r, i: verdict)
    lm = ScriptedLM([reply(calls=[call("reply", {"text": "Paris"}, id="r1")]), reply("Paris")])
    agent = dspy_imp.ReActV2(QA, tools=[outbox], finish_on={"reply": hook})
    with dspy.context(lm=lm):
        pred = run(agent, question="Capital of France?")

    assert len(hook.calls) == 1
    assert pred.answer == "Paris"
    assert (pred.metadata.termination_reason, pred.metadata.finished_by_tool) == ("answered", None)
    assert lm.requests[1].messages[-1] == tool("r1", "sent: Paris")
    first, _ = pred.metadata.history.messages
    assert [(r["result"], r["error"]) for r in first["tool_call_results"]] == [("sent: Paris", False)]
    lm.assert_complete()


# -- L3 -----------------------------------------------------------------------------------------


def test_l3_invalid_outputs_become_the_calls_error_result(run):
    outbox = Outbox()
    hook = Hook(lambda a, r, i: dspy_imp.Finish())
    lm = ScriptedLM([reply(calls=[call("reply", {"text": "Paris"}, id="r1")]), reply("Paris")])
    agent = dspy_imp.ReActV2(QA, tools=[outbox], finish_on={"reply": hook})
    with dspy.context(lm=lm):
        pred = run(agent, question="Capital of France?")

    assert outbox.sent == ["Paris"]  # the tool ran; only its ending was refused
    assert (pred.metadata.termination_reason, pred.answer) == ("answered", "Paris")
    first, _ = pred.metadata.history.messages
    assert without_times([dict(r) for r in first["tool_call_results"]]) == [
        {
            "id": "r1",
            "name": "reply",
            "result": "submit is missing: answer",
            "error": True,
            "error_kind": "missing_output_fields",
        }
    ]
    assert lm.requests[1].messages[-1] == tool("r1", "Error: submit is missing: answer")
    lm.assert_complete()


def test_l3_outputs_are_coerced_and_checked_like_submit(run):
    def decide(choice: str, confidence: str) -> str:
        """Decide."""
        return choice

    def verdict(args: dict[str, Any], result: Any, inputs: dict[str, Any]) -> dspy_imp.Finish:
        return dspy_imp.Finish(answer=result, confidence=args["confidence"])

    lm = ScriptedLM(
        [
            reply(calls=[call("decide", {"choice": "A", "confidence": "very"}, id="d1")]),
            reply(calls=[call("decide", {"choice": "B", "confidence": "0.75"}, id="d2")]),
        ]
    )
    agent = dspy_imp.ReActV2(SubmitSig, tools=[decide], finish_on={"decide": verdict})
    with dspy.context(lm=lm):
        pred = run(agent, intent="pick")

    assert (pred.answer, pred.confidence) == ("B", 0.75)
    assert (pred.metadata.termination_reason, pred.metadata.finished_by_tool) == ("finished_by_tool", "decide")
    [refused] = pred.metadata.history.messages[0]["tool_call_results"]
    assert (refused["error"], refused["error_kind"]) == (True, "invalid_submit_outputs")
    assert refused["result"].startswith("submit outputs were not accepted: `confidence`")
    assert "confidence" not in pred.metadata.history.messages[1]
    lm.assert_complete()


# -- L4 -----------------------------------------------------------------------------------------


def test_l4_the_hook_receives_string_keyed_args_the_result_and_the_calls_inputs(run):
    def post(channel: str, body: str) -> dict[str, Any]:
        """Post a message."""
        return {"status": "posted", "channel": channel}

    hook = Hook(lambda a, r, i: dspy_imp.Finish(answer=a["body"]))
    lm = ScriptedLM(
        [
            reply(calls=[call("post", {"channel": "general", "body": "Paris"}, id="p1")]),
            reply(calls=[call("post", {"channel": "general", "body": "Lyon"}, id="p2")]),
        ]
    )
    agent = dspy_imp.ReActV2(QA, tools=[post], finish_on={"post": hook})
    with dspy.context(lm=lm):
        first = run(agent, question="Capital of France?")
        resumed = run(agent, history=first.metadata.history)

    assert hook.calls[0] == (
        {"channel": "general", "body": "Paris"},
        {"status": "posted", "channel": "general"},  # what the tool returned, not its rendering
        {"question": "Capital of France?"},
    )
    assert all(isinstance(k, str) for k in hook.calls[0][0])
    assert hook.calls[1][2] == {}  # a pure resume carries no inputs
    assert (first.answer, resumed.answer) == ("Paris", "Lyon")
    assert lm.requests[1].messages[1:] == [
        inputs(question="Capital of France?"),
        assistant("", [("p1", "post", '{"channel":"general","body":"Paris"}')]),
        tool("p1", '{"status": "posted", "channel": "general"}'),
    ]


def test_l4_construction_refuses_a_hook_for_no_tool_or_for_submit():
    with pytest.raises(dspy_imp.ConfigurationError, match="finish_on` names no tool: 'nope'"):
        dspy_imp.ReActV2(QA, tools=[Outbox()], finish_on={"nope": finish_with_text})
    with pytest.raises(dspy_imp.ConfigurationError, match="submit already ends the turn"):
        dspy_imp.ReActV2(SubmitSig, tools=[Outbox()], finish_on={"submit": finish_with_text})


def test_a_hook_is_not_consulted_when_its_call_did_not_run_successfully(run):
    hook = Hook(finish_with_text)

    def reply_tool(text: str) -> str:
        """Reply to the person."""
        if text == "boom":
            raise RuntimeError("mail server down")
        return f"sent: {text}"

    reply_tool.__name__ = "reply"
    lm = ScriptedLM(
        [
            reply(
                calls=[
                    call("reply", {"text": "boom"}, id="r1"),  # raises
                    call("reply", {}, id="r2"),  # missing argument
                    call("reply", {"text": "secret"}, id="r3"),  # refused by the policy
                ]
            ),
            reply("gave up"),
        ]
    )
    policy = lambda name, args: args.get("text") != "secret"  # noqa: E731
    agent = dspy_imp.ReActV2(QA, tools=[reply_tool], finish_on={"reply": hook}, tool_policy=policy)
    with dspy.context(lm=lm):
        pred = run(agent, question="q")

    assert hook.calls == []
    assert (pred.metadata.termination_reason, pred.answer) == ("answered", "gave up")
    kinds = [r["error_kind"] for r in pred.metadata.history.messages[0]["tool_call_results"]]
    assert kinds == ["tool_error", "missing_required", "tool_denied"]


# -- L5 -----------------------------------------------------------------------------------------


def ending_tools() -> tuple[Any, Any, list[str]]:
    ran: list[str] = []

    def a(text: str) -> str:
        """Send through a."""
        ran.append("a")
        return f"a: {text}"

    def b(text: str) -> str:
        """Send through b."""
        ran.append("b")
        return f"b: {text}"

    return a, b, ran


def test_l5_the_first_finishing_call_wins_and_later_calls_still_run(run):
    a, b, ran = ending_tools()
    hook_a, hook_b = Hook(finish_with_text), Hook(finish_with_text)
    lm = ScriptedLM([reply(calls=[call("a", {"text": "from a"}, id="a1"), call("b", {"text": "from b"}, id="b1")])])
    agent = dspy_imp.ReActV2(QA, tools=[a, b], finish_on={"a": hook_a, "b": hook_b})
    with dspy.context(lm=lm):
        pred = run(agent, question="q")

    assert ran == ["a", "b"] and len(hook_b.calls) == 1
    assert pred.answer == "from a"
    assert (pred.metadata.termination_reason, pred.metadata.finished_by_tool) == ("finished_by_tool", "a")
    [entry] = pred.metadata.history.messages
    assert without_times([dict(r) for r in entry["tool_call_results"]]) == [
        {"id": "a1", "name": "a", "result": "a: from a", "error": False},
        {"id": "b1", "name": "b", "result": "b: from b", "error": False},  # a later finish stays a success
    ]
    assert "answer" not in entry
    lm.assert_complete()


def test_l5_a_failed_earlier_finish_lets_a_later_call_finish(run):
    a, b, _ = ending_tools()
    lm = ScriptedLM([reply(calls=[call("a", {"text": "x"}, id="a1"), call("b", {"text": "from b"}, id="b1")])])
    hooks = {"a": lambda *_: dspy_imp.Finish(), "b": finish_with_text}
    agent = dspy_imp.ReActV2(QA, tools=[a, b], finish_on=hooks)
    with dspy.context(lm=lm):
        pred = run(agent, question="q")

    assert (pred.answer, pred.metadata.finished_by_tool) == ("from b", "b")
    first, second = pred.metadata.history.messages[0]["tool_call_results"]
    assert (first["error"], first["result"], second["error"]) == (True, "submit is missing: answer", False)


@pytest.mark.parametrize("submit_first", [True, False], ids=["submit-first", "submit-last"])
def test_l5_a_valid_submit_in_the_same_step_wins_over_finish_on(run, submit_first):
    a, b, ran = ending_tools()
    hooks = {"a": lambda args, *_: dspy_imp.Finish(answer=args["text"], confidence=0.1), "b": finish_with_text}
    submit = call("submit", {"answer": "submitted", "confidence": 0.9}, id="s1")
    calls = [call("a", {"text": "from a"}, id="a1"), call("b", {"text": "from b"}, id="b1")]
    calls = [submit, *calls] if submit_first else [*calls, submit]
    lm = ScriptedLM([reply(calls=calls)])
    agent = dspy_imp.ReActV2(SubmitSig, tools=[a, b], finish_on=hooks)
    with dspy.context(lm=lm):
        pred = run(agent, intent="q")

    assert ran == ["a", "b"]
    assert (pred.answer, pred.confidence) == ("submitted", 0.9)
    meta = pred.metadata
    assert (meta.termination_reason, meta.finished_by_tool) == ("submit", None)
    [entry] = meta.history.messages
    assert (entry["answer"], entry["confidence"]) == ("submitted", 0.9)  # submit's outputs are recorded
    lm.assert_complete()


# -- a hook that raises ---------------------------------------------------------------------------


def test_a_hook_that_raises_is_an_error_observation_and_the_loop_goes_on(run):
    outbox = Outbox()

    def exploding(args: dict[str, Any], result: Any, inputs: dict[str, Any]) -> None:
        raise RuntimeError("hook exploded")

    lm = ScriptedLM([reply(calls=[call("reply", {"text": "Paris"}, id="r1")]), reply("Paris")])
    agent = dspy_imp.ReActV2(QA, tools=[outbox], finish_on={"reply": exploding})
    with dspy.context(lm=lm):
        pred = run(agent, question="Capital of France?")

    assert outbox.sent == ["Paris"]
    assert (pred.metadata.termination_reason, pred.answer) == ("answered", "Paris")
    # The code's choice (the reference is silent): the hook's failure is reported as the call's.
    [result] = pred.metadata.history.messages[0]["tool_call_results"]
    assert (result["error"], result["error_kind"], result["result"]) == (
        True,
        "tool_error",
        "reply failed: hook exploded",
    )
    assert lm.requests[1].messages[-1] == tool("r1", "Error: reply failed: hook exploded")
    lm.assert_complete()


# -- in the last-text request ------------------------------------------------------------------------


def test_a_hook_finishes_from_the_last_text_request_through_last_request_tools(run):
    outbox = Outbox()

    def log(line: str) -> str:
        """Write a log line."""
        raise AssertionError("not in last_request_tools: must not run")

    lm = ScriptedLM(
        [reply("bye", calls=[call("reply", {"text": "Paris"}, id="r1"), call("log", {"line": "x"}, id="g1")])]
    )
    agent = dspy_imp.ReActV2(
        QA, tools=[outbox, log], max_iters=0, finish_on={"reply": finish_with_text}, last_request_tools=["reply"]
    )
    with dspy.context(lm=lm):
        pred = run(agent, question="Capital of France?")

    assert (lm.requests[0].tool_names, lm.requests[0].tool_choice) == (["reply", "log"], "auto")
    meta = pred.metadata
    assert (meta.termination_reason, meta.termination_cause, meta.finished_by_tool) == (
        "finished_by_tool",
        "max_iters",
        "reply",
    )
    assert pred.answer == "Paris" and outbox.sent == ["Paris"]
    assert meta.unexecuted_tool_calls == ({"id": "g1", "name": "log", "args": {"line": "x"}},)
    [entry] = meta.history.messages
    assert [c["id"] for c in entry["tool_calls"]] == ["r1"]
    assert entry.get("answer") != "Paris"  # the hook's outputs are never written into the entry
    lm.assert_complete()
