"""A context policy (``dspy_imp.Context``): tokens counted before sending, tiers applied in order,
the record kept whole and the shortened prompt recorded so the next call renders the same one."""

from __future__ import annotations

import json

import dspy
import pytest
from helpers import TA, inputs

import dspy_imp
from dspy_imp.testing import ScriptedLM, call, fail, reply

SYSTEM = 91
"""What ``words`` counts a system message as, whatever its wording: these tests check the tiers'
arithmetic, not the prompt's length (the system message's sentences are issue 29's to shorten)."""


def words(messages, tools, model):
    """A counter the tests can add up by hand: one token per whitespace-separated word of text,
    and ``SYSTEM`` for the system message."""
    return sum(SYSTEM if m["role"] == "system" else len(str(m.get("content") or "").split()) for m in messages)


def fetch(key: str) -> str:
    """Fetch a document."""
    return " ".join(f"{key}{i}" for i in range(200))


SUMMARY = "They asked for documents; I read them."


def agent_answer(request):
    """Summaries for summary requests; a call on a user message, then an answer."""
    last = request.messages[-1]
    if str(last.get("content")).startswith("[[ ## intent ## ]]\nSummarize"):
        return reply(SUMMARY)
    if last["role"] == "user":
        return reply("", calls=[call("fetch", {"key": "k"})])
    return reply("done")


def program(**context):
    options = {"trigger": 500, "target": 300, "window": 1000, "keep_results": 1, "counter": words, **context}
    return dspy_imp.ReActV2(TA, tools=[fetch], context=dspy_imp.Context(**options))


def two_episodes(run, agent, lm):
    """Two calls of one conversation ("read 0", then "read 1"); the second call's prediction."""
    history = None
    with dspy.context(lm=lm):
        for i in range(2):
            pred = run(agent, intent=f"read {i}", history=history)
            history = pred.metadata.history
    return pred


def test_old_tool_results_show_as_a_placeholder_naming_the_call(run):
    lm = ScriptedLM(
        [reply("", calls=[call("fetch", {"key": k}, id=f"c{i}")]) for i, k in enumerate("abc", 1)] + [reply("done")]
    )
    with dspy.context(lm=lm):
        pred = run(program(summarize=False, leave_out=False), intent="read")

    *_, third, last = lm.requests
    assert [words(r.messages, None, "") for r in lm.requests] == [97, 297, 497, 333]
    placeholder = "[The result of fetch ({id}) was cleared to save context; call the tool again if you need it.]"
    assert [m["content"] for m in last.messages if m["role"] == "tool"] == [
        placeholder.format(id="c1"),
        placeholder.format(id="c2"),
        fetch("c"),
    ]
    assert last.messages[:2] == third.messages[:2]  # the prefix holds up to the first cleared result
    assert pred.metadata.context[-1] == {
        "request": "step",
        "tokens_before": 697,
        "applied": [{"tier": "clear", "results_cleared": 2, "tokens_before": 697, "tokens_after": 333}],
        "tokens": 333,
    }
    assert [r["tokens"] for r in pred.metadata.context] == [97, 297, 497, 333]
    entries = pred.metadata.history.messages
    assert [r["result"] for e in entries for r in e["tool_call_results"]] == [fetch("a"), fetch("b"), fetch("c")]
    assert entries[-1]["prompt_view"] == {"cleared": 2}  # the step the first shortened request produced
    assert [e.get("prompt_view") for e in entries[:-1]] == [None, None, None]


def test_the_next_call_renders_the_same_shortened_prompt(run):
    lm = ScriptedLM(
        [reply("", calls=[call("fetch", {"key": k}, id=f"c{i}")]) for i, k in enumerate("abc", 1)]
        + [reply("done"), reply("again")]
    )
    agent = program(summarize=False, leave_out=False)
    with dspy.context(lm=lm):
        first = run(agent, intent="read")
        reloaded = dspy_imp.load_history(dspy_imp.dump_history(first.metadata.history))
        run(agent, intent="more", history=reloaded)

    shortened, next_call = lm.requests[-2], lm.requests[-1]
    assert next_call.messages[: len(shortened.messages)] == shortened.messages  # the cached prefix holds
    assert next_call.messages[len(shortened.messages) :] == [
        {"role": "assistant", "content": "done"},
        inputs(intent="more"),
    ]


