"""``fallback=[lm2, lm3]``: a request that fails with a provider error goes to the next LM (not a
content filter, not a context window); each hop is in ``metadata.fallbacks``."""

from __future__ import annotations

import dspy
import pytest
from helpers import TA, SubmitSig

import dspy_imp
from dspy_imp.testing import ScriptedLM, call, fail, reply


def lookup(query: str) -> str:
    """Look something up."""
    return f"found {query}"


def test_a_failed_request_goes_to_the_next_lm(run):
    primary = ScriptedLM([fail.server_error()], model="openai/primary")
    backup = ScriptedLM([reply("Paris.")], model="openai/backup")
    agent = dspy_imp.ReActV2(TA, tools=[lookup], fallback=[backup])
    with dspy.context(lm=primary):
        pred = run(agent, intent="capital of France")
    meta = pred.metadata
    assert (meta.termination_reason, pred.answer) == ("answered", "Paris.")
    [hop] = meta.fallbacks
    assert (hop["kind"], hop["model"], hop["next"]) == ("step", "openai/primary", "openai/backup")
    assert hop["error"].startswith("LMServerError")
    assert backup.requests[0].messages == primary.requests[0].messages  # the same request, to the next LM
    assert meta.usage.requests == {"step": 2}
    primary.assert_complete()
    backup.assert_complete()


def test_every_request_starts_at_the_first_lm(run):
    primary = ScriptedLM([fail.rate_limit(), reply("Paris.")], model="openai/primary")
    backup = ScriptedLM([reply(calls=[call("lookup", {"query": "france"}, id="c1")])], model="openai/backup")
    agent = dspy_imp.ReActV2(TA, tools=[lookup], fallback=[backup])
    with dspy.context(lm=primary):
        pred = run(agent, intent="capital of France")
    assert pred.answer == "Paris." and len(pred.metadata.fallbacks) == 1
    primary.assert_complete()


def test_the_chain_goes_on_and_the_last_failure_is_the_turns(run):
    first = ScriptedLM([fail.server_error(), fail.server_error()], model="openai/a")
    second = ScriptedLM([fail.rate_limit(), fail.rate_limit()], model="openai/b")
    third = ScriptedLM([fail.server_error(503), fail.server_error(502)], model="openai/c")
    agent = dspy_imp.ReActV2(TA, tools=[lookup], fallback=[second, third])
    with dspy.context(lm=first), pytest.raises(dspy_imp.StepError) as failed:
        run(agent, intent="x")
    assert type(failed.value.reason).__name__ == "LMServerError"
    assert failed.value.usage.requests == {"step": 3, "last_text": 3}  # the step, then its last-text request
    for lm in (first, second, third):
        lm.assert_complete()


def test_a_context_window_refusal_does_not_fall_back(run):
    primary = ScriptedLM([fail.context_window()], model="openai/primary")
    backup = ScriptedLM([], model="openai/backup")
    agent = dspy_imp.ReActV2(TA, tools=[lookup], fallback=[backup])
    with dspy.context(lm=primary):
        pred = run(agent, intent="x")
    assert pred.metadata.termination_cause == "context_window_exceeded"
    assert backup.requests == [] and pred.metadata.fallbacks == ()


def test_a_content_filtered_reply_does_not_fall_back(run):
    primary = ScriptedLM([reply("", finish_reason="content_filter")], model="openai/primary")
    backup = ScriptedLM([], model="openai/backup")
    agent = dspy_imp.ReActV2(TA, tools=[lookup], fallback=[backup])
    with dspy.context(lm=primary), pytest.raises(dspy_imp.StepError):
        run(agent, intent="x")
    assert backup.requests == []


