"""``dspy_imp.testing.FakeClock``: a deadline set and read on a clock the test moves, so a deadline
test gives the same result on any machine; the loop's retry pauses move it instead of waiting."""

from __future__ import annotations

import dspy
from helpers import TA, Look

import dspy_imp
from dspy_imp.testing import FakeClock, ScriptedLM, call, fail, reply


def test_a_reply_that_takes_longer_than_the_deadline_ends_the_turn(run):
    clock = FakeClock()
    lm = ScriptedLM([clock.after(30, reply(calls=[call("look", {"where": "shelf"}, id="c1")]))])
    agent = dspy_imp.ReActV2(TA, tools=[Look()])
    with clock.running(), dspy.context(lm=lm), dspy_imp.deadline(seconds=10):
        pred = run(agent, intent="find it")
    meta = pred.metadata
    assert (meta.termination_reason, meta.termination_cause, len(lm.requests)) == ("incomplete", "deadline_exceeded", 1)
    assert clock.time() == 1_800_000_030.0


def test_time_left_is_read_on_the_clock_and_pauses_advance_it(run):
    clock = FakeClock()
    lm = ScriptedLM([fail.rate_limit(retry_after=3), clock.after(5, reply("Found."))])
    agent = dspy_imp.ReActV2(TA, tools=[Look()])
    with clock.running(), dspy.context(lm=lm), dspy_imp.deadline(seconds=10):
        pred = run(agent, intent="find it")
    assert (pred.answer, clock.slept, clock.time()) == ("Found.", [3.0], 1_800_000_008.0)  # no real wait
