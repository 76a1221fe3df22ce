"""A turn stopped at every step: the scripted turn, the effect counter, and the checks.

The turn (``Scenario``) has what a stop can cut: a request that fails over to a fallback model,
two tool calls in one step, a sub-agent with a tool of its own, a call that waits for approval
(the turn pauses; a second call approves it), a context policy that counts each request. Each
tool counts its real executions (``Scenario.ran``).

``Effects`` hooks the driver/effect boundary (``dspy_imp._drivers.driver.Effects.perform`` and
``aperform``, monkeypatched in the test, never in the machine): it numbers every effect a driver
is handed (a sub-agent's and a parallel batch's own effects too; the same effect handed on from
the sync driver to the async path counted once) and calls ``stop(k)`` when the k-th begins,
before it is performed. ``n`` is the count of an uncancelled run.

``check`` is what must hold after a stop: the history round-trips through ``dump_history`` and
``load_history``; every call in it has exactly one result (or is a pending call of a paused
turn); every tool execution that finished before the stop is recorded exactly once; no effect
began after the stop; and the next turn, continued from the history, sends a well-formed
request and answers.
"""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, ClassVar

import dspy
import pytest

import dspy_imp
from dspy_imp._drivers.driver import Effects as DriverEffects
from dspy_imp.testing import ScriptedLM, call, fail, reply


@dataclass
class Scenario:
    """One scripted conversation; build a fresh one per run (its tools count into ``ran``)."""

    ran: list[tuple[str, str]] = field(default_factory=list)  # (tool, what it returned), once finished
    lock: threading.Lock = field(default_factory=threading.Lock)
    by_content: bool = False  # the models answer by what the request holds, not in order (a replay)
    on_run: Callable[[str, str], Any] | None = None  # told each finished execution (a log file)

    def __post_init__(self) -> None:
        def lookup(order: str) -> str:
            """Look an order up."""
            return self._ran("lookup", f"order {order} shipped")

        def stock(item: str) -> str:
            """Count an item in stock."""
            return self._ran("stock", f"40 {item}")

        def warehouse(item: str) -> str:
            """Ask the warehouse about an item."""
            return self._ran("warehouse", f"12 {item} in aisle 3")

        def refund(order: str) -> str:
            """Refund an order (needs approval)."""
            return self._ran("refund", f"order {order} refunded")

        researcher = dspy_imp.ReActV2("question -> findings", tools=[warehouse]).as_tool(name="researcher")
        context = dspy_imp.Context(trigger=10_000, window=100_000, counter=_words, summarize=False)
        two_calls = [call("lookup", {"order": "42"}, id="c1"), call("stock", {"item": "chairs"}, id="c2")]
        if self.by_content:  # a recovered durable turn asks only what its records do not hold
            self.lm, self.backup = ScriptedLM(_primary), ScriptedLM(lambda request: reply("Looking.", calls=two_calls))
        else:
            self.backup = ScriptedLM([reply("Looking.", calls=two_calls)], model="openai/backup")
            self.lm = ScriptedLM(
                [
                    fail.server_error(),  # the first request fails over to the backup
                    reply(calls=[call("researcher", {"question": "Chairs?"}, id="c3")]),
                    reply(calls=[call("warehouse", {"item": "chairs"}, id="w1")]),  # the researcher's turn
                    reply("12 chairs in aisle 3."),
                    reply("A refund needs approval.", calls=[call("refund", {"order": "42"}, id="c4")]),
                    reply("Order 42 is refunded; 40 chairs in stock."),  # after the approval
                ]
            )
        self.agent = dspy_imp.ReActV2(
            "message -> reply",
            tools=[lookup, stock, researcher, refund],
            needs_approval=[refund],
            fallback=[self.backup],
            context=context,
        )
        self.agent.set_lm(self.lm)

    def _ran(self, tool: str, value: str) -> str:
        with self.lock:
            self.ran.append((tool, value))
        if self.on_run is not None:
            self.on_run(tool, value)
        return value

    FIRST: ClassVar[dict[str, str]] = {"message": "Refund order 42 and count the chairs."}

    @staticmethod
    def approving(history: dspy.History) -> dict[str, Any]:
        return {"history": history, "approvals": {"c4": True}}


def _primary(request: Any) -> Any:
    """The primary model of ``Scenario`` answering by the request: the step it is at."""
    answered = {m.get("tool_call_id") for m in request.messages if m.get("role") == "tool"}
    if "findings" in str(request.messages[0].get("content")):  # the researcher's turn
        return (
            reply("12 chairs in aisle 3.")
            if "w1" in answered
            else reply(calls=[call("warehouse", {"item": "chairs"}, id="w1")])
        )
    if "c4" in answered:
        return reply("Order 42 is refunded; 40 chairs in stock.")
    if "c3" in answered:
        return reply("A refund needs approval.", calls=[call("refund", {"order": "42"}, id="c4")])
    if "c1" in answered:
        return reply(calls=[call("researcher", {"question": "Chairs?"}, id="c3")])
    return fail.server_error()


TOOLS = ("lookup", "stock", "warehouse", "refund")  # the tools that count their executions (not the sub-agent)


