"""Admission: which new turns an instance starts, and the ``Retry-After`` of those it refuses.

At most ``max_turns`` at once (200 by default, whatever the cores), none while the event loop's
median lag over the last second is above ``max_loop_lag``; a refusal answered before the request's
body is validated or its store read; its ``Retry-After`` estimated from the clients told to wait
and the rate turns end; and DSPy's history not kept for the app's turns (every full garbage
collection would walk it).

Nothing here is timed: the lag is recorded by the test on a clock of its own, a turn holds in its
tool until the test releases it (``GUARD`` is a hang guard only), and what is asserted of the
garbage collector is object counts.
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import sys
from typing import Any

import dspy
import pytest
from test_web_scale import Holds, chat_body
from web_helpers import agui_events
from web_scenarios import client, run_input

import dspy_imp
import dspy_imp.web
from dspy_imp._records.errors import ConfigurationError
from dspy_imp.testing import ScriptedLM, call, reply
from dspy_imp.web import _admission
from dspy_imp.web._admission import Admission, LoopLag, Rate

GUARD = 30  # seconds: a failure guard only, never a timing assertion
SSE = {"accept": "text/event-stream"}


class Clock:
    """A clock the test moves."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def lagging(app: Any, clock: Clock, max_loop_lag: float | None = 0.015) -> Admission:
    """The app's admission on ``clock``, its loop's lag told by the test (no probe runs)."""
    admission = Admission(app.runner.max_turns, max_loop_lag, clock=clock)
    app.runner.admission = admission
    return admission


# -- the Retry-After estimate ---------------------------------------------------------------------


def test_retry_after_is_1_until_a_turn_ended_then_the_clients_waiting_over_the_rate_turns_end() -> None:
    clock = Clock()
    admission = Admission(max_turns=1, clock=clock)
    first = admission.refusal(running=1)
    assert first is not None and first.retry_after == 1  # no turn has ended: nothing to estimate from
    admission.ended_turn()  # one end: 0.2 a second over the 5 s window
    told = []
    for _ in range(7):
        refused = admission.refusal(running=1)
        assert refused is not None
        told.append(refused.retry_after)
    # each refusal adds the seconds it was told to the clients waiting (Little's law): 1 client-second
    # waiting per 5 s (0.2) over 0.2 ends a second is 1 s; then 2 client-seconds, 4, ...; at most 30
    assert told == [1, 2, 4, 8, 16, 30, 30]
    assert (first.status, first.details) == (429, {"limit": "max_turns", "max_turns": 1})


def test_retry_after_falls_as_turns_end_faster() -> None:
    clock = Clock()
    admission = Admission(max_turns=1, clock=clock)
    for _ in range(10):
        admission.ended_turn()  # 10 ends in the window: 2 a second
    told = [admission.refusal(running=1).retry_after for _ in range(25)]  # type: ignore[union-attr]
    # each is told ceil(the client-seconds told so far / 5 s, over 2 ends a second): 1 until 11
    # client-seconds are waiting (1.1 clients a second of ends: 2 s), then 2 until 21, ...
    assert told == [1] * 11 + [2] * 5 + [3] * 4 + [4] * 2 + [5] * 2 + [6]
    for _ in range(1000):
        admission.ended_turn()  # many more ends: the same clients are served sooner
    assert admission.refusal(running=1).retry_after == 1  # type: ignore[union-attr]


def test_a_rate_decays_over_its_window() -> None:
    rate = Rate()
    assert rate.per_second(0.0) == 0.0
    rate.add(10.0)
    rate.add(10.0, weight=4.0)
    assert rate.per_second(10.0) == pytest.approx(1.0)  # 5 events over the 5 s window
    assert rate.per_second(15.0) == pytest.approx(1.0 / 2.718281828, rel=1e-6)  # one window later: / e


def test_no_refusal_below_the_bounds() -> None:
    clock = Clock()
    admission = Admission(max_turns=3, clock=clock)
    admission.lag.record(clock.now, 0.015)  # at the bound, not above it
    assert admission.refusal(running=2) is None
    assert admission.refusal(running=3) is not None


# -- the loop's lag -------------------------------------------------------------------------------


def test_the_lag_is_the_median_of_the_last_second() -> None:
    clock = Clock(100.0)
    lag = LoopLag(clock)
    assert lag.recent() is None  # never measured
    lag.record(99.5, 0.3)
    lag.record(99.8, 0.1)
    lag.record(100.0, 0.02)
    assert lag.recent() == pytest.approx(0.1)
    clock.now = 100.6  # the first tick is now more than a second old
    assert lag.recent() == pytest.approx(0.06)
    clock.now = 101.5
    assert lag.recent() is None


