"""What one turn costs the database, statement by statement, and two claims racing for one
conversation, on SQLite and Postgres.

A turn on a ``DatabaseStore`` is two transactions: the claim, which reads the conversation in
the same transaction (the load that follows takes that read, not the database); and the save,
which gives the lease back with it (``save_and_release``: the lease row deleted, which checks and
locks it as a save's read did, and an upsert that checks the owner itself), so the release that
follows has nothing left to send. The statements are counted by SQLAlchemy's own events
on the store's engine: what the driver was asked, in order. The lease renewals (one statement a
tick for all the store's leases, on a connection of their own) are not a turn's: the lease here
outlasts the test.

Two stores on one database stand for two instances; their claims of one conversation meet at a
barrier where each is most exposed (Postgres: both have read the lease free and not yet written;
SQLite: both about to begin), and exactly one wins. Nothing waits on the machine's speed: the
barrier's wait is a hang guard only.
"""

from __future__ import annotations

import asyncio
import threading
import zlib
from pathlib import Path
from typing import Any

import dspy
import pytest
import sqlalchemy as sa
from test_web_agui import post
from web_scenarios import run_input

import dspy_imp
import dspy_imp.web
from dspy_imp._records.errors import ConfigurationError
from dspy_imp.testing import ScriptedLM, call, reply
from dspy_imp.web import Conversation, _database
from dspy_imp.web._database import DatabaseStore, LeaseLost

pytestmark = pytest.mark.block_network(allowed_hosts=[r"127\.0\.0\.1$"])
GUARD = 30  # seconds: a hang guard only, never a timing assertion


