"""``dspy_imp.RetryTool``: a tool asks the model to call it again with better arguments; past the
tool's budget (``tool_retries``) the turn is interrupted with cause ``"tool_retries_exhausted"``."""

from __future__ import annotations

import dspy
import pytest
from helpers import TA, SubmitSig

import dspy_imp
from dspy_imp.testing import ScriptedLM, call, reply


def book(date: str) -> str:
    """Book a table on a date."""
    if "-" not in date:
        raise dspy_imp.RetryTool(f"{date!r} is not an ISO date; send YYYY-MM-DD")
    return f"booked {date}"


def booking(*dates: str) -> list:
    return [reply(calls=[call("book", {"date": d}, id=f"b{i}")]) for i, d in enumerate(dates)]


def tool_content(request, call_id: str) -> str:
    return next(m["content"] for m in request.messages if m.get("tool_call_id") == call_id)


def test_the_model_reads_the_message_and_calls_again(run):
    lm = ScriptedLM([*booking("friday", "2026-12-04"), reply("Booked for Friday.")])
    agent = dspy_imp.ReActV2(TA, tools=[book])
    with dspy.context(lm=lm):
        pred = run(agent, intent="book friday")
    assert (pred.metadata.termination_reason, pred.answer) == ("answered", "Booked for Friday.")
    assert tool_content(lm.requests[1], "b0") == "Error: 'friday' is not an ISO date; send YYYY-MM-DD"
    first = pred.metadata.history.messages[0]["tool_call_results"][0]
    assert (first["error"], first["error_kind"]) == (True, "retry_requested")
    lm.assert_complete()


def test_past_the_budget_the_turn_gets_its_last_text_request(run):
    lm = ScriptedLM([*booking("friday", "fri"), reply("I could not book it.")])
    agent = dspy_imp.ReActV2(TA, tools=[book], tool_retries={"book": 1})
    with dspy.context(lm=lm):
        pred = run(agent, intent="book friday")
    meta = pred.metadata
    assert (meta.termination_reason, meta.termination_cause) == ("last_text", "tool_retries_exhausted")
    assert pred.answer == "I could not book it."
    assert meta.usage.requests == {"step": 2, "last_text": 1}
    assert tool_content(lm.requests[2], "b1") == "Error: 'fri' is not an ISO date; send YYYY-MM-DD"
    lm.assert_complete()


def test_a_budget_of_zero_interrupts_at_the_first_retry(run):
    lm = ScriptedLM([*booking("friday"), reply("No.")])
    agent = dspy_imp.ReActV2(TA, tools=[book], tool_retries=0)
    with dspy.context(lm=lm):
        pred = run(agent, intent="book friday")
    assert pred.metadata.termination_cause == "tool_retries_exhausted"
    lm.assert_complete()


def test_a_submit_turn_ends_through_the_forced_submit(run):
    lm = ScriptedLM(
        [*booking("friday", "fri"), reply(calls=[call("submit", {"answer": "not booked", "confidence": 0.2})])]
    )
    agent = dspy_imp.ReActV2(SubmitSig, tools=[book])
    with dspy.context(lm=lm):
        pred = run(agent, intent="book friday")
    meta = pred.metadata
    assert (meta.termination_reason, meta.termination_cause) == ("forced_submit", "tool_retries_exhausted")
    assert lm.requests[2].tool_choice == {"type": "function", "function": {"name": "submit"}}


def test_under_finish_tools_the_turn_is_incomplete(run):
    lm = ScriptedLM(booking("friday", "fri"))
    agent = dspy_imp.ReActV2(
        "intent -> answer", tools=[book], finish="tools", finish_on={"book": lambda a, r, i: dspy_imp.Finish(answer=r)}
    )
    with dspy.context(lm=lm):
        pred = run(agent, intent="book friday")
    assert (pred.metadata.termination_reason, pred.metadata.termination_cause) == (
        "incomplete",
        "tool_retries_exhausted",
    )


def test_a_per_call_budget_replaces_the_programs(run):
    lm = ScriptedLM([*booking("friday", "fri", "2026-12-04"), reply("Booked.")])
    agent = dspy_imp.ReActV2(TA, tools=[book], tool_retries=0)
    with dspy.context(lm=lm):
        pred = run(agent, intent="book friday", tool_retries={"book": 2})
    assert pred.metadata.termination_reason == "answered"


def test_retry_tool_keeps_its_message():
    error = dspy_imp.RetryTool("send a date")
    assert (error.message, str(error)) == ("send a date", "send a date")


@pytest.mark.parametrize("value", [-1, 1.5, {"book": -2}, {"ghost": 1}])
def test_bad_budgets_are_refused(value):
    with pytest.raises(dspy_imp.ConfigurationError, match="tool_retries"):
        dspy_imp.ReActV2(TA, tools=[book], tool_retries=value)
