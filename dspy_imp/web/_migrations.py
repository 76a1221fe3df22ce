"""The conversation store's schema, created and moved forward by the package itself.

``dspy_imp_web_schema`` holds one row, the version written. ``MIGRATIONS[i]`` takes a database
from version ``i`` to ``i + 1``; ``migrate`` applies the missing ones in order, each in its own
transaction with the version bump, under a lock (Postgres: a transaction advisory lock; SQLite:
the ``BEGIN IMMEDIATE`` write lock), so two processes starting at once migrate once. A database
written by a newer release (a higher version) is refused rather than guessed at.

Migrations only ever add: a new column, table or index. A released migration is never edited.
"""

from __future__ import annotations

from collections.abc import Callable

import sqlalchemy as sa

from dspy_imp._records.errors import ConfigurationError

SCHEMA = "dspy_imp_web_schema"
_LOCK = 7_205_118_337  # pg_advisory_xact_lock's key for the store's migrations


class SchemaTooNew(ConfigurationError):
    """The database was written by a newer dspy-imp (its schema version is higher than ours)."""

    def __init__(self, found: int, known: int):
        super().__init__(
            f"the conversation database is at schema version {found}, newer than this dspy-imp "
            f"knows ({known}): upgrade dspy-imp"
        )
        self.found = found
        self.known = known


def _v1(c: sa.Connection) -> None:
    """Conversations (id, history) and the turn leases."""
    c.execute(
        sa.text(
            "CREATE TABLE dspy_imp_web_conversations ("
            " key VARCHAR(500) PRIMARY KEY, history TEXT NOT NULL, updated DOUBLE PRECISION NOT NULL)"
        )
    )
    c.execute(
        sa.text(
            "CREATE TABLE dspy_imp_web_turns ("
            " key VARCHAR(500) PRIMARY KEY, holder VARCHAR(64) NOT NULL, expires DOUBLE PRECISION NOT NULL)"
        )
    )


def _v2(c: sa.Connection) -> None:
    """Owners, titles and creation times; a user's list read by index."""
    for column in ("owner VARCHAR(500)", "title VARCHAR(200)", "created DOUBLE PRECISION"):
        c.execute(sa.text(f"ALTER TABLE dspy_imp_web_conversations ADD COLUMN {column}"))
    c.execute(sa.text("UPDATE dspy_imp_web_conversations SET created = updated"))
    c.execute(sa.text("CREATE INDEX dspy_imp_web_conversations_owner ON dspy_imp_web_conversations (owner, updated)"))


MIGRATIONS: tuple[Callable[[sa.Connection], None], ...] = (_v1, _v2)


def migrate(engine: sa.Engine, to: int | None = None) -> int:
    """Bring the schema to version ``to`` (the latest by default); the version it is at after."""
    target = len(MIGRATIONS) if to is None else to
    with engine.begin() as c:
        _lock(c)
        c.execute(sa.text(f"CREATE TABLE IF NOT EXISTS {SCHEMA} (version INTEGER NOT NULL)"))
        version = c.execute(sa.text(f"SELECT version FROM {SCHEMA}")).scalar()
        if version is None:
            c.execute(sa.text(f"INSERT INTO {SCHEMA} (version) VALUES (0)"))
            version = 0
        if version > len(MIGRATIONS):
            raise SchemaTooNew(version, len(MIGRATIONS))
        for step in range(version, target):
            MIGRATIONS[step](c)
            c.execute(sa.text(f"UPDATE {SCHEMA} SET version = :v"), {"v": step + 1})
        return max(version, target)


def _lock(c: sa.Connection) -> None:
    if c.dialect.name == "postgresql":
        c.execute(sa.text("SELECT pg_advisory_xact_lock(:k)"), {"k": _LOCK})
