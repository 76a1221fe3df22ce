"""Faults between the web app and Postgres, injected by a TCP proxy at each phase of a turn.

The store talks to a throwaway Postgres (``postgres_server.py``) through ``faultproxy.FaultProxy``.
A store double arms one fault for one phase of the turn (``claim``, ``renew``, ``save``; the
turn's load is read in its claim's transaction, so a fault there is the claim's): the proxy
switches to it just before that phase's statement. Each case checks what a user of the
app is promised: a clear error to the caller (a ``RUN_ERROR`` naming what failed, never a hung
stream), no conversation locked past its lease, no tool run twice and none lost from the history,
and the next turn working once the fault clears.

Nothing here waits on the machine's speed: the tools wait on events the store sets; the leases
and statement bounds are seconds only where a stall must end by one (a stalled connection answers
nothing, so only a bound ends it), and every wait has a generous guard.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from faultproxy import FaultProxy
from postgres_server import Server
from web_helpers import agui_events
from web_scenarios import client, run_input

import dspy_imp
import dspy_imp.web
from dspy_imp.testing import ScriptedLM, call, reply
from dspy_imp.web._database import DatabaseStore

pytestmark = pytest.mark.block_network(allowed_hosts=[r"127\.0\.0\.1$"])
GUARD = 60  # seconds: a hang guard only, never a timing assertion
PHASES = {"claim": "_claim", "renew": "_extend", "save": "_save"}  # a turn's load is read in its claim's transaction


@pytest.fixture(scope="module")
def database(postgres: Server) -> str:
    return postgres.database("faults")


@pytest.fixture
def proxy(database: str) -> Iterator[FaultProxy]:
    port = int(database.rsplit(":", 1)[1].split("/")[0])
    with FaultProxy("127.0.0.1", port) as running:
        yield running


def through(database: str, proxy: FaultProxy) -> str:
    host, rest = database.rsplit(":", 1)
    return f"{host}:{proxy.port}/{rest.split('/', 1)[1]}"


class Armed(DatabaseStore):
    """A Postgres store whose ``phase`` statement switches the proxy to ``fault`` first, once.

    A fault that fails at once (``reset``, ``refuse``, ``drop``) is cleared when the statement
    returns; ``stall`` stays until the test clears it (a stalled statement never returns by itself).
    ``faulted`` is set once the armed statement has run (or been abandoned); ``renewed`` after
    ``wanted`` good renewals following it."""

    def __init__(self, url: str, proxy: FaultProxy, phase: str | None, fault: str, **options: Any) -> None:
        super().__init__(url, **options)
        self.armed_renew = phase == "renew"
        self.proxy, self.phase, self.fault = proxy, phase, fault
        self.faulted = threading.Event()
        self.renewed = threading.Event()
        self.good_renewals = 0
        self.lost_lease = threading.Event()
        self.charging = threading.Event()  # the charge runs: a renewal is armed only from then on
        for name, method in PHASES.items():
            setattr(self, method, self._armed(name, getattr(self, method)))

    def _armed(self, name: str, statement: Any) -> Any:
        def run(*args: Any) -> Any:
            if name != self.phase or (name == "renew" and not self.charging.is_set()):
                if name == "save" and self.proxy.mode == "stall":
                    self.proxy.clear()  # the database answers again by the time the save is tried again
                result = statement(*args)
                if name == "renew" and self.faulted.is_set():
                    self.good_renewals += 1
                    if self.good_renewals >= 2:
                        self.renewed.set()
                return result
            self.phase = None  # once
            if self.fault == "refuse":
                # No pooled connection: the statement needs a new one. Disposed once this is the only
                # statement running (a renewal's connection checked out meanwhile would go back to
                # the old pool and be left open), new ones held off until it is done.
                with self._settled:
                    self._settled.wait_for(lambda: self._statements == 1, timeout=self.timeout)
                    self.engine.dispose()
            self.proxy.set(self.fault, **OPTIONS.get(self.fault, {}))
            if self.fault == "stall":
                self.faulted.set()  # the statement will not return while the stall lasts
            try:
                return statement(*args)
            finally:
                if self.fault != "stall":
                    self.proxy.clear()
                self.faulted.set()

        return run

    def _lose(self, key: str, why: str) -> None:
        self.proxy.clear()  # the database answers again just after the lease ran out
        super()._lose(key, why)
        self.lost_lease.set()


RAN: list[str] = []


def agent_for(store: Armed) -> dspy_imp.ReActV2:
    def charge(order: str) -> str:
        """Charge an order: the effect that must happen once."""
        RAN.append(f"charge {order}")
        store.charging.set()
        if store.armed_renew:
            waited = store.lost_lease if store.fault == "stall" else store.renewed
            assert waited.wait(GUARD), "the renewal never happened"
        return f"charged {order}"

    def note(text: str) -> str:
        """The effect after the charge."""
        RAN.append(f"note {text}")
        return "noted"

    def answer(request: Any) -> Any:
        last = request.messages[-1]
        if last["role"] == "tool" and "charged" in str(last["content"]):
            return reply(calls=[call("note", {"text": "done"}, id=f"n{len(request.messages)}")], usage=(10, 2))
        if last["role"] == "tool":
            return reply("Charged and noted.", usage=(10, 2))
        return reply(calls=[call("charge", {"order": "A-1"}, id=f"c{len(request.messages)}")], usage=(10, 2))

    agent = dspy_imp.ReActV2("message -> reply", tools=[charge, note])
    agent.set_lm(ScriptedLM(answer))
    return agent


@pytest.fixture(autouse=True)
def _ran() -> None:
    RAN.clear()


async def turn(app: Any, thread: str, run: str) -> list[dict[str, Any]]:
    async with client(app) as http:
        response = await asyncio.wait_for(
            http.post("/ag-ui", json=run_input("Charge A-1", thread=thread, run=run)), GUARD
        )
    assert response.status_code == 200, response.text
    return agui_events(response.text)


async def history_of(url: str, key: str) -> list[str]:
    """The tool results the stored conversation holds, in order."""
    store = DatabaseStore(url)
    try:
        stored = await store.load(key)
    finally:
        store.close()
    if stored is None:
        return []
    return [
        str(result.get("content") or result)
        for message in dspy_imp.dump_history(stored.history)["messages"]
        for result in message.get("tool_call_results") or []
    ]


FAULTS = ["reset", "refuse", "drop", "cut", "stall", "slow"]
OPTIONS = {"cut": {"after": 8}, "slow": {"latency": 0.02}}  # cut: the answer's first bytes, then a reset


@pytest.mark.parametrize("fault", FAULTS)
@pytest.mark.parametrize("phase", list(PHASES))
async def test_a_fault_at_each_phase_is_told_and_the_next_turn_works(
    database: str, proxy: FaultProxy, phase: str, fault: str
) -> None:
    url = through(database, proxy)
    thread = f"{phase}-{fault}"
    bound = {"timeout": 2} if fault == "stall" else {}  # what ends a stalled statement
    lease = 5 if (phase, fault) == ("save", "stall") else 3  # the lease outlasts the save's first, stalled try
    store = Armed(url, proxy, phase, fault, lease=lease, renew_every=0.05, **bound)
    app = dspy_imp.web.app(agent_for(store), store=store)
    await store.check()  # the schema, before the fault

    events = await turn(app, thread, "r1")
    assert store.faulted.is_set()
    proxy.clear()
    last = events[-1]
    first_ran = list(RAN)
    if fault == "slow":  # only slower
        assert last["type"] == "RUN_FINISHED", last
        assert first_ran == ["charge A-1", "note done"]
    elif phase == "claim":
        assert last["type"] == "RUN_ERROR", last
        assert first_ran == []  # nothing ran
    elif phase == "renew" and fault != "stall":
        assert last["type"] == "RUN_FINISHED", last  # a failed renewal is retried
        assert first_ran == ["charge A-1", "note done"]
    elif phase == "renew":
        assert last["type"] == "RUN_ERROR" and last["code"] == "LeaseLost", last
        assert first_ran == ["charge A-1"]  # nothing after the lease was lost
    else:  # save: tried again while the lease lasts, and the database is back
        assert last["type"] == "RUN_FINISHED", last
        assert first_ran == ["charge A-1", "note done"]
    if last["type"] == "RUN_ERROR":
        assert last["message"], last

    store.armed_renew = False
    RAN.clear()
    again = await turn(app, thread, "r2")  # the fault cleared: the conversation is not held
    assert again[-1]["type"] == "RUN_FINISHED", again[-1]
    assert RAN == ["charge A-1", "note done"]
    results = await history_of(database, thread)
    charges = [r for r in results if "charged" in r]
    assert len(charges) == len([r for r in first_ran + RAN if r.startswith("charge")]), (
        results
    )  # every charge that ran is in the history, once
    store.close()
