"""Stop cancels what a web turn is waiting for: the model request (before its first chunk or mid-stream) and an async
tool, and leaves a sync turn's running sync tool behind; the turn ends stopped with its history, and a Stop answered
200 always ends the turn stopped.

The model and the tool here wait on an event nobody sets: a turn that Stop does not cancel never
ends, and ``asyncio.wait_for(..., GUARD)`` fails the test instead of hanging it.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from web_helpers import agui_events, verify_agui
from web_scenarios import client, run_input

import dspy_imp
import dspy_imp.web
from dspy_imp.testing import ScriptedLM, call, reply
from dspy_imp.testing._engine import _AsyncScript
from dspy_imp.web._inputs import Call
from dspy_imp.web._turns import Calls, Ended, MemoryStore, Runner

GUARD = 30  # seconds: a failure guard only, never a timing assertion
JSON = {"content-type": "application/json"}
ONLY_THE_QUESTION = {"question": "When?", "tool_calls": [], "tool_call_results": []}  # a turn stopped before a step
STOPPED = {"type": "RUN_ERROR", "message": "StreamClosed: the turn was stopped", "code": "StreamClosed"}


class Hanging:
    """An async engine answering the script's first ``answered`` requests, then waiting forever on
    the next one: ``complete`` waits at once, ``stream`` after sending its first ``sent`` events."""

    def __init__(self, lm: ScriptedLM, answered: int, sent: int = 0) -> None:
        self.script = _AsyncScript(lm._engine_spec)
        self.answered, self.sent = answered, sent
        self.waiting, self.cancelled = asyncio.Event(), asyncio.Event()
        self.ways: list[str] = []

    async def _hang(self) -> None:
        self.waiting.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled.set()
            raise

    async def complete(self, request: Any) -> Any:
        self.ways.append("complete")
        if len(self.ways) <= self.answered:
            return await self.script.complete(request)
        await self._hang()

    async def stream(self, request: Any) -> Any:
        self.ways.append("stream")
        events = self.script.stream(request)
        if len(self.ways) <= self.answered:
            async for event in events:
                yield event
            return
        count = 0
        async for event in events:
            if count == self.sent:
                break
            count += 1
            yield event
        await self._hang()


def hanging_lm(script: list[Any], answered: int, sent: int = 0) -> tuple[ScriptedLM, Hanging]:
    lm = ScriptedLM(script)
    engine = Hanging(lm, answered, sent)
    return lm.copy(engine=lm._engine_spec, async_engine=engine), engine


def only_the_question(kept: dict[str, Any]) -> bool:
    """The stopped turn's history: its question, and its entry with no step (the cut reply is not one)."""
    question, entry = kept["messages"]
    assert question["content"] == "Where is order 42?"
    assert "content" not in entry and entry["metadata"]["dspy_imp"]["entry"]["tool_calls"] == []
    return kept["running"] is False


async def stop_while(app: Any, thread: str, waiting: asyncio.Event) -> tuple[Any, list[dict[str, Any]], Any]:
    """Start a turn, press Stop once ``waiting`` is set: Stop's answer, the turn's events, what was kept."""
    async with client(app) as http:
        running = asyncio.ensure_future(http.post("/ag-ui", json=run_input("Where is order 42?", thread=thread)))
        await asyncio.wait_for(waiting.wait(), GUARD)
        stopped = await http.post(f"/api/conversations/{thread}/stop", json={}, headers=JSON)
        events = agui_events((await asyncio.wait_for(running, GUARD)).text)
        kept = (await http.get(f"/api/conversations/{thread}")).json()
    return stopped, events, kept


@pytest.mark.parametrize("sent", [0, 2], ids=["thinking-before-any-chunk", "mid-stream"])
async def test_stop_cancels_the_model_request_it_waits_for(sent: int) -> None:
    agent = dspy_imp.ReActV2("question -> answer")
    lm, engine = hanging_lm([reply("Order 42 shipped on Monday and arrives on Thursday.", chunk=4)], 0, sent)
    agent.set_lm(lm)
    stopped, events, kept = await stop_while(dspy_imp.web.app(agent), "m1", engine.waiting)
    assert (stopped.status_code, stopped.json()) == (200, {"stopping": "m1"})
    assert engine.cancelled.is_set()  # the request was cancelled, not left to finish
    verify_agui(events)
    assert events[-1] == STOPPED
    assert only_the_question(kept)


