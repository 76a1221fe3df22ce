"""A claim refused because another instance holds the conversation's lease writes nothing.

While one instance runs a conversation's turn (or while a killed instance's lease runs out), every
client that asks the other instance gets a 409 with ``Retry-After``. Under a hand-over those asks
come from every moved conversation at once, as often as their clients retry, so each one costs the
database one read: no DELETE, no upsert, and the ``Retry-After`` comes from the expiry that read
found (no second round trip). A lease that has expired is still taken by the one upsert, and a
lease of this store's own ended turn is still replaced.

The stores share the test's clock: expiry is decided by the seconds the test moves it, never by the
machine's speed.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from dspy_imp.web._database import DatabaseStore

pytestmark = pytest.mark.block_network(allowed_hosts=[r"127\.0\.0\.1$"])


class Clock:
    now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(params=["sqlite", "postgres"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'c.db'}"
    name = f"refused_{zlib.crc32(request.node.nodeid.encode()):x}"  # a database of each test's own
    return str(request.getfixturevalue("postgres").database(name))


@pytest.fixture
def stores(url: str) -> Iterator[tuple[DatabaseStore, DatabaseStore, Clock]]:
    clock = Clock()
    first, other = DatabaseStore(url, lease=3, clock=clock), DatabaseStore(url, lease=3, clock=clock)
    yield first, other, clock
    first.close()
    other.close()


def statements(store: DatabaseStore) -> list[str]:
    """Every statement ``store``'s pool sends from now on, its first word upper-cased."""
    sent: list[str] = []

    @sa.event.listens_for(store.engine, "before_cursor_execute")
    def _sent(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        sent.append(statement.split(None, 1)[0].upper())

    return sent


async def test_a_refused_claim_reads_once_and_tells_the_time_left_without_asking_again(
    stores: tuple[DatabaseStore, DatabaseStore, Clock],
) -> None:
    first, other, clock = stores
    assert await first.claim("k")
    await other.lease_left("warm-up")  # the schema is made on a store's first statement
    sent = statements(other)
    clock.now += 1.0
    assert not await other.claim("k")
    assert await other.lease_left("k") == pytest.approx(2.0)
    assert [s for s in sent if s not in ("BEGIN", "COMMIT")] == ["SELECT"]
    assert await other.lease_left("k") == pytest.approx(2.0)  # asked again: the database answers
    assert [s for s in sent if s not in ("BEGIN", "COMMIT")] == ["SELECT", "SELECT"]
    await first.release("k")


async def test_an_expired_lease_is_still_taken_and_a_released_one_at_once(
    stores: tuple[DatabaseStore, DatabaseStore, Clock],
) -> None:
    first, other, clock = stores
    assert await first.claim("k") and await first.claim("j")
    assert not await other.claim("k")
    await first.release("j")
    assert await other.claim("j")  # a released lease: taken on the next ask, no waiting out its expiry
    with first._lock:  # the first instance dies: nothing renews its lease on k from here on
        first._expires.clear()
        first._tokens.clear()
    clock.now += 3.5  # past the expiry of that lease as last written
    assert await other.claim("k")
    assert await other.lease_left("k") == pytest.approx(3.0)
    await other.release("k")
    await other.release("j")
