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

from . import (
    compare,
    context_prefix,
    costs,
    e2e,
    engines,
    overhead,
    parallel,
    report,
    report_cost,
    report_e2e,
    report_summary,
)
from .loops import COST_LOOP_MAKERS, E2E_LOOPS, LOOPS
from .profile import shares
from .server import SCENARIOS, BenchServer

ROOT = Path(__file__).resolve().parent.parent
RUNS_KEPT = 10  # the headline figures of the last runs, kept in results.json for their spread
SIZES: dict[str, dict[str, Any]] = {
    "full": {
        "steps": [1, 10, 100],
        "ours": [1, 10, 100, 300, 1000],
        "theirs": [1, 10, 100],
        "calls": [1, 4, 8],
        "profile": 30,
        "conversation": 100,
        "e2e": [10, 50, 100],
        "e2e_long": 1000,
        "rounds": {"10": 7, "50": 5, "100": 5, "1000": 3},
        # What a turn costs: long turns on every model; 1,000 steps on Claude Sonnet 4.5 only (a
        # peer's 1,000-step turn takes minutes, and the price list shares one history).
        "cost_long": [100, 1000],
        "cost_long_only": {"1000": [costs.SONNET]},
        "engine_steps": 1000,
        "engine_rounds": 3,
    },
    "quick": {
        "steps": [1, 2],
        "ours": [1, 10],
        "theirs": [1, 10],
        "calls": [2],
        "profile": 2,
        "conversation": 6,
        "e2e": [2, 3],
        "e2e_long": 5,
        "rounds": {"2": 2, "3": 2, "5": 2},
        "cost_long": [3],
        "cost_long_only": {},
        "engine_steps": 5,
        "engine_rounds": 2,
    },
}


def _quiet() -> None:
    """The loops under test log their own failures (scenarios provoke them on purpose)."""
    for name in ("dspy", "LiteLLM", "litellm", "openai", "httpx", "pydantic_ai", "openai.agents"):
        logging.getLogger(name).setLevel(logging.CRITICAL)


COST_PARTS = ("cost", "engines", "targets_cost")


def run(quick: bool, long_loops: list[str] | None = None, kept: dict[str, Any] | None = None) -> dict[str, Any]:
    """Every part; ``kept``: saved results whose cost and engine parts are reused, not rerun."""
    sizes = SIZES["quick" if quick else "full"]
    started = time.perf_counter()
    results: dict[str, Any] = {
        "machine": {
            "python": platform.python_version(),
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "load_before": _load(),
        },
        "sizes": sizes,
    }
    with BenchServer() as server:
        print("\n[1/7] end to end: every loop over HTTP, interleaved rounds", flush=True)
        counts = {int(k): v for k, v in sizes["rounds"].items()}
        results["e2e"] = e2e.measure(server, E2E_LOOPS, sizes["e2e"], sizes["e2e_long"], counts)
    print("\n[2/7] where a request's time goes (in-process, scripted engine)", flush=True)
    results["curve"] = overhead.curve(sizes["ours"], sizes["theirs"])
    with BenchServer() as server:
        print("\n[3/7] same model, five loops: what each sends (local OpenAI-compatible server)", flush=True)
        results["loops"] = compare.compare(server, sizes["steps"])
        print("\n[4/7] requests and tokens per answered turn", flush=True)
        results["scenarios"] = compare.scenarios(server, SCENARIOS[1:])
        print("\n[5/7] where each loop spends a turn (cProfile shares)", flush=True)
        results["profile"] = _profiles(server, sizes["profile"])
    print("\n[6/7] parallel tools", flush=True)
    results["parallel"] = parallel.parallel(sizes["calls"])
    results["ledger"] = compare.ledger_summary(results["scenarios"], results["loops"], report_e2e.SHARED)
    print("\n[7/7] the prefix in a long conversation under a context policy", flush=True)
    results["context"] = context_prefix.run(sizes["conversation"])
    results["machine"]["load_after"] = _load()  # the parts above; the cost part records its own
    if kept is not None:
        results.update({part: kept[part] for part in COST_PARTS if part in kept})
    else:
        results.update(run_cost(sizes, long_loops))
    results["targets"] = report.targets(results)
    results["targets_e2e"] = report_e2e.targets(results)
    results["elapsed_s"] = time.perf_counter() - started
    return results


