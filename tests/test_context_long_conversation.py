"""The issue's promise, at the scale where every tier has worked: 60 calls of the program (the
first summary comes at about the 54th), 180 tool steps, 20 kB tool results, a 32k-token window:
zero refused requests, every request under the window by the same tokenizer, and the returned
history holding every entry."""

from __future__ import annotations

import dspy
import pytest
from helpers import TA

import dspy_imp
from benchmarks.context_prefix import READS_PER_CALL, WINDOW, model, read
from dspy_imp._routes.tokens import count_tokens
from dspy_imp.testing import ScriptedLM, fail

CALLS, STEPS = 60, READS_PER_CALL

# Over 10 s a driver on a quiet 2-core machine (each request is counted by the tokenizer twice,
# the policy's and the provider's): in the slow set, which `make test` (and so CI) runs.
pytestmark = pytest.mark.slow


def test_sixty_calls_with_big_results_never_meet_the_wall(run):
    sizes: list[int] = []  # each request's tokens, counted once, in the order sent

    def scripted(request):
        """The benchmark's conversation (``benchmarks/context_prefix.py``), and a provider's refusal
        of any request over the window, as the tokenizer the policy counts with sees it."""
        tokens = count_tokens(request.messages, request.tools, "openai/scripted")
        sizes.append(tokens)
        if tokens > WINDOW:
            return fail.context_window(f"{tokens} tokens is over the window")
        return model(request)

    lm = ScriptedLM(scripted)
    agent = dspy_imp.ReActV2(TA, tools=[read], context=dspy_imp.Context(window=WINDOW))
    history = None
    with dspy.context(lm=lm):
        for index in range(CALLS):
            pred = run(agent, intent=f"What does page set {index} say?", history=history)
            assert pred.metadata.termination_reason == "answered", index
            history = pred.metadata.history

    assert len(sizes) == len(lm.requests)  # every request was counted
    assert max(sizes) < WINDOW  # every request under the window, by the tokenizer the policy counts with
    refused = [s for s in sizes if s > WINDOW]
    assert refused == []
    entries = history.messages
    assert len(entries) == CALLS * (STEPS + 1)  # every entry kept
    results = [r["result"] for e in entries for r in e["tool_call_results"]]
    assert len(results) == CALLS * STEPS and all(len(r) > 20_000 for r in results)  # each whole, 20 kB
    summaries = sum(1 for r in lm.requests if "Summarize the conversation" in str(r.messages[-1].get("content")))
    assert summaries >= 1
    assert any("cleared to save context" in str(m.get("content")) for m in lm.requests[-1].messages)
