"""Input and output guardrails: a tripped guardrail ends the turn ``"blocked"``, with its name and
reason in metadata and no further request; an output guardrail may ask the model once to try again."""

from __future__ import annotations

import dspy
import pytest
from helpers import TA, SubmitSig

import dspy_imp
from dspy_imp.testing import ScriptedLM, call, reply


def lookup(query: str) -> str:
    """Look something up."""
    return f"found {query}"


def no_homework(inputs: dict) -> str | None:
    return "homework is not supported" if "solve" in inputs["intent"] else None


def test_a_tripped_input_guardrail_sends_no_request(run):
    lm = ScriptedLM([])
    agent = dspy_imp.ReActV2(TA, tools=[lookup], input_guardrails=[no_homework])
    with dspy.context(lm=lm):
        pred = run(agent, intent="solve 2x + 3 = 11")
    meta = pred.metadata
    assert (meta.termination_reason, meta.termination_cause, meta.complete) == ("blocked", None, False)
    assert meta.guardrail == {"stage": "input", "name": "no_homework", "reason": "homework is not supported"}
    assert pred.answer is None
    assert lm.requests == [] and meta.history.messages == []  # the blocked input is not part of the conversation
    assert meta.usage.total_requests == 0


def test_a_passing_input_guardrail_changes_nothing(run):
    seen = []
    lm = ScriptedLM([reply("Paris.")])
    agent = dspy_imp.ReActV2(TA, tools=[lookup], input_guardrails=[lambda inputs: seen.append(inputs)])
    with dspy.context(lm=lm):
        pred = run(agent, intent="capital of France")
    assert pred.answer == "Paris." and seen == [{"intent": "capital of France"}]
    assert pred.metadata.guardrail is None


def test_an_alongside_guardrail_discards_the_reply_and_sends_nothing_more(run):
    lm = ScriptedLM([reply(calls=[call("lookup", {"query": "x"}, id="c1")])])
    guard = dspy_imp.Guardrail(no_homework, run="alongside")
    agent = dspy_imp.ReActV2(TA, tools=[lookup], input_guardrails=[guard])
    with dspy.context(lm=lm):
        pred = run(agent, intent="solve 2x + 3 = 11")
    meta = pred.metadata
    assert meta.termination_reason == "blocked" and meta.guardrail["name"] == "no_homework"
    assert len(lm.requests) == 1 and meta.history.messages == []  # the reply was discarded: no tool ran
    assert meta.usage.requests == {"step": 1}


def test_an_alongside_guardrail_that_passes_lets_the_turn_go_on(run):
    lm = ScriptedLM([reply(calls=[call("lookup", {"query": "x"}, id="c1")]), reply("Found it.")])
    agent = dspy_imp.ReActV2(TA, tools=[lookup], input_guardrails=[dspy_imp.Guardrail(no_homework, run="alongside")])
    with dspy.context(lm=lm):
        pred = run(agent, intent="find x")
    assert pred.answer == "Found it."


def no_email(outputs: dict, inputs: dict) -> str | None:
    return "the answer shows an email address" if "@" in str(outputs.get("answer")) else None


def test_a_tripped_output_guardrail_blocks_and_the_answer_is_not_replayed(run):
    lm = ScriptedLM([reply("Write to bob@example.com."), reply("Hello again.")])
    agent = dspy_imp.ReActV2(TA, tools=[lookup], output_guardrails=[no_email])
    with dspy.context(lm=lm):
        pred = run(agent, intent="who do I write to?")
        meta = pred.metadata
        assert (meta.termination_reason, pred.answer) == ("blocked", None)
        assert meta.guardrail == {"stage": "output", "name": "no_email", "reason": "the answer shows an email address"}
        assert len(lm.requests) == 1
        run(agent, intent="hi", history=meta.history)
    assert "bob@example.com" not in str(lm.requests[1].messages)
    assert meta.history.messages == [{"intent": "who do I write to?", "tool_calls": [], "tool_call_results": []}]


