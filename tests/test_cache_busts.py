"""Cache busts: a request that does not extend the one before is reported, with its reason, in
``metadata.cache_busts``, the status line and the request's span (``_turn.busts``)."""

from __future__ import annotations

import dspy
import pytest
from helpers import TA, SubmitSig
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from streaming_helpers import statuses, stream_items

import dspy_imp
import dspy_imp.tracing
from dspy_imp._routes.caching import rereads_messages_on_choice
from dspy_imp.testing import ScriptedLM, call, fail, reply


def fetch(key: str) -> str:
    """Fetch a document."""
    return " ".join(f"{key}{i}" for i in range(200))


def words(messages, tools, model):
    return sum(91 if m["role"] == "system" else len(str(m.get("content") or "").split()) for m in messages)


def three_fetches():
    return [reply("", calls=[call("fetch", {"key": k}, id=f"c{i}")]) for i, k in enumerate("abc", 1)] + [reply("done")]


def test_a_turn_that_only_extends_its_requests_reports_no_bust(run):
    lm = ScriptedLM(three_fetches())
    with dspy.context(lm=lm):
        pred = run(dspy_imp.ReActV2(TA, tools=[fetch]), intent="read")
    assert pred.metadata.cache_busts == ()
    lm.assert_complete()


def test_a_context_tier_is_a_bust_of_that_request(run):
    lm = ScriptedLM(three_fetches())
    policy = dspy_imp.Context(trigger=500, target=300, window=1000, keep_results=1, counter=words, summarize=False)
    with dspy.context(lm=lm):
        pred = run(dspy_imp.ReActV2(TA, tools=[fetch], context=policy), intent="read")
    assert pred.metadata.cache_busts == ({"request": 3, "kind": "step", "reason": "context_policy"},)
    assert [bool(c.get("applied")) for c in pred.metadata.context] == [False, False, False, True]
    lm.assert_complete()


def test_a_fallback_hop_is_a_bust_and_coming_back_is_not(run):
    primary = ScriptedLM([fail.server_error(), reply("", calls=[call("fetch", {"key": "a"}, id="c1")]), reply("done")])
    backup = ScriptedLM([reply("", calls=[call("fetch", {"key": "b"}, id="c0")])], model="openai/backup")
    with dspy.context(lm=primary):
        pred = run(dspy_imp.ReActV2(TA, tools=[fetch], fallback=[backup]), intent="read")
    # request 1 goes to the backup (nothing of the turn in its cache); 2 and 3 extend the primary's own first
    assert pred.metadata.cache_busts == ({"request": 1, "kind": "step", "reason": "fallback"},)
    assert len(pred.metadata.usage.calls) == 4
    primary.assert_complete()
    backup.assert_complete()


def test_an_edited_history_is_a_bust_of_the_next_calls_first_request(run):
    agent = dspy_imp.ReActV2(TA, tools=[fetch])
    lm = ScriptedLM(
        [reply("", calls=[call("fetch", {"key": "a"}, id="c1")]), reply("one"), reply("two"), reply("3"), reply("4")]
    )
    with dspy.context(lm=lm):
        first = run(agent, intent="read")
        again = run(agent, intent="more", history=first.metadata.history)  # as returned: it extends
        entries = [dict(e) for e in again.metadata.history.messages]
        entries[0]["intent"] = "read it all"  # edited
        edited = run(agent, intent="last", history=dspy.History(messages=entries))
        rebuilt = run(agent, intent="and", history=edited.metadata.history)
    assert (first.metadata.cache_busts, again.metadata.cache_busts, rebuilt.metadata.cache_busts) == ((), (), ())
    assert edited.metadata.cache_busts == ({"request": 0, "kind": "step", "reason": "history_edited"},)
    lm.assert_complete()


def test_a_history_trimmed_at_its_start_is_an_edit_and_one_cut_at_its_end_is_not(run):
    agent = dspy_imp.ReActV2(TA, tools=[fetch])
    lm = ScriptedLM([reply("one"), reply("two"), reply("three"), reply("four")])
    with dspy.context(lm=lm):
        first = run(agent, intent="read")
        second = run(agent, intent="more", history=first.metadata.history)
        entries = second.metadata.history.messages
        trimmed = run(agent, intent="again", history=dspy.History(messages=entries[1:]))
        branched = run(agent, intent="back", history=dspy.History(messages=entries[:1]))  # an earlier point
    assert trimmed.metadata.cache_busts == ({"request": 0, "kind": "step", "reason": "history_edited"},)
    assert (second.metadata.cache_busts, branched.metadata.cache_busts) == ((), ())
    lm.assert_complete()


def test_the_status_line_names_a_bust(how):
    primary = ScriptedLM([fail.server_error()], model="openai/a")
    backup = ScriptedLM([reply("Paris.")], model="openai/b")
    agent = dspy_imp.ReActV2(TA, tools=[fetch], fallback=[backup])
    with dspy.context(lm=primary):
        lines = statuses(stream_items(agent, how, [], intent="capital?"))
    assert lines == [
        "Trying openai/b after LMServerError",
        "Prompt cache: this request starts a new prefix (another model)",
        "Turn ended: answered",
    ]


