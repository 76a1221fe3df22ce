"""CPU seconds per ended turn of each process of the web load benchmark, at a small scale.

    python -m benchmarks.web_cpu --store memory --users 100 --duration 40
    python -m benchmarks.web_cpu --store sqlite --users 100 --duration 40 --profile /tmp/prof
    python -m benchmarks.web_cpu --peer --users 100

The same pieces as ``make bench-web`` (``benchmarks.web_load``: the loopback model, one instance
of ``benchmarks.web_server``, Locust running ``benchmarks.web_locust``), one level, one target.
What it prints is CPU, not wall time: on a machine shared with other work turns/s move with the
neighbours, while the CPU a process spends on one turn barely does. For each process (the app,
the model, Locust) its CPU seconds over the steady window (from all users spawned to the stop,
read by Locust at both ends) per turn ended in that window, and its share of one core; the sum
per turn says how many turns/s the machine's cores could carry at best (``cores / sum``).
``--profile DIR``: py-spy (installed by hand, a dev tool) samples the app over the window too
and writes its collapsed stacks there, with the functions most often on the CPU printed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

from . import web_load
from .web_model import ModelServer


def per_turn(raw: dict[str, Any]) -> dict[str, Any]:
    """Each process's CPU ms per turn ended in the steady window, and its share of a core."""
    if raw.get("cpu_at_spawned") is None:
        raise SystemExit("the run stopped before all its users were spawned: no steady window to measure")
    spawned, stopped = raw["spawned_at"], raw["stopped_at"]
    window = max(1e-9, stopped - spawned)
    ended = [t for t in raw["turns"] if t[1] + t[3] >= spawned]
    at_start = raw.get("instances_at_spawned") or []
    app = sum(
        (i["stats"] or {}).get("cpu_s", 0) - (b or {}).get("cpu_s", 0)
        for i, b in zip(raw["instances"], at_start, strict=False)
    )
    model = (raw.get("model") or {}).get("cpu_s", 0) - (raw.get("model_at_spawned") or {}).get("cpu_s", 0)
    locust = raw["cpu_at_stopped"] - raw["cpu_at_spawned"]
    gc_now = [(i["stats"] or {}).get("gc") or {} for i in raw["instances"]]
    gc_then = [(b or {}).get("gc") or {} for b in at_start]
    collected = [
        sum(
            n.get("seconds", [0, 0, 0])[g] - t.get("seconds", [0, 0, 0])[g]
            for n, t in zip(gc_now, gc_then, strict=False)
        )
        for g in range(3)
    ]
    cpu = {"app": app, "model": model, "locust": locust}
    n = max(1, len(ended))
    ms = {k: round(v * 1000 / n, 2) for k, v in cpu.items()}
    total = sum(ms.values())
    return {
        "window_s": round(window, 1),
        "turns": len(ended),
        "turns_per_s": round(len(ended) / window, 1),
        "cpu_ms_per_turn": ms | {"total": round(total, 2)},
        "core_share": {k: round(v / window, 2) for k, v in cpu.items()},
        "app_gc_ms_per_turn": [round(s * 1000 / n, 2) for s in collected],
        "turns_per_s_if_cpu_bound": round((os.cpu_count() or 1) * 1000 / total, 1) if total else None,
    }


def hottest(collapsed: Path, top: int = 40) -> list[tuple[str, float]]:
    """The functions most often on the stack (inclusive) and at its top (self), in % of samples."""
    inclusive: Counter[str] = Counter()
    own: Counter[str] = Counter()
    total = 0
    for line in collapsed.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        n = int(count)
        total += n
        frames = [f for f in stack.split(";") if f]
        for frame in set(frames):
            inclusive[frame] += n
        if frames:
            own[frames[-1]] += n
    total = max(1, total)
    rows = [(f"self  {f}", round(100 * n / total, 1)) for f, n in own.most_common(top)]
    rows += [(f"incl  {f}", round(100 * n / total, 1)) for f, n in inclusive.most_common(top)]
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--store", choices=web_load.STORES, default="memory")
    p.add_argument("--peer", action="store_true", help="pydantic-ai's AG-UI app instead of ours")
    p.add_argument("--users", type=int, default=100, help="concurrent conversations")
    p.add_argument("--duration", type=float, default=40.0, help="seconds after the ramp")
    p.add_argument("--ramp", type=float, default=5.0)
    p.add_argument("--protocol", choices=["agui", "aisdk", "mixed"], default="mixed")
    p.add_argument("--profile", type=Path, help="a folder for py-spy's collapsed stacks of the app")
    args = p.parse_args()
    if args.peer:
        target = web_load.Target("pydantic-ai x1", "pydantic-ai", "-", 1, "agui")
    else:
        target = web_load.Target(f"dspy-imp {args.store} x1", "dspy-imp", args.store, 1, args.protocol)
    with tempfile.TemporaryDirectory(prefix="bench-web-cpu-") as folder, ModelServer() as model:
        logs = Path(folder)
        postgres = None
        store_url = "memory"
        if target.store == "sqlite":
            store_url = f"sqlite:///{logs / 'conversations.db'}"
        elif target.store == "postgres":
            import sys

            sys.path.insert(0, str(web_load.ROOT / "tests"))
            import postgres_server

            postgres, reason = postgres_server.start()
            if postgres is None:
                raise SystemExit(f"postgres: {reason}")
            store_url = postgres.database("bench_web_cpu")
        try:
            web_load.start(target, model.base_url, store_url, None, logs)
            spy = None
            if args.profile is not None:
                args.profile.mkdir(parents=True, exist_ok=True)
                out = args.profile / f"{target.name.replace(' ', '_')}.txt"
                py_spy = shutil.which("py-spy") or str(Path(os.sys.executable).parent / "py-spy")
                spy = subprocess.Popen(
                    [py_spy, "record", "--pid", str(target.processes[0].pid), "--format", "raw", "--rate", "200",
                     "--duration", str(int(args.ramp + args.duration)), "--output", str(out), "--nonblocking", "--gil"],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                )  # fmt: skip
            measured = web_load.run_level(target, model, args.users, args.duration, args.ramp, logs)
            raw = json.loads((logs / f"locust-{target.name.replace(' ', '_')}-{args.users}.json").read_text())
            if spy is not None:
                spy.wait(60)
        finally:
            web_load.stop(target)
            if postgres is not None:
                postgres.stop()
    result = {
        "target": target.name,
        "users": args.users,
        **per_turn(raw),
        "errors": measured["errors"],
        "lag_ms": measured["lag_ms"],
        "end_ms": measured["end_ms"],
        "load_after": measured["load_after"],
    }
    print(json.dumps(result, indent=1))
    if spy is not None:
        for name, share in hottest(out):
            print(f"{share:5.1f}%  {name}")


if __name__ == "__main__":
    main()