def rerun_e2e(results: dict[str, Any], quick: bool = False) -> None:
    """The end-to-end part again, into saved results (the loop changed what it pays per turn, not
    what it sends); its own load and time are recorded beside it, and its targets marked again."""
    sizes = SIZES["quick" if quick else "full"]
    started, load_before = time.perf_counter(), _load()
    with BenchServer() as server:
        print("\n[1/1] end to end again: every loop over HTTP, interleaved rounds", flush=True)
        counts = {int(k): v for k, v in sizes["rounds"].items()}
        results["e2e"] = e2e.measure(server, E2E_LOOPS, sizes["e2e"], sizes["e2e_long"], counts)
    results["e2e"]["machine"] = {
        "load_before": load_before,
        "load_after": _load(),
        "elapsed_s": time.perf_counter() - started,
    }
    results["targets_e2e"] = report_e2e.targets(results)


def run_cost(
    sizes: dict[str, Any], long_loops: list[str] | None = None, kept_engines: dict[str, Any] | None = None
) -> dict[str, Any]:
    """What a turn costs (dollars, connections) and the engine choice at a long history.

    ``long_loops``: the loops that run the longest turn (all of them unless given).
    ``kept_engines``: the engine part's saved results, kept instead of measured again.
    """
    out: dict[str, Any] = {}
    started, load = time.perf_counter(), _load()
    with BenchServer() as server:
        print("\n[cost] dollars per answered turn, every loop on every model's prices", flush=True)
        only = {int(k): v for k, v in sizes["cost_long_only"].items()}
        longest = max(sizes["cost_long"])
        makers = COST_LOOP_MAKERS
        rows = costs.measure(server, makers, report_e2e.SHARED, sizes["cost_long"], only=only, long_loops=long_loops)
        out["cost"] = costs.summary(rows, report_e2e.SHARED, sizes["cost_long"])
        out["cost"]["rows"] = rows
        out["cost"]["longest"] = {"steps": longest, "models": only.get(longest), "loops": long_loops}
        if kept_engines is None:
            print("\n[engine] engine='lm15' against the default at a long history", flush=True)
            out["engines"] = engines.measure(server, sizes["engine_steps"], sizes["engine_rounds"])
        else:
            out["engines"] = kept_engines
    out["targets_cost"] = report_cost.targets(out["cost"])
    out["cost"]["machine"] = {"load_before": load, "load_after": _load(), "elapsed_s": time.perf_counter() - started}
    out["cost"]["machine"]["engines_kept"] = kept_engines is not None
    return out


def add_longest(results: dict[str, Any], names: list[str]) -> None:
    """Run the cost part's longest turn for more loops and add them to saved results.

    A peer's 1,000-step turn takes many minutes, so ``--cost-only`` may leave some out
    (``--long-loops``); this adds them afterwards, on the same models, and recomputes the summary.
    """
    cost = results["cost"]
    longest = max(cost["long"])
    models = cost.get("longest", {}).get("models") or [costs.SONNET, costs.HAIKU, costs.GPT]
    started, load = time.perf_counter(), _load()
    with BenchServer() as server:
        for model in models:
            for name in names:
                turn = COST_LOOP_MAKERS[name](server.base_url, "text", longest + 5, model=model)
                row = costs.run_one(server, turn, "steps", longest, {"answer": "found"})
                cost["rows"] = [
                    r for r in cost["rows"] if (r["loop"], r["model"], r["what"]) != (name, model, f"steps:{longest}")
                ]
                cost["rows"].append({"loop": name, "model": model, "what": f"steps:{longest}", **row})
                print(f"  {model:<18} {name:<14} N={longest:<5} answered={row['answered']}", flush=True)
    kept = {k: cost[k] for k in ("rows", "longest", "machine") if k in cost}
    results["cost"] = costs.summary(cost["rows"], cost["scenarios"], cost["long"]) | kept
    loops = results["cost"]["longest"].get("loops")
    if loops is not None:
        results["cost"]["longest"]["loops"] = [*loops, *(n for n in names if n not in loops)]
    added = {"loops": names, "elapsed_s": time.perf_counter() - started, "load_before": load, "load_after": _load()}
    results["cost"]["machine"]["added"] = added
    results["targets_cost"] = report_cost.targets(results["cost"])