def test_the_requests_span_carries_a_bust_event(run):
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    primary = ScriptedLM([fail.server_error()], model="openai/a")
    backup = ScriptedLM([reply("Paris.")], model="openai/b")
    dspy_imp.tracing.instrument(tracer_provider=provider)
    try:
        with dspy.context(lm=primary):
            run(dspy_imp.ReActV2(TA, tools=[fetch], fallback=[backup]), intent="capital?")
    finally:
        dspy_imp.tracing.uninstrument()
    requests = sorted(
        (s for s in exporter.get_finished_spans() if s.name.startswith("chat")), key=lambda s: s.start_time
    )
    assert [s.name for s in requests] == ["chat a", "chat b"]
    assert [[(e.name, dict(e.attributes)) for e in s.events] for s in requests] == [
        [],
        [("dspy_imp.cache_bust", {"dspy_imp.cache_bust.reason": "fallback"})],
    ]


def test_the_required_retrys_smaller_tool_list_is_a_bust(run):
    answer = call("submit", {"answer": "Paris", "confidence": 0.9}, id="s2")
    lm = ScriptedLM([reply(calls=[call("submit", {}, id="s0")]), fail.tool_choice_refused(), reply(calls=[answer])])
    with dspy.context(lm=lm):
        pred = run(dspy_imp.ReActV2(SubmitSig, tools=[fetch], max_iters=1), intent="capital of France?")
    assert pred.metadata.termination_reason == "forced_submit"
    assert pred.metadata.cache_busts == ({"request": 2, "kind": "required_retry", "reason": "tools_changed"},)
    lm.assert_complete()


def test_the_forced_submit_on_claude_is_a_bust_and_elsewhere_is_not(run):
    answer = call("submit", {"answer": "Paris", "confidence": 0.9}, id="s1")
    for model, busts in (
        ("anthropic/claude-sonnet-4-5", ({"request": 1, "kind": "forced_submit", "reason": "tool_choice_changed"},)),
        ("openai/gpt-4o-mini", ()),
    ):
        lm = ScriptedLM([reply(calls=[call("fetch", {"key": "a"}, id="c0")]), reply(calls=[answer])], model=model)
        with dspy.context(lm=lm):
            pred = run(dspy_imp.ReActV2(SubmitSig, tools=[fetch], max_iters=1), intent="capital of France?")
        assert pred.metadata.termination_reason == "forced_submit"
        assert [r.tool_choice for r in lm.requests] == ["auto", {"type": "function", "function": {"name": "submit"}}]
        assert pred.metadata.cache_busts == busts, model
        lm.assert_complete()


@pytest.mark.parametrize(
    ("model", "keyed"),
    [
        ("anthropic/claude-sonnet-4-5", True),
        ("claude-3-5-haiku-latest", True),
        ("bedrock/us.anthropic.claude-sonnet-4-5-20250929-v1:0", True),
        ("vertex_ai/claude-opus-4-5", True),
        ("openrouter/anthropic/claude-sonnet-4.5", True),
        ("anthropic/claude-fable-5-1", False),  # refuses a forced choice: its forced submit goes out "auto"
        ("openrouter/anthropic/claude-opus-5.5", False),
        ("openrouter/google/gemini-2.5-pro", False),
        ("openai/gpt-4o-mini", False),
        ("openai/claude-behind-my-proxy", False),  # a compatible server: its cache is not known
        ("ScriptedLM", False),
    ],
)
def test_which_models_read_the_messages_again_on_a_new_tool_choice(model, keyed):
    assert rereads_messages_on_choice(model) is keyed


def test_replaying_the_last_turn_as_its_actions_is_a_bust_when_it_drops_what_that_turn_sent(run):
    look = [reply("I will fetch it.", calls=[call("fetch", {"key": "a"}, id="c1")]), reply("found")]
    quiet = [reply("", calls=[call("fetch", {"key": "b"}, id="c2")]), reply("found")]
    lm = ScriptedLM([*look, *quiet, *quiet, *look, *quiet])
    actions = dspy_imp.ReActV2(TA, tools=[fetch], history_replay="actions")
    trajectory = dspy_imp.ReActV2(TA, tools=[fetch])
    with dspy.context(lm=lm):
        first = run(actions, intent="one")
        narrated = run(actions, intent="two", history=first.metadata.history)  # turn one narrated its call
        silent = run(actions, intent="three", history=narrated.metadata.history)  # turn two did not
        kept = run(trajectory, intent="one")
        whole = run(trajectory, intent="two", history=kept.metadata.history)
    assert narrated.metadata.cache_busts == ({"request": 0, "kind": "step", "reason": "history_replay"},)
    assert (first.metadata.cache_busts, silent.metadata.cache_busts, whole.metadata.cache_busts) == ((), (), ())
    lm.assert_complete()
