"""A turn's lease renewal survives a failed statement (a database restarting) and a lease that
cannot be kept stops the turn before its next effect, ending with ``LeaseLost`` on both streams.

The store's clock is a counter each renewal moves on by one second, so expiry is decided by the
number of renewals, never by the machine's speed; the tools wait on events, guarded by ``GUARD``.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from test_web_agui import post
from test_web_store_faults import chat_body
from web_scenarios import client, run_input, with_lm

import dspy_imp
import dspy_imp.web
from dspy_imp.testing import call, reply
from dspy_imp.web import Conversation
from dspy_imp.web._database import DatabaseStore

GUARD = 30  # seconds: a failure guard only, never a timing assertion


class FlakyRenewals(DatabaseStore):
    """A SQLite store whose renewals fail (``OperationalError``) while ``failing(n)`` says so for the
    ``n``-th renewal; the clock moves one second per renewal; ``renewed`` is set after ``wanted`` good ones."""

    def __init__(self, path: Path, failing: Any, wanted: int = 3) -> None:
        self.now = 0.0
        super().__init__(f"sqlite:///{path}", lease=3, renew_every=0.001, clock=lambda: self.now)
        self.failing, self.wanted = failing, wanted
        self.renewals: list[str] = []  # "ok" or "failed", in order
        self.renewed = asyncio.Event()
        self.lost = asyncio.Event()
        self.loop: asyncio.AbstractEventLoop | None = None

    async def claim(self, key: str) -> bool:
        self.loop = asyncio.get_running_loop()
        return await super().claim(key)

    def _extend(self, held: dict[str, str]) -> tuple[float, set[str]]:  # in a worker thread
        self.now += 1
        if self.failing(len(self.renewals) + 1):
            self.renewals.append("failed")
            raise sa.exc.OperationalError("UPDATE", {}, Exception("server closed the connection"))
        self.renewals.append("ok")
        if self.renewals.count("ok") == self.wanted and self.loop is not None:
            self.loop.call_soon_threadsafe(self.renewed.set)
        return super()._extend(held)

    def _lose(self, key: str, why: str) -> None:  # on the event loop
        super()._lose(key, why)
        self.lost.set()


RAN: list[str] = []


def lease_agent(store: FlakyRenewals) -> dspy_imp.ReActV2:
    async def first() -> str:
        """Work a while: until the store renewed the lease a few times, or lost it."""
        RAN.append("first")
        renewed, lost = asyncio.ensure_future(store.renewed.wait()), asyncio.ensure_future(store.lost.wait())
        await asyncio.wait([renewed, lost], timeout=GUARD, return_when=asyncio.FIRST_COMPLETED)
        renewed.cancel(), lost.cancel()
        return "done"

    async def second() -> str:
        """The next effect."""
        RAN.append("second")
        return "done too"

    agent = dspy_imp.ReActV2("question -> answer", tools=[first, second])
    script = [
        reply(calls=[call("first", {}, id="c1")], usage=(10, 2)),
        reply(calls=[call("second", {}, id="c2")], usage=(10, 2)),
        reply("All done.", usage=(10, 2)),
    ]

    with_lm(agent, script)
    return agent


@pytest.fixture(autouse=True)
def _ran() -> None:
    RAN.clear()


async def test_a_renewal_failing_once_is_retried_and_the_turn_finishes(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = FlakyRenewals(tmp_path / "c.db", failing=lambda n: n == 1)
    app = dspy_imp.web.app(lease_agent(store), store=store)
    with caplog.at_level(logging.WARNING, logger="dspy_imp.web"):
        events = await asyncio.wait_for(post(app, run_input("Go")), GUARD)
    assert events[-1]["type"] == "RUN_FINISHED", events[-1]
    assert RAN == ["first", "second"]
    assert store.renewals[:4] == ["failed", "ok", "ok", "ok"]  # renewals went on after the failure
    logged = [r.getMessage() for r in caplog.records]
    assert any("lease not renewed (retrying)" in m and "server closed" in m for m in logged)
    assert isinstance(await store.load("t1"), Conversation)


async def test_a_lease_lost_to_failed_renewals_stops_the_turn_before_its_next_tool(tmp_path: Path) -> None:
    # renewed until the first tool runs, then never again: expires 3 s (three renewals) later
    store = FlakyRenewals(tmp_path / "c.db", failing=lambda n: "first" in RAN, wanted=10**6)
    app = dspy_imp.web.app(lease_agent(store), store=store)
    events = await asyncio.wait_for(post(app, run_input("Go")), GUARD)
    last = events[-1]
    assert last["type"] == "RUN_ERROR" and last["code"] == "LeaseLost", last
    assert "conversation 't1': its turn lease expired while renewals failed" in last["message"]
    assert RAN == ["first"]  # the tool after the loss never ran
    assert store.renewals.count("failed") == 3 and store.renewals[-3:] == ["failed"] * 3  # retried, then given up
    saved = await store.load("t1")  # no other turn took the lease: what the turn did is kept
    assert saved is not None and [r["name"] for r in saved.history.messages[0]["tool_call_results"]] == ["first"]
    assert await store.claim("t1")  # and the conversation is free again


async def test_a_lease_another_holder_took_is_an_error_part_on_the_ai_sdk_stream(tmp_path: Path) -> None:
    store = FlakyRenewals(tmp_path / "c.db", failing=lambda n: False, wanted=10**6)
    other = DatabaseStore(f"sqlite:///{tmp_path / 'c.db'}", lease=3, clock=lambda: store.now + 100)
    original = store._extend
    took: list[str] = []

    def taken(held: dict[str, str]) -> tuple[float, set[str]]:
        if "first" in RAN and not took:  # while the first tool runs: expired, and another instance claims it
            (key,) = held
            took.append(key)
            store.now += 100
            assert other._claim(key)[1]
        return original(held)

    store._extend = taken  # type: ignore[method-assign]
    app = dspy_imp.web.app(lease_agent(store), store=store)
    async with client(app) as http:
        response = await asyncio.wait_for(http.post("/api/chat", json=chat_body("t1")), GUARD)
    parts = [line.removeprefix("data: ") for line in response.text.splitlines() if line.startswith("data: ")]
    errors = [p for p in parts if '"type":"error"' in p.replace(" ", "")]
    assert errors and "LeaseLost" in errors[0] and "another turn took its lease" in errors[0], parts
    assert RAN == ["first"]