def test_earlier_episodes_are_summarized_by_one_request_that_shares_the_prefix(run):
    lm = ScriptedLM(agent_answer)
    agent = program(target=320)
    pred = two_episodes(run, agent, lm)

    r1, _, r3, summary, r5 = lm.requests
    assert summary.messages[:-1] == r3.messages[:-1]  # the prior episode as the last request showed it
    assert summary.messages[-1] == inputs(
        intent=dspy_imp.ReActV2(TA, tools=[fetch]).summary_predictor().signature.instructions
    )
    assert summary.tool_choice == "auto" and summary.tool_names == ["fetch"]
    assert r5.messages[1:] == [
        {"role": "user", "content": f"Summary of the earlier conversation:\n{SUMMARY}"},
        inputs(intent="read 1"),
        r5.messages[3],
        r5.messages[4],
    ]
    assert r5.messages[0] == r1.messages[0]
    meta = pred.metadata
    assert meta.usage.requests == {"step": 2, "summary": 1}
    assert [a["tier"] for a in meta.context[-1]["applied"]] == ["clear", "summarize"]
    assert meta.context[-1]["applied"][1]["entries_summarized"] == 2
    assert len(meta.history.messages) == 4 and meta.history.messages[0]["tool_call_results"][0]["result"] == fetch("k")
    assert meta.history.messages[-1]["prompt_view"] == {"summarized": 2, "summary": SUMMARY, "cleared": 2}


def test_the_oldest_episodes_are_left_out_when_summaries_are_off(run):
    lm = ScriptedLM(agent_answer)
    agent = program(summarize=False, target=300)
    pred = two_episodes(run, agent, lm)
    last = lm.requests[-1]
    assert last.messages[1] == inputs(intent="read 1")
    assert pred.metadata.context[-1]["applied"][-1] == {
        "tier": "leave_out",
        "entries_left_out": 2,
        "summary_left_out": False,
        "tokens_before": pred.metadata.context[-1]["applied"][-1]["tokens_before"],
        "tokens_after": 298,
    }
    assert len(pred.metadata.history.messages) == 4


def test_a_request_over_the_window_after_every_tier_is_not_sent(run):
    lm = ScriptedLM([reply("", calls=[call("fetch", {"key": "a"})])])
    with dspy.context(lm=lm):
        pred = run(program(window=250, trigger=100, target=50), intent="read")
    assert len(lm.requests) == 1  # the second request would not fit: never sent
    meta = pred.metadata
    assert (meta.termination_reason, meta.termination_cause) == ("incomplete", "context_window_exceeded")
    assert "not sent" in meta.termination_error["initial"]
    assert len(meta.history.messages) == 1


def test_without_a_policy_nothing_is_measured_or_recorded(run):
    lm = ScriptedLM([reply("", calls=[call("fetch", {"key": "a"})]), reply("done")])
    with dspy.context(lm=lm):
        pred = run(dspy_imp.ReActV2(TA, tools=[fetch]), intent="read")
    assert pred.metadata.context == ()
    assert all("prompt_view" not in e for e in pred.metadata.history.messages)
    assert [n for n, _ in dspy_imp.ReActV2(TA, tools=[fetch]).named_predictors()] == ["react"]
    assert [n for n, _ in program().named_predictors()] == ["react", "summarizer"]


