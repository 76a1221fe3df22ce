"""What a turn costs a ``DatabaseStore``, without the app: statements, transactions, CPU.

    python -m benchmarks.web_store --store sqlite --users 50 --turns 20
    python -m benchmarks.web_store --store postgres --users 50 --turns 20

Each of ``--users`` conversations plays ``--turns`` turns at once on one store, as the app's
Runner does a turn's store calls: ``claim``, ``load``, ``save_and_release`` (``save`` on a store
without it), ``release``; each save one exchange longer. Printed per turn: the statements the
store's engine sent, its commits and pooled checkouts (SQLAlchemy's events), this process's CPU
milliseconds (the store's Python, its driver and its worker threads' hops, from the loop and
back), and on Postgres the server's CPU milliseconds (every ``postgres`` process under
``/proc``, the backends that exited included). CPU, not wall time: on a machine shared with
other work it barely moves with the neighbours, so two runs (a change, and the code before it)
compare on a busy machine where ``benchmarks.web_cpu`` (the whole app under Locust) moves by
more than the store's share. The lease renewals (one statement a tick for all the store's
leases) are on their own engine and not counted.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import dspy
import sqlalchemy as sa

from dspy_imp.web import Conversation, DatabaseStore

ROOT = Path(__file__).resolve().parent.parent


def server_cpu() -> float:
    """CPU seconds of every ``postgres`` process, with the children each reaped (backends that exited)."""
    total = 0.0
    tick = os.sysconf("SC_CLK_TCK")
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        if stat[stat.index("(") + 1 : stat.rindex(")")] != "postgres":
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        total += sum(int(f) for f in fields[11:15]) / tick  # utime, stime, cutime, cstime
    return total


def history(exchanges: int) -> dspy.History:
    return dspy.History(
        messages=[{"message": f"question {i} " * 5, "reply": f"answer {i} " * 20} for i in range(exchanges)]
    )


async def measure(url: str, users: int, turns: int, **options: Any) -> dict[str, Any]:
    """``options``: the store's (``lease``, ...); a claim's sweep of expired leases, at most one a
    tick, counts as the statements of the turn it fell in."""
    store = DatabaseStore(url, **options)
    counts: Counter[str] = Counter()
    sa.event.listen(store.engine, "before_cursor_execute", lambda *a: counts.update(["statements"]))
    sa.event.listen(store.engine, "commit", lambda *a: counts.update(["commits"]))
    sa.event.listen(store.engine.pool, "checkout", lambda *a: counts.update(["checkouts"]))
    save = getattr(store, "save_and_release", store.save)  # as the Runner does

    async def conversation(key: str) -> None:
        for _ in range(turns):
            if not await store.claim(key):
                raise SystemExit(f"conversation {key!r}: its claim was refused")
            loaded = await store.load(key)
            await save(key, Conversation(history(1 + (len(loaded.history.messages) if loaded else 0)), None))
            await store.release(key)

    try:
        await store.check()
        await asyncio.gather(*(conversation(f"warm-{n}") for n in range(5)))  # connections, caches
        counts.clear()
        served = server_cpu() if url.startswith("postgresql") else None
        cpu, wall = time.process_time(), time.perf_counter()
        await asyncio.gather(*(conversation(f"c{n}") for n in range(users)))
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        served = None if served is None else server_cpu() - served
    finally:
        store.close()
    n = users * turns
    return {
        "turns": n,
        "per_turn": {k: round(v / n, 3) for k, v in sorted(counts.items())},
        "cpu_ms_per_turn": round(cpu * 1000 / n, 3),
        "server_cpu_ms_per_turn": None if served is None else round(served * 1000 / n, 3),
        "wall_s": round(wall, 2),
        "load_after": [round(x, 2) for x in os.getloadavg()],
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--store", choices=["sqlite", "postgres"], default="sqlite")
    p.add_argument("--users", type=int, default=50, help="conversations playing their turns at once")
    p.add_argument("--turns", type=int, default=20, help="turns of each conversation")
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-web-store-") as folder:
        postgres = None
        url = f"sqlite:///{Path(folder) / 'conversations.db'}"
        if args.store == "postgres":
            sys.path.insert(0, str(ROOT / "tests"))
            import postgres_server

            postgres, reason = postgres_server.start()
            if postgres is None:
                raise SystemExit(f"postgres: {reason}")
            url = postgres.database("bench_web_store")
        try:
            result = asyncio.run(measure(url, args.users, args.turns))
        finally:
            if postgres is not None:
                postgres.stop()
    print(json.dumps({"store": args.store, "users": args.users, **result}, indent=1))


if __name__ == "__main__":
    main()