def _words(messages: Any, tools: Any, model: Any) -> int:
    return sum(len(str(m.get("content") or "").split()) for m in messages)


class Effects:
    """Numbers the effects drivers are handed; ``stop(k)`` is called as the ``at``-th begins.

    ``after`` lists the effects that began after the stop (none may).
    """

    def __init__(
        self, at: int | None = None, stop: Callable[[int], Any] | None = None, when: Callable[[Any], bool] | None = None
    ):
        self.at, self.stop, self.when = at, stop, when  # ``when``: stop at the first effect it accepts instead
        self.count = 0
        self.seen: dict[int, Any] = {}  # by id, the effects kept alive so an id is never reused
        self.after: list[str] = []
        self.stopped = False
        self.lock = threading.Lock()

    def _number(self, effect: Any) -> int | None:
        """The effect's number when it is new, else ``None`` (the sync driver handing it on)."""
        with self.lock:
            if id(effect) in self.seen:
                return None
            self.seen[id(effect)] = effect
            if self.stopped:
                self.after.append(type(effect).__name__)
            self.count += 1
            if self.when is not None and self.at is None and self.when(effect):
                self.at = self.count
            return self.count

    @contextmanager
    def installed(self, monkeypatch: pytest.MonkeyPatch) -> Iterator[Effects]:
        perform, aperform = DriverEffects.perform, DriverEffects.aperform
        numbered = self

        def counted(driver: Any, effect: Any) -> Any:
            number = numbered._number(effect)
            if number is not None and number == numbered.at and numbered.stop is not None:
                numbered.stopped = True
                numbered.stop(number)
            return perform(driver, effect)

        async def acounted(driver: Any, effect: Any) -> Any:
            number = numbered._number(effect)
            if number is not None and number == numbered.at and numbered.stop is not None:
                numbered.stopped = True
                numbered.stop(number)
                await asyncio.sleep(0)  # a cancellation asked now lands here, before the effect begins
            return await aperform(driver, effect)

        monkeypatch.setattr(DriverEffects, "perform", counted)
        monkeypatch.setattr(DriverEffects, "aperform", acounted)
        try:
            yield self
        finally:
            monkeypatch.setattr(DriverEffects, "perform", perform)
            monkeypatch.setattr(DriverEffects, "aperform", aperform)


def check(scenario: Scenario, history: dspy.History, effects: Effects, ran_before_stop: list[tuple[str, str]]) -> None:
    """What a stopped turn's history must be (see the module's docstring)."""
    dumped = dspy_imp.dump_history(history)
    assert dspy_imp.dump_history(dspy_imp.load_history(dumped)) == dumped, "the history does not round-trip"
    recorded: Counter[tuple[str, str]] = Counter()
    for entry in _entries(history):
        calls = {c["id"]: c["name"] for c in entry.get("tool_calls", [])}
        results = [r["id"] for r in entry.get("tool_call_results", [])]
        pending = {p["id"] for p in entry.get("pending_calls", []) or []}
        assert sorted(results) == sorted(set(results)), f"a call with two results: {entry}"
        missing = set(calls) - set(results) - pending
        assert not missing, f"calls with no result and not marked: {missing} in {entry}"
        for result in entry.get("tool_call_results", []):
            if not result.get("error"):
                recorded[(result["name"], str(result["result"]))] += 1
    for execution in ran_before_stop:
        assert recorded[execution] == 1, f"{execution} ran but is recorded {recorded[execution]} times"
    counted = {tool for tool, _ in recorded if tool in TOOLS}
    assert {e for e in recorded if e[0] in counted} <= set(scenario.ran), f"a result no tool returned: {recorded}"
    assert effects.after == [], f"effects began after the stop: {effects.after}"


def _entries(history: dspy.History) -> Iterator[dict[str, Any]]:
    """Every history entry, a sub-agent's recorded turn's too."""
    for entry in history.messages:
        yield entry
        for run in (entry.get("agent_runs") or {}).values():
            inner = run.get("history") if isinstance(run, dict) else None
            if inner is not None:
                yield from _entries(inner if isinstance(inner, dspy.History) else dspy.History(messages=inner))


def next_turn_continues(agent: dspy_imp.ReActV2, history: dspy.History) -> None:
    """The next turn, from the stopped turn's history: a well-formed request, and an answer."""
    lm = ScriptedLM([reply("Anything else?")])
    pred = _answer(agent, history, lm)
    assert pred.reply == "Anything else?"
    messages = lm.requests[0].messages
    asked = [c["id"] for m in messages if m["role"] == "assistant" for c in m.get("tool_calls") or []]
    answered = [m["tool_call_id"] for m in messages if m["role"] == "tool"]
    assert sorted(asked) == sorted(answered), f"the next request's calls and results differ: {asked} {answered}"


def _answer(agent: dspy_imp.ReActV2, history: dspy.History, lm: ScriptedLM) -> Any:
    saved = agent.react.lm
    agent.set_lm(lm)
    try:
        return agent(message="Thanks.", history=history)
    finally:
        agent.set_lm(saved)
