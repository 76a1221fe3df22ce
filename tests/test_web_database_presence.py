"""A dead instance noticed by its presence lock on Postgres, not by its lease running out.

Each ``DatabaseStore(..., presence=True)`` on Postgres holds a session advisory lock on a
connection of its own. A process that dies closes its connections, so another store takes over its leases a tick
(``renew_every``) after their last renewal instead of a whole lease; a live store whose renewals
are late keeps them (its lock is held); a store whose lock was lost trusts its leases only a tick
past their last renewal, and the whole lease again once it holds the lock and has renewed. Every
lease here is an hour long, so a lease running out is never what frees a conversation; every wait
is for a state, bounded.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest
from postgres_server import Server

import dspy_imp.web
from dspy_imp.web import _database

ROOT = Path(__file__).parent.parent
HOUR = 3600.0
TICK = 0.2
pytestmark = pytest.mark.block_network(allowed_hosts=[r"127\.0\.0\.1$"])

HOLDER = """
import asyncio, sys, time
import dspy_imp.web
store = dspy_imp.web.DatabaseStore(sys.argv[1], lease=3600.0, renew_every=0.2, presence=True)
print("claimed" if asyncio.run(store.claim("dying")) else "refused", flush=True)
time.sleep(600)
"""


def until(done: Callable[[], Any], what: str, bound: float = 60.0) -> Any:
    end = time.monotonic() + bound
    while not (found := done()):
        assert time.monotonic() < end, f"never {what}"
        time.sleep(0.02)
    return found


async def claimed(store: dspy_imp.web.DatabaseStore, key: str, bound: float = 60.0) -> bool:
    end = time.monotonic() + bound
    while not await store.claim(key):
        if time.monotonic() > end:
            return False
        await asyncio.sleep(0.05)
    return True


def presence_backends(url: str) -> list[int]:
    """The backends holding a store's presence lock now."""
    with psycopg.connect(url, autocommit=True) as c:
        rows = c.execute(
            "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND classid = %s AND granted",
            (_database._PRESENCE_SPACE,),
        ).fetchall()
    return [row[0] for row in rows]


