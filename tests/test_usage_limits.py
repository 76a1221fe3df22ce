"""``usage_limits``: no request leaves once a limit is reached; the turn ends ``"incomplete"``."""

from __future__ import annotations

import dspy
import pytest
from helpers import TA, Look, SubmitSig

import dspy_imp
from dspy_imp.testing import ScriptedLM, call, reply

UNREADABLE = "[[ ## answer ## ]]\nhm\n\n[[ ## tool_calls ## ]]\n42\n\n[[ ## completed ## ]]"
WRITTEN_ANSWER = "[[ ## answer ## ]]\nA cat.\n\n[[ ## tool_calls ## ]]\n[]\n\n[[ ## completed ## ]]"


def lookup(query: str) -> str:
    """Look something up."""
    return f"found {query}"


def looking(n: int, usage: tuple[int, int] = (100, 10)) -> list:
    return [reply(calls=[call("lookup", {"query": str(i)}, id=f"c{i}")], usage=usage) for i in range(n)]


def assert_limited(pred, lm, sent: int) -> None:
    meta = pred.metadata
    assert (meta.termination_reason, meta.termination_cause) == ("incomplete", "usage_limit_exceeded")
    assert len(lm.requests) == meta.usage.total_requests == sent
    lm.assert_complete()  # nothing was sent after the limit: the script holds exactly `sent` replies


def test_a_request_limit_stops_before_the_next_request_and_owes_no_last_request(run):
    lm = ScriptedLM(looking(2))
    agent = dspy_imp.ReActV2(SubmitSig, tools=[lookup], usage_limits=dspy_imp.UsageLimits(requests=2))
    with dspy.context(lm=lm):
        pred = run(agent, intent="i")
    assert_limited(pred, lm, 2)
    assert (pred.answer, pred.confidence) == (None, None)
    assert len(pred.metadata.history.messages) == 2  # both steps recorded, their tools ran


def test_the_request_that_crosses_a_token_limit_is_the_last_one(run):
    lm = ScriptedLM(looking(2))  # 110 tokens each
    agent = dspy_imp.ReActV2(TA, tools=[lookup], usage_limits=dspy_imp.UsageLimits(total_tokens=150))
    with dspy.context(lm=lm):
        pred = run(agent, intent="i")
    assert_limited(pred, lm, 2)
    assert pred.metadata.usage.total_tokens == 220  # over by the one request that crossed it


@pytest.mark.parametrize(
    ("limits", "sent"),
    [
        ({"input_tokens": 100}, 1),  # reached exactly: nothing more leaves
        ({"input_tokens": 101}, 2),
        ({"output_tokens": 25}, 3),
        ({"requests": 3}, 3),
    ],
)
def test_each_kind_of_limit(run, limits, sent):
    lm = ScriptedLM(looking(sent))
    agent = dspy_imp.ReActV2(TA, tools=[lookup], usage_limits=dspy_imp.UsageLimits(**limits))
    with dspy.context(lm=lm):
        pred = run(agent, intent="i")
    assert_limited(pred, lm, sent)


def test_a_limit_reached_before_the_forced_submit_sends_nothing_more(run):
    lm = ScriptedLM(looking(1))
    agent = dspy_imp.ReActV2(SubmitSig, tools=[lookup], max_iters=1, usage_limits={"requests": 1})
    with dspy.context(lm=lm):
        pred = run(agent, intent="i")
    assert_limited(pred, lm, 1)


def test_per_call_limits_replace_the_programs(run):
    lm = ScriptedLM(looking(1))
    agent = dspy_imp.ReActV2(TA, tools=[lookup], usage_limits=dspy_imp.UsageLimits(requests=5))
    with dspy.context(lm=lm):
        pred = run(agent, intent="i", usage_limits=dspy_imp.UsageLimits(requests=1))
    assert_limited(pred, lm, 1)


def test_no_json_fallback_under_a_token_limit(run):
    lm = ScriptedLM([reply(UNREADABLE, usage=(10, 1)), reply(WRITTEN_ANSWER, usage=(10, 1))], native=False)
    agent = dspy_imp.ReActV2(TA, tools=[Look()], usage_limits=dspy_imp.UsageLimits(total_tokens=1000))
    with dspy.context(lm=lm):
        pred = run(agent, intent="what?")
    meta = pred.metadata
    assert (meta.termination_reason, meta.termination_cause) == ("last_text", "parse_error")
    assert meta.usage.requests == {"step": 1, "last_text": 1}
    lm.assert_complete()


@pytest.mark.parametrize(("requests", "fallback"), [(1, False), (2, True)])
def test_a_json_fallback_only_while_two_requests_remain(run, requests, fallback):
    items = [reply(UNREADABLE), reply('{"answer": "A cat.", "tool_calls": []}')]
    lm = ScriptedLM(items[: 1 + fallback], native=False)
    agent = dspy_imp.ReActV2(TA, tools=[Look()], usage_limits=dspy_imp.UsageLimits(requests=requests))
    with dspy.context(lm=lm):
        pred = run(agent, intent="what?")
    lm.assert_complete()
    assert len(lm.requests) == requests
    if fallback:
        assert (pred.answer, pred.metadata.usage.requests) == ("A cat.", {"step": 1, "json_fallback": 1})
    else:
        assert (pred.metadata.termination_reason, pred.metadata.termination_cause) == (
            "incomplete",
            "usage_limit_exceeded",
        )


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"requests": -1}, r"`usage_limits.requests` must be a non-negative integer or None, got -1"),
        ({"input_tokens": 1.5}, r"`usage_limits.input_tokens` must be a non-negative integer or None, got 1.5"),
        ({"cost": float("nan")}, r"`usage_limits.cost` must be a non-negative number or None, got nan"),
        ({"cost": True}, r"`usage_limits.cost` must be a non-negative number or None, got True"),
        ({"dollars": 1}, r"`usage_limits` has unknown key\(s\) \['dollars'\]"),
    ],
)
def test_limits_are_validated(value, message):
    with pytest.raises(dspy_imp.ConfigurationError, match=message):
        dspy_imp.ReActV2(TA, usage_limits=value)


def test_a_bad_per_call_limit_is_refused_before_any_request(run):
    lm = ScriptedLM([])
    with dspy.context(lm=lm), pytest.raises(dspy_imp.ConfigurationError, match=r"`usage_limits` must be a dspy_imp"):
        run(dspy_imp.ReActV2(TA), intent="i", usage_limits=5)
    assert lm.requests == []
