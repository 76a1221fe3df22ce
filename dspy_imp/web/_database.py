"""Conversations on a real database (SQLAlchemy 2): SQLite by default, Postgres by URL.

Theory of operation. ``DatabaseStore`` keeps each conversation as one row: its id, the user who
started it (``owner``), a title, and its history as the JSON ``dump_history`` writes (so a reloaded
conversation sends byte-identical requests), with how each turn ended beside its messages (``turns``,
what the page shows again on a reload; a row written before has none). A second table holds the *turn lease* of each
conversation that is running a turn: which process holds it and until when. ``claim`` takes the
lease in one statement (an upsert that only replaces an expired lease), so across processes and
machines at most one turn of a conversation runs at a time; the holder renews it while the turn
runs (one statement a tick for all of a store's leases) and deletes it when the turn ends or
fails. A renewal that fails (the database restarting)
is logged and tried again every interval while the lease has not expired; a lease that expires
unrenewed, or that another holder took, is *lost*: the store tells the turn (``watch``), which the
Runner stops before its next effect, ending with ``LeaseLost``. A process that dies leaves a lease that expires
after ``lease`` seconds, and the conversation is usable again, with what was saved before; the
next claim, for any conversation, deletes every lease expired for a whole lease or more.

The schema is the package's own: a version table, and forward migrations applied in order at the
first use (under a lock, so two processes starting at once migrate once). Every statement runs in
a worker thread (SQLAlchemy's sync engine and the driver DBOS uses), never on the event loop.

What is read back is input, as a file would be: ``load_history`` validates it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
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
            mid-turn frees its conversations after this long (the next claim deletes every lease
            expired for a whole lease or more), and a client refused meanwhile is told the seconds left.
        renew_every: Seconds between renewals (``lease / 3`` by default); a failed one is tried
            again after this long while the lease has not expired.
        clock: Seconds since the epoch (``time.time``); tests move it to expire a lease.

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
    ):
        self.lease = _seconds("lease", lease)
        self.renew_every = self.lease / 3 if renew_every is None else _seconds("renew_every", renew_every)
        if not self.renew_every < self.lease:
            raise ConfigurationError(f"DatabaseStore renew_every must be less than lease, got {renew_every!r}")
        self.engine = _engine(url)
        self.clock = clock
        self.holder = uuid.uuid4().hex  # this store object, in this process
        self._held: dict[str, float] = {}  # each lease this store holds, and when it expires
        self._claims: dict[str, object] = {}  # each held lease's claim: a renewal speaks only for its own
        self._lost: set[str] = set()  # leases lost mid-turn, until released: a save is refused
        self._renewer: asyncio.Task[Any] | None = None
        self._renewals: anyio.CapacityLimiter | None = None  # renews them all, one statement a tick
        self._watchers: dict[str, Callable[[LeaseLost], None]] = {}
        self._ready = False

    def close(self) -> None:
        """Close the store's pooled connections (at shutdown; a later call opens new ones)."""
        self.engine.dispose()

    # -- the Store protocol ------------------------------------------------------------------

    async def load(self, key: str) -> Conversation | None:
        return await self._run(self._load, _key(key))  # decoded in the worker thread too: off the loop

    async def save(self, key: str, conversation: Conversation) -> None:
        """Write the conversation; its owner is set by the first save and never changed after (a save
        naming another owner is refused). Encoded in the worker thread, off the event loop."""
        await self._run(self._encode_and_save, _key(key), conversation)

    async def check(self) -> None:
        """Reach the database and bring its schema up to date (``SchemaTooNew``: it is newer)."""
        await self._run(lambda: None)

    async def ping(self) -> None:
        """Reach the database now, with a statement (``/readyz``); ``SchemaTooNew`` as ``check``."""
        await self._run(self._ping)

    # -- the turn lease ------------------------------------------------------------------------

    async def claim(self, key: str) -> bool:
        """Take ``key``'s turn lease (``False``: another turn holds it) and renew it until ``release``."""
        key = _key(key)
        if key in self._held or not await self._run(self._claim, key):
            return False
        self._held[key] = self.clock() + self.lease
        self._claims[key] = object()
        renewer = self._renewer
        if renewer is None or renewer.done() or renewer.get_loop() is not asyncio.get_running_loop():
            self._renewals = anyio.CapacityLimiter(1)  # of this loop
            self._renewer = asyncio.get_running_loop().create_task(self._renew())
            _TASKS.add(self._renewer)
            self._renewer.add_done_callback(_TASKS.discard)
        return True

    async def lease_left(self, key: str) -> float:
        """Seconds until the turn lease on ``key`` expires (0: none is held): when a client refused
        because another instance runs the conversation's turn may try again (``Retry-After``)."""
        return float(await self._run(self._left, _key(key)))

    def watch(self, key: str, lost: Callable[[LeaseLost], None]) -> None:
        """Have ``lost`` told (on the event loop) if ``key``'s lease cannot be kept until ``release``."""
        self._watchers[_key(key)] = lost

    async def release(self, key: str) -> None:
        """Give the lease back (the turn ended or failed)."""
        key = _key(key)
        self._held.pop(key, None)
        self._claims.pop(key, None)
        self._lost.discard(key)
        self._watchers.pop(key, None)
        await self._run(self._release, key)

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

    async def _run(self, function: Callable[..., Any], *args: Any, limiter: Any = None) -> Any:
        return await anyio.to_thread.run_sync(self._ready_then, function, *args, limiter=limiter)

    def _ready_then(self, function: Callable[..., Any], *args: Any) -> Any:
        if not self._ready:
            migrate(self.engine)
            self._ready = True
        return function(*args)

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[sa.Connection]:
        with self.engine.begin() as connection:
            yield connection

    def _ping(self) -> None:
        with self.engine.connect() as c:
            c.execute(sa.text("SELECT 1"))

    def _load(self, key: str) -> Conversation | None:
        row = self._row(key)
        if row is None:
            return None
        data = json.loads(row.history)
        turns = kept_turns(data.pop("turns", None) if isinstance(data, dict) else None)
        return Conversation(load_history(data), row.owner, turns)

    def _encode_and_save(self, key: str, conversation: Conversation) -> None:
        data = {**dump_history(conversation.history), "turns": list(conversation.turns)}  # turns beside it
        self._save(key, json.dumps(data), conversation.owner)  # ASCII escapes: a lone surrogate too

    def _row(self, key: str) -> Any:
        with self._transaction() as c:
            return c.execute(sa.text(f"SELECT owner, history FROM {T} WHERE key = :k"), {"k": key}).first()

    def _save(self, key: str, text: str, owner: str | None) -> None:
        now = self.clock()
        with self._transaction() as c:
            holder = c.execute(sa.text(f"SELECT holder FROM {L} WHERE key = :k"), {"k": key}).scalar()
            if (key in self._held or key in self._lost) and holder != self.holder:
                raise LeaseLost(f"conversation {key!r}: this turn's lease ran out and another turn took it")
            mine = c.execute(sa.text(f"SELECT owner FROM {T} WHERE key = :k"), {"k": key}).first()
            if mine is not None and None not in (mine.owner, owner) and mine.owner != owner:
                raise ConfigurationError(f"conversation {key!r} belongs to another user")
            c.execute(
                sa.text(
                    f"INSERT INTO {T} (key, owner, title, history, created, updated) "
                    "VALUES (:k, :o, NULL, :h, :now, :now) "
                    "ON CONFLICT (key) DO UPDATE SET history = excluded.history, updated = excluded.updated"
                ),
                {"k": key, "o": owner, "h": text, "now": now},
            )

    def _claim(self, key: str) -> bool:
        now = self.clock()
        with self._transaction() as c:
            # dead holders' leases: expired a whole lease ago (a live holder's late renewal keeps its own)
            c.execute(sa.text(f"DELETE FROM {L} WHERE expires < :before"), {"before": now - self.lease})
            c.execute(
                sa.text(
                    f"INSERT INTO {L} (key, holder, expires) VALUES (:k, :h, :e) "
                    f"ON CONFLICT (key) DO UPDATE SET holder = excluded.holder, expires = excluded.expires "
                    f"WHERE {L}.expires < :now"
                ),
                {"k": key, "h": self.holder, "e": now + self.lease, "now": now},
            )
            return c.execute(sa.text(f"SELECT holder FROM {L} WHERE key = :k"), {"k": key}).scalar() == self.holder

    def _left(self, key: str) -> float:
        with self._transaction() as c:
            expires = c.execute(sa.text(f"SELECT expires FROM {L} WHERE key = :k"), {"k": key}).scalar()
        return 0.0 if expires is None else max(0.0, float(expires) - self.clock())

    def _extend(self, keys: list[str]) -> tuple[float, set[str]]:
        """Every lease of this holder renewed in one statement: their new expiry, and which of
        ``keys`` it still holds (the others another holder took, or they are gone)."""
        expires = self.clock() + self.lease
        with self._transaction() as c:
            c.execute(sa.text(f"UPDATE {L} SET expires = :e WHERE holder = :h"), {"h": self.holder, "e": expires})
            rows = c.execute(sa.text(f"SELECT key FROM {L} WHERE holder = :h"), {"h": self.holder})
            return expires, {r.key for r in rows} & set(keys)

    def _release(self, key: str) -> None:
        with self._transaction() as c:
            c.execute(sa.text(f"DELETE FROM {L} WHERE key = :k AND holder = :h"), {"k": key, "h": self.holder})

    def _list(self, owner: str | None) -> list[ConversationInfo]:
        where = "owner IS NULL" if owner is None else "owner = :o"
        with self._transaction() as c:
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

    async def _renew(self) -> None:
        """Renew every lease held, every ``renew_every``, one statement for all, until none is held;
        a failure is logged and tried again while each lease lasts. A lease lost (expired, or
        another holder's) is told to its watcher."""
        while self._held:
            await anyio.sleep(self.renew_every)
            claims = dict(self._claims)
            keys = [key for key in self._held if key in claims]
            if not keys:
                continue
            try:
                # a thread of its own: never queued behind the turns' loads and saves
                expires, mine = await self._run(self._extend, keys, limiter=self._renewals)
            except Exception as error:  # a dropped connection, a restarting server: tried again
                now = self.clock()
                for key in keys:
                    if self._claims.get(key) is not claims[key]:
                        continue  # released meanwhile (perhaps claimed again: that lease is the next tick's)
                    if now < self._held[key]:
                        _log.logger.warning("conversation %r: lease not renewed (retrying): %s", key, error)
                    else:
                        self._held.pop(key, None)
                        self._lose(key, f"its turn lease expired while renewals failed ({error})")
                continue
            for key in keys:
                if self._claims.get(key) is not claims[key]:
                    continue  # released while the statement ran (perhaps claimed again): gone, not lost
                if key in mine:
                    self._held[key] = expires
                else:
                    self._held.pop(key, None)
                    self._lose(key, "another turn took its lease")

    def _lose(self, key: str, why: str) -> None:
        self._lost.add(key)
        error = LeaseLost(f"conversation {key!r}: {why}; the turn was stopped")
        _log.logger.warning("%s", error)
        lost = self._watchers.pop(key, None)
        if lost is not None:
            lost(error)