def rerun_scenarios(results: dict[str, Any], names: list[str]) -> None:
    """Run the cost part's six scenarios again for some loops (every model) into saved results.

    The scenarios' dollars do not depend on the machine; a change to how a loop answers them
    (not to its long turns) is measured this way without the many minutes of the longest turns.
    """
    cost = results["cost"]
    started, load = time.perf_counter(), _load()
    with BenchServer() as server:
        print(f"\n[cost] the six scenarios again: {', '.join(names)}", flush=True)
        rows = costs.measure(server, COST_LOOP_MAKERS, cost["scenarios"], [], names=names)
    fresh = {(r["loop"], r["model"], r["what"]) for r in rows}
    cost["rows"] = [r for r in cost["rows"] if (r["loop"], r["model"], r["what"]) not in fresh] + rows
    kept = {k: cost[k] for k in ("rows", "longest", "machine") if k in cost}
    results["cost"] = costs.summary(cost["rows"], cost["scenarios"], cost["long"]) | kept
    rerun = {"loops": names, "load_before": load, "load_after": _load(), "elapsed_s": time.perf_counter() - started}
    results["cost"]["machine"]["rerun"] = rerun
    results["targets_cost"] = report_cost.targets(results["cost"])


def _load() -> list[float]:
    """The machine's 1, 5 and 15 minute load averages (the load the figures were measured under)."""
    return [round(x, 2) for x in os.getloadavg()]


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
    parser.add_argument(
        "--cost-only", type=Path, metavar="JSON", help="rerun only the cost and engine parts into saved results"
    )
    parser.add_argument(
        "--long-loops", help="comma-separated loops that run the cost part's longest turn (default: all)"
    )
    parser.add_argument(
        "--keep-engines", action="store_true", help="with --cost-only: keep the saved engine part, rerun the cost part"
    )
    parser.add_argument(
        "--keep-cost",
        type=Path,
        metavar="JSON",
        help="run every part but the cost and engine ones, kept from saved results",
    )
    parser.add_argument(
        "--rerun-scenarios",
        type=Path,
        metavar="JSON",
        help="run the cost part's six scenarios again for --long-loops' loops into saved results",
    )
    parser.add_argument(
        "--add-long", type=Path, metavar="JSON", help="run the longest cost turn for --long-loops into saved results"
    )
    parser.add_argument(
        "--rerun-e2e", type=Path, metavar="JSON", help="run the end-to-end part again into saved results"
    )
    args = parser.parse_args()
    _quiet()
    long_loops = args.long_loops.split(",") if args.long_loops else None
    if args.rerun_e2e:
        results = json.loads(args.rerun_e2e.read_text())
        rerun_e2e(results, args.quick)
        args.out = args.out or args.rerun_e2e
    elif args.rerun_scenarios:
        if not long_loops:
            parser.error("--rerun-scenarios needs --long-loops: the loops whose scenarios to run again")
        results = json.loads(args.rerun_scenarios.read_text())
        rerun_scenarios(results, long_loops)
        args.out = args.out or args.rerun_scenarios
    elif args.add_long:
        if not long_loops:
            parser.error("--add-long needs --long-loops: the loops whose longest turn to add")
        results = json.loads(args.add_long.read_text())
        add_longest(results, long_loops)
        args.out = args.out or args.add_long
    elif args.cost_only:
        results = json.loads(args.cost_only.read_text())
        kept = results.get("engines") if args.keep_engines else None
        results.update(run_cost(SIZES["quick" if args.quick else "full"], long_loops, kept))
        args.out = args.out or args.cost_only
    elif args.keep_cost:
        results = run(args.quick, long_loops, kept=json.loads(args.keep_cost.read_text()))
        args.out = args.out or args.keep_cost
    else:
        results = json.loads(args.render.read_text()) if args.render else run(args.quick, long_loops)
    print()
    print(report.tables(results))
    out = args.out or (None if args.quick or args.render else ROOT / "benchmarks" / "results.json")
    if out is not None and not (args.render or args.add_long or args.rerun_scenarios or args.rerun_e2e):  # not new
        previous = json.loads(out.read_text()) if out.exists() and not args.cost_only else results
        results["runs"] = [*previous.get("runs", []), report_summary.headline(results)][-RUNS_KEPT:]
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