def test_an_output_guardrail_may_ask_the_model_once_to_try_again(run):
    lm = ScriptedLM(
        [
            reply(calls=[call("submit", {"answer": "bob@example.com", "confidence": 0.9}, id="s1")]),
            reply(calls=[call("submit", {"answer": "write to support", "confidence": 0.8}, id="s2")]),
        ]
    )
    guard = dspy_imp.Guardrail(no_email, retry=True)
    agent = dspy_imp.ReActV2(SubmitSig, tools=[lookup], output_guardrails=[guard])
    with dspy.context(lm=lm):
        pred = run(agent, intent="who do I write to?")
    assert (pred.metadata.termination_reason, pred.answer) == ("submit", "write to support")
    assert lm.requests[1].messages[-1] == {
        "role": "tool",
        "tool_call_id": "s1",
        "content": "Error: the answer shows an email address",
    }
    lm.assert_complete()


def test_the_retry_is_once_then_the_guardrail_blocks(run):
    lm = ScriptedLM(
        [
            reply(calls=[call("submit", {"answer": "bob@example.com", "confidence": 0.9}, id="s1")]),
            reply(calls=[call("submit", {"answer": "ann@example.com", "confidence": 0.8}, id="s2")]),
        ]
    )
    agent = dspy_imp.ReActV2(SubmitSig, tools=[lookup], output_guardrails=[dspy_imp.Guardrail(no_email, retry=True)])
    with dspy.context(lm=lm):
        pred = run(agent, intent="who do I write to?")
    assert pred.metadata.termination_reason == "blocked"
    last = pred.metadata.history.messages[-1]["tool_call_results"][-1]
    assert (last["error"], last["result"]) == (True, "the answer shows an email address")
    lm.assert_complete()


def test_a_guardrail_that_raises_blocks(run):
    def broken(inputs: dict) -> None:
        raise RuntimeError("classifier is down")

    lm = ScriptedLM([])
    agent = dspy_imp.ReActV2(TA, tools=[lookup], input_guardrails=[broken])
    with dspy.context(lm=lm):
        pred = run(agent, intent="hi")
    assert pred.metadata.guardrail == {
        "stage": "input",
        "name": "broken",
        "reason": "broken failed: classifier is down",
    }
    assert lm.requests == []


class Moderation(dspy.Module):
    """A DSPy module as a guardrail: called with the fields, answers ``blocked`` and ``reason``."""

    def forward(self, intent: str, answer: str | None = None) -> dspy.Prediction:
        return dspy.Prediction(blocked="forbidden" in intent, reason="forbidden topic")


def test_a_dspy_module_is_a_guardrail(run):
    lm = ScriptedLM([reply("Fine.")])
    agent = dspy_imp.ReActV2(TA, tools=[lookup], input_guardrails=[Moderation()], output_guardrails=[Moderation()])
    with dspy.context(lm=lm):
        passed = run(agent, intent="weather")
        blocked = run(agent, intent="a forbidden thing")
    assert passed.answer == "Fine."
    assert blocked.metadata.guardrail == {"stage": "input", "name": "Moderation", "reason": "forbidden topic"}


def test_a_resumed_turn_runs_no_input_guardrail(run):
    def refund(order: str) -> str:
        """Refund an order."""
        return "refunded"

    calls = []
    lm = ScriptedLM([reply(calls=[call("refund", {"order": "A7"}, id="r1")]), reply("Refunded.")])
    agent = dspy_imp.ReActV2(TA, tools=[refund], needs_approval=["refund"], input_guardrails=[calls.append])
    with dspy.context(lm=lm):
        paused = run(agent, intent="refund A7")
        done = run(agent, history=paused.metadata.history, approvals={"r1": True})
    assert done.answer == "Refunded." and calls == [{"intent": "refund A7"}]


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("input_guardrails", no_homework, "must be a list of guardrails"),
        ("input_guardrails", [42], "must hold functions or dspy.Module"),
        ("input_guardrails", [dspy_imp.Guardrail(no_homework, retry=True)], "`retry=True` is for output guardrails"),
        ("output_guardrails", [dspy_imp.Guardrail(no_email, run="alongside")], "is for input guardrails"),
        ("output_guardrails", [no_email, no_email], "two guardrails named ['no_email']"),
    ],
)
def test_bad_guardrails_are_refused(option, value, message):
    with pytest.raises(dspy_imp.ConfigurationError) as refused:
        dspy_imp.ReActV2(TA, tools=[lookup], **{option: value})
    assert message in str(refused.value)


