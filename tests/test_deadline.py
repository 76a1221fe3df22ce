"""SPEC §2 "Deadline" and reference §5: once the deadline has passed, no request of any kind is sent.

Timing: the deadline reads the test's clock (``fake_clock``), which moves only when the test says:
a deadline of ``WITHIN`` seconds is set right before the call, and whatever must pass it (a tool, a
scripted reply) moves the clock ``SLOW`` seconds. No margin depends on the machine's speed.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import dspy
import pytest
from helpers import NAMED_SUBMIT, TA, Look, SubmitSig

import dspy_imp
from dspy_imp.testing import ScriptedLM, call, fail, reply

WITHIN = 0.4
SLOW = 0.8


CLOCK: list[Any] = []  # the test's clock (``fake_clock``), set for each test
RELEASE = threading.Event()


@pytest.fixture(autouse=True)
def _clock(fake_clock: Any) -> Iterator[Any]:
    CLOCK[:] = [fake_clock]
    RELEASE.clear()
    yield fake_clock
    RELEASE.set()  # the slow tools the deadline stopped return


def late(item: Any) -> Any:
    """A script item answered ``SLOW`` seconds later, on the test's clock."""
    return CLOCK[0].after(SLOW, item)


class SlowLook(Look):
    """Takes ``SLOW`` seconds on the test's clock, and is still running when the deadline passes."""

    def __call__(self, where: str = "here") -> dict[str, bool]:
        CLOCK[0].advance(SLOW)
        RELEASE.wait(30)
        return super().__call__(where)


def thought_step(text: str, **keys: Any) -> dict[str, Any]:
    return {**keys, "next_thought": text, "tool_calls": [], "tool_call_results": []}


def assert_out_of_time(pred: Any) -> None:
    """``"incomplete"`` with cause ``"deadline_exceeded"``; every output present and None."""
    meta = pred.metadata
    assert (meta.termination_reason, meta.termination_cause) == ("incomplete", "deadline_exceeded")
    assert not meta.complete and not dspy_imp.is_complete(pred)
    assert list(pred.keys()) and all(value is None for value in pred.values())


def without_results_time(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {
            **entry,
            "tool_call_results": [
                {k: v for k, v in r.items() if k != "returned_at"} for r in entry.get("tool_call_results", [])
            ],
        }
        for entry in entries
    ]


def stopped_step(call_id: str, **keys: Any) -> dict[str, Any]:
    """A look call the deadline stopped (issue 25: the deadline bounds tool time too)."""
    stopped = "look was stopped: the turn's deadline passed"
    result = {"id": call_id, "name": "look", "result": stopped, "error": True, "error_kind": "tool_timeout"}
    return {
        **keys,
        "tool_calls": [{"id": call_id, "name": "look", "args": {"where": "shelf"}}],
        "tool_call_results": [result],
    }


# -- the deadline itself ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "bounds",
    [
        pytest.param({"seconds": 0}, id="seconds-0"),
        pytest.param({"seconds": -5}, id="seconds-negative"),
        pytest.param({"at": datetime.now(UTC) - timedelta(seconds=1)}, id="at-aware-past"),
        pytest.param({"at": time.monotonic() - 1}, id="at-monotonic-past"),
    ],
)
@pytest.mark.parametrize("signature", [TA, SubmitSig], ids=["text-answer", "submit"])
def test_an_expired_deadline_sends_no_request_at_all(run, bounds, signature):
    look = Look()
    lm = ScriptedLM([])
    agent = dspy_imp.ReActV2(signature, tools=[look], last_request_note="Last one.")
    with dspy.context(lm=lm), dspy_imp.deadline(**bounds):
        pred = run(agent, intent="hello")

    assert lm.requests == []
    assert look.runs == []
    assert_out_of_time(pred)
    assert list(pred.keys()) == list(signature.output_fields)
    assert pred.metadata.termination_error is None
    assert pred.metadata.history.messages == []  # nothing recorded, the note included


