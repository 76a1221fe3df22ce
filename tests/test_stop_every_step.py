"""A turn stopped at every step (``stop_every_step``): for k = 1..n, the scripted turn is stopped
as its k-th effect begins (n counted on an uncancelled run), by the cancellation of ``acall``'s
task and by the web app's Stop (async and ``sync=True`` turns), and by a crash of the durable worker
(``stop_every_step_durable.py``: a DBOS workflow killed there and recovered); each stopped turn's
history must be consistent, record every tool that ran once, and carry the next turn. What the harness found
is kept below as named regression cases."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio.from_thread
import dspy
import pytest
from stop_every_step import Effects, Scenario, check, next_turn_continues

from dspy_imp import dump_history, load_history
from dspy_imp._drivers import tool_threads
from dspy_imp._turn.effects import ModelRequest, RunTool
from dspy_imp.web._inputs import Call
from dspy_imp.web._turns import Calls, Ended, MemoryStore, Runner

GUARD = 120  # seconds: a hang guard for each subprocess only, never a timing assertion


async def uncancelled(monkeypatch: pytest.MonkeyPatch) -> int:
    """n: the effects of the whole scripted conversation (its pause and the approving call)."""
    scenario = Scenario()
    with Effects().installed(monkeypatch) as effects:
        paused = await scenario.agent.acall(**Scenario.FIRST)
        assert paused.metadata.termination_reason == "paused"
        answered = await scenario.agent.acall(**Scenario.approving(paused.metadata.history))
    assert answered.reply == "Order 42 is refunded; 40 chairs in stock."
    assert [tool for tool, _ in scenario.ran] == ["lookup", "stock", "warehouse", "refund"]
    assert effects.count > 10
    return effects.count


def failures(k: int, scenario: Scenario, history: dspy.History, effects: Effects, ran: list[Any]) -> list[str]:
    """What ``check`` and the next turn found wrong with the turn stopped at its k-th effect."""
    found = []
    for checking in (
        lambda: check(scenario, history, effects, ran),
        lambda: next_turn_continues(scenario.agent, history),
    ):
        try:
            checking()
        except AssertionError as failed:
            found.append(f"k={k}: {failed}")
    return found


async def cancelled_at(
    monkeypatch: pytest.MonkeyPatch, k: int | None, when: Callable[[Any], bool] | None = None
) -> tuple[Scenario, dspy.History, Effects, list[Any]]:
    """The conversation's task cancelled as its k-th effect (or the first ``when`` accepts) begins."""
    scenario, box = Scenario(), {}

    def stop(number: int) -> None:
        box["ran"] = list(scenario.ran)
        box["task"].cancel()

    async def conversation() -> Any:
        paused = await scenario.agent.acall(**Scenario.FIRST)
        return await scenario.agent.acall(**Scenario.approving(paused.metadata.history))

    with Effects(k, stop, when).installed(monkeypatch) as effects:
        box["task"] = asyncio.ensure_future(conversation())
        with pytest.raises(asyncio.CancelledError) as cancelled:
            await box["task"]
    return scenario, cancelled.value.dspy_imp_history, effects, box["ran"]


async def test_acall_cancelled_at_every_effect(monkeypatch: pytest.MonkeyPatch) -> None:
    n = await uncancelled(monkeypatch)
    found: list[str] = []
    for k in range(1, n + 1):
        found += failures(k, *await cancelled_at(monkeypatch, k))
    assert not found, "\n".join(found)


async def web_stopped_at(
    monkeypatch: pytest.MonkeyPatch, k: int, sync: bool
) -> tuple[Scenario, dspy.History, Effects, list[Any]]:
    """The conversation played by the web app's runner, Stop pressed as its k-th effect begins."""
    scenario, box, key = Scenario(), {}, f"k{k}"
    runner = Runner(Calls(scenario.agent, sync=sync), MemoryStore())

    def stop(number: int) -> None:
        box["ran"] = list(scenario.ran)

        def press() -> None:  # on the loop: the answer is known before the turn can end
            box["answer"] = runner.stop(key, None)

        if tool_threads.in_anyio_worker():  # a sync turn's thread: Stop is pressed on the loop
            anyio.from_thread.run_sync(press)
        else:
            press()

    async def turn(read: Any) -> Ended:
        items = [item async for item in runner.run(key, None, read)]
        assert isinstance(items[-1], Ended)
        return items[-1]

    with Effects(k, stop).installed(monkeypatch) as effects:
        ended = await turn(lambda history: Call(dict(Scenario.FIRST)))
        if "answer" not in box:  # paused: the approving request
            ended = await turn(lambda history: Call(Scenario.approving(history)))
    assert box.get("answer") is True, f"k={k}: Stop was refused"
    assert type(ended.error).__name__ == "StreamClosed", f"k={k}: {ended}"
    saved = await runner.store.load(key)
    assert saved is not None
    return scenario, saved.history, effects, box["ran"]


@pytest.mark.parametrize("sync", [False, True], ids=["async", "sync"])
async def test_web_stop_at_every_effect(monkeypatch: pytest.MonkeyPatch, sync: bool) -> None:
    n = await uncancelled(monkeypatch)
    found: list[str] = []
    for k in range(1, n + 1):
        found += failures(k, *await web_stopped_at(monkeypatch, k, sync))
    assert not found, "\n".join(found)


# What the harness found (each was a failing k before its fix).


def tool_named(name: str) -> Callable[[Any], bool]:
    return lambda effect: isinstance(effect, RunTool) and effect.tool.name == name


