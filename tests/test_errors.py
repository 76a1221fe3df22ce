"""Reference §12 J, §4.3 and §10: when a turn raises ``StepError``, and what it carries."""

from __future__ import annotations

import copy
import pickle
from typing import Any

import dspy
import pytest
from dspy.utils.exceptions import (
    LMAuthError,
    LMBillingError,
    LMConfigurationError,
    LMServerError,
    LMUnsupportedFeatureError,
    is_retryable_lm_error,
)
from helpers import NAMED_SUBMIT, TA, Look, SubmitSig, inputs, settled

import dspy_imp
from dspy_imp.testing import ScriptedLM, call, fail, reply

SERVER_MESSAGE = "The server had an error while processing your request. Sorry about that!"


def first_look(**keys: Any) -> dict[str, Any]:
    return {
        **keys,
        "tool_calls": [{"id": "first", "name": "look", "args": {"where": "shelf"}}],
        "tool_call_results": [{"id": "first", "name": "look", "result": {"seen": True}, "error": False}],
    }


def step_error(run: Any, agent: dspy_imp.ReActV2, lm: ScriptedLM, **kwargs: Any) -> dspy_imp.StepError:
    with dspy.context(lm=lm), pytest.raises(dspy_imp.StepError) as caught:
        run(agent, **kwargs)
    error = caught.value
    assert error.__cause__ is error.reason
    assert isinstance(error.history, dspy.History)
    assert str(error).startswith("ReActV2 turn got no model response: ")
    return error


FATAL = [
    pytest.param(lambda: LMBillingError("Your credit balance is too low.", status=402), id="billing"),
    pytest.param(lambda: LMAuthError("Incorrect API key provided.", status=401), id="auth"),
    pytest.param(lambda: LMConfigurationError("No route for this model."), id="configuration"),
    pytest.param(lambda: LMUnsupportedFeatureError("Tools are not supported.", feature="tools"), id="unsupported"),
]


# -- J1, J2: every request fails -------------------------------------------------------------------


def test_j1_a_failing_lm_raises_step_error_after_the_last_text_request(run):
    lm = ScriptedLM([fail.server_error(503), fail.server_error(503)])
    agent = dspy_imp.ReActV2(TA, tools=[Look()])
    error = step_error(run, agent, lm, intent="hello")

    assert isinstance(error.reason, LMServerError) and error.reason.status == 503
    assert is_retryable_lm_error(error.reason)
    assert SERVER_MESSAGE in str(error)
    assert len(lm.requests) == 2
    assert [r.tool_choice for r in lm.requests] == ["auto", "auto"]
    lm.assert_complete()


def test_j2_with_a_submit_signature_after_the_forced_submit(run):
    lm = ScriptedLM([fail.server_error(503), fail.server_error(503)])
    agent = dspy_imp.ReActV2(SubmitSig, tools=[Look()])
    error = step_error(run, agent, lm, intent="hello")

    assert isinstance(error.reason, LMServerError)
    assert len(lm.requests) == 2
    assert [r.tool_choice for r in lm.requests] == ["auto", NAMED_SUBMIT]
    lm.assert_complete()


# -- J3: fails on step 2 ---------------------------------------------------------------------------


def test_j3_failing_on_step_two_keeps_the_first_step_in_the_error_history(run):
    look = Look()
    lm = ScriptedLM(
        [reply(calls=[call("look", {"where": "shelf"}, id="first")]), fail.server_error(), fail.server_error()]
    )
    agent = dspy_imp.ReActV2(TA, tools=[look])
    error = step_error(run, agent, lm, intent="is it there?")

    assert len(lm.requests) == 3
    assert look.runs == [{"where": "shelf"}]
    assert settled(error.history.messages) == [first_look(intent="is it there?")]

    # Identical to the history of the same turn whose last request said nothing.
    quiet = ScriptedLM([reply(calls=[call("look", {"where": "shelf"}, id="first")]), fail.server_error(), reply("")])
    with dspy.context(lm=quiet):
        pred = run(agent, intent="is it there?")
    assert pred.metadata.termination_reason == "last_text"
    assert settled(pred.metadata.history.messages) == settled(error.history.messages)