async def test_stop_cancels_an_awaiting_async_tool_and_keeps_what_ran() -> None:
    waiting, cancelled = asyncio.Event(), asyncio.Event()

    async def inventory(item: str) -> str:
        """Count an item in the warehouse (never finishes)."""
        waiting.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return "never"

    async def lookup(order: str) -> str:
        """Look up an order."""
        return f"order {order} shipped"

    agent = dspy_imp.ReActV2("question -> answer", tools=[lookup, inventory])
    script = [
        reply(calls=[call("lookup", {"order": "42"}, id="c1")]),
        reply(calls=[call("inventory", {"item": "chairs"}, id="c2")]),
        reply("Never asked."),
    ]
    lm = ScriptedLM(script)
    agent.set_lm(lm)
    stopped, events, kept = await stop_while(dspy_imp.web.app(agent), "t1", waiting)
    assert stopped.status_code == 200
    assert cancelled.is_set()
    verify_agui(events)
    assert events[-1] == STOPPED
    assert [e["content"] for e in events if e["type"] == "TOOL_CALL_RESULT"] == ["order 42 shipped"]
    assert [m["role"] for m in kept["messages"]] == ["user", "assistant", "tool"]  # the finished step
    assert lm.remaining == 1  # no request after the stop


class Finished:
    """A turn that has finished (its prediction returned) when the test lets it, so Stop can be
    pressed at each point of its end: before its ending is taken, and after."""

    cancellable = True

    def __init__(self, prediction: Any) -> None:
        self.prediction = prediction
        self.release = asyncio.Event()

    async def play(self, key: str, kwargs: dict[str, Any], observe: Any, tools: Any) -> Any:
        await self.release.wait()
        return self.prediction


class GatedStore(MemoryStore):
    """A store whose save waits for ``saved``: the turn's ending is taken and it still runs."""

    def __init__(self) -> None:
        super().__init__()
        self.saving, self.saved = asyncio.Event(), asyncio.Event()

    async def save(self, key: str, conversation: Any) -> None:
        self.saving.set()
        await self.saved.wait()
        await super().save(key, conversation)


async def answered_prediction() -> Any:
    agent = dspy_imp.ReActV2("question -> answer")
    agent.set_lm(ScriptedLM([reply("Monday.")]))
    return await agent.acall(question="When?")


async def events_of(runner: Runner, key: str) -> list[Any]:
    turn = runner.run(key, None, lambda history: Call({"question": "When?"}))
    return [item async for item in turn]


@pytest.mark.parametrize("pressed", ["as-it-returns", "after-its-ending"])
async def test_stop_that_races_the_end_never_answers_for_an_answered_turn(pressed: str) -> None:
    """Stop as the play returns (its task done, its ending not yet taken): 200 and stopped, the
    answer's history kept. Stop once the ending is taken: refused (409's ``False``), answered."""
    turns = Finished(await answered_prediction())
    store = GatedStore()
    runner = Runner(turns, store)
    turn = asyncio.ensure_future(events_of(runner, "r1"))
    while "r1" not in runner.plays:  # the play waits for ``release``: it cannot end meanwhile
        await asyncio.sleep(0)
    asks: list[bool] = []
    if pressed == "as-it-returns":  # a done callback runs before the turn's task wakes to take the ending
        runner.plays["r1"].add_done_callback(lambda play: asks.append(runner.stop("r1", None)))
    turns.release.set()
    if pressed == "after-its-ending":  # the ending taken, the history being saved: still busy
        await asyncio.wait_for(store.saving.wait(), GUARD)
        asks.append(runner.stop("r1", None))
    store.saved.set()
    ended = (await asyncio.wait_for(turn, GUARD))[-1]
    assert isinstance(ended, Ended)
    saved = await runner.store.load("r1")
    assert saved is not None and saved.history.messages[-1] == turns.prediction.metadata.history.messages[-1]
    if pressed == "as-it-returns":
        assert asks == [True]
        assert type(ended.error).__name__ == "StreamClosed"
    else:
        assert asks == [False]
        assert ended.error is None and ended.prediction is turns.prediction


