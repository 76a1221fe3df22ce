"""``make bench``: every benchmark, one table each; results to JSON and ``docs/performance.md``.

Run: ``.venv/bin/python -m benchmarks.run`` (``--quick`` for a smoke run with tiny sizes that
writes nothing unless ``--out`` is given). Nothing here asserts on time: the targets are
computed and reported.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from . import compare, context_prefix, overhead, parallel, report
from .loops import LOOPS
from .profile import shares
from .server import SCENARIOS, BenchServer

ROOT = Path(__file__).resolve().parent.parent
SIZES = {
    "full": {"steps": [1, 10, 100], "ours": [1, 10, 100, 300, 1000], "theirs": [1, 10, 100], "calls": [1, 4, 8],
             "profile": 30, "conversation": 100},
    "quick": {"steps": [1, 2], "ours": [1, 10], "theirs": [1, 10], "calls": [2], "profile": 2, "conversation": 6},
}


def _quiet() -> None:
    """The loops under test log their own failures (scenarios provoke them on purpose)."""
    for name in ("dspy", "LiteLLM", "litellm", "openai", "httpx", "pydantic_ai", "openai.agents"):
        logging.getLogger(name).setLevel(logging.CRITICAL)


def run(quick: bool) -> dict[str, Any]:
    sizes = SIZES["quick" if quick else "full"]
    started = time.perf_counter()
    results: dict[str, Any] = {
        "machine": {"python": platform.python_version(), "platform": platform.platform(), "cpus": os.cpu_count()},
        "sizes": sizes,
    }
    print("\n[1/6] per-request cost against recorded steps (in-process, scripted engine)", flush=True)
    results["curve"] = overhead.curve(sizes["ours"], sizes["theirs"])
    with BenchServer() as server:
        print("\n[2/6] same model, four loops (local OpenAI-compatible server)", flush=True)
        results["loops"] = compare.compare(server, sizes["steps"], quick)
        print("\n[3/6] requests per answered turn", flush=True)
        results["scenarios"] = compare.scenarios(server, SCENARIOS[1:])
        print("\n[4/6] where each loop spends a turn (cProfile shares)", flush=True)
        results["profile"] = _profiles(server, sizes["profile"])
    print("\n[5/6] parallel tools", flush=True)
    results["parallel"] = parallel.parallel(sizes["calls"])
    print("\n[6/6] the prefix in a long conversation under a context policy", flush=True)
    results["context"] = context_prefix.run(sizes["conversation"])
    results["targets"] = report.targets(results)
    results["elapsed_s"] = time.perf_counter() - started
    return results


def _profiles(server: BenchServer, steps: int) -> dict[str, Any]:
    out = {}
    for name, make in LOOPS.items():
        turn = make(server.base_url, "text", steps + 5)
        server.reset("steps", steps)

        def one(turn: Callable[[], bool] = turn) -> None:
            server.reset("steps", steps)
            turn()

        out[name] = {"steps": steps, "shares": shares(one)}
        print(f"  {name:<20} " + ", ".join(f"{p} {s:.0%}" for p, s in out[name]["shares"]), flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="tiny sizes: checks the scripts run")
    parser.add_argument("--out", type=Path, help="results JSON (default: benchmarks/results.json unless --quick)")
    parser.add_argument("--docs", type=Path, help="markdown page (default: docs/performance.md unless --quick)")
    parser.add_argument("--render", type=Path, metavar="JSON", help="rebuild the page from saved results")
    args = parser.parse_args()
    _quiet()
    results = json.loads(args.render.read_text()) if args.render else run(args.quick)
    print()
    print(report.tables(results))
    out = args.out or (None if args.quick or args.render else ROOT / "benchmarks" / "results.json")
    docs = args.docs or (None if args.quick else ROOT / "docs" / "performance.md")
    if out is not None:
        out.write_text(json.dumps(results, indent=2) + "\n")
        print(f"wrote {out}")
    if docs is not None:
        docs.write_text(report.page(results))
        chart = docs.with_suffix(".svg")
        chart.write_text(report.chart(results["curve"]))
        print(f"wrote {docs} and {chart}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