# -- J4: a renderer raises -------------------------------------------------------------------------


def test_j4_a_tool_result_renderer_that_raises_on_step_two_raises_step_error(run):
    rendered: list[str] = []

    def renderer(tool_call: Any, result: Any) -> str:
        rendered.append(tool_call.id)
        raise ArgumentError("cannot render this result")

    class ArgumentError(ValueError):
        pass

    look = Look()
    lm = ScriptedLM([reply(calls=[call("look", {"where": "shelf"}, id="first")])])
    agent = dspy_imp.ReActV2(TA, tools=[look], tool_result_renderer=renderer)
    error = step_error(run, agent, lm, intent="is it there?")

    # The reason is the renderer's own exception, unchanged; step 2 and the last request never went out.
    assert isinstance(error.reason, ArgumentError)
    assert str(error.reason) == "cannot render this result"
    assert len(lm.requests) == 1
    assert rendered == ["first", "first"]  # step 2, then the last-text request
    assert look.runs == [{"where": "shelf"}]
    assert settled(error.history.messages) == [first_look(intent="is it there?")]
    lm.assert_complete()


# -- J5, J6: fatal provider errors -----------------------------------------------------------------


@pytest.mark.parametrize("make", FATAL)
def test_j5_a_fatal_error_on_step_two_raises_at_once(run, make):
    fatal = make()
    lm = ScriptedLM([reply(calls=[call("look", {"where": "shelf"}, id="first")]), fail.raises(fatal)])
    agent = dspy_imp.ReActV2(TA, tools=[Look()])
    error = step_error(run, agent, lm, intent="is it there?")

    assert error.reason is fatal
    assert len(lm.requests) == 2  # no last request
    assert settled(error.history.messages) == [first_look(intent="is it there?")]
    with pytest.raises(type(fatal)):
        raise error.reason
    lm.assert_complete()


@pytest.mark.parametrize("signature", [TA, SubmitSig], ids=["text-answer", "submit"])
@pytest.mark.parametrize("make", FATAL)
def test_j6_a_fatal_error_on_step_one_raises_after_one_request(run, make, signature):
    fatal = make()
    lm = ScriptedLM([fail.raises(fatal)])
    agent = dspy_imp.ReActV2(signature, tools=[Look()])
    error = step_error(run, agent, lm, intent="hello")

    assert error.reason is fatal
    assert len(lm.requests) == 1
    assert error.history.messages == [{"intent": "hello", "tool_calls": [], "tool_call_results": []}]
    lm.assert_complete()


def test_j6_a_guard_wrapped_inside_another_error_is_found(run):
    # Reference §10.1 / §4.3 step 1: the guard is found anywhere in the error, wrapped errors too.
    fatal = LMBillingError("Your credit balance is too low.", status=402)
    wrapper = RuntimeError("the client gave up")
    wrapper.__cause__ = fatal
    lm = ScriptedLM([fail.raises(wrapper), reply("From memory.")])
    agent = dspy_imp.ReActV2(TA, tools=[Look()])
    with dspy.context(lm=lm), pytest.raises(dspy_imp.StepError) as caught:
        run(agent, intent="hello")

    chain, error = [], caught.value.reason
    while error is not None:
        chain.append(error)
        error = error.__cause__
    assert fatal in chain
    assert len(lm.requests) == 1  # no last request


def test_j6_a_fatal_error_on_the_last_text_request_raises(run):
    fatal = LMBillingError("Your credit balance is too low.", status=402)
    lm = ScriptedLM([fail.server_error(503), fail.raises(fatal)])
    agent = dspy_imp.ReActV2(TA, tools=[Look()])
    error = step_error(run, agent, lm, intent="hello")
    assert error.reason is fatal
    assert len(lm.requests) == 2


# -- J7: content filter ----------------------------------------------------------------------------


