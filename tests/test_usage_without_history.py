"""Issue 23, point 4: usage and its limits hold under ``dspy.configure(disable_history=True)``.

DSPy writes no history entry then; the loop's requests go through a quiet copy of the LM whose
entries reach only the loop's recorders, so tokens are counted, token limits stop the turn, and
nothing is written to DSPy's global history or the LM's own.
"""

from __future__ import annotations

import dspy
import pytest
from dspy.clients.base_lm import GLOBAL_HISTORY
from helpers import SubmitSig

import dspy_imp
from dspy_imp.testing import ScriptedLM, call, reply


def lookup(query: str) -> str:
    """Look something up."""
    return f"found {query}"


def _looking(n: int) -> list:
    return [reply(calls=[call("lookup", {"query": str(i)}, id=f"c{i}")], usage=(100, 10)) for i in range(n)]


@pytest.fixture
def no_history():
    with dspy.context(disable_history=True):
        yield


def test_a_token_limit_stops_the_turn_with_history_disabled(run, no_history):
    lm = ScriptedLM(_looking(2))
    limits = dspy_imp.UsageLimits(total_tokens=150)
    agent = dspy_imp.ReActV2(SubmitSig, tools=[lookup], usage_limits=limits)
    global_before = len(GLOBAL_HISTORY)
    with dspy.context(lm=lm):
        pred = run(agent, intent="i")
    meta = pred.metadata
    assert (meta.termination_reason, meta.termination_cause) == ("incomplete", "usage_limit_exceeded")
    assert len(lm.requests) == 2
    assert (meta.usage.input_tokens, meta.usage.output_tokens) == (200, 20)
    assert len(GLOBAL_HISTORY) == global_before and lm.history == []  # what the host switched off stays off


def test_usage_and_the_finish_reason_are_read_with_history_disabled(run, no_history):
    lm = ScriptedLM([reply("Done.", usage=(40, 3))])
    agent = dspy_imp.ReActV2("question -> answer")
    with dspy.context(lm=lm):
        pred = run(agent, question="hi")
    assert (pred.metadata.usage.input_tokens, pred.metadata.usage.output_tokens) == (40, 3)
    assert pred.metadata.finish_reason == "stop"
    assert lm.history == []


EXTRACTED = "[[ ## reasoning ## ]]\nr\n\n[[ ## answer ## ]]\nA\n\n[[ ## confidence ## ]]\n0.5\n\n[[ ## completed ## ]]"


def test_every_kind_of_request_is_counted_with_history_disabled(run, no_history):
    lm = ScriptedLM(
        [reply("thinking", usage=(10, 1)), reply("still thinking", usage=(11, 1)), reply(EXTRACTED, usage=(7, 2))]
    )
    agent = dspy_imp.ReActV2(SubmitSig, tools=[lookup])
    with dspy.context(lm=lm):
        pred = run(agent, intent="i")
    assert pred.metadata.termination_reason == "extracted"
    assert [(c.kind, c.input_tokens, c.output_tokens) for c in pred.metadata.usage.calls] == [
        ("step", 10, 1),
        ("forced_submit", 11, 1),
        ("extraction", 7, 2),
    ]