def test_the_forced_submit_falls_back_too(run):
    primary = ScriptedLM(
        [reply(calls=[call("lookup", {"query": "a"}, id="c1")]), fail.server_error()], model="openai/primary"
    )
    backup = ScriptedLM([reply(calls=[call("submit", {"answer": "a", "confidence": 1.0})])], model="openai/backup")
    agent = dspy_imp.ReActV2(SubmitSig, tools=[lookup], max_iters=1, fallback=[backup])
    with dspy.context(lm=primary):
        pred = run(agent, intent="x")
    assert pred.metadata.termination_reason == "forced_submit"
    assert [h["kind"] for h in pred.metadata.fallbacks] == ["forced_submit"]
    assert backup.requests[0].tool_choice == {"type": "function", "function": {"name": "submit"}}


@pytest.mark.parametrize("value", ["openai/gpt-4o", ["openai/gpt-4o"], [object()]])
def test_bad_fallbacks_are_refused(value):
    with pytest.raises(dspy_imp.ConfigurationError, match="fallback"):
        dspy_imp.ReActV2(TA, tools=[lookup], fallback=value)


def test_the_extraction_request_falls_back_too(run):
    primary = ScriptedLM(
        [
            reply(calls=[call("lookup", {"query": "a"}, id="c1")]),
            reply("I think it is a."),  # the forced submit got text: the extractor is asked
            fail.server_error(),
        ],
        model="openai/primary",
    )
    extracted = (
        "[[ ## reasoning ## ]]\nIt said a.\n\n[[ ## answer ## ]]\na\n\n"
        "[[ ## confidence ## ]]\n0.5\n\n[[ ## completed ## ]]"
    )
    backup = ScriptedLM([reply(extracted)], model="openai/backup")
    agent = dspy_imp.ReActV2(SubmitSig, tools=[lookup], max_iters=1, fallback=[backup])
    with dspy.context(lm=primary):
        pred = run(agent, intent="x")
    assert (pred.metadata.termination_reason, pred.answer, pred.confidence) == ("extracted", "a", 0.5)
    assert [(h["kind"], h["next"]) for h in pred.metadata.fallbacks] == [("extraction", "openai/backup")]


def _team(**child_options):
    child = dspy_imp.ReActV2("question -> findings", tools=[lookup], **child_options)
    return child, child.as_tool(name="researcher")


def test_a_sub_agent_without_fallbacks_inherits_its_callers_chain(run):
    primary = ScriptedLM(
        [reply(calls=[call("researcher", {"question": "where?"}, id="p1")]), fail.server_error(), fail.server_error()],
        model="openai/primary",
    )  # the parent's first step, then the child's step fails, then the parent's second
    backup = ScriptedLM([reply("In Lyon."), reply("It is in Lyon.")], model="openai/backup")
    _, tool = _team()
    agent = dspy_imp.ReActV2("ticket -> reply", tools=[tool], fallback=[backup])
    with dspy.context(lm=primary):
        pred = run(agent, ticket="Where is my order?")
    assert pred.reply == "It is in Lyon."
    record = pred.metadata.history.messages[0]["agent_runs"]["p1"]
    assert record["termination_reason"] == "answered" and record["history"][0]["next_thought"] == "In Lyon."
    [hop] = pred.metadata.fallbacks  # the parent's own; the child's hop is in its own record
    assert (hop["model"], hop["next"]) == ("openai/primary", "openai/backup")
    assert backup.requests[0].messages[-1] == {"role": "user", "content": "[[ ## question ## ]]\nwhere?"}
    primary.assert_complete()
    backup.assert_complete()


def test_a_sub_agent_with_its_own_chain_keeps_it(run):
    own = ScriptedLM([reply("In Lyon.")], model="openai/own")
    callers = ScriptedLM([], model="openai/callers")
    child, tool = _team(fallback=[own])
    child.react.lm = ScriptedLM([fail.server_error()], model="openai/child")
    lm = ScriptedLM([reply(calls=[call("researcher", {"question": "where?"}, id="p1")]), reply("Lyon.")])
    agent = dspy_imp.ReActV2("ticket -> reply", tools=[tool], fallback=[callers])
    with dspy.context(lm=lm):
        pred = run(agent, ticket="Where is my order?")
    assert pred.reply == "Lyon." and not callers.requests
    own.assert_complete()
