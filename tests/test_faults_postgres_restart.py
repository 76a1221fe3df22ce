"""Postgres restarted in the middle of a 20-turn load on two web instances sharing it.

Two apps in this process, each with its own ``DatabaseStore`` (two holders, as two servers are),
play five turns on each of four conversations, every turn sent to the other instance than the one
before; each turn runs one tool (``charge``) recording the turn's marker. When the load is half
way, the server is crashed (``pg_ctl stop -m immediate``) from inside a turn's tool, so that turn
ends (and is saved) while the database is down, and started again once the load has met the
outage (a save being tried again, or a turn told an error); the load goes on. Afterwards: every
turn was told (finished, a ``RUN_ERROR`` with a message, or, when the other instance's release
failed during the outage, a 409 with ``Retry-After`` within the lease), no conversation is locked past its
lease (with both stores' clocks moved past it, every conversation takes a turn on either
instance), and each conversation's saved history holds every charge that ran for it, once, and
none that did not.

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
    """The turn's last event; or, for a turn refused before its stream because the other instance
    still holds the conversation (its lease's release failed while the server was down), that
    refusal: a 409 naming when to come back, within the lease."""
    async with client(app) as http:
        response = await asyncio.wait_for(http.post("/ag-ui", json=run_input(text, thread=thread, run=run)), GUARD)
    if response.status_code == 409:
        body = response.json()
        assert "on another instance" in body["error"] and 1 <= body["retry_after"] <= LEASE, body
        assert response.headers["retry-after"] == str(body["retry_after"])
        return {"type": "REFUSED", "message": body["error"]}
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


class Outage:
    """The restart: the server crashed from inside the ``half``-th charge, started again once the
    load met the outage (a save tried again, as its warning says, or a turn told an error)."""

    def __init__(self, postgres: Server, half: int) -> None:
        self.postgres, self.half = postgres, half
        self.going_down, self.crashed, self.met = threading.Event(), threading.Event(), threading.Event()
        self.restarted = asyncio.Event()

    def in_the_middle(self, count: int) -> None:  # in the tool's worker thread
        if count == self.half:  # this turn holds its lease as the server goes down; it ends while it is down
            self.going_down.set()
            self.postgres.crash()
            self.crashed.set()

    def emit(self, record: logging.LogRecord) -> None:  # a logging handler's ``emit``
        if self.going_down.is_set() and "not saved (retrying)" in record.getMessage():
            self.met.set()

    async def told(self, last: dict[str, Any]) -> None:
        """After each turn: one that met the outage waits for the server to be back."""
        if self.going_down.is_set() and not self.restarted.is_set():
            if last["type"] in ("RUN_ERROR", "REFUSED"):
                self.met.set()
            await self.restarted.wait()

    async def restart(self) -> None:
        await asyncio.to_thread(self.crashed.wait, GUARD)
        await asyncio.to_thread(self.met.wait, GUARD)
        await asyncio.to_thread(self.postgres.start_again)
        self.restarted.set()


async def test_a_postgres_restart_mid_load_on_two_instances_locks_nothing_and_loses_no_effect(
    postgres: Server,
) -> None:
    url = postgres.database("restart_load")
    clock = Clock()
    ran: list[tuple[str, str]] = []
    outage = Outage(postgres, CONVERSATIONS * TURNS // 2)
    handler = logging.Handler()
    handler.emit = outage.emit  # type: ignore[method-assign]
    stores = [DatabaseStore(url, lease=LEASE, renew_every=0.2, timeout=10, clock=clock) for _ in range(2)]
    try:
        apps = [dspy_imp.web.app(agent(ran, outage.in_the_middle), store=store) for store in stores]
        told: dict[str, list[tuple[str, dict[str, Any]]]] = {f"load-{n}": [] for n in range(CONVERSATIONS)}

        async def conversation(n: int) -> None:
            thread = f"load-{n}"
            for turn in range(TURNS):  # each turn to the other instance than the one before
                marker = f"m{n}x{turn}"
                last = await play(apps[(n + turn) % 2], thread, f"{thread} {marker}", f"r{turn}")
                told[thread].append((marker, last))
                await outage.told(last)

        logging.getLogger("dspy_imp.web").addHandler(handler)
        try:
            load = asyncio.gather(outage.restart(), *(conversation(n) for n in range(CONVERSATIONS)))
            await asyncio.wait_for(load, GUARD)
        finally:
            logging.getLogger("dspy_imp.web").removeHandler(handler)
        assert outage.crashed.is_set() and outage.restarted.is_set()

        endings = [last for turns in told.values() for _, last in turns]
        assert len(endings) == CONVERSATIONS * TURNS
        assert all(
            last["type"] == "RUN_FINISHED" or (last["type"] in ("RUN_ERROR", "REFUSED") and last["message"])
            for last in endings
        )
        for thread, turns in told.items():  # each charge that ran is in its history once; none else
            executed = sorted(marker for conversation, marker in ran if conversation == thread)
            saved = await saved_markers(url, thread)
            assert sorted(saved) == executed, (thread, saved, executed, turns)
            assert len(set(saved)) == len(saved)
            assert {m for m, last in turns if last["type"] == "RUN_FINISHED"} <= set(saved), (thread, turns)

        clock.offset = LEASE + 1  # both instances' clocks past any lease left behind
        for n in range(CONVERSATIONS):
            for i, app in enumerate(apps):
                last = await play(app, f"load-{n}", f"load-{n} after{i}", f"after{i}")
                assert last["type"] == "RUN_FINISHED", last  # not locked past its lease
    finally:
        for store in stores:
            store.close()