@pytest.mark.parametrize("signature", [TA, SubmitSig], ids=["text-answer", "submit"])
def test_j7_a_content_filtered_step_raises_after_exactly_one_request(run, signature):
    lm = ScriptedLM([reply("", finish_reason="content_filter")])
    agent = dspy_imp.ReActV2(signature, tools=[Look()])
    error = step_error(run, agent, lm, intent="hello")

    assert "content filter" in str(error.reason)
    assert len(lm.requests) == 1
    assert error.history.messages == [{"intent": "hello", "tool_calls": [], "tool_call_results": []}]
    lm.assert_complete()


def test_j7_a_content_filtered_later_step_keeps_the_tools_that_ran(run):
    lm = ScriptedLM(
        [reply(calls=[call("look", {"where": "shelf"}, id="first")]), reply("", finish_reason="content_filter")]
    )
    agent = dspy_imp.ReActV2(TA, tools=[Look()])
    error = step_error(run, agent, lm, intent="is it there?")
    assert len(lm.requests) == 2
    assert settled(error.history.messages) == [first_look(intent="is it there?")]


# -- J8: recovery on the last request --------------------------------------------------------------


def test_j8_the_last_request_recovers_from_a_failed_step(run):
    lm = ScriptedLM([fail.server_error(503), reply("From memory: it is there.")])
    agent = dspy_imp.ReActV2(TA, tools=[Look()])
    with dspy.context(lm=lm):
        pred = run(agent, intent="is it there?")

    meta = pred.metadata
    assert (pred.answer, meta.termination_reason, meta.termination_cause) == (
        "From memory: it is there.",
        "last_text",
        "prediction_error",
    )
    assert meta.termination_error is None
    lm.assert_complete()


# -- J9: safe inspection ---------------------------------------------------------------------------


def test_j9_repr_shows_the_reason_and_the_count_never_inputs_or_results(run):
    def vault(key: str) -> str:
        """Open the vault."""
        return "TOOL-RESULT-GOLD-BARS"

    lm = ScriptedLM(
        [reply(calls=[call("vault", {"key": "KEY-ARG-77"}, id="v1")]), fail.server_error(), fail.server_error()]
    )
    agent = dspy_imp.ReActV2(TA, tools=[vault])
    error = step_error(run, agent, lm, intent="PRIVATE-INTENT-42")

    text = repr(error)
    assert text == f"StepError(reason={'LMServerError: ' + str(error.reason)!r}, history: 1 message)"
    assert SERVER_MESSAGE in text
    for secret in ("PRIVATE-INTENT-42", "TOOL-RESULT-GOLD-BARS", "KEY-ARG-77"):
        assert secret not in text
        assert secret not in str(error)


def test_j9_repr_counts_messages_in_the_plural(run):
    lm = ScriptedLM(
        [
            reply(calls=[call("look", {}, id="c1")]),
            reply(calls=[call("look", {}, id="c2")]),
            fail.server_error(),
            fail.server_error(),
        ]
    )
    agent = dspy_imp.ReActV2(TA, tools=[Look()])
    error = step_error(run, agent, lm, intent="hello")
    assert repr(error).endswith(", history: 2 messages)")

    empty = step_error(run, agent, ScriptedLM([fail.server_error(), fail.server_error()]), intent="hello")
    assert repr(empty).endswith(", history: 1 message)")  # the inputs, kept to resume


# -- the error's history, the caller's history, pickling -------------------------------------------


def test_step_error_history_holds_every_tool_that_ran(run):
    ran: list[str] = []

    def probe(name: str) -> str:
        """Probe a thing."""
        ran.append(name)
        return f"probed {name}"

    lm = ScriptedLM(
        [
            reply("two at once", calls=[call("probe", {"name": "a"}, id="p1"), call("probe", {"name": "b"}, id="p2")]),
            reply(calls=[call("probe", {"name": "c"}, id="p3")]),
            fail.raises(LMBillingError("Your credit balance is too low.", status=402)),
        ]
    )
    agent = dspy_imp.ReActV2(TA, tools=[probe])
    error = step_error(run, agent, lm, intent="probe everything")

    assert ran == ["a", "b", "c"]
    assert settled(error.history.messages) == [
        {
            "intent": "probe everything",
            "next_thought": "two at once",
            "tool_calls": [
                {"id": "p1", "name": "probe", "args": {"name": "a"}},
                {"id": "p2", "name": "probe", "args": {"name": "b"}},
            ],
            "tool_call_results": [
                {"id": "p1", "name": "probe", "result": "probed a", "error": False},
                {"id": "p2", "name": "probe", "result": "probed b", "error": False},
            ],
        },
        {
            "tool_calls": [{"id": "p3", "name": "probe", "args": {"name": "c"}}],
            "tool_call_results": [{"id": "p3", "name": "probe", "result": "probed c", "error": False}],
        },
    ]