@pytest.fixture(params=["sqlite", "postgres"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'c.db'}"
    name = f"statements_{zlib.crc32(request.node.nodeid.encode()):x}"  # a database of each test's own
    return str(request.getfixturevalue("postgres").database(name))


def look(where: str) -> str:
    """Look somewhere."""
    return f"nothing at {where}"


def agent() -> dspy_imp.ReActV2:
    def answer(request: Any) -> Any:
        if request.messages[-1]["role"] == "tool":
            return reply("Nothing there.", usage=(10, 2))
        return reply(calls=[call("look", {"where": "here"}, id=f"c{len(request.messages)}")], usage=(10, 2))

    program = dspy_imp.ReActV2("message -> reply", tools=[look])
    program.set_lm(ScriptedLM(answer))
    return program


def counted(engine: sa.Engine) -> list[str]:
    """Every statement the engine's connections send, in order, with each pooled checkout and
    each transaction's begin and commit as SQLAlchemy tells them."""
    told: list[str] = []

    def statement(conn: Any, cursor: Any, text: str, *args: Any) -> None:
        told.append(" ".join(text.split()).split(" (")[0].split(" VALUES")[0])

    sa.event.listen(engine, "before_cursor_execute", statement)
    sa.event.listen(engine, "commit", lambda conn: told.append("COMMIT (told)"))
    sa.event.listen(engine.pool, "checkout", lambda *a: told.append("checkout"))
    return told


def placeholder(url: str) -> str:
    return "?" if url.startswith("sqlite") else "%(k)s"


async def test_a_turn_is_two_transactions_and_its_load_and_release_send_nothing(url: str) -> None:
    store = DatabaseStore(url, lease=3600)  # no renewal tick while the test runs
    app = dspy_imp.web.app(agent(), store=store)
    try:
        first = await asyncio.wait_for(post(app, run_input("Look", run="r1")), GUARD)
        assert first[-1]["type"] == "RUN_FINISHED", first[-1]
        told = counted(store.engine)
        second = await asyncio.wait_for(post(app, run_input("Again", run="r2")), GUARD)
        assert second[-1]["type"] == "RUN_FINISHED", second[-1]
        saved = await store.load("t1")
    finally:
        store.close()
    k = placeholder(url)
    sqlite = url.startswith("sqlite")
    begin = ["BEGIN IMMEDIATE"] if sqlite else []  # psycopg sends its BEGIN itself, with the first statement
    assert told == [
        "checkout",  # the claim, which reads the conversation for the load
        *begin,
        f"SELECT holder, expires FROM dspy_imp_web_turns WHERE key = {k}",
        "INSERT INTO dspy_imp_web_turns",
        f"SELECT owner, history FROM dspy_imp_web_conversations WHERE key = {k}",
        "COMMIT (told)",
        "checkout",  # the save and the release: the lease deleted (checked, locked), the owner checked by the upsert
        *begin,
        f"DELETE FROM dspy_imp_web_turns WHERE key = {k} AND holder = {'?' if sqlite else '%(h)s'}",
        "INSERT INTO dspy_imp_web_conversations",
        "COMMIT (told)",
        "checkout",  # the load after the turn: one read, no transaction of its own
        f"SELECT owner, history FROM dspy_imp_web_conversations WHERE key = {k}",
    ]
    assert saved is not None and len(saved.turns) == 2


async def test_a_claim_refused_reads_the_lease_and_writes_nothing(url: str) -> None:
    holder, other = DatabaseStore(url, lease=3600), DatabaseStore(url, lease=3600)
    try:
        assert await holder.claim("t1")
        await other.check()  # its schema check (once a store), before the count
        told = counted(other.engine)
        assert not await other.claim("t1")
        left = await other.lease_left("t1")  # from the refused claim's read: no second round trip
        await holder.release("t1")
    finally:
        holder.close()
        other.close()
    begin = ["BEGIN IMMEDIATE"] if url.startswith("sqlite") else []
    k = placeholder(url)
    read = f"SELECT holder, expires FROM dspy_imp_web_turns WHERE key = {k}"
    assert told == ["checkout", *begin, read, "COMMIT (told)"]
    assert 0 < left <= 3600


def claims_meet(stores: list[DatabaseStore], key: str, sqlite: bool) -> list[bool]:
    """Each store claims ``key`` in a thread of its own (its own event loop, as another instance
    would), the claims held at a barrier: on Postgres after each has read the lease row (absent:
    free) and before its upsert, so both decide on the same read; on SQLite as each is about to
    begin (its write lock orders the whole claim)."""
    barrier = threading.Barrier(len(stores), timeout=GUARD)
    results: list[Any] = [None] * len(stores)
    met: set[int] = set()  # the threads past the barrier: a claim's later statements are not held

    def meet() -> None:
        if threading.get_ident() not in met:
            met.add(threading.get_ident())
            barrier.wait()

    where = "BEGIN IMMEDIATE" if sqlite else "SELECT holder, expires FROM dspy_imp_web_turns"
    event = "before_cursor_execute" if sqlite else "after_cursor_execute"

    def hook(conn: Any, cursor: Any, text: str, *args: Any) -> None:
        if text.startswith(where):
            meet()

    for store in stores:
        sa.event.listen(store.engine, event, hook)

    def claim(n: int) -> None:
        try:
            results[n] = asyncio.run(stores[n].claim(key))
        except BaseException as error:  # told to the test below
            results[n] = error

    threads = [threading.Thread(target=claim, args=(n,)) for n in range(len(stores))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(GUARD)
    for store in stores:
        sa.event.remove(store.engine, event, hook)
    assert all(isinstance(r, bool) for r in results), results
    return results


@pytest.mark.parametrize("round_", range(3))
async def test_two_instances_claiming_one_conversation_at_once_exactly_one_wins(url: str, round_: int) -> None:
    stores = [DatabaseStore(url, lease=3600), DatabaseStore(url, lease=3600)]
    try:
        await stores[0].check()  # the schema made once, before the race
        results = await asyncio.to_thread(claims_meet, stores, "t1", url.startswith("sqlite"))
        assert sorted(results) == [False, True], results
        winner, loser = (stores[0], stores[1]) if results[0] else (stores[1], stores[0])
        engine = sa.create_engine(url.replace("postgresql://", "postgresql+psycopg://"))
        try:
            with engine.connect() as c:
                rows = c.execute(sa.text("SELECT key, holder FROM dspy_imp_web_turns")).all()
        finally:
            engine.dispose()
        assert [(key, holder.split(":")[0]) for key, holder in rows] == [("t1", winner.holder)]
        assert 0 < await loser.lease_left("t1") <= 3600  # the loser is told when to ask again
        assert not await loser.claim("t1")  # and is refused while the winner holds it
        await winner.release("t1")
        assert await loser.claim("t1")  # released: the other instance takes it now
        await loser.release("t1")
    finally:
        for store in stores:
            store.close()


def leases(url: str) -> list[tuple[str, str]]:
    engine = sa.create_engine(url.replace("postgresql://", "postgresql+psycopg://"))
    try:
        with engine.connect() as c:
            return [(r.key, r.holder) for r in c.execute(sa.text("SELECT key, holder FROM dspy_imp_web_turns"))]
    finally:
        engine.dispose()


def conversation(text: str, owner: str | None) -> Conversation:
    return Conversation(dspy.History(messages=[{"message": text, "reply": "ok"}]), owner)


class AnswerLost(DatabaseStore):
    """A store whose first save under a lease lands (committed) and then fails as a dropped
    connection does after the commit: the app is told an error, though the write is there."""

    lost_once = False

    def _save(self, *args: Any) -> None:  # in a worker thread
        super()._save(*args)
        if not self.lost_once:
            self.lost_once = True
            raise sa.exc.OperationalError("COMMIT", {}, Exception("server closed the connection"))


async def test_a_save_and_release_whose_answer_was_lost_is_tried_again_and_holds(url: str) -> None:
    """The retry finds the lease row gone, but the history there is the one it writes: its own
    earlier try landed (not a lease another turn took), so it ends as saved and released."""
    store = AnswerLost(url, lease=3600, renew_every=0.01)
    try:
        assert await store.claim("t1")
        await store.save_and_release("t1", conversation("first", "ann"))
        assert store.lost_once
        saved = await store.load("t1")
        assert leases(url) == []
        await store.release("t1")  # nothing left to give back: no error
        assert await store.claim("t1")  # and the conversation is free
        await store.release("t1")
    finally:
        store.close()
    assert saved is not None and saved.owner == "ann"
    assert saved.history.messages == [{"message": "first", "reply": "ok"}]


async def test_a_save_and_release_of_another_users_conversation_writes_nothing_and_keeps_the_lease(url: str) -> None:
    store = DatabaseStore(url, lease=3600)
    try:
        await store.save("t1", conversation("theirs", "bob"))
        assert await store.claim("t1")
        with pytest.raises(ConfigurationError, match="belongs to another user"):
            await store.save_and_release("t1", conversation("mine", "ann"))
        assert [key for key, _ in leases(url)] == ["t1"]  # rolled back with the refused write: still held
        await store.release("t1")
        assert leases(url) == []
        saved = await store.load("t1")
    finally:
        store.close()
    assert saved is not None and saved.owner == "bob"
    assert saved.history.messages == [{"message": "theirs", "reply": "ok"}]


async def test_a_save_and_release_after_another_instance_took_the_lease_is_lease_lost(url: str) -> None:
    now = [1000.0]
    store = DatabaseStore(url, lease=3, clock=lambda: now[0])
    other = DatabaseStore(url, lease=3, clock=lambda: now[0])
    try:
        await store.save("t1", conversation("before", None))
        assert await store.claim("t1")
        now[0] += 10  # expired unrenewed: the other instance takes it
        assert await other.claim("t1")
        with pytest.raises(LeaseLost, match="another turn took it"):
            await store.save_and_release("t1", conversation("late", None))
        assert [holder.split(":")[0] for _, holder in leases(url)] == [other.holder]  # its lease untouched
        saved = await store.load("t1")
        await store.release("t1")
        await other.release("t1")
    finally:
        store.close()
        other.close()
    assert saved is not None and saved.history.messages == [{"message": "before", "reply": "ok"}]


def closed_on_the_server(url: str, store: DatabaseStore) -> None:
    """Every connection the store's pool holds closed by the server (as a restart closes them),
    the pool none the wiser."""
    engine = sa.create_engine(url.replace("postgresql://", "postgresql+psycopg://"))
    try:
        with engine.connect() as c:
            mine = c.execute(sa.text("SELECT pg_backend_pid()")).scalar()
            ended = c.execute(
                sa.text(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND pid <> :mine"
                ),
                {"mine": mine},
            ).scalar()
    finally:
        engine.dispose()
    assert ended == store.engine.pool.checkedin() == 1, (ended, store.engine.pool.status())


@pytest.mark.parametrize("rested", [True, False])
async def test_a_pooled_postgres_connection_is_checked_only_after_it_rested(
    postgres: Any, monkeypatch: pytest.MonkeyPatch, rested: bool
) -> None:
    """A connection that rested ``IDLE`` seconds is checked as it is handed out, so one a restart
    closed meanwhile is replaced and the statement works. One used a moment ago is not checked (a
    round trip saved per transaction): closed all the same, its statement fails, and the pool
    replaces its connections for the next."""
    url = postgres.database(f"rested_{rested}")
    monkeypatch.setattr(_database, "IDLE", 0.0 if rested else 3600.0)  # the rest, without waiting for it
    store = DatabaseStore(url, lease=3600)
    try:
        await store.save("t1", conversation("kept", None))
        closed_on_the_server(url, store)
        if rested:
            saved = await store.load("t1")
        else:
            with pytest.raises(sa.exc.OperationalError):
                await store.load("t1")
            saved = await store.load("t1")  # the pool's connections replaced
    finally:
        store.close()
    assert saved is not None and saved.history.messages == [{"message": "kept", "reply": "ok"}]


async def test_the_store_benchmark_counts_a_turns_statements_as_above(url: str) -> None:
    from benchmarks import web_store

    measured = await web_store.measure(url, users=3, turns=2, lease=3600)  # one sweep, in the warm-up
    assert measured["turns"] == 6
    statements = 7 if url.startswith("sqlite") else 5  # the sequences the first test asserts, less the load's
    assert measured["per_turn"] == {"checkouts": 2.0, "commits": 2.0, "statements": float(statements)}
    assert measured["cpu_ms_per_turn"] > 0
    assert (measured["server_cpu_ms_per_turn"] is None) == url.startswith("sqlite")
