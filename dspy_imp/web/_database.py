"""Conversations on a real database (SQLAlchemy 2): SQLite by default, Postgres by URL.

Theory of operation. ``DatabaseStore`` keeps each conversation as one row: its id, the user who
started it (``owner``), a title, and its history as the JSON ``dump_history`` writes (so a reloaded
conversation sends byte-identical requests), with how each turn ended beside its messages
(``turns``, what the page shows again on a reload; a row written before has none). A second table
holds the *turn lease* of each conversation that is running a turn: which process holds it and
until when. ``claim`` takes the lease in one statement (an upsert that only replaces an expired
lease), so across processes and machines at most one turn of a conversation runs at a time; the
holder renews it while the turn runs and deletes it when the turn ends (with its save) or fails. A store renews all
the leases it holds in one statement a tick (every ``renew_every``): 500 running turns are one
statement, not 500. The renewals have a thread and a connection of their own (``renewal_engine``, a
pool of one), so neither a busy event loop nor a pool whose every connection the turns' loads and
saves hold can delay them. Each claim takes the lease under a token of its own, and every later
statement of that turn (renewals, the save, the release) names it, so a statement left behind by an
earlier turn (abandoned while the database stalled, landing once it answers) can never overwrite a
later turn's history or free its lease. What the database answers a renewal decides: a lease it
renewed is kept, even when the answer comes after the lease's expiry by this store's clock (the row
still names the turn's token, so nobody took it meanwhile: a claim replaces only an expired row, in
the same statement that checks the expiry); one another holder took is *lost*: the store tells the
turn (``watch``), which the Runner stops before its next effect, ending with ``LeaseLost``. A
renewal that fails (the database restarting) is logged and tried again every interval while the
lease has not expired, and a lease that expired while they failed is lost too. The turn's save is
tried again the same way while its lease lasts, so a database that restarts as the turn ends loses
none of it; a save lands only while the turn's own token holds the lease (checked in the saving
transaction, the lease row locked). A process that dies leaves a lease that expires after ``lease``
seconds (``LEASE``, 2.5, by default), and the conversation is usable again, with what was saved
before; a claim, of any conversation, deletes the rows of leases expired a whole lease ago (dead
instances' rows do not stay until each conversation's next turn): a store's first claim, then at
most one claim a tick (``renew_every``). On Postgres a dead instance can be
noticed sooner (``presence=True``): each store holds a session advisory lock, keyed on its holder id, on
a connection of its own, and a thread blocked on that connection learns at once when it closes.
A process that dies closes its connections, so its lock is free within milliseconds; a claim that
finds a lease whose holder's lock is free and whose renewal is a tick overdue (``renew_every``)
takes it over then, in the same statement that checks the row is still the one it read. The
holder keeps the other side of the bargain: while its lock is not held (its connection dropped,
the database restarting) it trusts each lease only until its last renewal plus one tick, the time
after which another store may take it, and only a renewal made under a lock held throughout
restores the whole lease. Whatever the renewer is doing,
the turn itself starts no effect once its lease's expiry as this store wrote it has passed
(``lapsed``, asked before each effect): while a late renewal has not answered yet, another instance
may have the conversation.

A turn is two transactions: its claim, which also reads the conversation (the lease is held
from that read on, so the turn's ``load`` takes it rather than reading again); and its save,
which gives the lease back with it (``save_and_release``: the lease row deleted only while it
names the turn's token, which checks and locks it as a save must; the owner checked by the upsert
itself). A release on its own is a single statement (in autocommit on Postgres: no
``BEGIN``/``COMMIT`` round trips). A single read (a
conversation, the list, a lease's expiry) takes no write lock on SQLite and no transaction on
Postgres. On SQLite, whose file has one writer, the store's write transactions go one at a time in
the order asked, a renewal ahead of all those waiting (``_Writes``): a renewal waits for at most
the write in progress, not behind the turns' queue.

Every statement is bounded (``timeout``): a database that answers nothing (a stalled connection,
a partition) fails the statement with ``TimeoutError`` instead of hanging the request. A renewal
is bounded by it too (in the renewal thread: a stalled one is left behind, its connection with
it), not by what is left of its lease: a renewal that is late but lands is a renewal.

The schema is the package's own: a version table, and forward migrations applied in order at the
first use (under a lock, so two processes starting at once migrate once). Every statement runs in
a worker thread (SQLAlchemy's sync engine and the driver DBOS uses), never on the event loop, and
so do a history's encoding and decoding (JSON, ``dump_history``, ``load_history``).

What is read back is input, as a file would be: ``load_history`` validates it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import anyio
import anyio.to_thread
import sqlalchemy as sa

from dspy_imp._records.errors import ConfigurationError
from dspy_imp._records.history import dump_history, load_history
from dspy_imp.web import _log
from dspy_imp.web._migrations import MIGRATIONS, migrate
from dspy_imp.web._turns import Conversation, kept_turns

DEFAULT_URL = "sqlite:///conversations.db"
POOL = 15  # the connections a store's turns use at most at once (more wait for one), kept open
_REFUSALS_KEPT = 10_000  # refused claims' expiries kept for the 409 that follows each
LEASE = 2.5
"""The turn lease's default seconds: a killed instance's conversations are free again this soon
(renewed every third of it, one statement a tick for all of a store's leases)."""


@dataclass(frozen=True)
class ConversationInfo:
    """One conversation as listed: its id, owner, title and times (seconds since the epoch)."""

    key: str
    owner: str | None
    title: str | None
    created: float
    updated: float


class LeaseLost(ConfigurationError):
    """This process's lease on a conversation ran out and another turn took it: not saved."""


class DatabaseStore:
    """Conversations in a SQL database: they survive restarts and are shared by every web instance.

    Args:
        url: A SQLAlchemy URL. ``sqlite:///conversations.db`` (the default: a file beside the app,
            no server) or ``postgresql://user@host/db`` (psycopg 3 is used when the URL names no
            driver); with a ``DurableAgent``, the same Postgres URL as DBOS keeps conversations and
            workflows in one database (the tables are ``dspy_imp_web_*``).
        lease: Seconds a turn's lease lasts without renewal (``LEASE``, 2.5, by default); the
            holder renews all its leases every third of that, in one statement. A process killed
            mid-turn frees its conversations after this long, and a client refused meanwhile is
            told the seconds left. A turn reaching its next effect after its lease ran out
            unrenewed (the database stalled longer than two thirds of it) stops with ``LeaseLost``:
            raise it if yours stall that long.
        renew_every: Seconds between renewals (``lease / 3`` by default); a failed one is tried
            again after this long while the lease has not expired.
        clock: Seconds since the epoch (``time.time``); tests move it to expire a lease.
        timeout: Seconds one statement may take before it fails with ``TimeoutError`` (a database
            that does not answer); also the connection timeout on Postgres.
        presence: Postgres only, off by default: hold a session advisory lock on a connection of
            the store's own, so that another instance takes over the leases of one that died (its
            connections closed) a tick (``renew_every``) after their last renewal instead of a
            whole lease. The price: a store whose own lock is lost (a dropped connection, the
            database restarting) trusts its leases only a tick past their last renewal until it
            holds the lock again, so an outage longer than a tick stops the turns running
            (``LeaseLost``, not saved) where the lease alone would ride out up to two thirds of a
            lease. Every instance on one database must use the same ``lease``, ``renew_every``
            and ``presence``. Not behind a pooler that shares server sessions between clients
            (PgBouncer's transaction mode: a session lock does not follow its client); refused
            on SQLite.

    Example:
        ```python
        store = dspy_imp.web.DatabaseStore("postgresql://app@db/chat")
        app = dspy_imp.web.app(agent, store=store)
        ```
    """

    def __init__(
        self,
        url: str = DEFAULT_URL,
        *,
        lease: float = LEASE,
        renew_every: float | None = None,
        clock: Callable[[], float] = time.time,
        timeout: float = 30.0,
        presence: bool = False,
    ):
        self.lease = _seconds("lease", lease)
        self.timeout = _seconds("timeout", timeout)
        self.renew_every = self.lease / 3 if renew_every is None else _seconds("renew_every", renew_every)
        if not self.renew_every < self.lease:
            raise ConfigurationError(f"DatabaseStore renew_every must be less than lease, got {renew_every!r}")
        self.engine = _engine(url, self.timeout)
        self.renewal_engine = _engine(url, self.timeout, renewals=True)  # renewals only: a pool of one (two spares)
        if not isinstance(presence, bool):
            raise ConfigurationError(f"DatabaseStore presence must be True or False, got {presence!r}")
        if presence and self.engine.dialect.name != "postgresql":
            raise ConfigurationError("DatabaseStore presence needs Postgres (session advisory locks); this is SQLite")
        self.presence = presence
        self.presence_engine = _engine(url, self.timeout, presence=True) if self.presence else None
        self.clock = clock
        self.holder = uuid.uuid4().hex  # this store object, in this process; each claim adds a token
        # The leases below are shared with the renewal thread: changed only under ``_lock``.
        self._lock = threading.Lock()
        self._tokens: dict[str, str] = {}  # each lease held (until released), and the holder it was claimed as
        self._expires: dict[str, float] = {}  # when each lease still renewed runs out, as the database has it
        self._loops: dict[str, asyncio.AbstractEventLoop] = {}  # the loop each lease's watcher is told on
        self._renewing: tuple[threading.Thread, threading.Event] | None = None  # the renewal thread, its stop
        self._failure: BaseException | None = None  # the last renewal's error, while they fail
        self._ended: dict[str, str] = {}  # a lease token whose turn ended here but whose release failed
        self._refused: dict[str, float] = {}  # the expiry of the lease a refused claim found (for lease_left)
        self._read: dict[str, tuple[str, Any]] = {}  # what each claim read of its conversation, until its load
        self._swept = float("-inf")  # when a claim last deleted dead instances' lease rows (this store's clock)
        # SQLite: this store's write transactions, one at a time, renewals first (``_Writes``)
        self._writes = _Writes() if self.engine.dialect.name == "sqlite" else None
        self._watchers: dict[str, Callable[[LeaseLost], None]] = {}
        # This store's presence lock (``presence``): its thread and stop, whether the lock is held,
        # and which holding it is (one more each time it is taken again), under ``_lock`` too.
        self._presence: tuple[threading.Thread, threading.Event, threading.Event] | None = None
        self._present = False
        self._epoch = 0
        self._absence = ""  # why the lock is not held, for the lapsed turn's message
        self._ready = False
        self._statements = 0  # running in worker threads, abandoned ones included
        self._settled = threading.Condition()

    def close(self) -> None:
        """Close the store's pooled connections (at shutdown; a later call opens new ones).

        Waits first (at most ``timeout``) for statements still running, abandoned ones included:
        a connection checked out while the pool is disposed goes back to the old pool, which
        nothing closes, and is left to the garbage collector still open. Renewals stop: a lease
        still held expires (a later claim starts them again)."""
        with self._lock:
            renewing, self._renewing = self._renewing, None
        if renewing is not None:  # its statement running ends first: none starts on the pool disposed below
            renewer, stop = renewing
            stop.set()
            renewer.join(self.timeout)
        with self._lock:
            presence, self._presence = self._presence, None
        if presence is not None:
            keeper, stop, _ = presence
            stop.set()
            keeper.join(self.timeout)
        with self._settled:
            self._settled.wait_for(lambda: self._statements == 0, timeout=self.timeout)
        self.engine.dispose()
        self.renewal_engine.dispose()
        if self.presence_engine is not None:
            self.presence_engine.dispose()

    # -- the Store protocol ------------------------------------------------------------------

    async def load(self, key: str) -> Conversation | None:
        """The conversation, read and decoded in a worker thread (a long history's JSON and its
        validation never hold the event loop). Right after this store's ``claim`` of ``key``, the
        row that claim read in its own transaction (the lease held since, so no other turn wrote
        it), decoded in its thread: a turn's claim and load are one transaction, one round trip
        from the loop."""
        key = _key(key)
        read = self._read.pop(key, None)
        if read is not None and read[0] == self._tokens.get(key):
            loaded = read[1]
            if isinstance(loaded, BaseException):
                raise loaded
            return loaded
        return await self._run(self._load, key)

    async def save(self, key: str, conversation: Conversation) -> None:
        """Write the conversation; its owner is set by the first save and never changed after (a save
        naming another owner is refused). Under a turn's lease, a save the database failed (a
        dropped connection, no answer in ``timeout``) is tried again every ``renew_every`` while
        the lease lasts."""
        await self._saving(_key(key), conversation, release=False)

    async def save_and_release(self, key: str, conversation: Conversation) -> None:
        """``save`` then ``release``, in one transaction: the turn's last write gives its lease back
        with it (the app ends each turn so). The lease row is deleted first, and only a row that
        still names this turn's lease is (the check a save makes, the row locked as it is); the
        conversation is written in the same transaction, so a claim elsewhere finds the lease free
        only once the history is there. Tried again as a save is; an earlier try left behind that
        landed meanwhile is told apart from a lease another turn took by the history it wrote.
        Without a lease held here, a ``save``."""
        key = _key(key)
        await self._saving(key, conversation, release=key in self._tokens)
        if key not in self._tokens:  # released with the save: what ``release`` forgets, and no statement
            self._watchers.pop(key, None)
            self._read.pop(key, None)

    async def _saving(self, key: str, conversation: Conversation, release: bool) -> None:
        token = self._tokens.get(key)  # taken now: a save left behind must not use a later turn's
        state: dict[str, Any] = {}  # the row's JSON, made off the event loop by the first try, for every try
        while True:
            try:
                await self._run(self._encode_and_save, key, conversation, state, token, release)
                return
            except (sa.exc.OperationalError, TimeoutError) as error:
                if state.get("released"):  # a try left behind landed (and gave the lease back) meanwhile
                    return
                expires = self._expires.get(key)
                if token is None or expires is None or self._tokens.get(key) != token or self.clock() >= expires:
                    raise
                _log.logger.warning("conversation %r: not saved (retrying): %s", key, error)
            await anyio.sleep(self.renew_every)

    async def check(self) -> None:
        """Reach the database and bring its schema up to date (``SchemaTooNew``: it is newer); once
        it is, nothing (the app asks before every turn: a worker thread's round trip each time,
        for nothing, was load on the loop under many turns)."""
        if not self._ready:
            await self._run(lambda: None)

    async def ping(self) -> None:
        """Reach the database now, with a statement (``/readyz``); ``SchemaTooNew`` as ``check``."""
        await self._run(self._ping)

    # -- the turn lease ------------------------------------------------------------------------

    async def claim(self, key: str) -> bool:
        """Take ``key``'s turn lease (``False``: another turn holds it) and renew it until ``release``."""
        key = _key(key)
        token = f"{self.holder}:{uuid.uuid4().hex[:12]}"
        if key in self._tokens:
            return False
        self._refused.pop(key, None)
        if self.presence and not self._present:
            await self._run(self._be_present)
        epoch = self._held_epoch()
        try:
            expires, held, loaded = await self._run(self._claim_and_read, key, token, self._ended.get(key))
        except BaseException:
            self._ended[key] = token  # it may land later: this store's next claim may replace it
            raise
        if not held:
            if len(self._refused) >= _REFUSALS_KEPT:  # asked for by nobody: not kept without bound
                self._refused.clear()
            self._refused[key] = expires  # the 409's Retry-After, without asking the database again
            return False
        self._ended.pop(key, None)
        trusted = self._trusted(expires, epoch)
        self._read[key] = (token, loaded)  # the turn's load, next: taken from here, not read again
        with self._lock:
            self._tokens[key] = token
            self._expires[key] = trusted
            self._loops[key] = asyncio.get_running_loop()
            if self._renewing is None:
                stop = threading.Event()
                renewer = threading.Thread(target=self._renew, args=(stop,), name="dspy-imp-renewals", daemon=True)
                self._renewing = (renewer, stop)
                renewer.start()
        return True

    async def lease_left(self, key: str) -> float:
        """Seconds until the turn lease on ``key`` expires (0: none is held): when a client refused
        because another instance runs the conversation's turn may try again (``Retry-After``). Right
        after a refused ``claim``, from the expiry that claim read (no second round trip)."""
        key = _key(key)
        refused = self._refused.pop(key, None)
        if refused is not None:
            return max(0.0, refused - self.clock())
        return float(await self._run(self._left, key))

    # -- presence (Postgres): a dead holder noticed by its lock, not its lease --------------------

    def _held_epoch(self) -> int | None:
        """Which holding of the presence lock is current (``None``: not held, or no presence)."""
        with self._lock:
            return self._epoch if self.presence and self._present else None

    def _trusted(self, expires: float, epoch: int | None) -> float:
        """How long this store may trust a lease the database wrote to expire at ``expires`` by a
        statement that started under holding ``epoch`` of the presence lock: the whole lease if the
        lock was held from before the statement until now (no other store may take it meanwhile),
        else until a tick after the write, when another store may find the lock free and take it."""
        if not self.presence:
            return expires
        with self._lock:
            if epoch is not None and self._present and self._epoch == epoch:
                return expires
        return expires - self.lease + self.renew_every

    def _be_present(self) -> None:
        """Start the presence thread (once) and wait, at most ``timeout``, for its first answer."""
        with self._lock:
            if self._presence is None:
                stop, answered = threading.Event(), threading.Event()
                keeper = threading.Thread(
                    target=self._keep_present, args=(stop, answered), name="dspy-imp-presence", daemon=True
                )
                self._presence = (keeper, stop, answered)
                keeper.start()
            answered = self._presence[2]
        answered.wait(self.timeout)

    def _keep_present(self, stop: threading.Event, answered: threading.Event) -> None:
        """The presence thread: take this store's lock on a connection of its own, then wait on that
        connection (it carries nothing else) until it closes or ``close`` stops the thread; the lock
        lost, every lease held is trusted only a tick past its last renewal, and the lock is taken
        again at once, then after a pause doubling up to ``renew_every``, until it is held; then the
        leases held are renewed at once, so a blip shorter than what is left of a tick costs nothing."""
        pause = min(self.renew_every, 0.05)  # after a loss: taken again soon, then every tick at most
        while not stop.is_set():
            connection = None
            try:
                assert self.presence_engine is not None  # a presence thread runs only with presence
                connection = self.presence_engine.raw_connection()
                driver: Any = connection.driver_connection  # psycopg 3: the lock lives as long as it
                driver.autocommit = True
                taken = driver.execute(_PRESENCE_TAKE, (_PRESENCE_SPACE, self.holder)).fetchone()
                if taken is None or not taken[0]:
                    raise RuntimeError("the presence lock was taken by a claim looking at it; taken again later")
                with self._lock:
                    self._present = True
                    self._epoch += 1
                    self._absence = ""
                answered.set()
                pause = min(self.renew_every, 0.05)
                self._renew_held()  # taken again: a renewal under it trusts the whole lease again now, not at the tick
                while not stop.is_set():
                    for _ in driver.notifies(timeout=0.5):  # raises once the connection is closed
                        pass
            except Exception as error:  # the database restarting, dropped, refused: taken again later
                if not stop.is_set():
                    self._absent(f"{type(error).__name__}: {error}".strip().splitlines()[0], log=True)
            finally:
                self._absent("the store was closed")
                if connection is not None:
                    with contextlib.suppress(Exception):
                        connection.close()
                answered.set()
            stop.wait(pause)
            pause = min(self.renew_every, pause * 2)

    def _renew_held(self) -> None:
        """Renew every lease still renewed now, from the presence thread (the renewal thread's tick
        may be most of a tick away; two renewals at once are safe: each keeps the later expiry)."""
        with self._lock:
            held = {key: self._tokens[key] for key in self._expires if key in self._tokens}
        if held:
            self._renew_once(held)

    def _absent(self, why: str, log: bool = False) -> None:
        """The presence lock is not held (any more): each lease held is trusted only until its last
        renewal plus a tick, when another store may take it over."""
        with self._lock:
            if not self._present:
                return
            self._present = False
            self._absence = why
            for key, expires in self._expires.items():
                self._expires[key] = min(expires, expires - self.lease + self.renew_every)
        if log:
            _log.logger.warning("the conversation store's presence on the database was lost: %s", why)

    def lapsed(self, key: str) -> LeaseLost | None:
        """The error to stop ``key``'s turn with when its lease ran out by this store's clock
        (``None``: it lasts, or it was lost already and told). Thread-safe, asked before each
        effect: the turn stops at its lease's expiry even while a renewal has not answered yet (a
        slow or stalled database): until one lands, another instance may have taken the row, so no
        effect starts then. A turn inside an effect meanwhile keeps its lease if the renewal lands."""
        expires = self._expires.get(key)
        if expires is None or self.clock() < expires:
            return None
        failure = self._failure
        why = "unrenewed" if failure is None else f"while renewals failed ({failure})"
        if self.presence and not self._present and self._absence:
            why += f", this store's presence on the database lost ({self._absence})"
        return LeaseLost(f"conversation {key!r}: its turn lease expired {why}; the turn was stopped")

    def watch(self, key: str, lost: Callable[[LeaseLost], None]) -> None:
        """Have ``lost`` told (on the event loop) if ``key``'s lease cannot be kept until ``release``."""
        self._watchers[_key(key)] = lost

    async def release(self, key: str) -> None:
        """Give the lease back (the turn ended or failed). A release the database failed raises, and
        is tried again in the background every ``renew_every`` until the lease would have run out,
        so another instance need not wait out the whole lease after a restart."""
        key = _key(key)
        self._watchers.pop(key, None)
        self._read.pop(key, None)
        with self._lock:
            expires = self._expires.pop(key, None)  # no longer renewed
            token = self._tokens.pop(key, None)
            self._loops.pop(key, None)
        if token is not None:
            try:
                await self._run(self._release, key, token)
            except BaseException:
                self._ended[key] = token  # the turn ended here: this store's next claim may replace it
                _background(self._release_later, key, token, expires if expires is not None else self.clock())
                raise

    async def _release_later(self, key: str, token: str, expires: float) -> None:
        while self.clock() < expires and self._ended.get(key) == token:
            await anyio.sleep(self.renew_every)
            with contextlib.suppress(Exception):
                await self._run(self._release, key, token)
                if self._ended.get(key) == token:
                    del self._ended[key]
                return

    # -- a user's conversations ----------------------------------------------------------------

    async def owner(self, key: str) -> str | None:
        row = await self._run(self._row, _key(key))
        return None if row is None else row.owner

    async def conversations(self, owner: str | None) -> list[ConversationInfo]:
        """``owner``'s conversations, the most recently updated first."""
        return await self._run(self._list, owner)

    async def rename(self, key: str, title: str, owner: str | None) -> bool:
        if not isinstance(title, str) or len(title) > 200:
            raise ConfigurationError(f"a conversation's title is a string of at most 200 characters, got {title!r}")
        return await self._run(self._update_title, _key(key), title, owner)

    async def delete(self, key: str, owner: str | None) -> bool:
        """Delete ``owner``'s conversation with everything it holds (its history, and so its waiting
        approvals, and its lease); ``False`` when there is no such conversation of theirs."""
        return await self._run(self._delete, _key(key), owner)

    async def purge(self, older_than: float) -> int:
        """Delete every conversation not updated for ``older_than`` seconds; how many went."""
        if not isinstance(older_than, int | float) or isinstance(older_than, bool) or older_than < 0:
            raise ConfigurationError(f"purge older_than must be seconds >= 0, got {older_than!r}")
        return await self._run(self._purge, self.clock() - older_than)

    # -- statements (worker threads) -----------------------------------------------------------

    async def _run(self, function: Callable[..., Any], *args: Any) -> Any:
        """``function(*args)`` in a worker thread, at most ``timeout`` seconds: past it the statement
        is abandoned (its thread ends when the connection does) and this raises."""
        with anyio.move_on_after(self.timeout):
            return await anyio.to_thread.run_sync(self._ready_then, function, *args, abandon_on_cancel=True)
        raise TimeoutError(f"the conversation store's database did not answer within {self.timeout:g} s")

    def _ready_then(self, function: Callable[..., Any], *args: Any) -> Any:
        with self._settled:
            self._statements += 1
        try:
            if not self._ready:
                migrate(self.engine)
                self._ready = True
            return function(*args)
        finally:
            with self._settled:
                self._statements -= 1
                self._settled.notify_all()

    @contextlib.contextmanager
    def _transaction(self, urgent: bool = False, engine: sa.Engine | None = None) -> Iterator[sa.Connection]:
        """A write transaction. On SQLite, this store's one at a time (``_Writes``; ``urgent``: a
        renewal, ahead of every write still waiting), the connection taken first: the writer whose
        turn it is never waits for the pool while the others wait for it."""
        engine = self.engine if engine is None else engine
        if self._writes is None:
            with engine.begin() as connection:
                yield connection
            return
        with engine.connect() as connection, self._writes.turn(urgent), connection.begin():
            yield connection

    @contextlib.contextmanager
    def _one(self) -> Iterator[sa.Connection]:
        """A single write statement: on Postgres in autocommit (the statement its own transaction:
        no ``BEGIN`` and ``COMMIT`` round trips), on SQLite a write transaction as any other."""
        if self._writes is not None:
            with self._transaction() as connection:
                yield connection
            return
        with self.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
            yield connection

    @contextlib.contextmanager
    def _reading(self) -> Iterator[sa.Connection]:
        """A single read statement, in autocommit: no write lock on SQLite (WAL: it waits for no
        writer), no ``BEGIN`` and ``COMMIT`` round trips on Postgres."""
        options = {"dspy_imp_read": True} if self._writes is not None else {"isolation_level": "AUTOCOMMIT"}
        with self.engine.connect().execution_options(**options) as connection:
            yield connection

    def _ping(self) -> None:
        with self.engine.connect() as c:
            c.execute(sa.text("SELECT 1"))

    def _left(self, key: str) -> float:
        with self._reading() as c:
            expires = c.execute(_LEASE_OF, {"k": key}).scalar()
        return 0.0 if expires is None else max(0.0, float(expires) - self.clock())

    def _load(self, key: str) -> Conversation | None:
        return _decoded(self._row(key))

    def _row(self, key: str, c: sa.Connection | None = None) -> Any:
        if c is not None:
            return c.execute(_ROW, {"k": key}).first()
        with self._reading() as c:
            return c.execute(_ROW, {"k": key}).first()

    def _encode_and_save(
        self, key: str, conversation: Conversation, state: dict[str, Any], token: str | None, release: bool = False
    ) -> None:
        """``_save`` of the conversation's JSON (``release``: and the lease given back with it),
        encoded here first if no earlier try did: in the statement's worker thread, one round trip
        from the loop for both."""
        if "text" not in state:
            state["text"] = _encoded(conversation)
        if not release or token is None:
            self._save(key, state["text"], conversation.owner, token)
            return
        self._save(key, state["text"], conversation.owner, token, True)  # positional: doubles wrap it so
        with self._lock:  # given back: no longer renewed, nothing left for ``release`` to delete
            if self._tokens.get(key) == token:
                del self._tokens[key]
                self._expires.pop(key, None)
                self._loops.pop(key, None)
        state["released"] = True

    def _save(self, key: str, text: str, owner: str | None, token: str | None = None, release: bool = False) -> None:
        """Upsert the row; under a lease (``token``) only while that token holds it, the lease row
        locked until the write commits (a concurrent claim cannot slip between the check and the
        write: SQLite's transactions are already one at a time). The owner is checked by the upsert
        itself (it changes nothing in a row another user owns), not by a read before it.
        ``release``: the lease row is deleted instead of read, which checks and locks it the same
        way; found gone, the history already there is this save's (an earlier try left behind
        landed), or the lease is lost."""
        now = self.clock()
        with self._transaction() as c:
            if token is not None and release:
                if c.execute(_RELEASE, {"k": key, "h": token}).rowcount != 1:
                    if c.execute(_HISTORY, {"k": key}).scalar() == text:
                        return  # written and released by that earlier try
                    raise LeaseLost(f"conversation {key!r}: this turn's lease ran out and another turn took it")
            elif token is not None:
                lock = _HOLDER_LOCKED if c.dialect.name == "postgresql" else _HOLDER
                holder = c.execute(lock, {"k": key}).scalar()
                if holder != token:
                    raise LeaseLost(f"conversation {key!r}: this turn's lease ran out and another turn took it")
            done = c.execute(_UPSERT, {"k": key, "o": owner, "h": text, "now": now})
            if done.rowcount != 1:  # the row is another user's: nothing written, the transaction rolled back
                raise ConfigurationError(f"conversation {key!r} belongs to another user")

    def _claim_and_read(self, key: str, token: str, ended: str | None) -> tuple[float, bool, Any]:
        """``_claim``, with the conversation's row read in the claim's transaction when it was taken,
        then decoded (the load's work, here in the same worker thread, after the commit): its
        ``Conversation``, ``None`` (no such row), or the error decoding it raised (the load raises it)."""
        row: list[Any] = []
        expires, held = self._claim(key, token, ended, row)
        if not held:
            return expires, False, None
        try:
            loaded: Any = _decoded(row[0] if row else None)
        except Exception as error:  # the stored row is refused: told by the load, as a read would
            loaded = error
        return expires, True, loaded

    def _claim(
        self, key: str, token: str | None = None, ended: str | None = None, row: list[Any] | None = None
    ) -> tuple[float, bool]:
        """Take the lease as ``token`` (this store's holder by default) unless another unexpired one
        holds it; ``ended``: a token of this store whose turn is over (its release failed), replaced too.
        Its expiry and whether it was taken: as written when taken, else the holding lease's. A lease
        another holds is seen by one read, and nothing is written: clients asking again while another
        instance runs the turn (or while a dead one's lease runs out) cost the database a lookup
        each, not a write. The rows of leases expired a whole lease ago go first (a dead
        instance's; a live holder whose renewal is only late keeps its own), by this store's first
        claim and then at most once a tick (``renew_every``), not by every claim. ``row``: the
        conversation's row is appended to it, read in the same transaction, when the lease was taken."""
        token = self.holder if token is None else token
        with self._transaction() as c:
            now = self.clock()  # in the transaction: the wait for SQLite's write lock does not eat the lease
            found = c.execute(_FOUND, {"k": key}).first()
            gone = {"gone": "", "seen": 0.0}
            if found is not None and float(found.expires) >= now and found.holder != (ended or ""):
                if not self._holder_gone(c, found.holder, float(found.expires), now):
                    return float(found.expires), False  # held: the upsert below would change nothing
                gone = {"gone": found.holder, "seen": float(found.expires)}  # that row, not a renewal since
            expires = now + self.lease
            if now >= self._swept + self.renew_every:
                c.execute(_SWEEP, {"before": now - self.lease})
                self._swept = now
            values = {"k": key, "h": token, "e": expires, "now": now, "ended": ended or "", **gone}
            if _returning(c):
                taken = c.execute(_TAKE_RETURNING, values).first()
                if taken is None:  # another claim took it meanwhile (Postgres: read committed)
                    taken = c.execute(_FOUND, {"k": key}).first()
            else:  # an SQLite before 3.35 has no RETURNING: the lease read after, in the transaction
                c.execute(_TAKE, values)
                taken = c.execute(_FOUND, {"k": key}).first()
            if taken is not None and taken.holder == token:
                if row is not None:
                    row.append(self._row(key, c))
                return expires, True
        return (float(taken.expires) if taken is not None else now), False

    def _holder_gone(self, c: sa.Connection, holder: str, expires: float, now: float) -> bool:
        """Whether the unexpired lease ``holder`` holds may be taken over now (``presence``): its
        renewal is a tick overdue and its store's presence lock is free, so its process is gone (or
        its connection is, and it trusts the lease no longer than this). The lock is tried for this
        transaction only: the holder's store, should it be alive and taking it again, waits a tick."""
        if not self.presence or expires - self.lease + self.renew_every >= now:
            return False
        store = holder.split(":", 1)[0]
        return bool(c.execute(sa.text(_PRESENCE_TRY), {"space": _PRESENCE_SPACE, "holder": store}).scalar())

    def _extend(self, held: dict[str, str]) -> tuple[float, set[str]]:
        """Every lease in ``held`` (key: token) renewed in one statement (per 900), on the renewal
        connection: their new expiry, and which keys the statement renewed (the others another
        holder took, or gone). An expiry is never moved back (``max``): a renewal abandoned in a
        stall that commits after a later one cannot shorten the lease the later one wrote."""
        tokens = list(held.values())
        renewed: set[str] = set()
        sqlite = self.renewal_engine.dialect.name == "sqlite"
        returning = not (sqlite and sqlite3.sqlite_version_info < (3, 35))
        later = _LATER_SQLITE if sqlite else _LATER
        with self._transaction(urgent=True, engine=self.renewal_engine) as c:  # SQLite: ahead of every write waiting
            expires = self.clock() + self.lease  # in the transaction, as the claim's
            for start in range(0, len(tokens), _CHUNK):
                chunk = {"h": tokens[start : start + _CHUNK], "e": expires}
                if returning:
                    rows = c.execute(_renewal(later, " RETURNING key, holder"), chunk).all()
                else:  # an SQLite before 3.35 has no RETURNING: the renewed rows read after, in the transaction
                    c.execute(_renewal(later, ""), chunk)
                    rows = c.execute(_RENEWED, {"h": chunk["h"]}).all()
                renewed |= {r.key for r in rows if held.get(r.key) == r.holder}
        return expires, renewed

    def _release(self, key: str, token: str) -> None:
        with self._one() as c:
            c.execute(_RELEASE, {"k": key, "h": token})

    def _list(self, owner: str | None) -> list[ConversationInfo]:
        where = "owner IS NULL" if owner is None else "owner = :o"
        with self._reading() as c:
            rows = c.execute(
                sa.text(f"SELECT key, owner, title, created, updated FROM {T} WHERE {where} ORDER BY updated DESC"),
                {"o": owner},
            )
            return [ConversationInfo(r.key, r.owner, r.title, r.created, r.updated) for r in rows]

    def _update_title(self, key: str, title: str, owner: str | None) -> bool:
        with self._transaction() as c:
            done = c.execute(
                sa.text(f"UPDATE {T} SET title = :t WHERE key = :k AND {_mine(owner)}"), _of(key, owner, t=title)
            )
            return done.rowcount == 1

    def _delete(self, key: str, owner: str | None) -> bool:
        with self._transaction() as c:
            done = c.execute(sa.text(f"DELETE FROM {T} WHERE key = :k AND {_mine(owner)}"), _of(key, owner))
            if done.rowcount == 1:
                c.execute(sa.text(f"DELETE FROM {L} WHERE key = :k"), {"k": key})
            return done.rowcount == 1

    def _purge(self, before: float) -> int:
        with self._transaction() as c:
            keys = [r.key for r in c.execute(sa.text(f"SELECT key FROM {T} WHERE updated < :b"), {"b": before})]
            for key in keys:
                c.execute(sa.text(f"DELETE FROM {T} WHERE key = :k"), {"k": key})
                c.execute(sa.text(f"DELETE FROM {L} WHERE key = :k"), {"k": key})
            return len(keys)

    def _renew(self, stop: threading.Event) -> None:
        """The renewal thread: every ``renew_every``, every lease this store still renews in one
        statement (``_extend``, on the renewal connection), until none is left or ``close`` stops it.

        A thread and a connection of its own, so neither the event loop (a busy one) nor the
        store's pool (all its connections checked out by loads and saves) can hold a renewal up.
        What the database answers decides: a lease it renewed is kept, even when the answer came
        after the lease's expiry by this store's clock (nobody took the row meanwhile, or the
        renewal would not match its token); one it did not renew another holder took, and is
        lost. A renewal that fails (or answers nothing in ``timeout``) is logged and tried again
        while each lease lasts; a lease that expired while they failed is lost. Meanwhile the
        turn itself stops at its lease's expiry (``lapsed``), so no effect starts while another
        instance may hold the conversation. A renewal speaks only for the claims it saw: a lease
        released (and perhaps claimed again) meanwhile is left to the next tick."""
        tick = time.monotonic() + self.renew_every  # ticks keep their pace: a slow statement does not push the next
        while not stop.wait(max(0.0, tick - time.monotonic())):
            tick = time.monotonic() + self.renew_every
            with self._lock:
                if not self._tokens:
                    if self._renewing is not None and self._renewing[1] is stop:
                        self._renewing = None  # the next claim starts another
                    return
                held = {key: self._tokens[key] for key in self._expires if key in self._tokens}
            if held:  # none: every lease held is lost, waiting for its release
                self._renew_once(held)

    def _renew_once(self, held: dict[str, str]) -> None:
        epoch = self._held_epoch()
        try:
            written, renewed = self._bounded(self._extend, held)
            expires = self._trusted(written, epoch)
        except Exception as error:  # a dropped connection, a restarting server, no answer: tried again
            self._failure = error
            now = self.clock()
            for key, token in held.items():
                with self._lock:
                    if self._tokens.get(key) != token or key not in self._expires:
                        continue  # released (or lost) meanwhile
                    if now < self._expires[key]:
                        _log.logger.warning("conversation %r: lease not renewed (retrying): %s", key, error)
                        continue
                    del self._expires[key]
                self._tell(key, token, f"its turn lease expired while renewals failed ({error})")
            return
        self._failure = None
        for key, token in held.items():
            with self._lock:
                if self._tokens.get(key) != token or key not in self._expires:
                    continue  # released while the statement ran: gone, not lost
                if key in renewed:  # still this turn's, late or not
                    self._expires[key] = max(self._expires[key], expires)
                    continue
                del self._expires[key]
            self._tell(key, token, "another turn took its lease")

    def _bounded(self, function: Callable[..., Any], *args: Any) -> Any:
        """``function(*args)`` in a thread of its own, at most ``timeout`` seconds: past it the
        statement is left behind (its thread ends when its connection does; the next renewal takes
        one of the renewal pool's spare connections) and this raises ``TimeoutError``."""
        done = threading.Event()
        box: dict[str, Any] = {}

        def statement() -> None:
            try:
                box["result"] = self._ready_then(function, *args)
            except BaseException as error:  # handed to the renewal thread, which decides
                box["error"] = error
            finally:
                done.set()

        threading.Thread(target=statement, name="dspy-imp-lease-renewal", daemon=True).start()
        if not done.wait(self.timeout):
            raise TimeoutError(f"the conversation store's database did not renew within {self.timeout:g} s")
        if "error" in box:
            raise box["error"]
        return box["result"]

    def _tell(self, key: str, token: str, why: str) -> None:
        """From the renewal thread: ``_lose`` on the loop the lease was claimed on, if that claim
        (its token) still holds then."""
        loop = self._loops.get(key)
        if loop is None:
            return
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody is left to tell
            loop.call_soon_threadsafe(self._told, key, token, why)

    def _told(self, key: str, token: str, why: str) -> None:
        if self._tokens.get(key) == token:
            self._lose(key, why)

    def _lose(self, key: str, why: str) -> None:
        """On the event loop: the turn is told its lease is lost (its watcher) and its save is no
        longer tried again."""
        error = LeaseLost(f"conversation {key!r}: {why}; the turn was stopped")
        _log.logger.warning("%s", error)
        with self._lock:
            self._expires.pop(key, None)
        lost = self._watchers.pop(key, None)
        if lost is not None:
            lost(error)


T = "dspy_imp_web_conversations"
L = "dspy_imp_web_turns"
_CHUNK = 900  # tokens per renewal statement: within an old SQLite's 999 parameters
_LATER = "GREATEST(expires, :e)"
_LATER_SQLITE = "max(expires, :e)"  # SQLite's two-argument max is a scalar function


def _renewal(later: str, returning: str) -> sa.TextClause:
    statement = sa.text(f"UPDATE {L} SET expires = {later} WHERE holder IN :h{returning}")
    return statement.bindparams(sa.bindparam("h", expanding=True))


# A turn's statements, made once (a text clause built anew on each call is parsed anew each time).
_FOUND = sa.text(f"SELECT holder, expires FROM {L} WHERE key = :k")
_LEASE_OF = sa.text(f"SELECT expires FROM {L} WHERE key = :k")
_SWEEP = sa.text(f"DELETE FROM {L} WHERE expires < :before")
_TAKE_SQL = (
    f"INSERT INTO {L} (key, holder, expires) VALUES (:k, :h, :e) "
    f"ON CONFLICT (key) DO UPDATE SET holder = excluded.holder, expires = excluded.expires "
    f"WHERE {L}.expires < :now OR {L}.holder = :ended OR ({L}.holder = :gone AND {L}.expires = :seen)"
)
_TAKE = sa.text(_TAKE_SQL)
_TAKE_RETURNING = sa.text(_TAKE_SQL + " RETURNING holder, expires")
_ROW = sa.text(f"SELECT owner, history FROM {T} WHERE key = :k")
_HISTORY = sa.text(f"SELECT history FROM {T} WHERE key = :k")
_HOLDER = sa.text(f"SELECT holder FROM {L} WHERE key = :k")
_HOLDER_LOCKED = sa.text(f"SELECT holder FROM {L} WHERE key = :k FOR UPDATE")
_UPSERT = sa.text(  # another user's row is left as it is (no row changed: refused)
    f"INSERT INTO {T} (key, owner, title, history, created, updated) VALUES (:k, :o, NULL, :h, :now, :now) "
    f"ON CONFLICT (key) DO UPDATE SET history = excluded.history, updated = excluded.updated "
    f"WHERE {T}.owner IS NULL OR excluded.owner IS NULL OR {T}.owner = excluded.owner"
)
_RELEASE = sa.text(f"DELETE FROM {L} WHERE key = :k AND holder = :h")


def _returning(c: sa.Connection) -> bool:
    """Whether the database has ``RETURNING`` (Postgres; SQLite from 3.35)."""
    return c.dialect.name != "sqlite" or sqlite3.sqlite_version_info >= (3, 35)


class _Writes:
    """This store's write transactions on SQLite: one at a time, in the order they asked, a
    renewal ahead of every one still waiting.

    A SQLite file has one writer. A transaction that finds the write lock taken polls for it (the
    busy handler), sleeping longer between tries the longer it has waited (up to 100 ms), so the
    writer that has waited longest tries least often and loses the lock to every newcomer. Under
    load a store's worker threads (up to 40) kept arriving, and the renewal, once it had waited a
    while, lost to each of them until its lease ran out (``LeaseLost``). Here only one of the
    store's writers asks SQLite at a time (the others wait here, and each hands the turn to the
    next as it ends), and a renewal is handed the turn before any write: it waits for the one
    transaction in progress and for other processes' writers, never behind this store's queue."""

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self._held = False
        self._waiting: deque[threading.Lock] = deque()
        self._urgent: deque[threading.Lock] = deque()

    @contextlib.contextmanager
    def turn(self, urgent: bool = False) -> Iterator[None]:
        with self._mutex:
            mine = None
            if self._held:
                mine = threading.Lock()
                mine.acquire()
                (self._urgent if urgent else self._waiting).append(mine)
            self._held = True
        if mine is not None:
            mine.acquire()  # released by the writer before this one: the turn handed over
        try:
            yield
        finally:
            with self._mutex:
                queue = self._urgent or self._waiting
                following = queue.popleft() if queue else None
                self._held = following is not None
            if following is not None:
                following.release()


_PRESENCE_SPACE = 1685286761  # the advisory locks' first key ("dspi"): a store's presence, by its holder id
_PRESENCE_TAKE = "SELECT pg_try_advisory_lock(%s, hashtext(%s))"  # session-level: held until the connection ends
_PRESENCE_TRY = "SELECT pg_try_advisory_xact_lock(:space, hashtext(:holder))"  # released as the claim commits
_RENEWED = sa.text(f"SELECT key, holder FROM {L} WHERE holder IN :h").bindparams(sa.bindparam("h", expanding=True))
VERSION = len(MIGRATIONS)
"""The schema version this package writes (``dspy_imp_web_schema``)."""


def _decoded(row: Any) -> Conversation | None:
    """The conversation a row holds (``None``: no row), validated as ``load_history`` does."""
    if row is None:
        return None
    data = json.loads(row.history)
    turns = kept_turns(data.pop("turns", None) if isinstance(data, dict) else None)
    return Conversation(load_history(data), row.owner, turns)


def _encoded(conversation: Conversation) -> str:
    """The row's ``history``: ``dump_history`` with how each turn ended beside it, as JSON."""
    data = {**dump_history(conversation.history), "turns": list(conversation.turns)}
    return json.dumps(data)  # ASCII escapes: a lone surrogate too


def _mine(owner: str | None) -> str:
    return "owner IS NULL" if owner is None else "owner = :o"


def _of(key: str, owner: str | None, **more: Any) -> dict[str, Any]:
    return {"k": key, "o": owner, **more}


def _seconds(name: str, value: Any) -> float:
    if not isinstance(value, int | float) or isinstance(value, bool) or not value > 0:
        raise ConfigurationError(f"DatabaseStore {name} must be a positive number of seconds, got {value!r}")
    return float(value)


def _key(key: Any) -> str:
    if not isinstance(key, str) or not key or len(key) > 500:
        raise ConfigurationError(f"a conversation id is a non-empty string of at most 500 characters, got {key!r}")
    return key


def _engine(url: str, timeout: float, renewals: bool = False, presence: bool = False) -> sa.Engine:
    """The store's engine: a pool that keeps up to ``POOL`` connections open; ``renewals``: the
    renewal thread's, a pool of one connection and two spares while a stalled renewal holds one (a
    file's or a server's: an in-memory SQLite has a database per connection, shared by nothing);
    ``presence`` (Postgres): the presence thread's, no pool (its connection closed is its lock
    released)."""
    if not isinstance(url, str) or not url:
        raise ConfigurationError(f"DatabaseStore url must be a SQLAlchemy URL string, got {url!r}")
    try:
        parsed = sa.make_url(url)
    except sa.exc.ArgumentError as error:
        raise ConfigurationError(f"DatabaseStore url is not a database URL: {url!r} ({error})") from None
    if parsed.drivername in ("postgresql", "postgres"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    # The turns' pool keeps every connection it opens (15 at most, as SQLAlchemy's default 5 + 10
    # overflow): an overflow connection is closed as it is given back, and on Postgres each one
    # opened again was a server process forked and a login, several a second under load.
    kept = {"pool_size": POOL, "max_overflow": 0, "pool_timeout": timeout}
    one = {"pool_size": 1, "max_overflow": 2, "pool_timeout": timeout} if renewals else kept
    if parsed.get_backend_name() == "sqlite":
        in_memory = parsed.database in (None, "", ":memory:") or parsed.query.get("mode") == "memory"
        return _sqlite(parsed, timeout, {} if in_memory else one)
    if parsed.get_backend_name() != "postgresql":
        raise ConfigurationError(f"DatabaseStore supports sqlite:// and postgresql:// URLs, got {url!r}")
    bound = {"connect_timeout": max(1, round(timeout)), "tcp_user_timeout": round(timeout * 1000)}
    if presence:
        return sa.create_engine(parsed, poolclass=sa.pool.NullPool, connect_args=bound)
    if renewals:
        return sa.create_engine(parsed, pool_pre_ping=True, connect_args=bound, **one)
    return _pinged_when_idle(sa.create_engine(parsed, connect_args=bound, **one))


IDLE = 1.0
"""Seconds a pooled Postgres connection may rest before it is checked (a round trip) as it is
handed out again: one given back less than this ago is used as it is."""


def _pinged_when_idle(engine: sa.Engine) -> sa.Engine:
    """The pool checks a connection before handing it out only when it has rested ``IDLE``
    seconds or more (SQLAlchemy's ``pool_pre_ping`` checks every one: a round trip before each
    transaction). A connection a database restart closed has rested through the restart, so it
    is checked, found closed and replaced; one that fails anyway (closed within a second of its
    last use) fails its statement, and SQLAlchemy then replaces every connection of the pool."""

    @sa.event.listens_for(engine, "checkin")
    def _returned(connection: Any, record: Any) -> None:
        record.info["dspy_imp_returned"] = time.monotonic()

    @sa.event.listens_for(engine, "checkout")
    def _checked(connection: Any, record: Any, proxy: Any) -> None:
        returned = record.info.get("dspy_imp_returned")
        if returned is None or time.monotonic() - returned < IDLE:
            return  # just opened, or used a moment ago
        try:
            alive = engine.dialect.do_ping(connection)
        except Exception as error:
            raise sa.exc.DisconnectionError(f"a pooled connection was closed: {error}") from error
        if not alive:
            raise sa.exc.DisconnectionError("a pooled connection was closed")

    return engine


def _sqlite(url: sa.URL, timeout: float, pool: dict[str, Any]) -> sa.Engine:
    """SQLite with every transaction ``BEGIN IMMEDIATE`` (one writer at a time, across processes),
    WAL so readers do not wait for it, and a busy timeout instead of "database is locked"."""
    engine = sa.create_engine(url, connect_args={"timeout": timeout}, **pool)

    @sa.event.listens_for(engine, "connect")
    def _connect(connection: Any, _: Any) -> None:
        connection.isolation_level = None  # SQLAlchemy's BEGIN below, not the driver's own
        connection.execute("PRAGMA journal_mode=WAL")

    @sa.event.listens_for(engine, "begin")
    def _begin(connection: sa.Connection) -> None:
        if not connection.get_execution_options().get("dspy_imp_read"):  # a single read: autocommit
            connection.exec_driver_sql("BEGIN IMMEDIATE")

    return engine


def _background(function: Callable[..., Any], *args: Any) -> asyncio.Task[Any]:
    """Start ``function(*args)`` on the running loop, kept alive until it returns."""
    task = asyncio.get_running_loop().create_task(function(*args))
    _TASKS.add(task)
    task.add_done_callback(_TASKS.discard)
    return task


_TASKS: set[asyncio.Task[Any]] = set()
