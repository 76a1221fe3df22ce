"""What durability costs per step: the plain loop against a DBOS-durable turn on SQLite and Postgres.

Every agent runs the same scripted turn: N tool steps, then a submit (2N + 1 effects: N + 1 model
requests and N tool calls). The scripted engine answers instantly and the tool does nothing, so
the difference is the durable driver's own cost: one checkpoint write per effect (plus the
workflow's start and end). Prints the median seconds per turn and the added milliseconds per
effect. Postgres is a throwaway server started here (``tests/postgres_server.py``, needs the
Debian ``postgresql`` package), or ``DBOS_SYSTEM_DATABASE_URL`` when set. Run::

    .venv/bin/python benchmarks/durable_overhead.py --steps 5 20 --repeats 5
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import dspy
from dbos import DBOS

import dspy_imp
from dspy_imp import durable
from dspy_imp.testing import ScriptedLM, call, reply

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
import postgres_server


def look(where: str) -> str:
    """Look somewhere."""
    return f"nothing at {where}"


def script(steps: int) -> ScriptedLM:
    def answer(request: Any) -> Any:
        done = request.roles.count("tool")
        if done >= steps:
            return reply(calls=[call("submit", {"answer": "found"}, id=f"s{done}")])
        return reply(calls=[call("look", {"where": f"place {done}"}, id=f"c{done}")])

    return ScriptedLM(answer)


def program() -> dspy_imp.ReActV2:
    return dspy_imp.ReActV2("question -> answer", tools=[look], finish="submit", max_iters=1000)


def timed(turn: Callable[..., Any], steps: int, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        with dspy.context(lm=script(steps)):
            start = time.perf_counter()
            pred = turn(question="where is it?")
            times.append(time.perf_counter() - start)
        assert pred.answer == "found", pred
    return statistics.median(times)


def durable_times(url: str, steps: list[int], repeats: int) -> dict[int, float]:
    DBOS(config=durable.config("dspy-imp-bench", system_database_url=url, log_level="WARNING"))
    agent = durable.DurableAgent(program(), name="bench")
    DBOS.launch()
    try:
        timed(agent, 2, 1)  # warm up
        return {n: timed(agent, n, repeats) for n in steps}
    finally:
        DBOS.destroy(destroy_registry=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, nargs="+", default=[5, 20])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    plain = program()
    timed(plain, 2, 1)
    results = {"plain loop": {n: timed(plain, n, args.repeats) for n in args.steps}}
    with tempfile.TemporaryDirectory() as folder:
        results["durable, SQLite"] = durable_times(f"sqlite:///{folder}/bench.sqlite", args.steps, args.repeats)
    server = None
    url = os.environ.get("DBOS_SYSTEM_DATABASE_URL")
    if url is None:
        server, reason = postgres_server.start()
        url = server.database("bench") if server is not None else None
        if url is None:
            print(f"Postgres: skipped ({reason})")
    if url is not None:
        try:
            results["durable, Postgres"] = durable_times(url, args.steps, args.repeats)
        finally:
            if server is not None:
                server.stop()

    print(f"{'engine':<20} {'tool steps':>10} {'effects':>8} {'s/turn':>9} {'added ms/effect':>16}")
    for engine, by_steps in results.items():
        for n, seconds in by_steps.items():
            effects = 2 * n + 1
            added = (seconds - results["plain loop"][n]) / effects * 1000
            print(f"{engine:<20} {n:>10} {effects:>8} {seconds:>9.4f} {added:>16.2f}")


if __name__ == "__main__":
    main()
