"""A request cancelled while its turn begins (its client gone between the lease's claim and the
turn's start) gives the store's lease back: a ``DatabaseStore`` renews the leases it holds, so a
lease left behind would refuse the conversation on every instance until this process ended.

The store double's ``load`` waits on an event that is never set, so the cancel lands exactly there,
whatever the machine's speed; ``GUARD`` only bounds a failure.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from dspy_imp.web._database import DatabaseStore
from dspy_imp.web._turns import Calls, MemoryStore, Runner

GUARD = 30  # seconds: a failure guard only, never a timing assertion


class HeldLoad(DatabaseStore):
    """A SQLite store whose ``load`` is reached (``loading`` set) and then never returns."""

    def __init__(self, path: Path) -> None:
        super().__init__(f"sqlite:///{path}", lease=60, renew_every=30)
        self.loading = asyncio.Event()

    async def load(self, key: str) -> Any:
        self.loading.set()
        await asyncio.Event().wait()


class HeldClaim(MemoryStore):
    """A store whose claim is reached and then never returns; ``released`` records its releases."""

    def __init__(self) -> None:
        super().__init__()
        self.claiming = asyncio.Event()
        self.released: list[str] = []

    async def claim(self, key: str) -> bool:
        self.claiming.set()
        await asyncio.Event().wait()
        return True

    async def release(self, key: str) -> None:
        self.released.append(key)


def runner(store: Any) -> Runner:
    import dspy_imp

    return Runner(Calls(dspy_imp.ReActV2("question -> answer"), sync=False), store)


async def settled(held: Runner) -> None:
    await asyncio.wait_for(asyncio.gather(*list(held.tasks)), GUARD)


async def test_a_turn_cancelled_after_its_claim_gives_the_lease_back(tmp_path: Path) -> None:
    path = tmp_path / "conversations.db"
    store = HeldLoad(path)
    held = runner(store)
    begun = asyncio.ensure_future(held.begin("c1", None, lambda history: None))  # type: ignore[arg-type,return-value]
    await asyncio.wait_for(store.loading.wait(), GUARD)
    assert "c1" in store._expires  # claimed: this store renews it from now on
    begun.cancel()
    with pytest.raises(asyncio.CancelledError):
        await begun
    assert "c1" in held.busy  # still taken here until the store has let go of it
    await settled(held)
    assert "c1" not in held.busy and "c1" not in store._expires  # no longer held, nor renewed
    other = DatabaseStore(f"sqlite:///{path}", lease=60, renew_every=30)  # another instance
    assert await other.claim("c1")  # at once, not after the lease
    await other.release("c1")


async def test_a_turn_cancelled_mid_claim_releases_what_the_claim_may_have_taken() -> None:
    store = HeldClaim()
    held = runner(store)
    begun = asyncio.ensure_future(held.begin("c2", None, lambda history: None))  # type: ignore[arg-type,return-value]
    await asyncio.wait_for(store.claiming.wait(), GUARD)
    begun.cancel()
    with pytest.raises(asyncio.CancelledError):
        await begun
    await settled(held)
    assert store.released == ["c2"] and "c2" not in held.busy


async def test_a_store_without_leases_frees_the_conversation_at_once() -> None:
    class HeldRead(MemoryStore):
        def __init__(self) -> None:
            super().__init__()
            self.loading = asyncio.Event()

        async def load(self, key: str) -> Any:
            self.loading.set()
            await asyncio.Event().wait()

    store = HeldRead()
    held = runner(store)
    begun = asyncio.ensure_future(held.begin("c3", None, lambda history: None))  # type: ignore[arg-type,return-value]
    await asyncio.wait_for(store.loading.wait(), GUARD)
    begun.cancel()
    with pytest.raises(asyncio.CancelledError):
        await begun
    assert "c3" not in held.busy and not held.tasks