def test_one_long_pause_in_a_second_of_short_lags_refuses_nothing() -> None:
    clock = Clock(100.0)
    admission = Admission(max_turns=10, clock=clock)
    for n in range(60):
        admission.lag.record(99.2 + n / 100, 0.005)
    admission.lag.record(100.0, 2.0)  # a two-second pause (a full collection on a loaded machine)
    assert admission.refusal(running=1) is None  # its mean, 38 ms, would have refused
    for _ in range(62):
        admission.lag.record(100.0, 0.05)  # then the loop stays late: most of the last second
    refused = admission.refusal(running=1)
    assert refused is not None and refused.details["loop_lag_ms"] == 50.0


async def test_the_probe_records_how_late_its_timer_ran_less_the_wait_for_a_core_and_stops() -> None:
    clock = Clock(50.0)
    waited = Clock(7.0)  # the loop's thread's seconds waiting for a core, cumulative
    lag = LoopLag(clock, waited=waited)
    lag.start()  # due at 50.01 by the test's clock
    clock.now, waited.now = 50.07, 7.02  # 60 ms late, 20 ms of which the thread waited for a core
    async with asyncio.timeout(GUARD):
        while not lag.samples:
            await asyncio.sleep(0)
    (first,) = lag.samples
    assert first == (50.07, pytest.approx(0.04))  # the loop's own lateness
    lag.stop()
    assert lag.recent() is None and lag._handle is None


def test_the_wait_for_a_core_is_read_from_linuxs_schedstat_and_is_nothing_elsewhere() -> None:
    from dspy_imp.web._admission import _open_schedstat

    lag = LoopLag()
    opened = _open_schedstat()
    if not sys.platform.startswith("linux"):  # no schedstat: the lag is the timer's alone
        assert opened is None and lag._waited_now() == 0.0
        return
    assert opened is not None  # the calling thread's file
    lag._schedstat = opened
    first = lag._waited_now()
    assert first >= 0.0 and lag._waited_now() >= first
    os.close(opened)


async def test_the_lifespan_starts_the_probe_and_stops_it() -> None:
    from test_web_collector import serving

    app = dspy_imp.web.app(Holds([]).agent)
    async with serving(app):
        async with asyncio.timeout(GUARD):
            while app.runner.admission.lag.recent() is None:  # the probe's first tick
                await asyncio.sleep(0.01)
        running = app.runner.admission.lag._handle is not None
    assert running and app.runner.admission.lag._handle is None and app.runner.admission.lag.recent() is None


# -- the app --------------------------------------------------------------------------------------


async def test_a_loop_running_late_refuses_new_turns_429_on_both_streams_until_it_catches_up() -> None:
    holds = Holds([reply("Later.")])
    app = dspy_imp.web.app(holds.agent)
    clock = Clock()
    admission = lagging(app, clock)
    admission.lag.record(clock.now, 0.2)  # the last second: 200 ms late
    async with client(app) as http:
        plain = await http.post("/ag-ui", json=run_input("Now?", thread="a"))
        agui = await http.post("/ag-ui", json=run_input("Now?", thread="a"), headers=SSE)
        chat = await http.post("/api/chat", json=chat_body("c", "Now?"), headers=SSE)
        late = await http.get("/readyz")
        clock.now += 1.5  # the late second is over
        ready = await http.get("/readyz")
        later = await http.post("/ag-ui", json=run_input("Now?", thread="a", run="r2"))
    message = (
        "the event loop of this instance is running late (200 ms, the median of the last second; max_loop_lag=15 ms): "
        "try again later"
    )
    assert (plain.status_code, plain.headers["retry-after"]) == (429, "1")
    assert plain.json() == {
        "error": message,
        "limit": "max_loop_lag",
        "loop_lag_ms": 200.0,
        "max_loop_lag_ms": 15.0,
        "retry_after": 1,
    }
    assert (agui.status_code, chat.status_code) == (429, 429)
    events = agui_events(agui.text)
    assert [e["type"] for e in events] == ["RUN_STARTED", "RUN_ERROR"]
    assert (events[0]["threadId"], events[0]["runId"]) == ("a", "r1")
    assert (events[1]["code"], events[1]["message"]) == ("max_loop_lag", message)
    parts = [json.loads(p[6:]) for p in chat.text.splitlines() if p.startswith("data: {")]
    assert [p["type"] for p in parts] == ["start", "error"]
    assert parts[1]["errorText"] == f"max_loop_lag: {message}"
    assert late.status_code == 503
    assert (late.json()["ready"], late.json()["loop_lag_ms"], late.json()["max_loop_lag_ms"]) == (False, 200.0, 15.0)
    assert ready.status_code == 200 and ready.json()["loop_lag_ms"] is None
    assert agui_events(later.text)[-1]["type"] == "RUN_FINISHED"