@pytest.mark.parametrize(
    "bounds",
    [
        pytest.param(lambda: {"seconds": WITHIN}, id="seconds"),
        pytest.param(lambda: {"at": datetime.now(UTC) + timedelta(seconds=WITHIN)}, id="at-aware-utc"),
        pytest.param(
            lambda: {"at": datetime.now(timezone(timedelta(hours=5))) + timedelta(seconds=WITHIN)},
            id="at-aware-utc+5",
        ),
        pytest.param(lambda: {"at": CLOCK[0].monotonic() + WITHIN}, id="at-monotonic"),
    ],
)
def test_c7_passed_before_the_last_text_request(run, bounds):
    look = SlowLook()
    lm = ScriptedLM([reply(calls=[call("look", {"where": "shelf"}, id="c1")])])
    agent = dspy_imp.ReActV2(TA, tools=[look], max_iters=1, last_request_note="Last one.")
    with dspy.context(lm=lm), dspy_imp.deadline(**bounds()):
        pred = run(agent, intent="is it there?")

    assert len(lm.requests) == 1
    assert_out_of_time(pred)
    assert pred.metadata.termination_error is None
    assert without_results_time(pred.metadata.history.messages) == [stopped_step("c1", intent="is it there?")]
    lm.assert_complete()


def test_the_deadline_applies_only_inside_its_block(run):
    lm = ScriptedLM([reply("late but fine")])
    agent = dspy_imp.ReActV2(TA, tools=[])
    with dspy_imp.deadline(seconds=0):
        pass
    with dspy.context(lm=lm):
        pred = run(agent, intent="hello")
    assert pred.metadata.termination_reason == "answered"


@pytest.mark.parametrize(
    ("kwargs", "names"),
    [
        pytest.param({"at": datetime(2030, 1, 1, 12, 0)}, "naive", id="naive-datetime"),
        pytest.param({}, "seconds", id="neither"),
        pytest.param({"seconds": 1, "at": time.monotonic() + 1}, "seconds", id="both"),
        pytest.param({"seconds": "30"}, "seconds", id="seconds-text"),
        pytest.param({"at": "tomorrow"}, "at", id="at-text"),
    ],
)
def test_a_bad_deadline_is_refused(kwargs, names):
    with pytest.raises(dspy_imp.ConfigurationError) as caught, dspy_imp.deadline(**kwargs):
        pass
    assert names in str(caught.value)


# -- before each kind of request ------------------------------------------------------------------


def test_d11_passed_before_the_forced_submit(run):
    look = SlowLook()
    lm = ScriptedLM([reply(calls=[call("look", {"where": "shelf"}, id="c1")])])
    agent = dspy_imp.ReActV2(SubmitSig, tools=[look], max_iters=1, last_request_note="Submit now.")
    with dspy.context(lm=lm), dspy_imp.deadline(seconds=WITHIN):
        pred = run(agent, intent="is it there?")

    assert len(lm.requests) == 1
    assert_out_of_time(pred)
    assert (pred.answer, pred.confidence) == (None, None)
    assert without_results_time(pred.metadata.history.messages) == [stopped_step("c1", intent="is it there?")]
    lm.assert_complete()


def test_d12_passed_before_the_required_retry(run):
    lm = ScriptedLM([reply("ready"), late(fail.tool_choice_refused())])
    agent = dspy_imp.ReActV2(SubmitSig, tools=[Look()])
    with dspy.context(lm=lm), dspy_imp.deadline(seconds=WITHIN):
        pred = run(agent, intent="capital?")

    assert [r.tool_choice for r in lm.requests] == ["auto", NAMED_SUBMIT]  # no "required" retry
    assert_out_of_time(pred)
    error = pred.metadata.termination_error
    assert set(error) == {"forced_submit"}
    assert error["forced_submit"].startswith("LMInvalidRequestError: ") and "tool_choice" in error["forced_submit"]
    assert pred.metadata.history.messages == [thought_step("ready", intent="capital?")]
    lm.assert_complete()


def test_d12_passed_before_the_extraction(run):
    lm = ScriptedLM([reply("ready"), late(reply("I would say Paris."))])
    agent = dspy_imp.ReActV2(SubmitSig, tools=[Look()])
    with dspy.context(lm=lm), dspy_imp.deadline(seconds=WITHIN):
        pred = run(agent, intent="capital?")

    assert len(lm.requests) == 2  # no extraction request
    assert lm.requests[1].tool_choice == NAMED_SUBMIT
    assert_out_of_time(pred)
    assert pred.metadata.history.messages == [
        thought_step("ready", intent="capital?"),
        thought_step("I would say Paris."),
    ]
    lm.assert_complete()


