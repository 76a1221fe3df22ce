"""Reference §12 C: the last-text request of an interrupted text-answer turn (§3.3, §4.3)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import dspy
import pytest
from dspy.utils.exceptions import LMServerError, LMUnexpectedError, is_retryable_lm_error
from helpers import TA, Look, assistant, inputs, settled, tool

import dspy_imp
from dspy_imp.testing import ScriptedLM, call, fail, reply

SERVER_MESSAGE = "The server had an error while processing your request. Sorry about that!"


def look_result(call_id: str) -> dict[str, Any]:
    return {"id": call_id, "name": "look", "result": {"seen": True}, "error": False}


def look_step(call_id: str, where: str = "shelf", **keys: Any) -> dict[str, Any]:
    return {
        **keys,
        "tool_calls": [{"id": call_id, "name": "look", "args": {"where": where}}],
        "tool_call_results": [look_result(call_id)],
    }


def look_call(call_id: str, where: str = "shelf") -> tuple[str, str, str]:
    return (call_id, "look", f'{{"where":"{where}"}}')


def publish(text: str) -> str:
    """Publish a text."""
    PUBLISHED.append(text)
    return f"published: {text}"


PUBLISHED: list[str] = []


@pytest.fixture(autouse=True)
def _no_publications():
    PUBLISHED.clear()
    yield
    PUBLISHED.clear()


# -- C1–C4: step limit, note, nothing added, an empty last reply -----------------------------------


def test_c1_step_limit_makes_one_more_ordinary_request(run):
    look = Look()
    text = "Two looks were enough: the thing is there."
    lm = ScriptedLM(
        [
            reply(calls=[call("look", {"where": "shelf"}, id="c1")]),
            reply(calls=[call("look", {"where": "box"}, id="c2")]),
            reply(text),
        ]
    )
    agent = dspy_imp.ReActV2(TA, tools=[look], max_iters=2)
    with dspy.context(lm=lm):
        pred = run(agent, intent="is it there?")

    assert len(lm.requests) == 3
    r1, r2, r3 = lm.requests
    system = r1.messages[0]
    assert system["role"] == "system"
    assert r2.messages == [
        system,
        inputs(intent="is it there?"),
        assistant("", [look_call("c1")]),
        tool("c1", '{"seen": true}'),
    ]
    # The last-text request is the ordinary step-3 request: nothing of the loop's own added.
    assert r3.messages == [*r2.messages, assistant("", [look_call("c2", "box")]), tool("c2", '{"seen": true}')]
    assert [r.tool_choice for r in lm.requests] == ["auto", "auto", "auto"]
    assert r3.tools == r1.tools and r3.tool_names == ["look"]
    assert r3.options == r1.options

    assert pred.answer == text
    assert list(pred.keys()) == ["answer"]
    meta = pred.metadata
    assert (meta.termination_reason, meta.termination_cause) == ("last_text", "max_iters")
    assert meta.termination_error is None and meta.unexecuted_tool_calls == ()
    assert meta.finish_reason == "stop" and meta.complete
    assert settled(meta.history.messages) == [
        look_step("c1", intent="is it there?"),
        look_step("c2", where="box"),
        {"next_thought": text, "tool_calls": [], "tool_call_results": [], "answer": text},
    ]
    assert look.runs == [{"where": "shelf"}, {"where": "box"}]
    lm.assert_complete()


NOTE = "You have used every step. Answer now, in your own words."


def test_c2_the_note_is_the_last_user_message_and_is_recorded(run):
    lm = ScriptedLM([reply(calls=[call("look", {"where": "shelf"}, id="c1")]), reply("The thing is there.")])
    agent = dspy_imp.ReActV2(TA, tools=[Look()], max_iters=1, last_request_note=NOTE)
    with dspy.context(lm=lm):
        pred = run(agent, intent="is it there?")

    assert len(lm.requests) == 2
    r1, r2 = lm.requests
    assert r2.messages == [
        r1.messages[0],
        inputs(intent="is it there?"),
        assistant("", [look_call("c1")]),
        tool("c1", '{"seen": true}'),
        inputs(intent=NOTE),
    ]
    assert r2.tool_choice == "auto" and r2.tool_names == ["look"]
    meta = pred.metadata
    assert (pred.answer, meta.termination_reason, meta.termination_cause) == (
        "The thing is there.",
        "last_text",
        "max_iters",
    )
    assert settled(meta.history.messages) == [
        look_step("c1", intent="is it there?"),
        {"intent": NOTE, "tool_calls": [], "tool_call_results": []},
        {
            "next_thought": "The thing is there.",
            "tool_calls": [],
            "tool_call_results": [],
            "answer": "The thing is there.",
        },
    ]
    lm.assert_complete()


def test_c3_without_a_note_nothing_is_added(run):
    lm = ScriptedLM([reply(calls=[call("look", {"where": "shelf"}, id="c1")]), reply("The thing is there.")])
    agent = dspy_imp.ReActV2(TA, tools=[Look()], max_iters=1)
    with dspy.context(lm=lm):
        pred = run(agent, intent="is it there?")

    first, last = (r.messages for r in lm.requests)
    assert len(last) == len(first) + 2
    assert last[: len(first)] == first
    assert last[-1] == tool("c1", '{"seen": true}')
    assert len(pred.metadata.history.messages) == 2
    assert pred.metadata.termination_reason == "last_text"


def test_c4_a_last_request_that_says_nothing_is_an_empty_answer(run):
    lm = ScriptedLM([reply(calls=[call("look", {"where": "shelf"}, id="c1")]), reply("")])
    agent = dspy_imp.ReActV2(TA, tools=[Look()], max_iters=1)
    with dspy.context(lm=lm):
        pred = run(agent, intent="is it there?")

    assert pred.answer is None
    meta = pred.metadata
    assert (meta.termination_reason, meta.termination_cause) == ("last_text", "max_iters")
    assert meta.termination_error is None
    assert meta.complete
    # A reply with no text and no executed call records nothing.
    assert settled(meta.history.messages) == [look_step("c1", intent="is it there?")]
    lm.assert_complete()


# -- C5, C6, C8, C9: failed steps and calls on the last request ------------------------------------


def test_c5_a_failed_first_step_gets_the_last_request_inputs_before_the_note(run):
    text = "I could not look, so from memory: it is there."
    lm = ScriptedLM([fail.server_error(503), reply(text)])
    agent = dspy_imp.ReActV2(TA, tools=[Look()], last_request_note="Last one.")
    with dspy.context(lm=lm):
        pred = run(agent, intent="hello")

    assert len(lm.requests) == 2
    r1, r2 = lm.requests
    assert r1.messages == [r1.messages[0], inputs(intent="hello")]
    assert r2.messages == [r1.messages[0], inputs(intent="hello"), inputs(intent="Last one.")]
    assert (r1.tool_choice, r2.tool_choice) == ("auto", "auto")
    assert r2.tool_names == ["look"]
    meta = pred.metadata
    assert (pred.answer, meta.termination_reason, meta.termination_cause) == (text, "last_text", "prediction_error")
    assert meta.history.messages == [
        {"intent": "hello", "tool_calls": [], "tool_call_results": []},
        {"intent": "Last one.", "tool_calls": [], "tool_call_results": []},
        {"next_thought": text, "tool_calls": [], "tool_call_results": [], "answer": text},
    ]
    lm.assert_complete()


def test_c6_the_last_request_failing_too_raises_step_error(run):
    lm = ScriptedLM([fail.server_error(503), fail.server_error(503)])
    agent = dspy_imp.ReActV2(TA, tools=[Look()])
    with dspy.context(lm=lm), pytest.raises(dspy_imp.StepError) as caught:
        run(agent, intent="hello")

    error = caught.value
    assert isinstance(error.reason, LMServerError)
    assert error.reason.status == 503
    assert is_retryable_lm_error(error.reason)
    assert error.__cause__ is error.reason
    assert SERVER_MESSAGE in str(error)
    assert isinstance(error.history, dspy.History)
    assert len(lm.requests) == 2
    assert lm.requests[1].messages == lm.requests[0].messages
    assert [r.tool_choice for r in lm.requests] == ["auto", "auto"]
    lm.assert_complete()


class SlowLook(Look):
    """Takes 0.5 s on the test's clock, and is still running when the deadline passes."""

    def __init__(self, clock: Any) -> None:
        super().__init__()
        self.clock, self.release = clock, threading.Event()

    def __call__(self, where: str = "here") -> dict[str, bool]:
        self.clock.advance(0.5)
        self.release.wait(30)
        return super().__call__(where)