def _prior_history() -> dspy.History:
    return dspy.History(
        messages=[
            {
                "intent": "earlier",
                "tool_calls": [{"id": "h1", "name": "look", "args": {"where": "attic"}}],
                "tool_call_results": [
                    {
                        "id": "h1",
                        "name": "look",
                        "result": {"seen": True},
                        "error": False,
                        "returned_at": "2025-01-01T00:00:00.000Z",
                    }
                ],
            },
            {"next_thought": "Seen.", "tool_calls": [], "tool_call_results": [], "answer": "Seen."},
        ]
    )


def test_the_callers_history_is_never_mutated(run):
    history = _prior_history()
    messages = history.messages
    before = copy.deepcopy(history.messages)
    lm = ScriptedLM([reply(calls=[call("look", {"where": "shelf"}, id="c1")]), reply("Still there.")])
    agent = dspy_imp.ReActV2(TA, tools=[Look()])
    with dspy.context(lm=lm):
        pred = run(agent, intent="and now?", history=history)

    assert history.messages is messages
    assert history.messages == before
    assert len(pred.metadata.history.messages) == 4
    assert pred.metadata.history is not history
    assert pred.metadata.history.messages[:2] == before


def test_the_callers_history_is_never_mutated_when_the_turn_fails(run):
    history = _prior_history()
    before = copy.deepcopy(history.messages)
    lm = ScriptedLM(
        [reply(calls=[call("look", {"where": "shelf"}, id="c1")]), fail.server_error(), fail.server_error()]
    )
    agent = dspy_imp.ReActV2(TA, tools=[Look()], last_request_note="Answer now.")
    error = step_error(run, agent, lm, intent="and now?", history=history)

    assert history.messages == before
    assert error.history.messages[:2] == before
    assert len(error.history.messages) == 4  # the new step and the note
    assert lm.requests[0].messages[1:4] == [
        inputs(intent="earlier"),
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "h1", "type": "function", "function": {"name": "look", "arguments": '{"where":"attic"}'}}
            ],
        },
        {"role": "tool", "tool_call_id": "h1", "content": '{"seen": true}'},
    ]


def _content_filtered(run: Any) -> dspy_imp.StepError:
    lm = ScriptedLM([reply(calls=[call("look", {}, id="c1")]), reply("", finish_reason="content_filter")])
    return step_error(run, dspy_imp.ReActV2(TA, tools=[Look()]), lm, intent="hello")


def _renderer_raised(run: Any) -> dspy_imp.StepError:
    def renderer(tool_call: Any, result: Any) -> str:
        raise ValueError("cannot render")

    lm = ScriptedLM([reply(calls=[call("look", {}, id="c1")])])
    return step_error(run, dspy_imp.ReActV2(TA, tools=[Look()], tool_result_renderer=renderer), lm, intent="hello")


def _provider_failed(run: Any) -> dspy_imp.StepError:
    lm = ScriptedLM([reply(calls=[call("look", {}, id="c1")]), fail.server_error(503), fail.server_error(503)])
    return step_error(run, dspy_imp.ReActV2(TA, tools=[Look()]), lm, intent="hello")


@pytest.mark.parametrize("make", [_content_filtered, _renderer_raised, _provider_failed])
def test_a_step_error_is_picklable(run, make):
    error = make(run)
    restored = pickle.loads(pickle.dumps(error))

    assert type(restored) is dspy_imp.StepError
    assert type(restored.reason) is type(error.reason)
    assert str(restored.reason) == str(error.reason)
    assert restored.history.messages == error.history.messages
    assert repr(restored) == repr(error)
    assert str(restored) == str(error)
