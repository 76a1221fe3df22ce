"""``parallel_tools=True``: the calls of one reply run at once, recorded as the sequential run records them."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import dspy
import pytest
from dspy.utils.callback import BaseCallback
from helpers import TA, SubmitSig, settled

import dspy_imp
from dspy_imp.testing import ScriptedLM, call, reply


class Clock:
    """Tools that record when each run started and ended (monotonic), and a shared event log."""

    def __init__(self) -> None:
        self.spans: dict[str, tuple[float, float]] = {}
        self.events: list[str] = []
        self.lock = threading.Lock()

    def slow(self, name: str, seconds: float = 0.2) -> Any:
        def run(key: str) -> str:
            start = time.monotonic()
            self.log(f"start {key}")
            time.sleep(seconds)
            with self.lock:
                self.spans[key] = (start, time.monotonic())
            return f"{name} {key}"

        async def arun(key: str) -> str:
            start = time.monotonic()
            self.log(f"start {key}")
            await asyncio.sleep(seconds)
            with self.lock:
                self.spans[key] = (start, time.monotonic())
            return f"{name} {key}"

        return run, arun

    def log(self, event: str) -> None:
        with self.lock:
            self.events.append(event)


def fetch_tool(clock: Clock, asynchronous: bool, seconds: float = 0.2) -> dspy.Tool:
    run, arun = clock.slow("fetched", seconds)
    func = arun if asynchronous else run
    return dspy.Tool(func, name="fetch", desc="Fetch a page.", args={"key": {"type": "string"}})


def broken(key: str) -> str:
    """Always fails."""
    raise RuntimeError(f"no {key}")


def three_fetches() -> list[Any]:
    return [
        reply("fetch all", calls=[call("fetch", {"key": k}, id=f"f-{k}") for k in ("a", "b", "c")]),
        reply("[[ ## answer ## ]]\nabc\n\n[[ ## completed ## ]]"),
    ]


def overlap(spans: dict[str, tuple[float, float]]) -> bool:
    """Every run started before any run ended."""
    return max(start for start, _ in spans.values()) < min(end for _, end in spans.values())


def test_three_slow_tools_in_one_reply_overlap(run):
    clock = Clock()
    lm = ScriptedLM(three_fetches())
    agent = dspy_imp.ReActV2("question -> answer", tools=[fetch_tool(clock, False)], parallel_tools=True)
    with dspy.context(lm=lm):
        pred = run(agent, question="q")
    assert pred.answer == "abc"
    assert sorted(clock.spans) == ["a", "b", "c"]
    assert overlap(clock.spans)
    [entry, _] = pred.metadata.history.messages
    assert [r["result"] for r in entry["tool_call_results"]] == ["fetched a", "fetched b", "fetched c"]


def test_async_tools_overlap_as_tasks_under_acall():
    clock = Clock()
    lm = ScriptedLM(three_fetches())
    agent = dspy_imp.ReActV2("question -> answer", tools=[fetch_tool(clock, True)], parallel_tools=True)
    with dspy.context(lm=lm):
        pred = asyncio.run(agent.acall(question="q"))
    assert pred.answer == "abc"
    assert overlap(clock.spans)


def test_sequential_runs_do_not_overlap(run):
    clock = Clock()
    lm = ScriptedLM(three_fetches())
    agent = dspy_imp.ReActV2("question -> answer", tools=[fetch_tool(clock, False, 0.01)])
    with dspy.context(lm=lm):
        run(agent, question="q")
    spans = [clock.spans[k] for k in ("a", "b", "c")]
    assert all(spans[i][1] <= spans[i + 1][0] for i in range(2))


def mixed_script() -> list[Any]:
    """One reply: two fetches, a failing tool, a refused tool, an unknown tool, then a finishing send twice."""
    return [
        reply(
            "do everything",
            calls=[
                call("fetch", {"key": "a"}, id="c1"),
                call("broken", {"key": "x"}, id="c2"),
                call("secret", {}, id="c3"),
                call("nowhere", {}, id="c4"),
                call("fetch", {"key": "b"}, id="c5"),
            ],
        ),
        reply(
            "send it",
            calls=[call("send", {"text": "first"}, id="s1"), call("send", {"text": "second"}, id="s2")],
        ),
    ]


def mixed_agent(clock: Clock, parallel: bool, **options: Any) -> dspy_imp.ReActV2:
    policy_log = clock

    def policy(name: str, args: dict[str, Any]) -> bool | str:
        policy_log.log(f"policy {name}")
        return "classified" if name == "secret" else True

    def secret() -> str:
        """A secret."""
        return "never"

    def send(text: str) -> str:
        """Send a reply."""
        time.sleep(0.05 if text == "first" else 0.0)  # the first call returns last
        return f"sent {text}"

    return dspy_imp.ReActV2(
        "message -> reply",
        tools=[fetch_tool(clock, False, 0.01), broken, secret, send],
        finish="tools",
        finish_on={"send": lambda args, result, inputs: dspy_imp.Finish(reply=args["text"])},
        tool_policy=policy,
        parallel_tools=parallel,
        **options,
    )


def test_parallel_and_sequential_give_identical_requests_and_histories(run):
    outcomes = []
    for parallel in (False, True):
        clock = Clock()
        lm = ScriptedLM(mixed_script())
        with dspy.context(lm=lm):
            pred = run(mixed_agent(clock, parallel), message="hi")
        lm.assert_complete()
        outcomes.append((lm.requests, pred))
    (seq_requests, seq), (par_requests, par) = outcomes
    assert [r.messages for r in par_requests] == [r.messages for r in seq_requests]
    assert [(r.tools, r.tool_choice, r.options) for r in par_requests] == [
        (r.tools, r.tool_choice, r.options) for r in seq_requests
    ]
    assert settled(par.metadata.history.messages) == settled(seq.metadata.history.messages)
    assert (par.reply, par.metadata.finished_by_tool) == ("first", "send")  # hooks decided in call order
    results = settled(par.metadata.history.messages)[0]["tool_call_results"]
    assert [(r["id"], r["error"]) for r in results] == [
        ("c1", False),
        ("c2", True),  # a raising tool cancels none of the others
        ("c3", True),
        ("c4", True),
        ("c5", False),
    ]
    assert results[1]["result"] == "broken failed: no x"


def test_policy_is_applied_to_every_call_before_any_runs(run):
    clock = Clock()
    lm = ScriptedLM(mixed_script())
    with dspy.context(lm=lm):
        run(mixed_agent(clock, True), message="hi")
    first_start = next(i for i, e in enumerate(clock.events) if e.startswith("start"))
    policies = [i for i, e in enumerate(clock.events) if e.startswith("policy")]
    assert clock.events[:first_start] == ["policy fetch", "policy broken", "policy secret", "policy fetch"]
    assert len(policies) == 6 and policies[4] > first_start  # the second reply's policies come later


class ToolCounter(BaseCallback):
    def __init__(self) -> None:
        self.starts: list[str] = []
        self.ends: list[str] = []

    def on_tool_start(self, call_id: str, instance: Any, inputs: dict[str, Any]) -> None:
        self.starts.append(instance.name)

    def on_tool_end(self, call_id: str, outputs: Any, exception: Exception | None = None) -> None:
        self.ends.append(call_id)


def test_callbacks_fire_once_per_tool(run):
    counter = ToolCounter()
    clock = Clock()
    lm = ScriptedLM(three_fetches())
    agent = dspy_imp.ReActV2("question -> answer", tools=[fetch_tool(clock, False, 0.01)], parallel_tools=True)
    with dspy.context(lm=lm, callbacks=[counter]):
        run(agent, question="q")
    assert counter.starts == ["fetch"] * 3
    assert len(counter.ends) == 3


def test_per_call_parallel_tools_and_its_validation(run):
    clock = Clock()
    lm = ScriptedLM(three_fetches())
    agent = dspy_imp.ReActV2("question -> answer", tools=[fetch_tool(clock, False)])
    with dspy.context(lm=lm):
        run(agent, question="q", parallel_tools=True)
    assert overlap(clock.spans)
    with pytest.raises(dspy_imp.ConfigurationError, match=r"`parallel_tools` must be True or False, got 'yes'"):
        run(agent, question="q", parallel_tools="yes")
    with pytest.raises(dspy_imp.ConfigurationError, match=r"`parallel_tools` must be True or False, got 1"):
        dspy_imp.ReActV2("question -> answer", parallel_tools=1)


def test_a_submit_beside_parallel_calls_still_ends_the_turn(run):
    clock = Clock()
    lm = ScriptedLM(
        [
            reply(
                calls=[
                    call("fetch", {"key": "a"}, id="c1"),
                    call("fetch", {"key": "b"}, id="c2"),
                    call("submit", {"answer": "ab", "confidence": 0.5}, id="c3"),
                ]
            )
        ]
    )
    agent = dspy_imp.ReActV2(SubmitSig, tools=[fetch_tool(clock, False)], parallel_tools=True)
    with dspy.context(lm=lm):
        pred = run(agent, intent="i")
    assert (pred.answer, pred.metadata.termination_reason) == ("ab", "submit")
    assert overlap(clock.spans)


def test_a_text_answer_program_with_one_call_runs_it_plainly(run):
    lm = ScriptedLM([reply(calls=[call("broken", {"key": "k"}, id="c1")]), reply("done")])
    agent = dspy_imp.ReActV2(TA, tools=[broken], parallel_tools=True)
    with dspy.context(lm=lm):
        pred = run(agent, intent="i")
    assert pred.answer == "done"
    [entry, _] = settled(pred.metadata.history.messages)
    assert entry["tool_call_results"][0]["error"] is True


def test_the_machine_yields_one_run_tools_effect_for_a_reply_and_takes_results_in_call_order():
    """What a driver sees (a streaming or durable driver performs the same effects)."""
    from dspy_imp._records.outcomes import Raised, RawCall, Reply, Returned
    from dspy_imp._turn.effects import ModelRequest, RunTool, RunTools

    clock = Clock()
    agent = dspy_imp.ReActV2("question -> answer", tools=[fetch_tool(clock, False)], parallel_tools=True)
    turn = agent._turn({"question": "q"})
    machine = turn.run()
    assert isinstance(next(machine), ModelRequest)
    calls = tuple(RawCall(f"c{i}", "fetch", {"key": k}) for i, k in enumerate("ab"))
    effect = machine.send(Reply(calls=calls))
    assert effect == RunTools(tuple(RunTool(agent.tools["fetch"], {"key": k}) for k in "ab"))
    request = machine.send((Returned("page a"), Raised(RuntimeError("gone"))))
    assert isinstance(request, ModelRequest)
    [step] = request.guidance.steps
    assert [(r.id, r.value, r.error) for r in step.results] == [
        ("c0", "page a", False),
        ("c1", "fetch failed: gone", True),
    ]
    assert clock.spans == {}  # the machine ran nothing itself


def test_each_result_is_stamped_when_its_own_tool_returned(run):
    clock = Clock()
    slow, _ = clock.slow("slow", 0.2)
    quick, _ = clock.slow("quick", 0.0)
    schema = {"key": {"type": "string"}}
    tools = [dspy.Tool(f, name=n, desc=n, args=schema) for f, n in ((slow, "slow"), (quick, "quick"))]
    both = [call("slow", {"key": "s"}, id="s"), call("quick", {"key": "q"}, id="q")]
    lm = ScriptedLM([reply(calls=both), reply("ok")])
    agent = dspy_imp.ReActV2("question -> answer", tools=tools, parallel_tools=True)
    with dspy.context(lm=lm):
        pred = run(agent, question="q")
    slow_result, quick_result = pred.metadata.history.messages[0]["tool_call_results"]
    assert quick_result["returned_at"] < slow_result["returned_at"]  # recorded in call order, stamped in time order
