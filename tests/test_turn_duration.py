"""``metadata.duration``: how long the call took, on the turn's clock (the one the deadline reads).

The test's clock (``fake_clock``) moves only when a scripted reply or a tool says so, so every
duration here is exact and none depends on the machine's speed.
"""

from __future__ import annotations

import re
from typing import Any

import dspy
import pytest

import dspy_imp
from dspy_imp.testing import ScriptedLM, call, reply

CLOCK: list[Any] = []


@pytest.fixture(autouse=True)
def _clock(fake_clock: Any) -> Any:
    CLOCK[:] = [fake_clock]
    return fake_clock


def lookup_order(order_id: str) -> str:
    """Look an order up (takes 2 s on the test's clock)."""
    CLOCK[0].advance(2.0)
    return f"{order_id}: charged twice"


def refund(order_id: str) -> str:
    """Refund an order."""
    return f"refunded {order_id}"


def test_the_duration_is_the_time_of_the_requests_and_tools_of_the_turn(run, fake_clock):
    agent = dspy_imp.ReActV2("ticket -> reply", tools=[lookup_order])
    script = [
        fake_clock.after(1.5, reply(calls=[call("lookup_order", {"order_id": "A-42"})])),
        fake_clock.after(0.25, reply("You were charged twice.")),
    ]
    fake_clock.advance(100.0)  # time before the call does not count
    with dspy.context(lm=ScriptedLM(script)):
        pred = run(agent, ticket="Charged twice on A-42?")
    fake_clock.advance(50.0)  # nor time after it
    assert pred.metadata.termination_reason == "answered"
    assert pred.metadata.duration == 3.75


def test_a_sub_agents_time_is_part_of_its_callers(run, fake_clock):
    researcher = dspy_imp.ReActV2("question -> findings", tools=[lookup_order])
    triage = dspy_imp.ReActV2("ticket -> reply", tools=[researcher.as_tool(name="researcher")])
    script = [
        fake_clock.after(1.0, reply(calls=[call("researcher", {"question": "A-42?"})])),
        fake_clock.after(1.0, reply(calls=[call("lookup_order", {"order_id": "A-42"})])),
        fake_clock.after(1.0, reply("Charged twice.")),
        fake_clock.after(1.0, reply("You were charged twice.")),
    ]
    with dspy.context(lm=ScriptedLM(script)):
        pred = run(triage, ticket="Charged twice on A-42?")
    assert pred.metadata.duration == 6.0  # four requests and the researcher's lookup


def test_a_resumed_call_counts_its_own_time_not_the_wait_for_the_decision(run, fake_clock):
    agent = dspy_imp.ReActV2("ticket -> reply", tools=[refund], needs_approval=[refund])
    script = [
        fake_clock.after(1.0, reply(calls=[call("refund", {"order_id": "A-42"}, id="c1")])),
        fake_clock.after(0.5, reply("Refunded.")),
    ]
    lm = ScriptedLM(script)
    with dspy.context(lm=lm):
        paused = run(agent, ticket="Refund A-42.")
        assert (paused.metadata.termination_reason, paused.metadata.duration) == ("paused", 1.0)
        fake_clock.advance(3600.0)  # a person decides an hour later
        resumed = run(agent, history=paused.metadata.history, approvals={"c1": True})
    lm.assert_complete()
    assert (resumed.metadata.termination_reason, resumed.metadata.duration) == ("answered", 0.5)


def test_an_interrupted_turn_has_its_duration_too(run, fake_clock):
    agent = dspy_imp.ReActV2("ticket -> reply", tools=[lookup_order], max_iters=1)
    script = [
        fake_clock.after(1.0, reply(calls=[call("lookup_order", {"order_id": "A-42"})])),
        fake_clock.after(1.0, reply("Still looking.")),
    ]
    with dspy.context(lm=ScriptedLM(script)):
        pred = run(agent, ticket="Charged twice on A-42?")
    assert pred.metadata.termination_cause == "max_iters"
    assert pred.metadata.duration == 4.0


def test_the_notebook_view_shows_how_long_the_turn_took(run, fake_clock):
    agent = dspy_imp.ReActV2("ticket -> reply")
    with dspy.context(lm=ScriptedLM([fake_clock.after(12.5, reply("Hello."))])):
        pred = run(agent, ticket="Hi")
    facts = re.findall(r'<span class="dspy-imp-fact">(.*?)</span>', pred.metadata._repr_html_())
    assert facts == ["finish_reason: <code>stop</code>", "took <code>12.5 s</code>"]