async def test_max_loop_lag_none_admits_whatever_the_lag() -> None:
    holds = Holds([reply("Now.")])
    app = dspy_imp.web.app(holds.agent, max_loop_lag=None)
    clock = Clock()
    lagging(app, clock, max_loop_lag=None).lag.record(clock.now, 5.0)
    async with client(app) as http:
        answered = await http.post("/ag-ui", json=run_input("Now?", thread="a"))
        ready = (await http.get("/readyz")).json()
    assert agui_events(answered.text)[-1]["type"] == "RUN_FINISHED"
    assert (ready["ready"], ready["loop_lag_ms"], ready["max_loop_lag_ms"]) == (True, 5000.0, None)


class Counted(dspy_imp.web.MemoryStore):
    def __init__(self) -> None:
        super().__init__()
        self.loads: list[str] = []

    async def load(self, key: str) -> Any:
        self.loads.append(key)
        return await super().load(key)


async def test_a_full_instance_refuses_before_it_validates_the_body_or_reads_the_store() -> None:
    holds = Holds([reply(calls=[call("hold", {}, id="h1")]), reply("Held.")])
    store = Counted()
    app = dspy_imp.web.app(holds.agent, max_turns=1, store=store)
    headers = {"content-type": "application/json"}
    nonsense = {"threadId": "b", "runId": "rb", "messages": "not a list of messages"}
    async with client(app) as http:
        running = asyncio.ensure_future(http.post("/ag-ui", json=run_input("Hold", thread="a")))
        await asyncio.wait_for(holds.holding.wait(), GUARD)
        loads = list(store.loads)
        not_json = await http.post("/ag-ui", content=b"{not json", headers=headers)
        chat_not_json = await http.post("/api/chat", content=b"{not json", headers=headers)
        invalid = await http.post("/ag-ui", json=nonsense, headers=SSE)
        chat_invalid = await http.post("/api/chat", json={"id": "d", "messages": [{"role": 7}]}, headers=SSE)
        no_ids = await http.post("/ag-ui", json={"messages": []}, headers=SSE)
        bad_id = await http.post("/api/chat", json={"id": "x\ny", "messages": []}, headers=SSE)
        holds.released.set()
        await asyncio.wait_for(running, GUARD)
        after = await http.post("/ag-ui", content=b"{not json", headers=headers)
    assert loads == ["a"] and store.loads == ["a"]  # no refused request read the store
    for answer in (not_json, chat_not_json, no_ids, bad_id):  # the body never read, or no ids the stream can name
        assert (answer.status_code, answer.headers["retry-after"]) == (429, "1")
        assert answer.json()["limit"] == "max_turns"
    assert agui_events(invalid.text)[1]["code"] == "max_turns"  # the stream's ids read, nothing validated
    assert (agui_events(invalid.text)[0]["threadId"], agui_events(invalid.text)[0]["runId"]) == ("b", "rb")
    chat_parts = [json.loads(p[6:]) for p in chat_invalid.text.splitlines() if p.startswith("data: {")]
    assert chat_parts[0] == {"type": "start", "messageId": "d-1"}
    assert chat_parts[1]["errorText"].startswith("max_turns: ")
    assert after.status_code == 400  # with room again, the body is read: not JSON


async def test_the_retry_after_of_a_full_instance_grows_with_the_clients_told_to_wait() -> None:
    script = [reply("First."), reply(calls=[call("hold", {}, id="h1")]), reply("Held.")]
    holds = Holds(script)
    app = dspy_imp.web.app(holds.agent, max_turns=1)
    clock = Clock()
    lagging(app, clock)
    async with client(app) as http:
        first = await http.post("/ag-ui", json=run_input("First", thread="f"))  # ends: one turn ended
        running = asyncio.ensure_future(http.post("/ag-ui", json=run_input("Hold", thread="a")))
        await asyncio.wait_for(holds.holding.wait(), GUARD)
        refused = [await http.post("/api/chat", json=chat_body(f"c{n}", "Me?")) for n in range(5)]
        holds.released.set()
        await asyncio.wait_for(running, GUARD)
    assert agui_events(first.text)[-1]["type"] == "RUN_FINISHED"
    assert [r.headers["retry-after"] for r in refused] == ["1", "1", "2", "4", "8"]
    assert [r.json()["retry_after"] for r in refused] == [1, 1, 2, 4, 8]


