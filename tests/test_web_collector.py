"""The cyclic garbage collector under a serving app: what the process held when the app started
serving is frozen while it serves (no collection walks it) and given back when it stops, full
collections are considered after 100 collections of generation 1 meanwhile, and the memory store
keeps each conversation as one string, which no collection walks, encoded and decoded in a worker
thread, not on the event loop.

Nothing here is timed: what is asserted is which objects the collector tracks, its thresholds, and
the thread the encoding runs on.
"""

from __future__ import annotations

import asyncio
import gc
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import dspy
import pytest
from web_scenarios import client, run_input, support_agent, tool_script, with_lm

import dspy_imp
import dspy_imp.web
from dspy_imp._records.history import dump_history
from dspy_imp.web import _turns
from dspy_imp.web._turns import Conversation, MemoryStore

GUARD = 60  # seconds: a failure guard only, never a timing assertion


def walked(thing: Any) -> bool:
    """Whether a collection walks ``thing``: it is among the objects of the collector's generations
    (a frozen one is in the permanent generation, which ``gc.get_objects`` leaves out)."""
    return any(o is thing for o in gc.get_objects())


@asynccontextmanager
async def serving(app: Any) -> AsyncIterator[list[str]]:
    """The app's ASGI lifespan: started up on entry, shut down on exit; what the app said."""
    said: list[str] = []
    inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    told = asyncio.Event()
    await inbox.put({"type": "lifespan.startup"})

    async def send(message: dict[str, Any]) -> None:
        said.append(message["type"])
        told.set()

    task = asyncio.ensure_future(app({"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}}, inbox.get, send))
    await asyncio.wait_for(told.wait(), GUARD)
    try:
        yield said
    finally:
        await inbox.put({"type": "lifespan.shutdown"})
        await asyncio.wait_for(task, GUARD)


@contextmanager
def threshold(third: int) -> Iterator[tuple[int, int, int]]:
    """The collector's third threshold set to ``third`` meanwhile; the thresholds as set."""
    kept = gc.get_threshold()
    gc.set_threshold(kept[0], kept[1], third)
    try:
        yield gc.get_threshold()
    finally:
        gc.set_threshold(*kept)


async def test_serving_freezes_what_the_process_held_and_gives_it_back_when_it_stops() -> None:
    agent = support_agent()
    app = dspy_imp.web.app(agent)
    assert walked(agent)  # before it serves: walked by every full collection
    with threshold(10) as before:
        async with serving(app) as said:
            assert said == ["lifespan.startup.complete"]
            frozen_agent, frozen_app = not walked(agent), not walked(app)
            made_while_serving: list[Any] = []  # what the app makes as it serves is collected as usual
            new_walked = walked(made_while_serving)
            during = gc.get_threshold()
            frozen = gc.get_freeze_count()
        after = gc.get_threshold()
    assert said == ["lifespan.startup.complete", "lifespan.shutdown.complete"]
    assert (frozen_agent, frozen_app, new_walked) == (True, True, True)
    assert frozen > 0
    assert during == (before[0], before[1], 100)
    assert after == before  # Python's threshold back once the app stops serving
    assert walked(agent) and walked(app) and gc.get_freeze_count() == 0  # given back to the collector


async def test_a_higher_third_threshold_already_set_is_kept() -> None:
    app = dspy_imp.web.app(support_agent())
    with threshold(500) as before:
        async with serving(app):
            during = gc.get_threshold()
        after = gc.get_threshold()
    assert during == after == before


async def test_a_turn_served_under_the_lifespan_runs_and_is_kept() -> None:
    agent = support_agent()
    with_lm(agent, tool_script())
    store = MemoryStore()
    app = dspy_imp.web.app(agent, store=store)
    async with serving(app), client(app) as http:
        answered = await http.post("/ag-ui", json=run_input("Where is order 42?", thread="kept"))
        back = await http.get("/api/conversations/kept")
    assert answered.status_code == 200 and "RUN_FINISHED" in answered.text
    kept = await store.load("kept")
    assert kept is not None and kept.history.messages[0]["message"] == "Where is order 42?"
    assert [m["role"] for m in back.json()["messages"]][:1] == ["user"]


def history(n: int) -> dspy.History:
    """A conversation of ``n`` entries, each with a tool call and its result (dicts and lists)."""
    return dspy.History(
        messages=[
            {
                "message": f"question {i}",
                "trajectory": [{"tool_calls": [{"id": f"c{i}", "name": "lookup", "args": {"q": [i, i + 1]}}]}],
                "reply": f"answer {i}",
            }
            for i in range(n)
        ]
    )


def tracked_reach(root: Any) -> int:
    """The container objects the collector tracks that ``root`` reaches (its class and modules aside)."""
    seen: set[int] = set()
    stack = [root]
    while stack:
        thing = stack.pop()
        if id(thing) in seen or isinstance(thing, type) or not gc.is_tracked(thing):
            continue
        seen.add(id(thing))
        stack.extend(gc.get_referents(thing))
    return len(seen)


async def test_the_memory_store_keeps_no_object_a_collection_walks_per_conversation() -> None:
    store = MemoryStore()
    await store.save("first", Conversation(history(1), "ann"))
    one = tracked_reach(store)
    for n in range(50):
        await store.save(f"c{n}", Conversation(history(20), "ann", ({"entries": 20, "ending": {"usage": {}}},)))
    assert tracked_reach(store) == one  # 51 conversations of 20 entries: the same few containers as one


async def test_the_memory_store_reads_back_each_conversation_as_saved_and_a_copy_of_its_own() -> None:
    store = MemoryStore()
    saved = Conversation(history(3), "ann", ({"entries": 3, "ending": {"termination_reason": "submitted"}},))
    await store.save("a", saved)
    loaded, again = await store.load("a"), await store.load("a")
    assert loaded is not None and again is not None
    assert dump_history(loaded.history) == dump_history(saved.history)
    assert (loaded.owner, loaded.turns) == ("ann", saved.turns)
    loaded.history.messages.append({"message": "changed", "reply": "here only"})
    assert len(again.history.messages) == 3 and len((await store.load("a")).history.messages) == 3  # type: ignore[union-attr]
    assert await store.load("absent") is None


async def test_the_memory_store_encodes_and_decodes_off_the_event_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    threads: dict[str, int] = {}

    def spy(name: str, function: Any) -> Any:
        def wrapped(*args: Any) -> Any:
            threads[name] = threading.get_ident()
            return function(*args)

        return wrapped

    monkeypatch.setattr(_turns, "dump_history", spy("dump", _turns.dump_history))
    monkeypatch.setattr(_turns, "load_history", spy("load", _turns.load_history))
    store = MemoryStore()
    await store.save("a", Conversation(history(2), None))
    loaded = await store.load("a")
    loop = threading.get_ident()
    assert loaded is not None and len(loaded.history.messages) == 2
    assert set(threads) == {"dump", "load"}
    assert loop not in threads.values()
