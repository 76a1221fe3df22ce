"""A turn keeps its lease while the store is busy, and loses it only to another holder.

Under load every pooled connection of a ``DatabaseStore`` is checked out by loads and saves, and
the event loop runs late. Renewals have a thread and a connection of their own, so they go on
while the pool is fully taken; and a renewal the database makes after the lease's expiry by the
store's clock (nobody took the row meanwhile) keeps the turn running. A lease another holder
actually took still stops the turn with ``LeaseLost``, whatever the pool is doing.

The store's clock is the test's: expiry is decided by the seconds the tools move it on, never by
the machine's speed; every wait is for a renewal (or a loss) to be told, guarded by ``GUARD``.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import threading
import zlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import dspy
import pytest
import sqlalchemy as sa
from test_web_agui import post
from web_scenarios import run_input, with_lm

import dspy_imp
import dspy_imp.web
from dspy_imp.testing import call, reply
from dspy_imp.web import Conversation
from dspy_imp.web._database import DatabaseStore

pytestmark = pytest.mark.block_network(allowed_hosts=[r"127\.0\.0\.1$"])
GUARD = 30  # seconds: a hang guard only, never a timing assertion
RAN: list[str] = []


class Watched(DatabaseStore):
    """A store on the test's clock (``now``) that tells the test of each renewal statement that
    returned and of each lease it lost; ``arm`` runs once, in the next renewal's thread, before its
    statement."""

    def __init__(self, url: str) -> None:
        self.now = 1000.0
        super().__init__(url, lease=3, renew_every=0.01, clock=lambda: self.now)
        self.lost = asyncio.Event()
        self.arm: Any = None
        self._answered = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None

    async def claim(self, key: str) -> bool:
        self._loop = asyncio.get_running_loop()
        return await super().claim(key)

    def _extend(self, held: dict[str, str]) -> tuple[float, set[str]]:  # in a worker thread
        armed, self.arm = self.arm, None
        if armed is not None:
            armed(held)
        result = super()._extend(held)
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._answered.set)
        return result

    def _lose(self, key: str, why: str) -> None:  # on the event loop
        super()._lose(key, why)
        self.lost.set()

    async def renewed_since(self, moment: float, key: str = "t1") -> bool:
        """``True`` once the store holds ``key``'s lease from a renewal that began at ``moment`` or
        later (it runs out a lease after then); ``False`` once the lease was lost."""
        while self._expires.get(key, float("-inf")) < moment + self.lease:
            if self.lost.is_set():
                return False
            self._answered.clear()
            waits = [asyncio.ensure_future(self._answered.wait()), asyncio.ensure_future(self.lost.wait())]
            done, pending = await asyncio.wait(waits, timeout=GUARD, return_when=asyncio.FIRST_COMPLETED)
            for waiting in pending:
                waiting.cancel()
            assert done, "no renewal landed and no loss was told"
        return True


@pytest.fixture(params=["sqlite", "postgres"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'c.db'}"
    name = f"lease_{zlib.crc32(request.node.nodeid.encode()):x}"  # a database of each test's own
    return str(request.getfixturevalue("postgres").database(name))


@pytest.fixture(autouse=True)
def _ran() -> None:
    RAN.clear()


@contextlib.asynccontextmanager
async def pool_taken(store: DatabaseStore) -> AsyncIterator[None]:
    """Every connection of the store's pool checked out by others, and store calls queued for one."""
    pool: Any = store.engine.pool  # a QueuePool: ``size`` kept, ``_max_overflow`` more at most
    taken = [store.engine.connect() for _ in range(pool.size() + pool._max_overflow)]
    assert pool.checkedout() == len(taken)
    waiting = [asyncio.ensure_future(store.load(f"other-{n}")) for n in range(4)]  # behind them
    try:
        yield
    finally:
        for connection in taken:
            connection.close()
        await asyncio.wait_for(asyncio.gather(*waiting), GUARD)


def agent(first: Any) -> dspy_imp.ReActV2:
    def second() -> str:
        """The next effect."""
        RAN.append("second")
        return "done too"

    program = dspy_imp.ReActV2("question -> answer", tools=[first, second])
    script = [
        reply(calls=[call("first", {}, id="c1")], usage=(10, 2)),
        reply(calls=[call("second", {}, id="c2")], usage=(10, 2)),
        reply("All done.", usage=(10, 2)),
    ]
    with_lm(program, script)
    return program


async def test_renewals_keep_the_lease_while_every_pooled_connection_is_taken(url: str) -> None:
    store = Watched(url)

    async def first() -> str:
        """Work for twice the lease while the store's pool is fully checked out."""
        RAN.append("first")
        async with pool_taken(store):
            for _ in range(2 * int(store.lease)):  # a second at a time: only renewals keep the lease
                store.now += 1
                if not await store.renewed_since(store.now):
                    return "lost"
        RAN.append("kept its lease")
        return "done"

    try:
        events = await asyncio.wait_for(post(dspy_imp.web.app(agent(first), store=store), run_input("Go")), GUARD)
    finally:
        store.close()
    assert events[-1]["type"] == "RUN_FINISHED", events[-1]
    assert RAN == ["first", "kept its lease", "second"]


