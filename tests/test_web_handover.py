"""Hand-over in seconds: two web instances (two processes) on one database, Postgres and SQLite,
each ``DatabaseStore`` on its default lease.

Instance A's process is killed (SIGKILL) mid-turn: the other instance, B, is told to come back
when A's lease ends (409, ``Retry-After`` within the default lease) and, once it waited that long,
runs the conversation's next turn on what was saved; no lease row is left behind. SIGTERM
instead: A finishes the running turn, gives its lease back and exits, leaving no row, and B takes
the conversation at once.

Nothing here depends on the machine's speed: every wait is for a file, a port or a process, and
the one sleep is the ``Retry-After`` the server asked for (waiting longer changes nothing).
"""

from __future__ import annotations

import asyncio
import math
import signal
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from test_web_agui import post
from test_web_database_instances import Instance, started, stored, told
from web_scenarios import run_input, with_lm

import dspy_imp
import dspy_imp.web
from dspy_imp.testing import call, reply
from dspy_imp.web._database import LEASE

pytestmark = pytest.mark.block_network(allowed_hosts=[r"127\.0\.0\.1$"])


@pytest.fixture(scope="module", params=["postgres", "sqlite"])
def backend(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    folder = tmp_path_factory.mktemp(request.param)
    if request.param == "sqlite":
        return f"sqlite:///{folder / 'conversations.db'}", folder
    return request.getfixturevalue("postgres").database("handover"), folder


def closed(instance: Instance) -> None:
    instance.stop()
    if instance.process.stdout:
        instance.process.stdout.close()


@pytest.fixture(scope="module")
def other(backend: tuple[str, Path]) -> Iterator[Instance]:
    """B, the instance that stays up (started once per database: each start imports DSPy)."""
    b = Instance(*backend, lease="default")
    try:
        yield b
    finally:
        closed(b)


def leases(url: str) -> list[str]:
    """The conversations that have a lease row, whoever holds it."""
    engine = sa.create_engine(url.replace("postgresql://", "postgresql+psycopg://"))
    try:
        with engine.connect() as c:
            return list(c.execute(sa.text("SELECT key FROM dspy_imp_web_turns")).scalars())
    finally:
        engine.dispose()


def listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


async def test_a_killed_instances_conversation_runs_on_the_other_once_its_short_lease_ends(
    backend: tuple[str, Path], other: Instance
) -> None:
    url, folder = backend
    a = Instance(url, folder, lease="default")
    try:
        (folder / "release-k-before").write_text("")
        before = await a.post(run_input("k-before", thread="killed", run="r1"))
        assert before[-1]["type"] == "RUN_FINISHED", told(before)
        dying = asyncio.create_task(a.post(run_input("k-dying", thread="killed", run="r2")))
        await asyncio.to_thread(started, folder, "k-dying")
        a.process.send_signal(signal.SIGKILL)  # mid-turn: its lease stays behind, unreleased
        await asyncio.to_thread(a.process.wait, 30)
    finally:
        closed(a)
    with pytest.raises(httpx.HTTPError):
        await dying

    (folder / "release-k-after").write_text("")
    answer = await other.answer(run_input("k-after", thread="killed", run="r3"))
    if answer.status_code == 409:  # A's lease still runs: B says when it ends, within the default lease
        assert "already running a turn on another instance" in answer.json()["error"]
        wait = int(answer.headers["retry-after"])
        assert 1 <= wait <= math.ceil(LEASE) and answer.json()["retry_after"] == wait
        await asyncio.sleep(wait)  # the wait the server asked for: the dead lease is over by then
        answer = await other.answer(run_input("k-after", thread="killed", run="r4"))
    assert answer.status_code == 200, answer.text
    assert '"RUN_FINISHED"' in answer.text, answer.text
    messages = await stored(url, "killed")
    assert [m.get("message") for m in messages if m.get("message")] == ["k-before", "k-after"]  # what was saved
    assert "killed" not in leases(url)  # the dead instance's row went with B's claim; B released its own


async def test_sigterm_lets_the_running_turn_finish_and_leaves_no_lease(
    backend: tuple[str, Path], other: Instance
) -> None:
    url, folder = backend
    a = Instance(url, folder, lease="default")
    try:
        running = asyncio.create_task(a.post(run_input("t-running", thread="termed", run="r1")))
        await asyncio.to_thread(started, folder, "t-running")
        assert "termed" in leases(url)  # held while the turn runs
        a.process.send_signal(signal.SIGTERM)
        while listening(a.port):  # the server takes the signal: it stops listening first
            await asyncio.sleep(0.02)
        busy = await other.answer(run_input("t-next", thread="termed", run="r0"))  # A still holds it, draining
        assert busy.status_code == 409 and "on another instance" in busy.json()["error"], busy.text
        assert 1 <= int(busy.headers["retry-after"]) <= math.ceil(LEASE)  # renewed while it drains
        (folder / "release-t-running").write_text("")  # only now may the turn end
        finished = await running
        assert finished[-1]["type"] == "RUN_FINISHED", told(finished)  # no turn cut
        await asyncio.to_thread(a.process.wait, 60)  # and then it exits
    finally:
        closed(a)
    assert leases(url) == []  # its lease given back: no row left

    (folder / "release-t-next").write_text("")
    nxt = await other.post(run_input("t-next", thread="termed", run="r2"))  # taken at once, no 409
    assert nxt[-1]["type"] == "RUN_FINISHED", told(nxt)
    messages = await stored(url, "termed")
    assert [m.get("message") for m in messages if m.get("message")] == ["t-running", "t-next"]


async def test_the_default_lease_is_seconds() -> None:
    store = dspy_imp.web.DatabaseStore("sqlite:///:memory:")
    try:
        assert (store.lease, store.renew_every) == (LEASE, LEASE / 3) and LEASE == 2.5
    finally:
        store.close()


GUARD = 30  # seconds: a hang guard only


async def test_a_stores_leases_are_renewed_in_one_statement_a_tick(tmp_path: Path) -> None:
    """Every lease a store holds renewed by one UPDATE a tick, not one per conversation."""
    store = dspy_imp.web.DatabaseStore(f"sqlite:///{tmp_path / 'c.db'}", renew_every=0.001)
    renewed: list[int] = []
    seen = asyncio.Event()
    loop = asyncio.get_running_loop()

    def counted(connection: object, cursor: object, statement: str, *args: object) -> None:
        if statement.startswith("UPDATE dspy_imp_web_turns"):
            renewed.append(statement.count("?"))  # the tokens it names (and its expiry)
            loop.call_soon_threadsafe(seen.set)

    sa.event.listen(store.renewal_engine, "after_cursor_execute", counted)  # renewals have a connection of their own
    try:
        for key in ("a", "b", "c"):
            assert await store.claim(key)
        renewed.clear()  # a renewal may have begun before the last claim: the next ones cannot have
        while len(renewed) < 2:
            seen.clear()
            await asyncio.wait_for(seen.wait(), GUARD)
        left = [await store.lease_left(key) for key in ("a", "b", "c")]
        for key in ("a", "b", "c"):
            await store.release(key)
    finally:
        store.close()
    assert renewed[1] == 4  # one statement for the three leases
    assert all(0 < seconds <= LEASE for seconds in left)


async def test_a_claim_deletes_the_lease_rows_dead_instances_left(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'c.db'}"
    dead = dspy_imp.web.DatabaseStore(url, clock=lambda: 1000.0)
    late = dspy_imp.web.DatabaseStore(url, clock=lambda: 1000.0 + 2 * LEASE - 1)
    live = dspy_imp.web.DatabaseStore(url, clock=lambda: 1000.0 + 2 * LEASE + 1)
    try:
        for key in ("a", "b"):
            assert await dead._run(dead._claim, key)  # taken, then the instance was killed: never renewed
        assert await late.claim("c")
        assert sorted(leases(url)) == ["a", "b", "c"]  # expired, but not for a whole lease: kept (a late renewal)
        await late.release("c")
        assert await live.claim("d")
        assert leases(url) == ["d"]  # the dead instance's rows are gone, not left until each one's next turn
        await live.release("d")
        assert leases(url) == []
    finally:
        for store in (dead, late, live):
            store.close()


async def test_a_turn_stops_at_its_leases_expiry_even_while_the_renewal_is_stalled(tmp_path: Path) -> None:
    """The renewal hangs (the database stalled) and the store's clock passes the lease: the turn
    stops before its next effect, without waiting for the renewal to be given up, since another
    instance may take the conversation from then on."""
    now = [0.0]
    stalled, unstall = threading.Event(), threading.Event()

    class Stalled(dspy_imp.web.DatabaseStore):
        def _extend(self, *args: Any) -> Any:  # in a worker thread: answers nothing until the test ends
            stalled.set()
            unstall.wait(GUARD)
            raise sa.exc.OperationalError("UPDATE", {}, Exception("no answer"))

    store = Stalled(f"sqlite:///{tmp_path / 'c.db'}", lease=3, renew_every=0.001, clock=lambda: now[0])
    ran: list[str] = []

    def first() -> str:
        """Work past the lease."""
        ran.append("first")
        assert stalled.wait(GUARD)  # the renewal is in flight, and will not answer
        now[0] = 10.0  # past the lease the claim wrote (3)
        return "done"

    def second() -> str:
        """The next effect."""
        ran.append("second")
        return "done too"

    agent = dspy_imp.ReActV2("question -> answer", tools=[first, second])
    with_lm(
        agent, [reply(calls=[call("first", {}, id="c1")]), reply(calls=[call("second", {}, id="c2")]), reply("Ok.")]
    )
    app = dspy_imp.web.app(agent, store=store)
    try:
        events = await asyncio.wait_for(post(app, run_input("Go")), GUARD)
    finally:
        unstall.set()
    last = events[-1]
    assert last["type"] == "RUN_ERROR" and last["code"] == "LeaseLost", last
    assert "its turn lease expired" in last["message"]
    assert ran == ["first"]  # stopped before the next tool, though the renewal never came back
    store.close()