def test_a_bad_guardrail_option_is_refused():
    with pytest.raises(dspy_imp.ConfigurationError, match="`run` must be 'before' or 'alongside'"):
        dspy_imp.Guardrail(no_homework, run="after")


def test_the_notebook_view_shows_the_guardrail_and_the_fallback_hops():
    primary = ScriptedLM([dspy_imp.testing.fail.server_error()], model="openai/primary")
    backup = ScriptedLM([reply("Write to bob@example.com.")], model="openai/backup")
    agent = dspy_imp.ReActV2(TA, tools=[lookup], output_guardrails=[no_email], fallback=[backup])
    with dspy.context(lm=primary):
        pred = agent(intent="who do I write to?")
    view = pred._repr_html_()
    assert "guardrail" in view and "the answer shows an email address" in view
    assert "fallbacks" in view and "openai/backup" in view


def test_output_guardrails_of_a_resumed_turn_see_the_turns_inputs(run):
    def refund(order: str) -> str:
        """Refund an order."""
        return "refunded"

    seen = []
    lm = ScriptedLM([reply(calls=[call("refund", {"order": "A7"}, id="r1")]), reply("Refunded.")])
    agent = dspy_imp.ReActV2(
        TA, tools=[refund], needs_approval=["refund"], output_guardrails=[lambda o, i: seen.append((o, i))]
    )
    with dspy.context(lm=lm):
        paused = run(agent, intent="refund A7")
        run(agent, history=paused.metadata.history, approvals={"r1": True})
    assert seen == [({"answer": "Refunded."}, {"intent": "refund A7"})]


def test_an_empty_last_text_answer_is_not_checked(run):
    seen = []
    lm = ScriptedLM([reply(calls=[call("lookup", {"query": "x"}, id="c1")]), reply("")])
    agent = dspy_imp.ReActV2(TA, tools=[lookup], max_iters=1, output_guardrails=[lambda o, i: seen.append(o)])
    with dspy.context(lm=lm):
        pred = run(agent, intent="x")
    assert pred.metadata.termination_reason == "last_text" and seen == []


def test_a_text_answer_turned_down_is_a_thought_with_the_reason_after_it(run):
    guard = dspy_imp.Guardrail(no_email, retry=True)
    lm = ScriptedLM([reply("bob@example.com"), reply("Write to support."), reply("You are welcome.")])
    agent = dspy_imp.ReActV2(TA, tools=[lookup], output_guardrails=[guard])
    with dspy.context(lm=lm):
        pred = run(agent, intent="who?")
        saved = dspy_imp.load_history(dspy_imp.dump_history(pred.metadata.history))
        run(agent, intent="thanks", history=saved)  # a reloaded history renders it the same way
    assert (pred.metadata.termination_reason, pred.answer) == ("answered", "Write to support.")
    assert lm.requests[1].messages[-2:] == [
        {"role": "assistant", "content": "bob@example.com"},
        {"role": "user", "content": "Your message above was not sent: the answer shows an email address"},
    ]
    first = pred.metadata.history.messages[0]
    assert (first["next_thought"], first["not_sent"], "answer" in first) == (
        "bob@example.com",
        "the answer shows an email address",
        False,
    )
    assert lm.requests[2].messages[: len(lm.requests[1].messages)] == lm.requests[1].messages


def test_a_last_requests_answer_is_not_asked_again(run):
    guard = dspy_imp.Guardrail(no_email, retry=True)
    lm = ScriptedLM([reply(calls=[call("lookup", {"query": "x"}, id="c1")]), reply("bob@example.com")])
    agent = dspy_imp.ReActV2(TA, tools=[lookup], max_iters=1, output_guardrails=[guard])
    with dspy.context(lm=lm):
        pred = run(agent, intent="who?")
    assert pred.metadata.termination_reason == "blocked"
    lm.assert_complete()