def test_max_turns_defaults_to_200_whatever_the_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    for cores in (1, 2, 64):
        monkeypatch.setattr("os.cpu_count", lambda cores=cores: cores)
        served = dspy_imp.web.app(dspy_imp.ReActV2("question -> answer"))
        assert (served.runner.max_turns, served.runner.admission.max_loop_lag) == (200, 0.015)
    assert (_admission.DEFAULT_MAX_TURNS, _admission.MAX_LOOP_LAG) == (200, 0.015)


@pytest.mark.parametrize("bad", [0, -0.5, True, "0.1", float("nan")])
def test_max_loop_lag_must_be_seconds_or_none(bad: Any) -> None:
    with pytest.raises(ConfigurationError, match="`max_loop_lag` must be a number of seconds > 0 or None"):
        dspy_imp.web.app(dspy_imp.ReActV2("question -> answer"), max_loop_lag=bad)


# -- what a turn leaves for the garbage collector -------------------------------------------------


async def test_a_served_turn_leaves_no_entry_in_dspys_history_and_its_usage_is_kept() -> None:
    from dspy.clients.base_lm import GLOBAL_HISTORY

    holds = Holds([reply("One.", usage=(11, 3)), reply("Two.", usage=(13, 4))])
    lm = holds.agent.get_lm()
    store = dspy_imp.web.MemoryStore()
    before = [id(e) for e in GLOBAL_HISTORY[-5:]]
    async with client(dspy_imp.web.app(holds.agent, store=store)) as http:
        one = await http.post("/ag-ui", json=run_input("One", thread="a"))
        two = await http.post("/api/chat", json=chat_body("b", "Two"))
    assert agui_events(one.text)[-1]["type"] == "RUN_FINISHED" and two.status_code == 200
    assert lm.history == []  # the LM's own history: nothing of the app's turns
    assert [id(e) for e in GLOBAL_HISTORY[-5:]] == before  # nor DSPy's global one
    kept = await store.load("a")
    assert kept is not None
    usage = kept.turns[-1]["ending"]["usage"]
    assert (usage["input_tokens"], usage["output_tokens"]) == (11, 3)  # read all the same


async def test_turns_that_ended_leave_no_object_the_collector_walks() -> None:
    """Sixty conversations' turns ended: the collector tracks fewer objects more than after the warm-up
    turns than one per ended turn (the memory store keeps each as a string; DSPy's history, which kept
    tens of objects for each request, is off). The warm-up's and the bound's margins take the few
    objects a run makes once or now and then (a pooled connection, a timer)."""
    turns = 60
    holds = Holds([reply(f"Answer {n}.") for n in range(turns + 3)])
    store = dspy_imp.web.MemoryStore()
    app = dspy_imp.web.app(holds.agent, store=store)
    recorded = holds.agent.get_lm()._engine_spec.requests  # the scripted model's own record of each request

    def tracked() -> int:
        recorded.clear()
        gc.collect()
        return len(gc.get_objects())

    async with client(app) as http:
        for n in range(3):
            await http.post("/ag-ui", json=run_input("Warm", thread=f"warm{n}"))
        first = tracked()
        for n in range(turns):
            answered = await http.post("/ag-ui", json=run_input("Ask", thread=f"t{n}"))
            assert agui_events(answered.text)[-1]["type"] == "RUN_FINISHED"
        grown = tracked() - first
    assert grown < turns  # fewer than one object per ended turn (DSPy's history alone kept tens each)


async def test_a_turns_trace_is_emptied_when_it_ends() -> None:
    """A timer the turn's HTTP client leaves (an idle pooled connection's) keeps the context it was
    scheduled in, DSPy's trace with it: the trace ends empty, its predictions not kept by it."""
    traces: list[Any] = []
    sizes: list[int] = []

    def peek() -> str:
        """Look."""
        traces.append(dspy.settings.trace)  # the turn's own list, as a context captured now holds it
        sizes.append(len(dspy.settings.trace))
        return "seen"

    agent = dspy_imp.ReActV2("question -> answer", tools=[peek])
    agent.set_lm(
        ScriptedLM([reply(calls=[call("peek", {}, id="p1")]), reply(calls=[call("peek", {}, id="p2")]), reply("Done.")])
    )
    async with client(dspy_imp.web.app(agent)) as http:
        answered = await http.post("/ag-ui", json=run_input("Look twice", thread="a"))
    assert agui_events(answered.text)[-1]["type"] == "RUN_FINISHED"
    first, second = traces
    assert first is second and first is not dspy.settings.trace  # one list of the turn's own
    assert sizes[1] > 0  # the turn's steps were traced in it
    assert first == []  # and it was emptied at the end