def test_a_per_call_policy_and_its_refusals():
    lm = ScriptedLM(
        [reply("", calls=[call("fetch", {"key": k}, id=f"c{i}")]) for i, k in enumerate("abc", 1)] + [reply("done")]
    )
    context = dspy_imp.Context(trigger=500, window=1000, keep_results=1, counter=words)
    with dspy.context(lm=lm):
        pred = dspy_imp.ReActV2(TA, tools=[fetch])(intent="read", context=context)
    assert pred.metadata.context[-1]["applied"][0]["tier"] == "clear"
    with pytest.raises(dspy_imp.ConfigurationError, match="`context`"):
        dspy_imp.ReActV2(TA, tools=[fetch])(intent="read", context={"trigger": 1})
    refused = [
        ({"trigger": 0}, "trigger"),
        ({"trigger": 1.5}, "trigger"),
        ({"keep_results": -1}, "keep_results"),
        ({"keep_results": 0}, "keep_results"),
        ({"trigger": 0.5, "target": 100}, "target"),
        ({"counter": 3}, "counter"),
        ({"summarize": 1}, "summarize"),
    ]
    for bad, name in refused:
        with pytest.raises(dspy_imp.ConfigurationError, match=rf"`context\.{name}`"):
            dspy_imp.Context(**bad)


def test_a_share_of_an_unknown_window_is_refused_before_any_request():
    lm = ScriptedLM([reply("done")])
    with dspy.context(lm=lm), pytest.raises(dspy_imp.ConfigurationError, match=r"`context\.window`"):
        dspy_imp.ReActV2(TA, tools=[fetch], context=dspy_imp.Context(trigger=0.5))(intent="read")
    assert lm.requests == []


def test_an_input_named_context_stays_an_input():
    lm = ScriptedLM([reply("ok")])
    with dspy.context(lm=lm):
        pred = dspy_imp.ReActV2("context, question -> answer")(context="c", question="q")
    assert pred.answer == "ok" and lm.requests[0].messages[1] == inputs(context="c", question="q")


def test_streaming_reports_each_tier_and_the_summary_request(how):
    from streaming_helpers import statuses, stream_items

    prior = [
        {
            "intent": f"q{i}",
            "next_thought": f"a{i} " * 40,
            "answer": f"a{i} " * 40,
            "tool_calls": [],
            "tool_call_results": [],
        }
        for i in range(3)
    ]
    lm = ScriptedLM([reply(SUMMARY), reply("here")])
    agent = program(trigger=200, target=150)
    with dspy.context(lm=lm):
        items = stream_items(agent, how, [], intent="q3", history=dspy.History(messages=prior))
    record = items[-1].metadata.context[-1]
    assert statuses(items) == [
        "Summarizing the earlier conversation to save context",
        f"Context: summarized 3 earlier entries ({record['tokens_before']:,} -> {record['tokens']:,} tokens)",
        "Prompt cache: this request starts a new prefix (the context policy changed earlier entries)",
        "Turn ended: answered",
    ]


def test_a_per_call_none_turns_the_programs_policy_off(run):
    lm = ScriptedLM([reply("", calls=[call("fetch", {"key": k})]) for k in "abc"] + [reply("done")])
    with dspy.context(lm=lm):
        pred = run(program(), intent="read", context=None)
    assert pred.metadata.context == ()
    assert not any("cleared" in str(m.get("content")) for m in lm.requests[-1].messages)


def test_a_malformed_recorded_view_is_refused_before_any_request(run):
    entry = {"intent": "q", "next_thought": "a", "answer": "a", "tool_calls": [], "tool_call_results": []}
    lm = ScriptedLM([reply("done")])
    for bad in ({"omitted": -1}, {"summary": 3}, {"cleared": "2"}, {"api_base": "x"}, "all"):
        with dspy.context(lm=lm), pytest.raises(dspy_imp.ConfigurationError, match="prompt_view"):
            run(program(), intent="q2", history=[{**entry, "prompt_view": bad}])
    assert lm.requests == []


def test_a_refusal_under_a_policy_still_leaves_out_episodes(run):
    prior = [
        {"intent": f"q{i}", "next_thought": f"a{i}", "answer": f"a{i}", "tool_calls": [], "tool_call_results": []}
        for i in range(4)
    ]
    lm = ScriptedLM([fail.context_window(), reply("fits now")])
    with dspy.context(lm=lm):
        pred = run(program(), intent="q4", history=prior)
    assert pred.answer == "fits now"
    assert pred.metadata.context_projection["omitted_prior_entries"] == 2
    assert [r["request"] for r in pred.metadata.context] == ["step", "step"]