@pytest.fixture
def slow_look(fake_clock: Any) -> Iterator[SlowLook]:
    look = SlowLook(fake_clock)
    yield look
    look.release.set()


def test_c7_a_passed_deadline_sends_no_last_request(run, slow_look):
    look = slow_look
    lm = ScriptedLM([reply(calls=[call("look", {"where": "shelf"}, id="c1")])])
    agent = dspy_imp.ReActV2(TA, tools=[look], max_iters=1, last_request_note="Last one.")
    with dspy.context(lm=lm), dspy_imp.deadline(seconds=0.2):
        pred = run(agent, intent="is it there?")

    assert len(lm.requests) == 1
    assert pred.answer is None and dict(pred) == {"answer": None}
    meta = pred.metadata
    assert (meta.termination_reason, meta.termination_cause) == ("incomplete", "deadline_exceeded")
    assert not meta.complete and not dspy_imp.is_complete(pred)
    assert meta.termination_error is None
    # The note is not recorded; the deadline stopped the slow tool (issue 25: it bounds tool time too).
    stopped = {"id": "c1", "name": "look", "result": "look was stopped: the turn's deadline passed", "error": True}
    [step] = settled(meta.history.messages)
    assert step == {
        **look_step("c1", intent="is it there?"),
        "tool_call_results": [{**stopped, "error_kind": "tool_timeout"}],
    }
    assert "Last one." not in str(meta.history.messages)
    lm.assert_complete()