async def test_a_renewal_after_the_leases_expiry_keeps_a_lease_nobody_took(url: str) -> None:
    """The renewer runs late (a busy loop, a slow database): by the store's clock the lease has
    expired when it renews, but the row is still this turn's, so the renewal holds and the turn
    goes on; its save lands and the lease is released."""
    store = Watched(url)

    async def first() -> str:
        """Work past the lease the last renewal wrote."""
        RAN.append("first")
        store.now += 10  # past it: the next renewal is late
        if await store.renewed_since(store.now):
            RAN.append("renewed late")
        return "done"

    try:
        events = await asyncio.wait_for(post(dspy_imp.web.app(agent(first), store=store), run_input("Go")), GUARD)
        assert events[-1]["type"] == "RUN_FINISHED", events[-1]
        assert RAN == ["first", "renewed late", "second"]
        saved = await store.load("t1")
        assert saved is not None and len(saved.turns) == 1
        assert await store.lease_left("t1") == 0  # released
    finally:
        store.close()


async def test_a_lease_another_holder_took_stops_the_turn_while_the_pool_is_taken(url: str) -> None:
    """While the pool is fully checked out, the lease expires and another instance takes the
    conversation: the next renewal, which does reach the database, finds the row taken, and the
    turn stops before its next effect with ``LeaseLost`` saying so."""
    store = Watched(url)
    other = DatabaseStore(url, lease=3, clock=lambda: store.now)

    def taken(held: dict[str, str]) -> None:  # in the renewal's thread, before its statement
        (key,) = held
        store.now += 10
        assert other._claim(key)[1]  # expired: the other instance takes it

    async def first() -> str:
        """Work while the pool is taken, until the lease is lost."""
        RAN.append("first")
        async with pool_taken(store):
            store.arm = taken
            assert not await store.renewed_since(store.now + 10)
        return "done"

    try:
        events = await asyncio.wait_for(post(dspy_imp.web.app(agent(first), store=store), run_input("Go")), GUARD)
    finally:
        store.close()
        other.close()
    last = events[-1]
    assert last["type"] == "RUN_ERROR" and last["code"] == "LeaseLost", last
    assert "another turn took its lease" in last["message"], last
    assert RAN == ["first"]  # the tool after the loss never ran
    engine = sa.create_engine(url.replace("postgresql://", "postgresql+psycopg://"))
    try:
        with engine.connect() as c:
            holder = c.execute(sa.text("SELECT holder FROM dspy_imp_web_turns WHERE key = 't1'")).scalar()
    finally:
        engine.dispose()
    assert holder is not None and holder.startswith(other.holder)  # the other instance's lease is untouched


async def test_a_renewal_on_sqlite_lands_before_the_stores_writes_queued_behind_it(tmp_path: Path) -> None:
    """SQLite has one writer, and a writer waiting for its lock polls for it, less often the longer
    it has waited: a renewal waiting among the store's worker threads' writes lost the lock to
    each newer one until its lease ran out (``LeaseLost`` under load). The renewal asks first here,
    while another process holds the write lock, and then the store's saves pile up behind it; once
    the lock is free the renewal lands first, ahead of every save that came after it."""
    path = tmp_path / "c.db"
    store = DatabaseStore(f"sqlite:///{path}", lease=3600)  # no tick of its own: the test renews
    landed: list[str] = []  # which of the store's transactions got the write lock, in order
    renewing, saving = threading.Event(), threading.Semaphore(0)

    def asked(conn: Any, cursor: Any, text: str, *args: Any) -> None:
        if text == "BEGIN IMMEDIATE" and conn.engine is store.renewal_engine:
            renewing.set()

    def got(conn: Any, cursor: Any, text: str, *args: Any) -> None:
        if text == "BEGIN IMMEDIATE":
            landed.append("renewal" if conn.engine is store.renewal_engine else "save")

    saves = 8
    original = store._save

    def save(*args: Any) -> None:  # in a worker thread
        saving.release()
        original(*args)

    store._save = save  # type: ignore[method-assign]
    try:
        assert await store.claim("t1")
        await store.save("c0", Conversation(dspy.History(messages=[]), None))  # the row, before the lock
        for engine in (store.engine, store.renewal_engine):
            sa.event.listen(engine, "before_cursor_execute", asked)
            sa.event.listen(engine, "after_cursor_execute", got)
        other = sqlite3.connect(path, isolation_level=None)  # another process's writer, holding the lock
        other.execute("BEGIN IMMEDIATE")
        renewal = asyncio.ensure_future(asyncio.to_thread(store._renew_once, dict(store._tokens)))
        assert await asyncio.to_thread(renewing.wait, GUARD)  # the renewal waits for the lock
        # Neither sleep below decides what is asserted; they give SQLite's busy handler the shape
        # it had under load: a renewal that has waited a while (polling every 100 ms by then)
        # among writers that have just begun to (polling every few ms).
        await asyncio.sleep(0.5)
        writes = [
            asyncio.ensure_future(store.save(f"c{n}", Conversation(dspy.History(messages=[]), None)))
            for n in range(1, saves + 1)
        ]
        for _ in range(saves):  # every save on its way to the lock
            assert await asyncio.to_thread(saving.acquire, True, GUARD)
        await asyncio.sleep(0.05)  # and at it
        other.execute("COMMIT")
        other.close()
        await asyncio.wait_for(asyncio.gather(renewal, *writes), GUARD)
    finally:
        store.close()
    assert landed == ["renewal"] + ["save"] * saves, landed