def researchers_first_request(effect: Any) -> bool:
    """The sub-agent's first request (its pending inputs are the question it was asked)."""
    return isinstance(effect, ModelRequest) and "question" in effect.pending


def request_after_tool(name: str) -> Callable[[Any], bool]:
    """The first request after tool ``name``'s run began (inside the sub-agent, for ``warehouse``)."""
    seen: list[Any] = []

    def accepts(effect: Any) -> bool:
        if tool_named(name)(effect):
            seen.append(effect)
        return bool(seen) and isinstance(effect, ModelRequest)

    return accepts


async def test_a_turn_stopped_between_two_calls_of_a_step_keeps_the_call_that_ran(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Stopped as the step's second call begins: the first call ran (``lookup``), and was lost
    with the unfinished step. Now the step is kept with the call that ran; the other is left out."""
    scenario, history, effects, ran = await cancelled_at(monkeypatch, None, tool_named("stock"))
    assert ran == [("lookup", "order 42 shipped")]
    (entry,) = history.messages
    assert [c["id"] for c in entry["tool_calls"]] == ["c1"]
    assert [r["result"] for r in entry["tool_call_results"]] == ["order 42 shipped"]
    assert failures(0, scenario, history, effects, ran) == []


async def test_a_turn_stopped_inside_a_sub_agent_keeps_the_callers_history(monkeypatch: pytest.MonkeyPatch) -> None:
    """Stopped as the sub-agent's first request begins: the stop carried the sub-agent's history
    (``question: Chairs?``) and that was the conversation saved. Now it carries the caller's."""
    scenario, history, effects, ran = await cancelled_at(monkeypatch, None, researchers_first_request)
    assert history.messages[0]["message"] == "Refund order 42 and count the chairs."
    assert [r["result"] for r in history.messages[0]["tool_call_results"]] == ["order 42 shipped", "40 chairs"]
    assert failures(0, scenario, history, effects, ran) == []


async def test_a_sub_agent_stopped_after_its_tool_ran_keeps_what_it_did(monkeypatch: pytest.MonkeyPatch) -> None:
    """Stopped as the sub-agent's second request begins, after its ``warehouse`` ran: that run was
    in no history. Now the sub-agent's call is kept as stopped (an error result the next model
    reads), its record holding the sub-agent's history with the tool's result."""
    scenario, history, effects, ran = await cancelled_at(monkeypatch, None, request_after_tool("warehouse"))
    assert ("warehouse", "12 chairs in aisle 3") in ran
    researcher = history.messages[-1]
    (result,) = researcher["tool_call_results"]
    assert (result["id"], result["error"], result["error_kind"]) == ("c3", True, "agent_incomplete")
    assert result["result"] == "researcher was stopped before it finished (the turn was stopped)."
    inner = researcher["agent_runs"]["c3"]["history"]
    assert inner[0]["tool_call_results"][0]["result"] == "12 chairs in aisle 3"
    assert failures(0, scenario, history, effects, ran) == []


def test_a_durable_worker_crashed_at_every_effect(tmp_path: Path) -> None:
    """``stop_every_step_durable.py``: workflow ``wk`` frozen as its k-th effect begins, for every k
    (n counted on the uncancelled ``w0``), the process SIGKILLed, DBOS recovering them all in the
    next process: each ends as ``w0`` did, with the same history, every tool run once in all."""
    db, folder = f"sqlite:///{tmp_path}/sys.sqlite", str(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent), "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    command = [sys.executable, str(Path(__file__).with_name("stop_every_step_durable.py")), "--db", db, "--dir", folder]
    doomed = subprocess.run([*command, "--doomed"], env=env, capture_output=True, timeout=GUARD)
    assert doomed.returncode == -signal.SIGKILL, doomed.stdout.decode() + doomed.stderr.decode()
    recovered = subprocess.run(command, env=env, capture_output=True, timeout=GUARD)
    assert recovered.returncode == 0, recovered.stdout.decode() + recovered.stderr.decode()
    n = int((tmp_path / "n").read_text())
    assert n > 10
    results = {path.stem: json.loads(path.read_text()) for path in (tmp_path / "results").glob("*.json")}
    assert sorted(results) == sorted(f"w{k}" for k in range(n + 1))
    ran = Counter(tuple(json.loads(line)) for line in (tmp_path / "ran.log").read_text().splitlines())
    reference = without_times(results["w0"]["history"])
    found = []
    for k in range(1, n + 1):
        workflow, result = f"w{k}", results[f"w{k}"]
        if result["reply"] != results["w0"]["reply"] or without_times(result["history"]) != reference:
            found.append(f"k={k}: the recovered turn is not the uncancelled one: {result}")
        runs = {(tool, value): count for (w, tool, value), count in ran.items() if w == workflow}
        if runs != dict.fromkeys(TOOL_RUNS, 1):
            found.append(f"k={k}: tools did not run once each across the crash: {runs}")
        history = load_history(result["history"])
        if dump_history(history) != result["history"]:
            found.append(f"k={k}: the history does not round-trip")
    assert json.loads((tmp_path / "early").read_text()) == []  # no tool ran in a frozen workflow
    assert not found, "\n".join(found)


TOOL_RUNS = [
    ("lookup", "order 42 shipped"),
    ("stock", "40 chairs"),
    ("warehouse", "12 chairs in aisle 3"),
    ("refund", "order 42 refunded"),
]


def without_times(dumped: dict[str, Any]) -> Any:
    """A dumped history with its results' ``returned_at`` taken out (the clock's, not the turn's)."""
    text = json.dumps(dumped)
    return json.loads(re.sub(r'"returned_at": "[^"]*"', '"returned_at": ""', text))