def test_d12_passed_before_the_extraction_after_a_required_retry(run):
    lm = ScriptedLM([reply("ready"), fail.tool_choice_refused(), late(reply("I would say Paris."))])
    agent = dspy_imp.ReActV2(SubmitSig, tools=[Look()])
    with dspy.context(lm=lm), dspy_imp.deadline(seconds=WITHIN):
        pred = run(agent, intent="capital?")

    assert [r.tool_choice for r in lm.requests] == ["auto", NAMED_SUBMIT, "required"]
    assert_out_of_time(pred)
    assert len(pred.metadata.history.messages) == 2
    lm.assert_complete()


def test_passed_before_the_continued_step(run):
    lm = ScriptedLM([late(reply("Let me look first."))])
    agent = dspy_imp.ReActV2(TA, tools=[Look()], finish="submit")
    with dspy.context(lm=lm), dspy_imp.deadline(seconds=WITHIN):
        pred = run(agent, intent="what is it?")

    assert len(lm.requests) == 1
    assert_out_of_time(pred)
    assert pred.metadata.history.messages == [thought_step("Let me look first.", intent="what is it?")]
    lm.assert_complete()


def test_passed_before_the_tools_retry(run):
    sent: list[str] = []

    def send(text: str) -> str:
        """Send the reply."""
        sent.append(text)
        return "sent"

    lm = ScriptedLM([late(fail.server_error(503))])
    agent = dspy_imp.ReActV2(
        "message -> reply",
        tools=[send],
        finish="tools",
        finish_on={"send": lambda args, result, given: dspy_imp.Finish(reply=args["text"])},
    )
    with dspy.context(lm=lm), dspy_imp.deadline(seconds=WITHIN):
        pred = run(agent, message="hello")

    assert len(lm.requests) == 1
    assert_out_of_time(pred)
    assert set(pred.metadata.termination_error) == {"initial"}
    lm.assert_complete()


def test_passed_before_an_ordinary_step(run):
    look = Look()
    lm = ScriptedLM([late(reply(calls=[call("look", {"where": "shelf"}, id="c1")]))])
    agent = dspy_imp.ReActV2(TA, tools=[look])
    with dspy.context(lm=lm), dspy_imp.deadline(seconds=WITHIN):
        pred = run(agent, intent="is it there?")

    assert len(lm.requests) == 1  # no step 2, no last-text request
    assert look.runs == []  # the reply came after the deadline: its call is answered, not run
    assert_out_of_time(pred)
    assert without_results_time(pred.metadata.history.messages) == [stopped_step("c1", intent="is it there?")]
    lm.assert_complete()


def test_a_step_failing_past_the_deadline_is_neither_retried_nor_followed(run):
    lm = ScriptedLM([late(fail.server_error(503))])
    agent = dspy_imp.ReActV2(TA, tools=[Look()], last_request_note="Last one.")
    with dspy.context(lm=lm), dspy_imp.deadline(seconds=WITHIN):
        pred = run(agent, intent="hello")

    assert len(lm.requests) == 1
    assert_out_of_time(pred)
    error = pred.metadata.termination_error
    assert set(error) == {"initial"} and error["initial"].startswith("LMServerError: ")
    assert pred.metadata.history.messages == []
    lm.assert_complete()


def test_a_last_text_request_failing_past_the_deadline_is_incomplete_not_an_error(run):
    lm = ScriptedLM([fail.server_error(503), late(fail.server_error(503))])
    agent = dspy_imp.ReActV2(TA, tools=[Look()])
    with dspy.context(lm=lm), dspy_imp.deadline(seconds=WITHIN):
        pred = run(agent, intent="hello")

    assert len(lm.requests) == 2
    assert_out_of_time(pred)
    assert set(pred.metadata.termination_error) == {"initial", "last_text"}
    lm.assert_complete()