async def test_a_sync_turn_leaves_its_running_sync_tool_behind() -> None:
    """``sync=True``: the worker thread is not cancelled, but the turn does not wait for it: it ends
    stopped while the sync tool still runs (left behind, as ``tool_timeouts`` leaves it), keeps the
    history of its finished steps (the cut step is not one), and sends no request after."""
    running, release, returned = threading.Event(), threading.Event(), threading.Event()

    def inventory(item: str) -> str:
        """Count an item in the warehouse (slow)."""
        running.set()
        release.wait(GUARD)
        returned.set()
        return f"12 {item}"

    agent = dspy_imp.ReActV2("question -> answer", tools=[inventory])
    lm = ScriptedLM([reply(calls=[call("inventory", {"item": "chairs"}, id="c1")]), reply("Never asked.")])
    agent.set_lm(lm)
    turns = Calls(agent, sync=True)
    assert turns.cancellable is False
    runner = Runner(turns, MemoryStore())
    turn = asyncio.ensure_future(events_of(runner, "s1"))
    assert await asyncio.wait_for(asyncio.to_thread(running.wait, GUARD), GUARD)
    assert runner.stop("s1", None) is True
    try:
        ended = (await asyncio.wait_for(turn, GUARD))[-1]  # ended with the tool still running
        assert not returned.is_set()
    finally:
        release.set()
    assert type(ended.error).__name__ == "StreamClosed"
    saved = await runner.store.load("s1")
    assert saved is not None and saved.history.messages == [ONLY_THE_QUESTION]
    assert await asyncio.to_thread(returned.wait, GUARD)  # it returned later: dropped, never recorded
    assert "12 chairs" not in str((await runner.store.load("s1")).history.messages)
    assert lm.remaining == 1


class SyncOnly:
    """A sync engine (no async counterpart) answering the script's first ``answered`` requests,
    then blocking until ``release`` is set."""

    def __init__(self, lm: ScriptedLM, answered: int) -> None:
        self.script, self.answered = lm._engine_spec, answered
        self.calls = 0
        self.waiting, self.release = threading.Event(), threading.Event()
        self.finished = threading.Event()  # a blocked request's thread is done with its reply

    def complete(self, request: Any) -> Any:
        self.calls += 1
        if self.calls > self.answered:
            self.waiting.set()
            self.release.wait(GUARD)
        try:
            return self.script.complete(request)
        finally:
            self.finished.set()

    def stream(self, request: Any) -> Any:
        self.calls += 1
        if self.calls > self.answered:
            self.waiting.set()
            self.release.wait(GUARD)
        try:
            yield from self.script.stream(request)
        finally:
            self.finished.set()


@pytest.mark.parametrize("answered", [1, 0], ids=["answers", "stopped-while-it-blocks"])
async def test_a_sync_turn_on_an_lm_without_async_engine_sends_sync_and_stops(answered: int) -> None:
    """An LM with no async engine is sent through its sync engine (in a worker thread): the turn
    works under ``sync=True``, and a Stop while its request blocks ends the turn at once, the
    request left behind (it cannot be closed from outside; what it returns later is dropped)."""
    script = ScriptedLM([reply("Monday.")])
    engine = SyncOnly(script, answered)
    agent = dspy_imp.ReActV2("question -> answer")
    agent.set_lm(script.copy(engine=engine))
    runner = Runner(Calls(agent, sync=True), MemoryStore())
    turn = asyncio.ensure_future(events_of(runner, "n1"))
    try:
        if answered:
            ended = (await asyncio.wait_for(turn, GUARD))[-1]
            assert ended.error is None and ended.prediction.answer == "Monday."
            return
        assert await asyncio.wait_for(asyncio.to_thread(engine.waiting.wait, GUARD), GUARD)
        assert runner.stop("n1", None) is True
        ended = (await asyncio.wait_for(turn, GUARD))[-1]
        assert not engine.release.is_set()  # ended with the request still blocked
    finally:
        engine.release.set()
    # The request left behind ends while this test's loop still runs: its late chunks, handed to the
    # loop and dropped, would otherwise be handed to a loop already closed (a warning at teardown).
    assert await asyncio.to_thread(engine.finished.wait, GUARD)
    assert type(ended.error).__name__ == "StreamClosed"
    saved = await runner.store.load("n1")
    assert saved is not None and saved.history.messages == [ONLY_THE_QUESTION]
