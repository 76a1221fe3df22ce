"""``pred.metadata.usage``: requests by kind, tokens and cost for this turn, whatever ``track_usage`` says."""

from __future__ import annotations

import dspy
import pytest
from dspy import lm15
from helpers import TA, Look, SubmitSig

import dspy_imp
from dspy_imp._drivers.recorder import measured
from dspy_imp._records.usage import RequestUsage
from dspy_imp.testing import ScriptedLM, call, fail, reply

EXTRACTED = (
    "[[ ## reasoning ## ]]\nThe history settles it.\n\n[[ ## answer ## ]]\nParis\n\n"
    "[[ ## confidence ## ]]\n0.9\n\n[[ ## completed ## ]]"
)
UNREADABLE = "[[ ## answer ## ]]\nhm\n\n[[ ## tool_calls ## ]]\n42\n\n[[ ## completed ## ]]"


def tokens(prompt: int, completion: int, cached: int = 0, reasoning: int = 0) -> lm15.Usage:
    return lm15.Usage(
        input_tokens=prompt,
        output_tokens=completion,
        total_tokens=prompt + completion,
        cache_read_tokens=cached,
        reasoning_tokens=reasoning,
    )


def lookup(query: str) -> str:
    """Look something up."""
    return f"found {query}"


@pytest.mark.parametrize("track_usage", [False, True])
def test_every_request_kind_is_counted_and_sums_match_what_the_model_reported(run, track_usage):
    lm = ScriptedLM(
        [
            reply(calls=[call("lookup", {"query": "x"}, id="c1")], usage=tokens(100, 10, cached=60)),
            fail.tool_choice_refused(),
            reply("I will submit Paris now.", usage=tokens(150, 20, reasoning=7)),
            reply(EXTRACTED, usage=tokens(90, 30)),
        ]
    )
    agent = dspy_imp.ReActV2(SubmitSig, tools=[lookup], max_iters=1)
    with dspy.context(lm=lm, track_usage=track_usage):
        pred = run(agent, intent="capital of France?")
    assert pred.metadata.termination_reason == "extracted"
    usage = pred.metadata.usage
    assert usage.requests == {"step": 1, "forced_submit": 1, "required_retry": 1, "extraction": 1}
    assert usage.total_requests == len(lm.requests) == 4
    assert usage.calls == (
        RequestUsage("step", 100, 10, 60, 0),
        RequestUsage("forced_submit"),  # refused: no usage reported, still a request sent
        RequestUsage("required_retry", 150, 20, 0, 7),
        RequestUsage("extraction", 90, 30),
    )
    assert (usage.input_tokens, usage.output_tokens) == (340, 60)
    assert (usage.cached_tokens, usage.reasoning_tokens, usage.total_tokens) == (60, 7, 400)
    assert usage.cost is None  # the scripted engine reports no cost


def test_the_last_text_request_and_a_json_fallback_are_their_own_kinds(run):
    lm = ScriptedLM(
        [
            reply(UNREADABLE, usage=(40, 4)),
            reply("{not json", usage=(50, 5)),
            reply("[[ ## answer ## ]]\nA cat.\n\n[[ ## tool_calls ## ]]\n[]\n\n[[ ## completed ## ]]", usage=(60, 6)),
        ],
        native=False,
    )
    with dspy.context(lm=lm):
        pred = run(dspy_imp.ReActV2(TA, tools=[Look()]), intent="what?")
    assert pred.metadata.termination_reason == "last_text"
    usage = pred.metadata.usage
    assert usage.requests == {"step": 1, "json_fallback": 1, "last_text": 1}
    assert [(c.kind, c.input_tokens, c.output_tokens) for c in usage.calls] == [
        ("step", 40, 4),
        ("json_fallback", 50, 5),
        ("last_text", 60, 6),
    ]


def test_usage_is_kept_on_step_error(run):
    lm = ScriptedLM(
        [
            reply(calls=[call("lookup", {"query": "x"}, id="c1")], usage=(11, 3)),
            fail.server_error(503),
            fail.server_error(503),
        ]
    )
    agent = dspy_imp.ReActV2(TA, tools=[lookup])
    with dspy.context(lm=lm), pytest.raises(dspy_imp.StepError) as caught:
        run(agent, intent="i")
    lm.assert_complete()
    usage = caught.value.usage
    assert usage.requests == {"step": 2, "last_text": 1}
    assert (usage.input_tokens, usage.output_tokens) == (11, 3)


def test_usage_is_per_turn():
    lm = ScriptedLM([reply("one", usage=(5, 1)), reply("two", usage=(7, 2))])
    agent = dspy_imp.ReActV2(TA)
    with dspy.context(lm=lm):
        first = agent(intent="a")
        second = agent(intent="b", history=first.metadata.history)
    assert (first.metadata.usage.input_tokens, second.metadata.usage.input_tokens) == (5, 7)
    assert second.metadata.usage.requests == {"step": 1}


def test_litellm_shaped_usage_and_cost_are_read():
    class Details:
        def model_dump(self) -> dict:
            return {"cached_tokens": 3}

    entry = {
        "usage": {
            "prompt_tokens": 12,
            "completion_tokens": 4,
            "prompt_tokens_details": Details(),
            "completion_tokens_details": {"reasoning_tokens": 2},
        },
        "cost": 0.0015,
    }
    assert measured("step", [entry, {"usage": {}, "cost": None}], 1) == (
        RequestUsage("step", 12, 4, 3, 2, 0.0015),
        RequestUsage("json_fallback"),
    )
