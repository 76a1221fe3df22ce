"""``repeat_limit``: the same call with the same result N times in one turn interrupts it with cause
``"repeated_calls"``, so the last request gets its chance before ``max_iters`` is spent."""

from __future__ import annotations

import itertools

import dspy
import pytest
from helpers import TA, SubmitSig

import dspy_imp
from dspy_imp.testing import ScriptedLM, call, reply


def status(order: str) -> str:
    """Check an order's status."""
    return "pending"


COUNTER = itertools.count()


def ticking(order: str) -> str:
    """Check an order's status (it changes every time)."""
    return f"pending ({next(COUNTER)})"


def looping(n: int, tool: str = "status") -> list:
    return [reply(calls=[call(tool, {"order": "A7"}, id=f"s{i}")]) for i in range(n)]


def test_a_model_looping_on_one_call_ends_through_the_last_request(run):
    lm = ScriptedLM([*looping(3), reply("It is still pending.")])
    agent = dspy_imp.ReActV2(TA, tools=[status], max_iters=20)
    with dspy.context(lm=lm):
        pred = run(agent, intent="where is A7?")
    meta = pred.metadata
    assert (meta.termination_reason, meta.termination_cause) == ("last_text", "repeated_calls")
    assert pred.answer == "It is still pending."
    assert meta.usage.requests == {"step": 3, "last_text": 1}  # 4 requests, not 21
    lm.assert_complete()


def test_a_submit_turn_gets_the_forced_submit(run):
    lm = ScriptedLM([*looping(3), reply(calls=[call("submit", {"answer": "pending", "confidence": 0.5})])])
    agent = dspy_imp.ReActV2(SubmitSig, tools=[status])
    with dspy.context(lm=lm):
        pred = run(agent, intent="where is A7?")
    assert (pred.metadata.termination_reason, pred.metadata.termination_cause) == ("forced_submit", "repeated_calls")
    lm.assert_complete()


def test_the_same_call_with_a_new_result_is_progress(run):
    lm = ScriptedLM([*looping(4, "ticking"), reply("Changing.")])
    agent = dspy_imp.ReActV2(TA, tools=[ticking])
    with dspy.context(lm=lm):
        pred = run(agent, intent="where is A7?")
    assert pred.metadata.termination_reason == "answered"


def test_the_limit_is_configurable_and_none_turns_it_off(run):
    lm = ScriptedLM([*looping(2), reply("Pending.")])
    agent = dspy_imp.ReActV2(TA, tools=[status], repeat_limit=2)
    with dspy.context(lm=lm):
        pred = run(agent, intent="where is A7?")
    assert pred.metadata.termination_cause == "repeated_calls"

    lm = ScriptedLM([*looping(5), reply("Pending.")])
    agent = dspy_imp.ReActV2(TA, tools=[status], max_iters=5, repeat_limit=None)
    with dspy.context(lm=lm):
        pred = run(agent, intent="where is A7?")
    assert pred.metadata.termination_cause == "max_iters"


def test_a_per_call_limit_replaces_the_programs(run):
    lm = ScriptedLM([*looping(4), reply("Pending.")])
    agent = dspy_imp.ReActV2(TA, tools=[status])
    with dspy.context(lm=lm):
        pred = run(agent, intent="where is A7?", repeat_limit=4)
    assert pred.metadata.usage.requests == {"step": 4, "last_text": 1}


def test_repeats_are_counted_per_turn(run):
    lm = ScriptedLM([*looping(2), reply("Pending."), *looping(2), reply("Still pending.")])
    agent = dspy_imp.ReActV2(TA, tools=[status])
    with dspy.context(lm=lm):
        first = run(agent, intent="where is A7?")
        second = run(agent, intent="and now?", history=first.metadata.history)
    assert second.metadata.termination_reason == "answered"


@pytest.mark.parametrize("value", [0, 1, -1, 2.0, True, "3"])
def test_bad_limits_are_refused(value):
    with pytest.raises(dspy_imp.ConfigurationError, match="repeat_limit"):
        dspy_imp.ReActV2(TA, tools=[status], repeat_limit=value)


def test_rereading_a_cleared_result_is_no_repeat(run):
    """The context policy clears old results to a placeholder asking the model to call the tool
    again; the model does, three times in all: only the reads whose results are still shown count,
    so the turn goes on to its answer (it ended ``"repeated_calls"``)."""

    def fetch(key: str) -> str:
        """Fetch a document."""
        return " ".join(f"{key}{i}" for i in range(200))

    def words(messages, tools, model):
        return sum(len(str(m.get("content") or "").split()) for m in messages)

    context = dspy_imp.Context(
        trigger=250, window=10_000, keep_results=1, summarize=False, leave_out=False, counter=words
    )
    lm = ScriptedLM([reply(calls=[call("fetch", {"key": "k"}, id=f"f{i}")]) for i in range(3)] + [reply("done")])
    agent = dspy_imp.ReActV2(TA, tools=[fetch], context=context)
    with dspy.context(lm=lm):
        pred = run(agent, intent="read k")
    meta = pred.metadata
    assert (pred.answer, meta.termination_reason, meta.termination_cause) == ("done", "answered", None)
    placeholder = "[The result of fetch (f0) was cleared to save context; call the tool again if you need it.]"
    assert [m["content"] for m in lm.requests[2].messages if m["role"] == "tool"] == [placeholder, fetch("k")]
    lm.assert_complete()


def test_a_repeat_whose_results_are_still_shown_still_counts_under_a_context_policy(run):
    context = dspy_imp.Context(trigger=100_000, window=1_000_000)  # never clears
    lm = ScriptedLM([*looping(3), reply("It is still pending.")])
    agent = dspy_imp.ReActV2(TA, tools=[status], context=context)
    with dspy.context(lm=lm):
        pred = run(agent, intent="A7?")
    meta = pred.metadata
    assert (meta.termination_reason, meta.termination_cause) == ("last_text", "repeated_calls")