def test_a_forced_submit_failing_past_the_deadline_is_incomplete_not_an_error(run):
    lm = ScriptedLM([reply("ready"), late(fail.server_error(503))])
    agent = dspy_imp.ReActV2(SubmitSig, tools=[Look()])
    with dspy.context(lm=lm), dspy_imp.deadline(seconds=WITHIN):
        pred = run(agent, intent="hello")

    assert len(lm.requests) == 2
    assert_out_of_time(pred)
    assert set(pred.metadata.termination_error) == {"forced_submit"}
    lm.assert_complete()


# -- retries under a deadline -----------------------------------------------------------------------


def test_a_retryable_error_is_retried_by_the_loop_while_time_remains(run):
    lm = ScriptedLM([fail.server_error(), reply("ok")])
    agent = dspy_imp.ReActV2(TA, tools=[Look()])
    with dspy.context(lm=lm), dspy_imp.deadline(seconds=30):
        pred = run(agent, intent="hello")

    assert len(lm.requests) == 2
    assert lm.requests[1].messages == lm.requests[0].messages
    meta = pred.metadata
    assert (pred.answer, meta.termination_reason, meta.termination_cause) == ("ok", "answered", None)
    assert meta.history.messages == [
        {"intent": "hello", "next_thought": "ok", "tool_calls": [], "tool_call_results": [], "answer": "ok"}
    ]
    lm.assert_complete()


def test_a_rate_limit_is_retried_after_its_retry_after(run, fake_clock):
    lm = ScriptedLM([fail.rate_limit(retry_after=0.05), reply("ok")])
    agent = dspy_imp.ReActV2(TA, tools=[Look()])
    with dspy.context(lm=lm), dspy_imp.deadline(seconds=30):
        pred = run(agent, intent="hello")

    assert fake_clock.slept == [0.05]  # retry_after, not the 1 s default pause
    assert len(lm.requests) == 2
    assert pred.metadata.termination_reason == "answered"


def test_a_request_that_waited_out_its_rung_ends_the_turn_at_the_deadline(run, fake_clock):
    # The request's timeout is nine tenths of the 1 s left; it timed out at 0.95 s. What is left
    # (50 ms) is the ladder's slack, not time for a retry or a last-text request: had they gone, the
    # turn's end would have turned on how soon the machine noticed the second timeout.
    timed_out = dspy.utils.exceptions.LMTimeoutError("Request timed out.")
    lm = ScriptedLM([fake_clock.after(0.95, fail.raises(timed_out)), reply("too late")])
    agent = dspy_imp.ReActV2(TA, tools=[Look()])
    with dspy.context(lm=lm), dspy_imp.deadline(seconds=1.0):
        pred = run(agent, intent="hello")

    assert len(lm.requests) == 1
    assert (pred.metadata.termination_reason, pred.metadata.termination_cause) == ("incomplete", "deadline_exceeded")
    assert fake_clock.slept == []


def test_a_timeout_shorter_than_the_rung_is_retried_while_time_remains(run, fake_clock):
    # the LM's own 0.1 s timeout, well inside the deadline's 27 s rung: the loop retries it
    timed_out = dspy.utils.exceptions.LMTimeoutError("Request timed out.")
    lm = ScriptedLM([fake_clock.after(0.1, fail.raises(timed_out)), reply("ok")])
    agent = dspy_imp.ReActV2(TA, tools=[Look()])
    with dspy.context(lm=lm), dspy_imp.deadline(seconds=30):
        pred = run(agent, intent="hello")

    assert len(lm.requests) == 2
    assert fake_clock.slept == [1]
    assert (pred.answer, pred.metadata.termination_reason) == ("ok", "answered")


def test_without_a_deadline_the_loop_does_not_retry(run):
    lm = ScriptedLM([fail.server_error(), reply("ok")])
    agent = dspy_imp.ReActV2(TA, tools=[Look()])
    with dspy.context(lm=lm):
        pred = run(agent, intent="hello")

    assert len(lm.requests) == 2  # the step, then the last-text request
    meta = pred.metadata
    assert (pred.answer, meta.termination_reason, meta.termination_cause) == ("ok", "last_text", "prediction_error")
    lm.assert_complete()