def test_a_summarized_history_reloaded_sends_the_same_bytes(run):
    lm = ScriptedLM(agent_answer)
    agent = program(target=320)
    history = None
    with dspy.context(lm=lm):
        for i in range(2):
            history = run(agent, intent=f"read {i}", history=history).metadata.history
        shortened = lm.requests[-1]
        reloaded = dspy_imp.load_history(json.loads(json.dumps(dspy_imp.dump_history(history))))
        run(program(target=320, trigger=5000), intent="read 2", history=reloaded)
    first_of_next = lm.requests[len(lm.requests) - 2]
    assert first_of_next.messages[: len(shortened.messages)] == shortened.messages
    assert first_of_next.messages[1]["content"].startswith("Summary of the earlier conversation:")


def test_a_policy_that_changed_the_prefix_asks_for_drop_block_as_the_route_does():
    """One rule for every edited prefix (``settle_options``): the policy's requests ask for
    ``drop_block`` on a model that binds thinking, and only there."""
    from dspy_imp._routes.route import settle_options

    kwargs: dict = {}
    settle_options(dspy.LM("anthropic/claude-opus-5-5", thinking={"type": "adaptive"}), kwargs, True)
    assert kwargs["thinking"] == {"type": "adaptive", "block_binding": {"prefix_mismatch_behavior": "drop_block"}}
    unbound: dict = {}
    sonnet_4_5 = dspy.LM("anthropic/claude-sonnet-4-5", thinking={"type": "enabled", "budget_tokens": 1024})
    settle_options(sonnet_4_5, unbound, True)
    assert "block_binding" not in str(unbound)


def test_the_policy_reads_binding_from_the_model_facts_table():
    """Which models bind thinking to the prefix is the per-model facts table's (``docs/providers.md``)."""
    from dspy_imp._drivers.measure import model_facts

    assert [
        model_facts(m).binds_thinking
        for m in ("anthropic/claude-fable-5-1", "claude-opus-5-5-20261001", "claude-sonnet-4-5")
    ] == [True, True, False]


def test_the_summary_instruction_is_the_summarizers_and_survives_save_and_load(run, tmp_path):
    agent = program(target=320)
    agent.summarizer.signature = agent.summarizer.signature.with_instructions("Summarize in one line.")
    path = tmp_path / "agent.json"
    agent.save(str(path))
    loaded = program(target=320)
    loaded.load(str(path))
    lm = ScriptedLM(agent_answer)
    history = two_episodes(run, loaded, lm).metadata.history
    summaries = [r for r in lm.requests if r.messages[-1] == inputs(intent="Summarize in one line.")]
    assert len(summaries) == 1
    assert summaries[0].messages[0] == lm.requests[0].messages[0]  # the program's own system message
    assert history.messages[-1]["prompt_view"]["summary"] == SUMMARY


def written(thought, calls):
    return f"[[ ## answer ## ]]\n{thought}\n\n[[ ## tool_calls ## ]]\n{json.dumps(calls)}\n\n[[ ## completed ## ]]"


def test_written_calls_show_cleared_results_in_their_results_message(run):
    lm = ScriptedLM(
        [reply(written("reading", [{"name": "fetch", "arguments": {"key": k}}])) for k in "abc"]
        + [reply(written("done", []))],
        native=False,
    )
    with dspy.context(lm=lm):
        pred = run(program(summarize=False, leave_out=False), intent="read")
    results = [m["content"] for m in lm.requests[-1].messages if "[[ ## tool_call_results ## ]]" in str(m["content"])]
    assert results[0] == (
        "[[ ## tool_call_results ## ]]\nfetch (call_0_0): [The result of fetch (call_0_0) was cleared to save "
        "context; call the tool again if you need it.]"
    )
    assert results[-1].endswith(fetch("c"))
    assert pred.metadata.context[-1]["applied"][0]["tier"] == "clear"


