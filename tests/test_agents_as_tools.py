"""Agents as tools (``agent.as_tool()``): the child's turn runs inside the caller's.

Its usage sums into the caller's and shows under its name, the caller's limits and deadline bound
it, its record rides in the caller's step, its pauses pause the caller (through any depth, and
through ``dump_history``/``load_history``), and tracers see its turn inside the tool call.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import dspy
import pytest
from dspy.utils.callback import BaseCallback
from helpers import assistant, inputs, settled, tool

import dspy_imp
from dspy_imp._records import clock
from dspy_imp.testing import ScriptedLM, call, fail, reply

RAN: list[str] = []


def lookup(query: str) -> str:
    """Look something up."""
    RAN.append(f"lookup {query}")
    return f"found {query}"


def refund(amount: int) -> str:
    """Refund the customer."""
    RAN.append(f"refund {amount}")
    return f"refunded {amount}"


TEST_CLOCK: list[Any] = []  # the test's clock (``fake_clock``) where a test moves time


def wait_out_the_deadline(query: str) -> str:
    """Search slowly."""
    while not clock.passed():  # returns once the caller's deadline has passed, on the test's clock
        TEST_CLOCK[0].advance(0.5)
    RAN.append(f"slow {query}")
    return "found late"


@pytest.fixture(autouse=True)
def _nothing_ran() -> Any:
    RAN.clear()
    yield


def researcher(script: list[Any], **options: Any) -> tuple[dspy_imp.ReActV2, ScriptedLM]:
    agent = dspy_imp.ReActV2("question -> findings", tools=[lookup], **options)
    lm = ScriptedLM(script)
    agent.set_lm(lm)
    return agent, lm


def triage(child: dspy_imp.ReActV2, **options: Any) -> dspy_imp.ReActV2:
    return dspy_imp.ReActV2(
        "ticket -> reply", tools=[child.as_tool(name="researcher", description="Research a question.")], **options
    )


ASK = reply(calls=[call("researcher", {"question": "where is order 7?"}, id="p1")], usage=(100, 10))
CHILD_SCRIPT = [
    reply(calls=[call("lookup", {"query": "order 7"}, id="k1")], usage=(30, 3)),
    reply("Order 7 is in Lyon.", usage=(40, 4)),
]


def test_the_child_runs_inside_the_call_and_its_usage_sums_exactly(run):
    child, child_lm = researcher(CHILD_SCRIPT)
    lm = ScriptedLM([ASK, reply("It is in Lyon.", usage=(200, 20))])
    with dspy.context(lm=lm):
        pred = run(triage(child), ticket="Where is my order?")
    meta = pred.metadata
    assert (pred.reply, meta.termination_reason) == ("It is in Lyon.", "answered")
    assert lm.requests[1].messages[1:] == [
        inputs(ticket="Where is my order?"),
        assistant(calls=[("p1", "researcher", '{"question":"where is order 7?"}')]),
        tool("p1", "Order 7 is in Lyon."),
    ]
    assert child_lm.requests[0].messages[1:] == [inputs(question="where is order 7?")]
    usage = meta.usage
    assert (usage.input_tokens, usage.output_tokens, dict(usage.requests)) == (370, 37, {"step": 4})
    assert [(c.agent, c.input_tokens) for c in usage.calls] == [
        (None, 100),
        ("researcher", 30),
        ("researcher", 40),
        (None, 200),
    ]
    mine = usage.agents["researcher"]
    assert (mine.input_tokens, mine.output_tokens, dict(mine.requests), set(usage.agents)) == (
        70,
        7,
        {"step": 2},
        {"researcher"},
    )
    first = settled(meta.history.messages)[0]
    assert first["tool_call_results"] == [
        {"id": "p1", "name": "researcher", "result": "Order 7 is in Lyon.", "error": False}
    ]
    record = first["agent_runs"]["p1"]
    assert {k: v for k, v in record.items() if k != "history"} == {
        "agent": "researcher",
        "termination_reason": "answered",
        "usage": {"requests": {"step": 2}, "input_tokens": 70, "output_tokens": 7},
    }
    assert [e.get("findings") for e in record["history"]] == [None, "Order 7 is in Lyon."]
    assert record["history"][0]["tool_call_results"][0]["result"] == "found order 7"
    assert RAN == ["lookup order 7"]
    lm.assert_complete()
    child_lm.assert_complete()


def test_a_child_with_several_outputs_returns_them_as_an_object(run):
    child = dspy_imp.ReActV2("question -> city: str, days: int", tools=[])
    child_lm = ScriptedLM([reply(calls=[call("submit", {"city": "Lyon", "days": 2}, id="s1")])])
    child.set_lm(child_lm)
    lm = ScriptedLM([ASK, reply("Lyon, two days.")])
    with dspy.context(lm=lm):
        run(triage(child), ticket="t")
    assert lm.requests[1].messages[-1] == tool("p1", '{"city": "Lyon", "days": 2}')


def test_the_callers_limit_stops_the_child_mid_turn_with_the_cause_on_both(run):
    looking = [reply(calls=[call("lookup", {"query": str(i)}, id=f"k{i}")]) for i in range(2)]
    child, child_lm = researcher(looking)
    lm = ScriptedLM([ASK])
    with dspy.context(lm=lm):
        pred = run(triage(child, usage_limits=dspy_imp.UsageLimits(requests=3)), ticket="t")
    meta = pred.metadata
    assert (meta.termination_reason, meta.termination_cause) == ("incomplete", "usage_limit_exceeded")
    assert meta.usage.total_requests == 3 and meta.usage.agents["researcher"].total_requests == 2
    step = meta.history.messages[0]
    record = step["agent_runs"]["p1"]
    assert (record["termination_reason"], record["termination_cause"]) == ("incomplete", "usage_limit_exceeded")
    assert step["tool_call_results"][0]["result"] == "researcher ended without an answer (usage_limit_exceeded)."
    assert RAN == ["lookup 0", "lookup 1"]
    lm.assert_complete()  # nothing was sent after the limit, by either agent
    child_lm.assert_complete()


def test_the_childs_own_limit_still_holds_under_a_looser_caller(run):
    looking = [reply(calls=[call("lookup", {"query": str(i)}, id=f"k{i}")]) for i in range(1)]
    child, child_lm = researcher(looking, usage_limits={"requests": 1})
    lm = ScriptedLM([ASK, reply("Could not find it.")])
    with dspy.context(lm=lm):
        pred = run(triage(child, usage_limits={"requests": 10}), ticket="t")
    assert pred.reply == "Could not find it." and pred.metadata.usage.total_requests == 3
    assert lm.requests[1].messages[-1] == tool(
        "p1", "Error: researcher ended without an answer (usage_limit_exceeded)."
    )
    child_lm.assert_complete()


def test_the_callers_deadline_ends_the_child_and_nothing_is_sent_after_it(run, fake_clock):
    TEST_CLOCK[:] = [fake_clock]
    # Run whole, not stopped at the deadline (issue 25's bound): the child's own turn must see it pass.
    unbounded = {"wait_out_the_deadline": None}
    child = dspy_imp.ReActV2("question -> findings", tools=[wait_out_the_deadline], tool_timeouts=unbounded)
    child_lm = ScriptedLM([reply(calls=[call("wait_out_the_deadline", {"query": "q"}, id="k1")])])
    child.set_lm(child_lm)
    lm = ScriptedLM([ASK])
    with dspy.context(lm=lm), dspy_imp.deadline(seconds=3.0):
        pred = run(triage(child), ticket="t")
    meta = pred.metadata
    assert (meta.termination_reason, meta.termination_cause) == ("incomplete", "deadline_exceeded")
    record = meta.history.messages[0]["agent_runs"]["p1"]
    assert (record["termination_reason"], record["termination_cause"]) == ("incomplete", "deadline_exceeded")
    assert RAN == ["slow q"]
    lm.assert_complete()
    child_lm.assert_complete()


def test_a_child_step_error_is_an_observation_and_its_history_is_kept(run):
    refused = fail.invalid_request("the request is malformed")
    child, child_lm = researcher([CHILD_SCRIPT[0], refused, refused])  # the step, then its last-text request
    lm = ScriptedLM([ASK, reply("Sorry.")])
    with dspy.context(lm=lm):
        pred = run(triage(child), ticket="t")
    assert pred.reply == "Sorry."
    observation = lm.requests[1].messages[-1]["content"]
    assert observation.startswith("Error: researcher failed: ReActV2 turn got no model response")
    record = pred.metadata.history.messages[0]["agent_runs"]["p1"]
    assert record["termination_reason"] == "step_error"
    assert record["history"][0]["tool_call_results"][0]["result"] == "found order 7"
    assert dict(pred.metadata.usage.agents["researcher"].requests) == {"step": 2, "last_text": 1}
    child_lm.assert_complete()


# -- pauses ---------------------------------------------------------------------------------------


def three_deep(needs: str = "refund") -> tuple[dspy_imp.ReActV2, list[ScriptedLM]]:
    billing = dspy_imp.ReActV2("order -> outcome", tools=[refund], needs_approval=[needs] if needs else ())
    billing_lm = ScriptedLM(
        [reply(calls=[call("refund", {"amount": 5}, id="g1")], usage=(5, 1)), reply("Refunded 5.", usage=(6, 1))]
    )
    billing.set_lm(billing_lm)
    research = dspy_imp.ReActV2("question -> findings", tools=[lookup, billing.as_tool(name="billing")])
    research_lm = ScriptedLM(
        [
            reply(
                calls=[call("lookup", {"query": "o7"}, id="c0"), call("billing", {"order": "o7"}, id="c1")],
                usage=(50, 5),
            ),
            reply("Refund done.", usage=(60, 6)),
        ]
    )
    research.react.lm = research_lm  # its own predictor only: set_lm reaches billing too (a part)
    lm = ScriptedLM([ASK, reply("Your refund is on its way.", usage=(300, 30))])
    return triage(research), [lm, research_lm, billing_lm]


def round_trip(history: dspy.History) -> dspy.History:
    return dspy_imp.load_history(json.loads(json.dumps(dspy_imp.dump_history(history))))


def test_a_grandchilds_approval_pauses_the_grandparent_and_resumes_all_three(run):
    agent, lms = three_deep()
    lm = lms[0]
    with dspy.context(lm=lm):
        paused = run(agent, ticket="Refund order 7.")
        meta = paused.metadata
        assert (meta.termination_reason, meta.complete) == ("paused", False)
        assert meta.pending_calls == (
            {"id": "p1/c1/g1", "name": "researcher/billing/refund", "args": {"amount": 5}, "kind": "approval"},
        )
        assert RAN == ["lookup o7"]  # the researcher's lookup ran; the refund waits
        assert meta.usage.total_requests == 3 and meta.usage.agents["researcher"].agents["billing"].total_requests == 1
        step = meta.history.messages[0]
        assert step["pending_calls"] == [dict(meta.pending_calls[0])] and step["tool_call_results"] == []
        inner = step["agent_runs"]["p1"]["history"][0]
        assert [r["id"] for r in inner["tool_call_results"]] == ["c0"]  # kept: it does not run again
        assert inner["agent_runs"]["c1"]["pending_calls"] == [
            {"id": "g1", "name": "refund", "args": {"amount": 5}, "kind": "approval"}
        ]
        done = run(agent, history=round_trip(meta.history), approvals={"p1/c1/g1": True})
    assert (done.reply, done.metadata.termination_reason) == ("Your refund is on its way.", "answered")
    assert RAN == ["lookup o7", "refund 5"]
    usage = done.metadata.usage  # this call's requests: billing's last, research's last, triage's last
    assert (usage.total_requests, usage.input_tokens) == (3, 366)
    assert usage.agents["researcher"].agents["billing"].input_tokens == 6
    research = lms[1].requests  # the researcher continues its own conversation, byte for byte
    assert research[1].messages[: len(research[0].messages)] == research[0].messages
    assert research[1].messages[len(research[0].messages) :] == [
        assistant(calls=[("c0", "lookup", '{"query":"o7"}'), ("c1", "billing", '{"order":"o7"}')]),
        tool("c0", "found o7"),
        tool("c1", "Refunded 5."),
    ]
    assert lm.requests[1].messages[-1] == tool("p1", "Refund done.")
    assert lms[2].requests[1].messages[-1] == tool("g1", "refunded 5")
    for each in lms:
        each.assert_complete()
    entry = settled(done.metadata.history.messages)[0]
    assert "pending_calls" not in entry and entry["tool_call_results"][0]["result"] == "Refund done."
    research_record = entry["agent_runs"]["p1"]
    assert research_record["termination_reason"] == "answered"
    assert research_record["history"][0]["agent_runs"]["c1"]["termination_reason"] == "answered"


def test_a_refused_grandchild_call_is_an_observation_for_the_grandchild(run):
    agent, lms = three_deep()
    with dspy.context(lm=lms[0]):
        paused = run(agent, ticket="Refund order 7.")
        run(agent, history=paused.metadata.history, approvals={"p1/c1/g1": "not this customer"})
    assert RAN == ["lookup o7"]
    assert lms[2].requests[1].messages[-1] == tool("g1", "Error: refund is not allowed: not this customer")


def test_an_agent_tool_that_needs_approval_is_asked_once(run):
    billing = dspy_imp.ReActV2("order -> outcome", tools=[refund], needs_approval=["refund"])
    billing_lm = ScriptedLM([reply(calls=[call("refund", {"amount": 5}, id="g1")]), reply("Refunded.")])
    billing.set_lm(billing_lm)
    agent = dspy_imp.ReActV2("ticket -> reply", tools=[billing.as_tool(name="billing")], needs_approval=["billing"])
    lm = ScriptedLM([reply(calls=[call("billing", {"order": "o7"}, id="p1")]), reply("Done.")])
    with dspy.context(lm=lm):
        first = run(agent, ticket="t")
        assert [c["id"] for c in first.metadata.pending_calls] == ["p1"] and not billing_lm.requests
        second = run(agent, history=first.metadata.history, approvals={"p1": True})
        assert [c["id"] for c in second.metadata.pending_calls] == ["p1/g1"]
        third = run(agent, history=second.metadata.history, approvals={"p1/g1": True})
    assert third.reply == "Done." and RAN == ["refund 5"]


def test_resuming_decisions_are_checked_before_any_request(run):
    agent, lms = three_deep()
    with dspy.context(lm=lms[0]):
        paused = run(agent, ticket="Refund order 7.")
        with pytest.raises(dspy_imp.ConfigurationError, match=r"`approvals` names call 'g1', which is not pending"):
            run(agent, history=paused.metadata.history, approvals={"g1": True})
    assert [len(each.requests) for each in lms] == [1, 1, 1]


# -- options, records -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("has space", r"as_tool `name` must be 1-64 letters"),
        ("submit", r"as_tool `name` must be .*not 'submit'"),
        (None, r"as_tool needs a `name` for an agent with a string signature"),
    ],
)
def test_as_tool_refuses_a_bad_name(name, message):
    with pytest.raises(dspy_imp.ConfigurationError, match=message):
        dspy_imp.ReActV2("question -> findings").as_tool(name=name)


def test_as_tool_takes_its_name_description_and_arguments_from_the_signature():
    class FindOrder(dspy.Signature):
        """Find where an order is."""

        order_id: int = dspy.InputField(desc="the order number")
        where: str = dspy.OutputField()

    made = dspy_imp.ReActV2(FindOrder).as_tool()
    assert (made.name, made.desc, made.has_kwargs) == ("find_order", "Find where an order is.", False)
    assert made.args == {"order_id": {"type": "integer", "description": "the order number"}}


def test_a_record_without_agent_runs_reads_and_writes_as_before():
    from dspy_imp._records.steps import from_entry, to_entry

    old = {"q": "x", "tool_calls": [], "tool_call_results": []}
    step = from_entry(old, ["q"], ["a"])
    assert step.agent_runs == {} and to_entry(step) == old
    with pytest.raises(dspy_imp.ConfigurationError, match="`agent_runs` must map call ids"):
        from_entry({**old, "agent_runs": ["x"]}, ["q"], ["a"])


# -- traces ---------------------------------------------------------------------------------------


class Events(BaseCallback):
    def __init__(self) -> None:
        self.events: list[str] = []

    def on_tool_start(self, call_id: str, instance: Any, inputs: dict[str, Any]) -> None:
        self.events.append(f"tool {instance.name}")

    def on_tool_end(self, call_id: str, outputs: Any, exception: Exception | None = None) -> None:
        self.events.append("tool end")

    def on_module_start(self, call_id: str, instance: Any, inputs: dict[str, Any]) -> None:
        if isinstance(instance, dspy_imp.ReActV2):
            self.events.append(f"turn {next(iter(instance.signature.input_fields))}")

    def on_module_end(self, call_id: str, outputs: Any, exception: Exception | None = None) -> None:
        if isinstance(outputs, dspy_imp.Prediction):
            self.events.append("turn end")


def test_the_childs_turn_is_inside_the_callers_tool_call(run):
    child, _ = researcher(CHILD_SCRIPT)
    events = Events()
    with dspy.context(lm=ScriptedLM([ASK, reply("ok")]), callbacks=[events]):
        run(triage(child), ticket="t")
    assert events.events == [
        "turn ticket",
        "tool researcher",
        "turn question",
        "tool lookup",
        "tool end",
        "turn end",
        "tool end",
        "turn end",
    ]


def test_two_calls_of_one_sub_agent_pause_side_by_side_and_resume_each(run):
    billing = dspy_imp.ReActV2("order -> outcome", tools=[refund], needs_approval=["refund"])
    billing_lm = ScriptedLM(
        [
            reply(calls=[call("refund", {"amount": 1}, id="g1")]),
            reply(calls=[call("refund", {"amount": 2}, id="g1")]),
            reply("Refunded 1."),
            reply("Not refunded."),
        ]
    )
    billing.set_lm(billing_lm)
    agent = dspy_imp.ReActV2("ticket -> reply", tools=[billing.as_tool(name="billing")])
    both = [call("billing", {"order": "a"}, id="p1"), call("billing", {"order": "b"}, id="p2")]
    lm = ScriptedLM([reply(calls=both), reply("One refund made.")])
    with dspy.context(lm=lm):
        paused = run(agent, ticket="t")
        assert [c["id"] for c in paused.metadata.pending_calls] == ["p1/g1", "p2/g1"]
        done = run(agent, history=paused.metadata.history, approvals={"p1/g1": True, "p2/g1": False})
    assert done.reply == "One refund made." and RAN == ["refund 1"]
    assert lm.requests[1].messages[-2:] == [tool("p1", "Refunded 1."), tool("p2", "Not refunded.")]
    assert billing_lm.requests[3].messages[-1] == tool("g1", "Error: refund is not allowed.")


def test_sub_agent_calls_run_after_a_parallel_batch_one_at_a_time(run):
    child, child_lm = researcher(CHILD_SCRIPT)
    agent = dspy_imp.ReActV2("ticket -> reply", tools=[child.as_tool(name="researcher"), lookup], parallel_tools=True)
    calls = [
        call("researcher", {"question": "q"}, id="p1"),
        call("lookup", {"query": "a"}, id="p2"),
        call("lookup", {"query": "b"}, id="p3"),
    ]
    lm = ScriptedLM([reply(calls=calls), reply("ok")])
    with dspy.context(lm=lm):
        pred = run(agent, ticket="t")
    assert pred.reply == "ok"
    assert sorted(RAN[:2]) == ["lookup a", "lookup b"] and RAN[2] == "lookup order 7"  # the batch, then the child
    assert [m.get("tool_call_id") for m in lm.requests[1].messages[-3:]] == ["p1", "p2", "p3"]  # in call order
    child_lm.assert_complete()


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_openinference_nests_the_childs_turn_span_under_the_callers_tool_span(mode: str) -> None:
    scenario = Path(__file__).with_name("agents_tracing_scenario.py")
    env = {**os.environ, "PYTHONPATH": str(scenario.parent.parent)}
    done = subprocess.run(
        [sys.executable, str(scenario), mode], capture_output=True, text=True, env=env, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    turn, predict, tool_call = (
        ("ReActV2.forward", "StepPredictor.forward", "__call__")
        if mode == "sync"
        else ("ReActV2.aforward", "StepPredictor.aforward", "acall")
    )
    child = f"{turn} > researcher.{tool_call} > {turn}"
    assert json.loads(done.stdout) == [
        turn,
        f"{turn} > {predict}",
        f"{turn} > {predict}",
        f"{turn} > researcher.{tool_call}",
        child,
        f"{child} > {predict}",
        f"{child} > {predict}",
        f"{child} > lookup.{tool_call}",
    ]


def test_the_usage_span_attribute_shows_each_sub_agent():
    from dspy_imp._watch.tracing import usage_attribute

    child, _ = researcher(CHILD_SCRIPT)
    with dspy.context(lm=ScriptedLM([ASK, reply("ok", usage=(200, 20))])):
        pred = triage(child)(ticket="t")
    value = usage_attribute(pred.metadata.usage)
    assert value["input_tokens"] == 370 and value["requests"] == {"step": 4}
    assert value["agents"] == {
        "researcher": {
            "requests": {"step": 2},
            "input_tokens": 70,
            "output_tokens": 7,
            "total_tokens": 77,
            "cached_tokens": 0,
            "cache_write_tokens": 0,
            "reasoning_tokens": 0,
        }
    }


def test_a_submit_beside_a_paused_sub_agent_ends_the_resumed_turn(run):
    billing = dspy_imp.ReActV2("order -> outcome", tools=[refund], needs_approval=["refund"])
    billing_lm = ScriptedLM([reply(calls=[call("refund", {"amount": 5}, id="g1")]), reply("Refunded.")])
    billing.set_lm(billing_lm)
    agent = dspy_imp.ReActV2("ticket -> reply", tools=[billing.as_tool(name="billing")], finish="submit")
    calls = [call("billing", {"order": "o7"}, id="p1"), call("submit", {"reply": "Refund requested."}, id="s1")]
    lm = ScriptedLM([reply(calls=calls)])
    with dspy.context(lm=lm):
        paused = run(agent, ticket="t")
        assert [c["id"] for c in paused.metadata.pending_calls] == ["p1/g1"] and paused.reply is None
        done = run(agent, history=paused.metadata.history, approvals={"p1/g1": True})
    assert (done.reply, done.metadata.termination_reason) == ("Refund requested.", "submit")
    assert RAN == ["refund 5"] and len(lm.requests) == 1


def test_a_finish_on_tool_that_ran_before_the_pause_still_finishes_the_turn(run):
    billing = dspy_imp.ReActV2("order -> outcome", tools=[refund], needs_approval=["refund"])
    billing.set_lm(ScriptedLM([reply(calls=[call("refund", {"amount": 5}, id="g1")]), reply("Refunded.")]))
    agent = dspy_imp.ReActV2(
        "ticket -> reply",
        tools=[lookup, billing.as_tool(name="billing")],
        finish="tools",
        finish_on={"lookup": lambda args, result, inputs: dspy_imp.Finish(reply=result)},
    )
    calls = [call("lookup", {"query": "o7"}, id="p0"), call("billing", {"order": "o7"}, id="p1")]
    lm = ScriptedLM([reply(calls=calls)])
    with dspy.context(lm=lm):
        paused = run(agent, ticket="t")
        done = run(agent, history=paused.metadata.history, approvals={"p1/g1": True})
    assert (done.reply, done.metadata.finished_by_tool) == ("found o7", "lookup")
    assert RAN == ["lookup o7", "refund 5"]  # lookup ran once, before the pause


# -- approval as shown, at every depth ------------------------------------------------------------


def test_a_grandchilds_pending_call_is_approved_as_shown(run):
    agent, lms = three_deep()
    with dspy.context(lm=lms[0]):
        paused = run(agent, ticket="Refund order 7.")
        [shown] = paused.metadata.pending_calls
        assert shown["id"] == "p1/c1/g1"
        done = run(agent, history=round_trip(paused.metadata.history), approvals={shown["id"]: shown})
    assert (done.reply, done.metadata.termination_reason) == ("Your refund is on its way.", "answered")
    assert RAN == ["lookup o7", "refund 5"]
    assert lms[2].requests[1].messages[-1] == tool("g1", "refunded 5")


def test_a_grandchilds_call_changed_in_the_record_is_refused_as_shown_and_nothing_runs(run):
    agent, lms = three_deep()
    with dspy.context(lm=lms[0]):
        paused = run(agent, ticket="Refund order 7.")
    [shown] = paused.metadata.pending_calls  # what the person saw: a refund of 5
    data = dspy_imp.dump_history(paused.metadata.history)
    inner = data["messages"][0]["agent_runs"]["p1"]["history"][-1]["agent_runs"]["c1"]["history"][-1]
    inner["tool_calls"][0]["args"]["amount"] = 99999  # the child's record, edited on its way back
    tampered = dspy_imp.load_history(data)
    with dspy.context(lm=lms[0]), pytest.raises(dspy_imp.ConfigurationError) as caught:
        run(agent, history=tampered, approvals={shown["id"]: shown})
    assert str(caught.value) == (
        "`approvals['p1/c1/g1']` approved researcher/billing/refund({'amount': 5}), but the history's call "
        "'p1/c1/g1' is {'name': 'researcher/billing/refund', 'args': {'amount': 99999}}; nothing ran. "
        "Show the person the calls of the history you resume"
    )
    assert RAN == ["lookup o7"]