async def test_a_killed_instances_lease_is_taken_over_a_tick_after_its_last_renewal(postgres: Server) -> None:
    url = postgres.database("presence_killed")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, url], env=env, stdout=subprocess.PIPE, text=True)
    store = dspy_imp.web.DatabaseStore(url, lease=HOUR, renew_every=TICK, presence=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "claimed"
        await asyncio.sleep(3 * TICK)  # the holder renews and is present: nobody takes its lease
        assert await store.claim("dying") is False
        assert await store.lease_left("dying") > HOUR - 60

        holder.kill()  # SIGKILL: its connections close with it, its lease row stays for an hour
        holder.wait(30)
        assert await claimed(store, "dying"), "the dead holder's lease was never taken over"
        assert store.lapsed("dying") is None
        await store.release("dying")
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait(30)
        if holder.stdout is not None:
            holder.stdout.close()
        store.close()


async def test_a_live_instance_whose_renewals_stall_keeps_its_leases(
    postgres: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = postgres.database("presence_stalled")
    stalled = threading.Event()
    release = threading.Event()
    live = dspy_imp.web.DatabaseStore(url, lease=HOUR, renew_every=TICK, presence=True)
    other = dspy_imp.web.DatabaseStore(url, lease=HOUR, renew_every=TICK, clock=lambda: time.time() + 60, presence=True)
    extend = live._extend

    def stall(held: dict[str, str]) -> Any:
        stalled.set()
        release.wait(60)
        return extend(held)

    monkeypatch.setattr(live, "_extend", stall)
    try:
        assert await live.claim("busy")
        until(stalled.is_set, "stalled a renewal")
        # a minute past the live store's last renewal by the other's clock, its lock held: not taken
        assert await other.claim("busy") is False
        assert live.lapsed("busy") is None
    finally:
        release.set()
        await live.release("busy")
        live.close()
        other.close()


async def test_a_store_that_lost_its_lock_trusts_its_leases_a_tick_until_it_holds_it_again(postgres: Server) -> None:
    url = postgres.database("presence_lost")
    now = [time.time()]
    store = dspy_imp.web.DatabaseStore(url, lease=HOUR, renew_every=TICK, clock=lambda: now[0], presence=True)
    admin = psycopg.connect(url, autocommit=True)
    try:
        assert await store.claim("kept")
        assert store._expires["kept"] == now[0] + HOUR  # held under the lock: the whole lease
        (backend,) = until(lambda: presence_backends(url), "saw the store's presence lock")
        # The store's lock connection ended, and its lock taken (here, by an admin) before the store
        # can take it again: the lease is trusted only a tick past its last renewal.
        admin.execute(
            "SELECT pg_terminate_backend(%s), pg_advisory_lock(%s, hashtext(%s))",
            (backend, _database._PRESENCE_SPACE, store.holder),
        )
        until(lambda: not store._present, "noticed its lock was lost")
        assert store._expires["kept"] == now[0] + TICK  # written at now, renewed without the lock: a tick
        now[0] += 2 * TICK
        lapsed = store.lapsed("kept")
        assert lapsed is not None and "presence on the database lost" in str(lapsed)

        admin.execute("SELECT pg_advisory_unlock(%s, hashtext(%s))", (_database._PRESENCE_SPACE, store.holder))
        until(lambda: store._present, "took its lock again")
        # the next renewal under the lock held throughout trusts the whole lease again
        until(lambda: store._expires.get("kept") == now[0] + HOUR, "trusted the whole lease again")
        assert store.lapsed("kept") is None
        await store.release("kept")
    finally:
        admin.close()
        store.close()


async def test_a_blip_on_the_lock_connection_is_renewed_over_at_once(postgres: Server) -> None:
    url = postgres.database("presence_blip")
    now = [time.time()]
    # a minute between ticks: only the renewal made as the lock is taken again can trust the lease again
    store = dspy_imp.web.DatabaseStore(url, lease=HOUR, renew_every=60, clock=lambda: now[0], presence=True)
    admin = psycopg.connect(url, autocommit=True)
    try:
        assert await store.claim("blip")
        (backend,) = until(lambda: presence_backends(url), "saw the store's presence lock")
        admin.execute("SELECT pg_terminate_backend(%s)", (backend,))
        until(lambda: store._epoch == 2, "took its lock again")
        until(lambda: store._expires.get("blip") == now[0] + HOUR, "renewed under the lock taken again")
        now[0] += 120  # two ticks on: the lease is trusted whole, as renewed
        assert store.lapsed("blip") is None
        await store.release("blip")
    finally:
        admin.close()
        store.close()


async def test_presence_off_by_default_holds_no_lock_and_waits_out_the_lease(postgres: Server) -> None:
    url = postgres.database("presence_off")
    store = dspy_imp.web.DatabaseStore(url, lease=HOUR, renew_every=TICK)
    try:
        assert await store.claim("plain")
        assert store._expires["plain"] > time.time() + HOUR - 60
        assert presence_backends(url) == []
    finally:
        await store.release("plain")
        store.close()


def test_presence_is_refused_where_it_cannot_work(tmp_path: Path) -> None:
    with pytest.raises(dspy_imp.ConfigurationError, match="presence needs Postgres"):
        dspy_imp.web.DatabaseStore(f"sqlite:///{tmp_path / 'c.db'}", presence=True)
    with pytest.raises(dspy_imp.ConfigurationError, match="presence must be True or False"):
        dspy_imp.web.DatabaseStore(f"sqlite:///{tmp_path / 'c.db'}", presence="yes")  # type: ignore[arg-type]
    store = dspy_imp.web.DatabaseStore(f"sqlite:///{tmp_path / 'c.db'}")
    assert store.presence is False and store.presence_engine is None
    store.close()