def test_no_retry_pauses_past_the_deadline(run, fake_clock):
    lm = ScriptedLM([fail.rate_limit(retry_after=5), reply("ok")])
    agent = dspy_imp.ReActV2(TA, tools=[Look()])
    with dspy.context(lm=lm), dspy_imp.deadline(seconds=1):
        pred = run(agent, intent="hello")

    assert fake_clock.slept == []
    meta = pred.metadata
    assert (meta.termination_reason, meta.termination_cause) == ("last_text", "prediction_error")
    lm.assert_complete()


def test_dspys_own_retries_are_off_under_a_deadline(run, fake_clock):
    # DSPy would sleep 1 s and retry; with 0.6 s left the loop does not retry either.
    lm = ScriptedLM([fail.server_error(), reply("ok")], num_retries=3)
    agent = dspy_imp.ReActV2(TA, tools=[Look()])
    with dspy.context(lm=lm), dspy_imp.deadline(seconds=0.6):
        pred = run(agent, intent="hello")

    assert fake_clock.slept == []
    assert len(lm.requests) == 2  # the step and the last-text request: no retry of DSPy's
    meta = pred.metadata
    assert (meta.termination_reason, meta.termination_cause) == ("last_text", "prediction_error")
    lm.assert_complete()


def test_a_non_retryable_error_is_not_retried_under_a_deadline(run):
    lm = ScriptedLM([fail.invalid_request("Invalid value for 'temperature'."), reply("ok")])
    agent = dspy_imp.ReActV2(TA, tools=[Look()])
    with dspy.context(lm=lm), dspy_imp.deadline(seconds=30):
        pred = run(agent, intent="hello")

    meta = pred.metadata
    assert (meta.termination_reason, meta.termination_cause) == ("last_text", "prediction_error")
    lm.assert_complete()


def test_no_per_request_timeout_reaches_a_custom_engine(run):
    lm = ScriptedLM([reply(calls=[call("look", {}, id="c1")]), reply("ok")])
    agent = dspy_imp.ReActV2(TA, tools=[Look()], config={"temperature": 0.1})
    with dspy.context(lm=lm), dspy_imp.deadline(seconds=30):
        pred = run(agent, intent="hello")

    assert pred.metadata.termination_reason == "answered"
    assert [r.options for r in lm.requests] == [{"temperature": 0.1}] * 2


def test_a_deadline_reaches_dspy_parallel_threads_and_never_extends_an_outer_one(fake_clock):
    both = threading.Barrier(2, timeout=30)

    def thinking(request: Any) -> Any:  # both first requests arrive, then each takes 0.3 s
        both.wait()
        fake_clock.advance(0.3)
        return reply("thinking")

    lm = ScriptedLM(thinking)
    agent = dspy_imp.ReActV2(SubmitSig, tools=[])
    examples = [dspy.Example(intent=f"q{i}").with_inputs("intent") for i in range(2)]
    with dspy.context(lm=lm), dspy_imp.deadline(seconds=0.1), dspy_imp.deadline(seconds=60):
        results = dspy.Parallel(num_threads=2)([(agent, ex) for ex in examples])
    for pred in results:
        assert (pred.metadata.termination_reason, pred.metadata.termination_cause) == (
            "incomplete",
            "deadline_exceeded",
        )
    assert len(lm.requests) == 2  # one step each; nothing after the deadline


@pytest.mark.parametrize("bounded", [False, True], ids=["no-deadline", "deadline"])
def test_the_users_lm_history_holds_every_request_under_a_deadline(run, bounded):
    # Under a deadline the requests go through a copy without DSPy's retries; its entries are the LM's.
    lm = ScriptedLM([reply(calls=[call("look", {"where": "shelf"}, id="c1")]), reply("found")], num_retries=3)
    agent = dspy_imp.ReActV2(TA, tools=[Look()])
    with dspy.context(lm=lm), dspy_imp.deadline(seconds=30) if bounded else contextlib.nullcontext():
        pred = run(agent, intent="hello")
    assert pred.metadata.termination_reason == "answered"
    assert len(lm.requests) == 2
    assert len(lm.history) == 2