def test_c8_a_call_on_the_last_request_is_not_run(run):
    look = Look()
    text = "One more look, then: it is there."
    lm = ScriptedLM(
        [
            reply(calls=[call("look", {"where": "box"}, id="c1")]),
            reply(text, calls=[call("look", {"where": "shelf"}, id="late")]),
        ]
    )
    agent = dspy_imp.ReActV2(TA, tools=[look], max_iters=1)
    with dspy.context(lm=lm):
        pred = run(agent, intent="is it there?")

    assert look.runs == [{"where": "box"}]
    meta = pred.metadata
    assert (pred.answer, meta.termination_reason, meta.termination_cause) == (text, "last_text", "max_iters")
    assert meta.unexecuted_tool_calls == ({"id": "late", "name": "look", "args": {"where": "shelf"}},)
    assert settled(meta.history.messages) == [
        look_step("c1", where="box", intent="is it there?"),
        {"next_thought": text, "tool_calls": [], "tool_call_results": [], "answer": text},
    ]
    lm.assert_complete()


def test_c9_after_a_failed_step_the_last_request_wants_a_tool(run):
    ran: list[bool] = []

    def identity_status() -> str:
        """Check the caller's identity."""
        ran.append(True)
        return "verified"

    lm = ScriptedLM([fail.server_error(503), reply(calls=[call("identity_status", {}, id="wanted")])])
    agent = dspy_imp.ReActV2(TA, tools=[identity_status])
    with dspy.context(lm=lm):
        pred = run(agent, intent="who am I?")

    assert ran == []
    assert [r.tool_choice for r in lm.requests] == ["auto", "auto"]
    assert lm.requests[1].tool_names == ["identity_status"]
    meta = pred.metadata
    assert pred.answer == ""  # calls only: an empty answer (issue 23; the reference said nil)
    assert (meta.termination_reason, meta.termination_cause) == ("last_text", "prediction_error")
    assert meta.unexecuted_tool_calls == ({"id": "wanted", "name": "identity_status", "args": {}},)
    # Said nothing and ran nothing: nothing recorded (the unexecuted call stays out of the history).
    assert meta.history.messages == []
    lm.assert_complete()


# -- C10: never tool_choice "none" -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("script", "agent_kwargs", "call_kwargs"),
    [
        pytest.param([reply(calls=[call("look", {}, id="c1")]), reply("a")], {"max_iters": 1}, {}, id="max_iters"),
        pytest.param(
            [reply(calls=[call("look", {}, id="c1")]), reply("a", calls=[call("look", {}, id="c2")])],
            {"max_iters": 1, "last_request_note": "Answer now."},
            {},
            id="max_iters-note-unexecuted",
        ),
        pytest.param([fail.server_error(503), reply("b")], {}, {}, id="prediction_error"),
        pytest.param([fail.raises(RuntimeError("boom")), reply("c")], {}, {}, id="raised"),
        pytest.param(
            [reply("c")],
            {},
            {"max_iters": 0, "last_request_note": "Summarise."},
            id="resume-max_iters-0",
        ),
    ],
)
def test_c10_no_request_ever_carries_tool_choice_none(run, script, agent_kwargs, call_kwargs):
    lm = ScriptedLM(script)
    agent = dspy_imp.ReActV2(TA, tools=[Look()], **agent_kwargs)
    with dspy.context(lm=lm):
        pred = run(agent, intent="hello", **call_kwargs)

    assert pred.metadata.termination_reason == "last_text"
    choices = [r.tool_choice for r in lm.requests]
    assert "none" not in choices
    assert choices == ["auto"] * len(script)
    assert all(r.tool_names == ["look"] for r in lm.requests)
    lm.assert_complete()


