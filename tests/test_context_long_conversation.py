"""The issue's promise: 100 calls of the program, 300 tool steps, 20 kB tool results, a 32k-token
window: zero refused requests, every request under the window by the same tokenizer, and the
returned history holding every entry."""

from __future__ import annotations

import itertools

import dspy
from helpers import TA

import dspy_imp
from dspy_imp._routes.tokens import count_tokens
from dspy_imp.testing import ScriptedLM, call, fail, reply

WINDOW = 32_000
VOCABULARY = [
    "the",
    "report",
    "lists",
    "every",
    "shipment",
    "by",
    "date",
    "and",
    "carrier",
    "with",
    "its",
    "weight",
    "and",
    "destination",
]
CALLS, STEPS = 100, 3


def read(page: int) -> str:
    """Read one page of the shipment report (about 20 kB)."""
    words = itertools.islice(itertools.cycle(VOCABULARY), page % 7, None)
    text = " ".join(itertools.islice(words, 3_400))
    return f"page {page}: {text}"


def scripted(request):
    """Three reads per call, then an answer; a summary for a summary request; refuse what is too long."""
    tokens = count_tokens(request.messages, request.tools, "openai/scripted")
    if tokens > WINDOW:
        return fail.context_window(f"{tokens} tokens is over the window")
    last = request.messages[-1]
    if "Summarize the conversation" in str(last.get("content")):
        return reply("Each call asked about the report; I read three pages and answered.")
    since_user = itertools.takewhile(lambda m: m["role"] != "user", reversed(request.messages))
    reads = sum(1 for m in since_user if m["role"] == "tool")
    if reads < STEPS:
        return reply("", calls=[call("read", {"page": len(request.messages)})])
    return reply("The report lists the shipments.")


def test_a_hundred_calls_with_big_results_never_meet_the_wall():
    lm = ScriptedLM(scripted)
    agent = dspy_imp.ReActV2(TA, tools=[read], context=dspy_imp.Context(window=WINDOW))
    history = None
    with dspy.context(lm=lm):
        for index in range(CALLS):
            pred = agent(intent=f"What does page set {index} say?", history=history)
            assert pred.metadata.termination_reason == "answered", index
            history = pred.metadata.history

    sizes = [count_tokens(r.messages, r.tools, "openai/scripted") for r in lm.requests]
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