def test_the_extractor_reads_the_history_as_the_view_shows_it(run):
    from helpers import SubmitSig

    fields = {"reasoning": "r", "answer": "x", "confidence": "0.5"}
    extracted = "\n\n".join(f"[[ ## {k} ## ]]\n{v}" for k, v in fields.items()) + "\n\n[[ ## completed ## ]]"
    lm = ScriptedLM(
        [reply("", calls=[call("fetch", {"key": k}, id=f"c{k}")]) for k in "ab"] + [reply("hm"), reply(extracted)]
    )
    context = dspy_imp.Context(trigger=400, target=300, window=5000, keep_results=1, counter=words)
    with dspy.context(lm=lm):
        pred = run(dspy_imp.ReActV2(SubmitSig, tools=[fetch], max_iters=2, context=context), intent="read")
    assert pred.metadata.termination_reason == "extracted"
    transcript = lm.requests[-1].messages[-1]["content"]
    assert 'call fetch({"key": "a"}) -> [The result of fetch (ca) was cleared' in transcript
    assert fetch("b") in transcript


@pytest.mark.parametrize(
    ("summary", "reason"),
    [
        pytest.param(reply("They asked for docu", finish_reason="content_filter"), "content_filter", id="filtered"),
        pytest.param(reply("They asked for", finish_reason="length"), "length", id="cut-at-max-tokens"),
        pytest.param(reply(" ".join(["Long."] * 2000)), "longer", id="longer-than-what-it-replaces"),
    ],
)
def test_a_bad_summary_is_not_used_and_the_next_tier_follows(run, summary, reason):
    def answer(request):
        last = request.messages[-1]
        if str(last.get("content")).startswith("[[ ## intent ## ]]\nSummarize"):
            return summary
        return agent_answer(request)

    lm = ScriptedLM(answer)
    agent = program(target=320)
    pred = two_episodes(run, agent, lm)

    last = lm.requests[-1]
    assert last.messages[1] == inputs(intent="read 1")  # the earlier episode left out, no summary shown
    meta = pred.metadata
    assert meta.usage.requests == {"step": 2, "summary": 1}
    applied = meta.context[-1]["applied"]
    assert [a["tier"] for a in applied] == ["clear", "summarize", "leave_out"]
    assert applied[1] == {
        "tier": "summarize",
        "failed": True,
        "reason": reason,
        "tokens_before": applied[0]["tokens_after"],
        "tokens_after": applied[0]["tokens_after"],
    }
    assert "summary" not in meta.history.messages[-1]["prompt_view"]


def test_a_summary_request_is_one_of_the_turns_requests_under_its_limits(run):
    lm = ScriptedLM(agent_answer)
    agent = program(target=320)
    with dspy.context(lm=lm):
        first = run(agent, intent="read 0")
        sent = len(lm.requests)
        pred = run(agent, intent="read 1", history=first.metadata.history, usage_limits={"requests": 2})
    meta = pred.metadata
    assert len(lm.requests) - sent == 2  # the summary took the second request: no step was sent after it
    assert meta.usage.requests == {"step": 1, "summary": 1}
    assert (meta.termination_reason, meta.termination_cause) == ("incomplete", "usage_limit_exceeded")


def test_no_step_leaves_after_a_summary_request_that_used_up_the_deadline(run, fake_clock):
    instruction = dspy_imp.ReActV2(TA, tools=[fetch]).summary_predictor().signature.instructions

    def slow_summary(request):
        if request.messages[-1] == inputs(intent=instruction):
            fake_clock.advance(60)  # the summary comes back after the deadline
        return agent_answer(request)

    lm = ScriptedLM(slow_summary)
    agent = program(target=320)
    with dspy.context(lm=lm):
        first = run(agent, intent="read 0")
        sent = len(lm.requests)
        with dspy_imp.deadline(seconds=30):
            pred = run(agent, intent="read 1", history=first.metadata.history)
    meta = pred.metadata
    assert len(lm.requests) - sent == 2 and meta.usage.requests == {"step": 1, "summary": 1}
    assert (meta.termination_reason, meta.termination_cause) == ("incomplete", "deadline_exceeded")