T = "dspy_imp_web_conversations"
L = "dspy_imp_web_turns"
VERSION = len(MIGRATIONS)
"""The schema version this package writes (``dspy_imp_web_schema``)."""


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


def _engine(url: str) -> sa.Engine:
    if not isinstance(url, str) or not url:
        raise ConfigurationError(f"DatabaseStore url must be a SQLAlchemy URL string, got {url!r}")
    try:
        parsed = sa.make_url(url)
    except sa.exc.ArgumentError as error:
        raise ConfigurationError(f"DatabaseStore url is not a database URL: {url!r} ({error})") from None
    if parsed.drivername in ("postgresql", "postgres"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    if parsed.get_backend_name() == "sqlite":
        return _sqlite(parsed)
    if parsed.get_backend_name() != "postgresql":
        raise ConfigurationError(f"DatabaseStore supports sqlite:// and postgresql:// URLs, got {url!r}")
    return sa.create_engine(parsed, pool_pre_ping=True)


def _sqlite(url: sa.URL) -> sa.Engine:
    """SQLite with every transaction ``BEGIN IMMEDIATE`` (one writer at a time, across processes),
    WAL so readers do not wait for it, and a busy timeout instead of "database is locked"."""
    engine = sa.create_engine(url, connect_args={"timeout": 30})

    @sa.event.listens_for(engine, "connect")
    def _connect(connection: Any, _: Any) -> None:
        connection.isolation_level = None  # SQLAlchemy's BEGIN below, not the driver's own
        connection.execute("PRAGMA journal_mode=WAL")

    @sa.event.listens_for(engine, "begin")
    def _begin(connection: sa.Connection) -> None:
        connection.exec_driver_sql("BEGIN IMMEDIATE")

    return engine


_TASKS: set[asyncio.Task[Any]] = set()
