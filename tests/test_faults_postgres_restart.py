"""Postgres restarted in the middle of a 20-turn load on two web instances sharing it.

Two apps in this process, each with its own ``DatabaseStore`` (two holders, as two servers are),
play five turns on each of four conversations, every turn sent to the other instance than the one
before; each turn runs one tool (``charge``) recording the turn's marker. When the load is half
way, the server is crashed (``pg_ctl stop -m immediate``) from inside a turn's tool, so that turn
ends (and is saved) while the database is down, and started again once the load has met the
outage (two turns told an error, or every other conversation done); the load goes on. Afterwards: every turn was told (finished, or a
``RUN_ERROR`` with a message), no conversation is locked past its lease (with both stores' clocks
moved past it, every conversation takes a turn on either instance), and each conversation's saved
history holds every charge that ran for it, once, and none that did not.

Nothing waits on the machine's speed: the restart follows what the load was told (events), the
clocks are moved, not waited for, and every wait has a generous guard.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import Any

import pytest
from postgres_server import Server
from web_helpers import agui_events
from web_scenarios import client, run_input

import dspy_imp
import dspy_imp.web
from dspy_imp.testing import ScriptedLM, call, reply
from dspy_imp.web._database import DatabaseStore

pytestmark = pytest.mark.block_network(allowed_hosts=[r"127\.0\.0\.1$"])
GUARD = 120  # seconds: a hang guard only
CONVERSATIONS, TURNS, LEASE = 4, 5, 30.0


class Clock:
    """The stores' clock: the real one plus an offset the test moves."""

    offset = 0.0

    def __call__(self) -> float:
        return time.time() + self.offset


def agent(ran: list[tuple[str, str]], in_the_middle: Any) -> dspy_imp.ReActV2:
    def charge(conversation: str, marker: str) -> str:
        """Charge for one turn: the effect that must happen once and be kept."""
        ran.append((conversation, marker))
        in_the_middle(len(ran))
        return f"charged {marker}"

    def answer(request: Any) -> Any:
        last = request.messages[-1]
        if last["role"] == "tool":
            return reply("Charged.", usage=(10, 2))
        text = str(last["content"])
        conversation, marker = text.split("message ## ]]")[-1].split("[[")[0].split()
        return reply(calls=[call("charge", {"conversation": conversation, "marker": marker}, id=marker)], usage=(10, 2))

    program = dspy_imp.ReActV2("message -> reply", tools=[charge])
    program.set_lm(ScriptedLM(answer))
    return program


async def play(app: Any, thread: str, text: str, run: str) -> dict[str, Any]:
    async with client(app) as http:
        response = await asyncio.wait_for(http.post("/ag-ui", json=run_input(text, thread=thread, run=run)), GUARD)
    assert response.status_code == 200, response.text
    return agui_events(response.text)[-1]


async def saved_markers(url: str, thread: str) -> list[str]:
    store = DatabaseStore(url)
    try:
        stored = await store.load(thread)
    finally:
        store.close()
    assert stored is not None
    return [
        str(result["result"]).removeprefix("charged ")
        for message in dspy_imp.dump_history(stored.history)["messages"]
        for result in message.get("tool_call_results") or []
    ]


async def test_a_postgres_restart_mid_load_on_two_instances_locks_nothing_and_loses_no_effect(
    postgres: Server,
) -> None:
    url = postgres.database("restart_load")
    clock = Clock()
    ran: list[tuple[str, str]] = []
    going_down, crashed, restarted = threading.Event(), threading.Event(), asyncio.Event()
    met_the_outage = threading.Event()
    half = CONVERSATIONS * TURNS // 2

    def in_the_middle(count: int) -> None:  # in the tool's worker thread
        if count == half:  # this turn holds its lease as the server goes down; it ends while it is down
            going_down.set()
            postgres.crash()
            crashed.set()

    class Retried(logging.Handler):  # a save that met the outage and is being tried again
        def emit(self, record: logging.LogRecord) -> None:
            if going_down.is_set() and "not saved (retrying)" in record.getMessage():
                met_the_outage.set()

    handler = Retried()
    logging.getLogger("dspy_imp.web").addHandler(handler)

    stores = [DatabaseStore(url, lease=LEASE, renew_every=0.2, timeout=10, clock=clock) for _ in range(2)]
    apps = [dspy_imp.web.app(agent(ran, in_the_middle), store=store) for store in stores]
    told: dict[str, list[tuple[str, dict[str, Any]]]] = {}

    async def conversation(n: int) -> None:
        thread = f"load-{n}"
        told[thread] = []
        for turn in range(TURNS):
            marker = f"m{n}x{turn}"
            last = await play(apps[(n + turn) % 2], thread, f"{thread} {marker}", f"r{turn}")
            told[thread].append((marker, last))
            if going_down.is_set() and not restarted.is_set():
                if last["type"] == "RUN_ERROR":
                    met_the_outage.set()
                await restarted.wait()  # this conversation met the outage: it goes on once the server is back

    async def restart() -> None:
        await asyncio.to_thread(crashed.wait, GUARD)
        await asyncio.to_thread(met_the_outage.wait, GUARD)
        await asyncio.to_thread(postgres.start_again)
        restarted.set()

    try:
        await asyncio.wait_for(asyncio.gather(restart(), *(conversation(n) for n in range(CONVERSATIONS))), GUARD)
    finally:
        logging.getLogger("dspy_imp.web").removeHandler(handler)
    assert crashed.is_set() and restarted.is_set()

    endings = [last for turns in told.values() for _, last in turns]
    assert len(endings) == CONVERSATIONS * TURNS
    for last in endings:  # told: finished, or an error that says what happened
        assert last["type"] in ("RUN_FINISHED", "RUN_ERROR"), last
        assert last["type"] == "RUN_FINISHED" or last["message"], last
    assert any(last["type"] == "RUN_FINISHED" for last in endings)

    for thread, turns in told.items():  # each charge that ran is in its history once; none else
        executed = sorted(marker for conversation, marker in ran if conversation == thread)
        saved = await saved_markers(url, thread)
        assert sorted(saved) == executed, (thread, saved, executed, turns)
        assert len(set(saved)) == len(saved)
        for marker, last in turns:
            if last["type"] == "RUN_FINISHED":
                assert marker in saved, (thread, marker)

    clock.offset = LEASE + 1  # both instances' clocks past any lease left behind
    for n in range(CONVERSATIONS):
        for i, app in enumerate(apps):
            thread = f"load-{n}"
            last = await play(app, thread, f"{thread} after{i}", f"after{i}")
            assert last["type"] == "RUN_FINISHED", last  # not locked past its lease
    for store in stores:
        store.close()