# -- C11 (replaced): a step whose client raised a plain exception ----------------------------------


def test_c11_a_step_whose_client_raises_is_a_prediction_error_then_the_last_request(run):
    lm = ScriptedLM([fail.raises(RuntimeError("socket closed unexpectedly")), reply("Answered after all.")])
    agent = dspy_imp.ReActV2(TA, tools=[Look()])
    with dspy.context(lm=lm):
        pred = run(agent, intent="hello")

    assert len(lm.requests) == 2
    assert [r.tool_choice for r in lm.requests] == ["auto", "auto"]
    assert lm.requests[1].messages == lm.requests[0].messages
    meta = pred.metadata
    assert (pred.answer, meta.termination_reason, meta.termination_cause) == (
        "Answered after all.",
        "last_text",
        "prediction_error",
    )
    assert meta.termination_error is None
    lm.assert_complete()


def test_c11_a_client_that_raises_on_both_requests_raises_step_error_with_that_error(run):
    lm = ScriptedLM([fail.raises(RuntimeError("socket closed")), fail.raises(RuntimeError("socket closed again"))])
    agent = dspy_imp.ReActV2(TA, tools=[Look()])
    with dspy.context(lm=lm), pytest.raises(dspy_imp.StepError) as caught:
        run(agent, intent="hello")

    reason = caught.value.reason
    # DSPy wraps an unclassified engine failure; the loop passes it on unchanged.
    assert isinstance(reason, LMUnexpectedError)
    assert isinstance(reason.__cause__, RuntimeError) and str(reason.__cause__) == "socket closed again"
    assert len(lm.requests) == 2


# -- C12, C13: last_request_tools ------------------------------------------------------------------


def test_c12_last_request_tools_runs_the_listed_tool_only(run):
    look = Look()
    lm = ScriptedLM(
        [
            reply(calls=[call("look", {"where": "box"}, id="c1")]),
            reply(
                "Published.",
                calls=[call("publish", {"text": "hello"}, id="p1"), call("look", {"where": "shelf"}, id="l2")],
            ),
        ]
    )
    agent = dspy_imp.ReActV2(TA, tools=[look, publish], max_iters=1, last_request_tools=["publish"])
    with dspy.context(lm=lm):
        pred = run(agent, intent="publish it")

    assert PUBLISHED == ["hello"]
    assert look.runs == [{"where": "box"}]
    assert lm.requests[1].tool_names == ["look", "publish"] and lm.requests[1].tool_choice == "auto"
    meta = pred.metadata
    assert (pred.answer, meta.termination_reason, meta.termination_cause) == ("Published.", "last_text", "max_iters")
    assert meta.unexecuted_tool_calls == ({"id": "l2", "name": "look", "args": {"where": "shelf"}},)
    assert settled(meta.history.messages) == [
        look_step("c1", where="box", intent="publish it"),
        {
            "next_thought": "Published.",
            "tool_calls": [{"id": "p1", "name": "publish", "args": {"text": "hello"}}],
            "tool_call_results": [{"id": "p1", "name": "publish", "result": "published: hello", "error": False}],
            "answer": "Published.",
        },
    ]
    lm.assert_complete()


