"""``tool_timeouts``: a tool that runs longer is an observation the model reads; the deadline bounds
tool time too. A sync tool is left running in its worker; an async one is cancelled."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import dspy
import pytest
from helpers import TA

import dspy_imp
from dspy_imp._drivers.tool_threads import MAX_TOOL_THREADS
from dspy_imp.testing import ScriptedLM, call, reply


class Stuck:
    """A sync tool that blocks until released (the test releases it at the end)."""

    def __init__(self, name: str = "search", clock: Any = None) -> None:
        self.clock = clock  # a test's clock, moved past any deadline when the tool starts
        self.__name__ = name
        self.__doc__ = "Search the web."
        self.release = threading.Event()
        self.started = threading.Event()
        self.finished = threading.Event()

    def __call__(self, query: str) -> str:
        if self.clock is not None:
            self.clock.advance(3600)
        self.started.set()
        self.release.wait(30)
        self.finished.set()
        return f"late results for {query}"


def quick(query: str) -> str:
    """Look it up quickly."""
    return f"found {query}"


def tool_messages(request) -> list[tuple[str, str]]:
    return [(m["tool_call_id"], m["content"]) for m in request.messages if m["role"] == "tool"]


def test_a_slow_sync_tool_is_an_observation_and_the_turn_goes_on(run):
    stuck = Stuck()
    lm = ScriptedLM([reply(calls=[call("search", {"query": "cats"}, id="c1")]), reply("Nothing came back.")])
    agent = dspy_imp.ReActV2(TA, tools=[stuck], tool_timeouts={"search": 0.05})
    try:
        with dspy.context(lm=lm):
            pred = run(agent, intent="cats")
    finally:
        stuck.release.set()
    assert (pred.metadata.termination_reason, pred.answer) == ("answered", "Nothing came back.")
    assert tool_messages(lm.requests[1]) == [("c1", "Error: search timed out after 0.05 s")]
    [step, _] = pred.metadata.history.messages
    [result] = step["tool_call_results"]
    assert (result["result"], result["error"], result["error_kind"]) == (
        "search timed out after 0.05 s",
        True,
        "tool_timeout",
    )
    assert stuck.started.is_set()
    lm.assert_complete()


def test_what_a_timed_out_tool_returns_later_is_dropped(run):
    stuck = Stuck()
    lm = ScriptedLM([reply(calls=[call("search", {"query": "cats"}, id="c1")]), reply("Done.")])
    agent = dspy_imp.ReActV2(TA, tools=[stuck], tool_timeouts=0.05)  # a number: every tool
    with dspy.context(lm=lm):
        pred = run(agent, intent="cats")
    stuck.release.set()
    assert stuck.finished.wait(5)
    [step, _] = pred.metadata.history.messages
    assert step["tool_call_results"][0]["error_kind"] == "tool_timeout"


def test_a_table_names_tools_and_star_is_every_other(run):
    stuck, other = Stuck("search"), Stuck("browse")
    other.release.set()  # browse returns at once
    lm = ScriptedLM(
        [
            reply(calls=[call("search", {"query": "a"}, id="c1"), call("browse", {"query": "b"}, id="c2")]),
            reply("Done."),
        ]
    )
    agent = dspy_imp.ReActV2(TA, tools=[stuck, other], tool_timeouts={"*": 0.05, "browse": 30})
    try:
        with dspy.context(lm=lm):
            run(agent, intent="x")
    finally:
        stuck.release.set()
    assert tool_messages(lm.requests[1]) == [
        ("c1", "Error: search timed out after 0.05 s"),
        ("c2", "late results for b"),
    ]


def test_parallel_calls_time_out_alone(run):
    stuck = Stuck()
    lm = ScriptedLM(
        [
            reply(calls=[call("search", {"query": "a"}, id="c1"), call("quick", {"query": "b"}, id="c2")]),
            reply("Done."),
        ]
    )
    agent = dspy_imp.ReActV2(TA, tools=[stuck, quick], tool_timeouts={"search": 0.05}, parallel_tools=True)
    try:
        with dspy.context(lm=lm):
            run(agent, intent="x")
    finally:
        stuck.release.set()
    assert tool_messages(lm.requests[1]) == [("c1", "Error: search timed out after 0.05 s"), ("c2", "found b")]


def test_the_deadline_bounds_a_tool_without_a_timeout(run, fake_clock):
    stuck = Stuck(clock=fake_clock)  # it passes the deadline on the test's clock, then hangs
    lm = ScriptedLM([reply(calls=[call("search", {"query": "cats"}, id="c1")])])
    agent = dspy_imp.ReActV2(TA, tools=[stuck])
    try:
        with dspy.context(lm=lm), dspy_imp.deadline(seconds=0.5):
            pred = run(agent, intent="cats")
    finally:
        stuck.release.set()
    meta = pred.metadata
    assert (meta.termination_reason, meta.termination_cause) == ("incomplete", "deadline_exceeded")
    [step] = meta.history.messages
    assert step["tool_call_results"][0]["result"] == "search was stopped: the turn's deadline passed"
    lm.assert_complete()  # nothing was sent after the tool


def test_a_slow_tool_under_a_timeout_and_a_deadline_times_out_first(run):
    stuck = Stuck()
    lm = ScriptedLM([reply(calls=[call("search", {"query": "cats"}, id="c1")]), reply("Gave up on search.")])
    agent = dspy_imp.ReActV2(TA, tools=[stuck], tool_timeouts={"search": 0.05})
    try:
        with dspy.context(lm=lm), dspy_imp.deadline(seconds=60):
            pred = run(agent, intent="cats")
    finally:
        stuck.release.set()
    assert pred.answer == "Gave up on search."
    assert tool_messages(lm.requests[1]) == [("c1", "Error: search timed out after 0.05 s")]


def test_an_async_tool_is_cancelled():
    cancelled = []

    async def search(query: str) -> str:
        """Search the web."""
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.append(query)
            raise
        return "never"

    lm = ScriptedLM([reply(calls=[call("search", {"query": "cats"}, id="c1")]), reply("Done.")])
    agent = dspy_imp.ReActV2(TA, tools=[search], tool_timeouts={"search": 0.05})
    with dspy.context(lm=lm):
        pred = asyncio.run(agent.acall(intent="cats"))
    assert cancelled == ["cats"]
    assert pred.answer == "Done."
    assert tool_messages(lm.requests[1]) == [("c1", "Error: search timed out after 0.05 s")]


def test_a_per_call_timeout_replaces_the_programs(run):
    stuck = Stuck()
    lm = ScriptedLM([reply(calls=[call("search", {"query": "cats"}, id="c1")]), reply("Done.")])
    agent = dspy_imp.ReActV2(TA, tools=[stuck], tool_timeouts={"search": 30})
    try:
        with dspy.context(lm=lm):
            run(agent, intent="cats", tool_timeouts={"search": 0.05})
    finally:
        stuck.release.set()
    assert tool_messages(lm.requests[1]) == [("c1", "Error: search timed out after 0.05 s")]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"nope": 1}, "`tool_timeouts` names a tool the program does not hold: 'nope'"),
        ({"quick": 0}, "`tool_timeouts['quick']` is not a valid value: 0"),
        (-1, "`tool_timeouts` must be a number or a dict of tool name -> number, got -1"),
        (True, "`tool_timeouts` must be a number or a dict of tool name -> number, got True"),
        (float("nan"), "got nan"),
    ],
)
def test_bad_timeouts_are_refused_at_construction(value, message):
    with pytest.raises(dspy_imp.ConfigurationError) as refused:
        dspy_imp.ReActV2(TA, tools=[quick], tool_timeouts=value)
    assert message in str(refused.value)


def test_a_bad_per_call_timeout_is_refused_before_any_request(run):
    lm = ScriptedLM([])
    agent = dspy_imp.ReActV2(TA, tools=[quick])
    with dspy.context(lm=lm), pytest.raises(dspy_imp.ConfigurationError, match="tool_timeouts"):
        run(agent, intent="x", tool_timeouts={"quick": "soon"})
    assert lm.requests == []


def test_a_table_may_name_tools_by_the_tool_itself(run):
    stuck = Stuck()
    lm = ScriptedLM([reply(calls=[call("search", {"query": "cats"}, id="c1")]), reply("Done.")])
    agent = dspy_imp.ReActV2(TA, tools=[stuck], tool_timeouts={stuck: 0.05})
    try:
        with dspy.context(lm=lm):
            run(agent, intent="cats")
    finally:
        stuck.release.set()
    assert tool_messages(lm.requests[1]) == [("c1", "Error: search timed out after 0.05 s")]


def test_none_leaves_a_tool_unbounded_even_under_a_deadline_in_the_callers_thread_when_sync(run):
    threads = []

    def lookup(query: str) -> str:
        """Look it up in a store tied to its thread."""
        threads.append(threading.get_ident())
        return "found"

    lm = ScriptedLM([reply(calls=[call("lookup", {"query": "a"}, id="c1")]), reply("Found.")])
    agent = dspy_imp.ReActV2(TA, tools=[lookup], tool_timeouts={"lookup": None, "*": 5})
    with dspy.context(lm=lm), dspy_imp.deadline(seconds=60):
        pred = run(agent, intent="a")
    assert pred.answer == "Found."
    # A sync call: not a worker, the caller's thread. Under ``acall`` no sync tool runs on the event
    # loop's thread (here the caller's): it runs unbounded in a worker thread.
    assert (threads == [threading.get_ident()]) == (run.mode == "sync")


# -- every run gets the time left when it starts ---------------------------------------------------


def test_a_call_of_a_large_sync_batch_gets_the_time_left_when_it_starts(fake_clock):
    """Nine calls, eight worker threads: the ninth starts only when a thread is free, after the first
    eight spent the deadline (on the test's clock). It gets the time left then, none: it does not
    run, and its observation says the deadline stopped it. (Under ``acall`` every call of a batch
    starts at once: there is no later start to test.)"""
    started = threading.Barrier(MAX_TOOL_THREADS, timeout=30)
    ran: list[str] = []
    lock = threading.Lock()

    def fetch(key: str) -> str:
        """Fetch a page."""
        with lock:
            ran.append(key)
            first = len(ran) <= MAX_TOOL_THREADS
        if first:
            started.wait()  # the first eight all started (and read the time left) before any time passed
        fake_clock.advance(10)
        return f"fetched {key}"

    keys = [f"k{i}" for i in range(MAX_TOOL_THREADS + 1)]
    lm = ScriptedLM([reply(calls=[call("fetch", {"key": key}, id=key) for key in keys])])
    agent = dspy_imp.ReActV2(TA, tools=[fetch], parallel_tools=True)
    with dspy.context(lm=lm), dspy_imp.deadline(seconds=5):
        pred = agent(intent="all of them")

    meta = pred.metadata
    assert (meta.termination_reason, meta.termination_cause) == ("incomplete", "deadline_exceeded")
    [late] = set(keys) - set(ran)
    results = {r["id"]: (r["result"], r.get("error_kind")) for r in meta.history.messages[0]["tool_call_results"]}
    stopped = ("fetch was stopped: the turn's deadline passed", "tool_timeout")
    assert results == {key: stopped if key == late else (f"fetched {key}", None) for key in keys}
    lm.assert_complete()  # nothing was sent after the deadline


# -- an async tool that will not stop -------------------------------------------------------------


def test_an_async_tool_that_swallows_its_cancellation_is_left_behind():
    """The driver stops waiting at the bound: the tool that ignored its cancellation runs on as an
    abandoned task, and what it returns later is dropped (before, the turn waited for it and
    recorded its late result as a normal one)."""
    swallowed: list[str] = []

    async def search(query: str) -> str:
        """Search the web."""
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            swallowed.append(query)  # and goes on
        await asyncio.sleep(1)
        return "late results"

    lm = ScriptedLM([reply(calls=[call("search", {"query": "cats"}, id="c1")]), reply("Done.")])
    agent = dspy_imp.ReActV2(TA, tools=[search], tool_timeouts={"search": 0.05})
    with dspy.context(lm=lm):
        pred = asyncio.run(agent.acall(intent="cats"))
    assert swallowed == ["cats"]
    assert pred.answer == "Done."
    assert tool_messages(lm.requests[1]) == [("c1", "Error: search timed out after 0.05 s")]
    [step, _] = pred.metadata.history.messages
    assert step["tool_call_results"][0]["error_kind"] == "tool_timeout"


def test_an_async_tool_that_blocks_the_event_loop_past_its_bound_is_timed_out():
    """Nothing can interrupt a coroutine that blocks the loop (a sync sleep inside ``async def``):
    the turn waits until it yields, then drops what it returned, as for a sync tool left behind."""

    async def search(query: str) -> str:
        """Search the web."""
        time.sleep(0.3)  # blocks the event loop: at least 0.3 s, however fast the machine
        return "late results"

    lm = ScriptedLM([reply(calls=[call("search", {"query": "cats"}, id="c1")]), reply("Done.")])
    agent = dspy_imp.ReActV2(TA, tools=[search], tool_timeouts={"search": 0.05})
    with dspy.context(lm=lm):
        pred = asyncio.run(agent.acall(intent="cats"))
    assert tool_messages(lm.requests[1]) == [("c1", "Error: search timed out after 0.05 s")]
    [step, _] = pred.metadata.history.messages
    assert step["tool_call_results"][0]["error_kind"] == "tool_timeout"