def test_c13_last_request_tools_meets_a_finish_on_hook(run):
    look = Look()
    lm = ScriptedLM(
        [
            reply(calls=[call("look", {"where": "box"}, id="c1")]),
            reply(
                "Published.",
                calls=[call("publish", {"text": "hello"}, id="p1"), call("look", {"where": "shelf"}, id="l2")],
            ),
        ]
    )
    agent = dspy_imp.ReActV2(
        TA,
        tools=[look, publish],
        max_iters=1,
        last_request_tools=["publish"],
        finish_on={"publish": lambda args, result, given: dspy_imp.Finish(answer="sent")},
    )
    with dspy.context(lm=lm):
        pred = run(agent, intent="publish it")

    assert PUBLISHED == ["hello"]
    assert look.runs == [{"where": "box"}]
    meta = pred.metadata
    assert pred.answer == "sent"
    assert (meta.termination_reason, meta.termination_cause) == ("finished_by_tool", "max_iters")
    assert meta.finished_by_tool == "publish"
    assert meta.unexecuted_tool_calls == ({"id": "l2", "name": "look", "args": {"where": "shelf"}},)
    assert meta.finish_reason is None  # finish_reason is reported for text answers only
    last = settled(meta.history.messages)[-1]
    # Recorded like any finishing step (reference §3.5, §6.2, L1): the text, the executed call and
    # its result, and no outputs at all (neither the hook's nor the reply's text as an answer).
    assert last == {
        "next_thought": "Published.",
        "tool_calls": [{"id": "p1", "name": "publish", "args": {"text": "hello"}}],
        "tool_call_results": [{"id": "p1", "name": "publish", "result": "published: hello", "error": False}],
    }
    lm.assert_complete()


# -- C14: finish_reason ----------------------------------------------------------------------------


def test_c14_finish_reason_length_on_an_answered_step_and_on_a_resume(run):
    cut = "It is a cat, and the reason is that"
    lm = ScriptedLM([reply(cut, finish_reason="length"), reply("We talked about a", finish_reason="length")])
    agent = dspy_imp.ReActV2(TA, tools=[Look()])
    with dspy.context(lm=lm):
        first = run(agent, intent="what is it?")
        assert (first.answer, first.metadata.termination_reason) == (cut, "answered")
        assert first.metadata.finish_reason == "length"

        pred = run(agent, history=first.metadata.history, max_iters=0, last_request_note="Summarise.")

    assert len(lm.requests) == 2
    resume = lm.requests[1]
    assert resume.messages == [
        lm.requests[0].messages[0],
        inputs(intent="what is it?"),
        assistant(cut),
        inputs(intent="Summarise."),
    ]
    assert resume.tool_choice == "auto" and resume.tool_names == ["look"]
    meta = pred.metadata
    assert (pred.answer, meta.termination_reason, meta.termination_cause) == (
        "We talked about a",
        "last_text",
        "max_iters",
    )
    assert meta.finish_reason == "length"
    lm.assert_complete()


def test_c14_finish_reason_stop(run):
    lm = ScriptedLM([fail.server_error(503), reply("Done.", finish_reason="stop")])
    agent = dspy_imp.ReActV2(TA, tools=[Look()])
    with dspy.context(lm=lm):
        pred = run(agent, intent="hello")
    assert pred.metadata.termination_reason == "last_text"
    assert pred.metadata.finish_reason == "stop"


def test_c14_finish_reason_is_read_even_with_dspy_history_disabled(run):
    lm = ScriptedLM([reply("Done.")])
    agent = dspy_imp.ReActV2(TA, tools=[Look()])
    with dspy.context(lm=lm, disable_history=True):  # issue 23: the loop's requests still hand it their entry
        pred = run(agent, intent="hello")
    assert pred.metadata.termination_reason == "answered"
    assert pred.metadata.finish_reason == "stop"
    assert lm.history == []


# -- C15: a last request refused for length --------------------------------------------------------


def test_c15_a_last_request_refused_for_length_is_incomplete_not_an_error(run):
    lm = ScriptedLM(
        [fail.server_error(503, "upstream rejected key sk-abcdefghijklmnopqrstu; retry later"), fail.context_window()]
    )
    agent = dspy_imp.ReActV2(TA, tools=[Look()])
    with dspy.context(lm=lm):
        pred = run(agent, intent="hello")

    assert len(lm.requests) == 2
    assert pred.answer is None
    meta = pred.metadata
    assert (meta.termination_reason, meta.termination_cause) == ("incomplete", "context_window_exceeded")
    assert not meta.complete
    error = meta.termination_error
    assert set(error) == {"initial", "last_text"}
    assert error["initial"].startswith("LMServerError: ")
    assert "sk-abcdefghijklmnopqrstu" not in error["initial"] and "[REDACTED]" in error["initial"]
    assert error["last_text"].startswith("ContextWindowExceededError: ")
    assert "maximum context length" in error["last_text"]
    lm.assert_complete()
