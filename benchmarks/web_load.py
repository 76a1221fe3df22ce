"""``make bench-web``: the web app under load, measured from outside with Locust.

    python -m benchmarks.web_load                      # levels 200,500,1000, 30 s each, every target
    python -m benchmarks.web_load --quick              # one small level, a few seconds: checks it runs
    python -m benchmarks.web_load --levels 200,500 --duration 30 --stores memory,sqlite,postgres

A loopback model (``benchmarks.web_model``: 20 tokens x 50 ms a request, a tool call then the
answer) serves every target. A *target* is one or two uvicorn processes
(``benchmarks.web_server``) of ``dspy_imp.web.app`` on the memory store, a SQLite
``DatabaseStore`` or a Postgres one (a throwaway server from Debian's binaries,
``tests/postgres_server.py``), or pydantic-ai's AG-UI app, the peer, on the same model. At each
*level* (concurrent conversations) Locust (``benchmarks.web_locust``, headless, its own process)
runs that many users, each one conversation of 3 turns after another, for a ramp of a few
seconds then ``--duration`` seconds. Measured over the time after the ramp: turns/s, time to
the first event and to the end (p50/p95/p99), errors by kind, the instances' RSS growth per
conversation and CPU per turn, the loop's lag inside each instance, the most model requests in
flight at once, and the machine's load average (the machine may be shared: the load says how
busy it was). Results go to ``benchmarks/web_results.json`` and the "Web under load" section of
``docs/performance.md`` (``benchmarks.report_web``); ``--quick`` writes neither unless asked.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import report_web, web_server
from .web_counts import percentile
from .web_model import ModelServer

ROOT = Path(__file__).resolve().parent.parent
STORES = ("memory", "sqlite", "postgres")
DEFAULT_LEVELS = (200, 500, 1000)


@dataclass
class Target:
    name: str
    kind: str  # "dspy-imp" or "pydantic-ai"
    store: str  # "memory", "sqlite", "postgres" ("-" for the peer)
    instances: int
    protocol: str
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    hosts: list[str] = field(default_factory=list)
    logs: list[Any] = field(default_factory=list)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def get_json(url: str, method: str = "GET", timeout: float = 30) -> Any:
    request = urllib.request.Request(url, data=b"{}" if method == "POST" else None, method=method)
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.loads(response.read())


def env() -> dict[str, str]:
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path}


def start(
    target: Target,
    model: str,
    store_url: str,
    max_turns: int | None,
    logs: Path,
    presence: bool = False,
    options: tuple[str, ...] = (),
) -> None:
    """The target's processes, each answering ``/bench/stats`` (bounded wait: 180 s); ``options``:
    more of ``benchmarks.web_server``'s."""
    for i in range(target.instances):
        port = free_port()
        command = [
            sys.executable,
            "-m",
            "benchmarks.web_server",
            "--kind",
            target.kind,
            "--store",
            store_url,
            "--port",
            str(port),
            "--model",
            model,
        ]
        if max_turns is not None and target.kind == "dspy-imp":
            command += ["--max-turns", str(max_turns)]
        if presence:
            command.append("--presence")
        command += options
        log = (logs / f"{target.name.replace(' ', '_')}-{i}.log").open("wb")
        target.logs.append(log)
        target.processes.append(subprocess.Popen(command, env=env(), stdout=log, stderr=subprocess.STDOUT, cwd=ROOT))
        target.hosts.append(f"http://127.0.0.1:{port}")
    end = time.monotonic() + 180
    for process, host in zip(target.processes, target.hosts, strict=True):
        while True:
            try:
                get_json(f"{host}/bench/stats", timeout=5)
                break
            except (OSError, ValueError):
                if process.poll() is not None or time.monotonic() > end:
                    stop(target)
                    raise RuntimeError(f"{target.name}: an instance did not start (see {logs})") from None
                time.sleep(0.2)


def stop(target: Target) -> None:
    for process in target.processes:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    for process in target.processes:
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)
    for log in target.logs:
        log.close()
    target.processes.clear()
    target.hosts.clear()
    target.logs.clear()


def run_level(
    target: Target, model: ModelServer, level: int, duration: float, ramp: float, logs: Path, stop_after: int = 0
) -> dict[str, Any]:
    """One Locust run of ``level`` users against the target; its measures. ``stop_after``: end the
    run once that many turns have ended (``duration`` is then only a bound)."""
    before = [get_json(f"{h}/bench/stats") for h in target.hosts]
    model_before = model.stats()
    out = logs / f"locust-{target.name.replace(' ', '_')}-{level}.json"
    locust_env = {
        **env(),
        "BENCH_HOSTS": ",".join(target.hosts),
        "BENCH_PROTOCOL": target.protocol,
        "BENCH_MODEL": model.root,
        "BENCH_OUT": str(out),
        "BENCH_TURNS": "3",
        "BENCH_STOP_AFTER": str(stop_after),
    }
    rate = max(1.0, level / ramp)
    command = [
        sys.executable,
        "-m",
        "locust",
        "-f",
        str(ROOT / "benchmarks" / "web_locust.py"),
        "--headless",
        "-u",
        str(level),
        "-r",
        f"{rate:g}",
        "-t",
        f"{int(ramp + duration)}s",
        "--stop-timeout",
        "0",
        "--only-summary",
        "--loglevel",
        "WARNING",
        "--exit-code-on-error",
        "0",
    ]
    load_before = os.getloadavg()
    log_path = logs / f"locust-{target.name.replace(' ', '_')}-{level}.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(command, env=locust_env, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
        _, status, usage = os.wait4(process.pid, 0)
        process.returncode = os.waitstatus_to_exitcode(status)
    load_after = os.getloadavg()
    if not out.exists():
        raise RuntimeError(f"{target.name} at {level}: Locust wrote no results (see {log_path})")
    raw = json.loads(out.read_text())
    locust_log = log_path.read_text(errors="replace")
    return measures(raw, before, model_before, level) | {
        "load_before": [round(x, 2) for x in load_before],
        "load_after": [round(x, 2) for x in load_after],
        "locust_cpu_s": round(usage.ru_utime + usage.ru_stime, 2),
        "locust_cpu_warning": "CPU usage above" in locust_log,
    }


def _per_turn(cpu: float, turns: int, model: dict[str, Any], before: dict[str, Any]) -> float | None:
    """The servers' CPU ms per turn over the level: per two model requests sent in it (a turn is two,
    and a turn still running at the end has done its share), else per ended turn."""
    worked = (model.get("total", 0) - before.get("total", 0)) / 2 if "total" in model else turns
    return round(cpu * 1000 / worked, 1) if worked else None


def _own(lag: list[dict[str, Any]]) -> dict[str, float | None] | None:
    """The worst instance's lag less the time its loop waited for a core (``None``: not told)."""
    own = [x["own"] for x in lag if x.get("own")]
    if not own:
        return None
    return {q: round(max(o[q] for o in own), 1) for q in ("p50", "p99", "max")}


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _ms(value: float | None) -> float | None:
    return None if value is None else round(value * 1000, 1)


def measures(
    raw: dict[str, Any], before: list[dict[str, Any]], model_before: dict[str, Any], level: int
) -> dict[str, Any]:
    """The level's numbers from Locust's results file and the instances' stats before it."""
    spawned = raw["spawned_at"] or raw["started_at"]
    window = max(1e-9, raw["stopped_at"] - spawned)
    turns = raw["turns"]
    steady = [t for t in turns if t[1] + t[3] >= spawned]
    firsts = [t[2] for t in steady if t[2] is not None]
    ends = [t[3] for t in steady]
    by_protocol: dict[str, int] = {}
    for t in steady:
        by_protocol[t[0]] = by_protocol.get(t[0], 0) + 1
    instances = raw["instances"]
    stats = [i["stats"] or {} for i in instances]
    lag = [s.get("lag_ms") or {} for s in stats]

    def worst(key: str) -> float | None:
        values = [x[key] for x in lag if x.get(key) is not None]
        return round(max(values), 1) if values else None

    elapsed = max(1e-9, raw["stopped_at"] - raw["started_at"])
    threads = [
        (s.get("loop_thread"), b.get("loop_thread")) for s, b in zip(stats, before, strict=True) if s.get("loop_thread")
    ]
    waited = [(s["runqueue_wait_s"] - b["runqueue_wait_s"]) / elapsed for s, b in threads if b]
    busy = [(s["cpu_s"] - b["cpu_s"]) / elapsed for s, b in threads if b]
    pauses = [(s.get("gc") or {}).get("pauses_ms") for s in stats]
    full = [p[2] for p in pauses if p]
    rss_delta = sum(s.get("rss", 0) - b["rss"] for s, b in zip(stats, before, strict=True))
    cpu = sum(s.get("cpu_s", 0) - b["cpu_s"] for s, b in zip(stats, before, strict=True))
    model = raw.get("model") or {}
    errors = dict(sorted(raw["errors"].items(), key=lambda kv: -kv[1]))
    return {
        "level": level,
        "window_s": round(window, 1),
        "turns": len(steady),
        "turns_all": len(turns),
        "turns_by_protocol": by_protocol,
        "turns_per_s": round(len(steady) / window, 1),
        "first_event_ms": {f"p{q}": _ms(percentile(firsts, q / 100)) for q in (50, 95, 99)},
        "end_ms": {f"p{q}": _ms(percentile(ends, q / 100)) for q in (50, 95, 99)} | {"mean": _ms(_mean(ends))},
        "errors": errors,
        "errors_total": sum(errors.values()),
        "refused_429": sum(n for k, n in errors.items() if k.startswith("429")),
        "refused_429_retry_after": sum(n for k, n in errors.items() if k.startswith("429 Retry-After")),
        "refused_409": sum(n for k, n in errors.items() if k.startswith("409")),
        "run_errors": sum(n for k, n in errors.items() if k.startswith(("RUN_ERROR", "error part"))),
        "conversations_started": raw["conversations"],
        "rss_mb": round(sum(s.get("rss", 0) for s in stats) / 2**20, 1),
        "rss_delta_mb": round(rss_delta / 2**20, 1),
        "rss_kb_per_conversation": round(rss_delta / 1024 / level, 1),
        "server_cpu_ms_per_turn": _per_turn(cpu, len(turns), model, model_before),
        "cpu_basis": "model" if "total" in model else "ended turns",
        "server_cpu_share": round(cpu / elapsed, 2),
        "loop_cpu_share": round(max(busy), 2) if busy else None,
        "loop_runqueue_wait_share": round(max(waited), 2) if waited else None,
        "gc_full_collections": max(p["count"] for p in full) if full else None,
        "gc_full_pause_max_ms": max((p["max"] or 0) for p in full) if full else None,
        "gc_pauses_over_50ms": max(sum(g["over_50"] for g in p) for p in pauses if p) if any(pauses) else None,
        "lag_ms": {"p50": worst("p50"), "p95": worst("p95"), "p99": worst("p99"), "max": worst("max")},
        "own_lag_ms": _own(lag),
        "model_max_in_flight": model.get("max_in_flight"),
        "model_requests": model.get("requests"),
        "model_cpu_s": round(model.get("cpu_s", 0) - model_before.get("cpu_s", 0), 2),
        "healthz": [i["healthz"] for i in instances],
        "readyz": [i["readyz"] for i in instances],
        "readyz_body": [i["readyz_body"] for i in instances],
    }


def targets(stores: list[str], counts: list[int], peer: bool, protocol: str) -> list[Target]:
    out = [Target(f"dspy-imp {store} x{n}", "dspy-imp", store, n, protocol) for store in stores for n in counts]
    if peer:
        out.append(Target("pydantic-ai x1", "pydantic-ai", "-", 1, "agui"))
    return out


def run(args: argparse.Namespace) -> dict[str, Any]:
    started = time.time()
    results: dict[str, Any] = {
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
        "settings": {
            "levels": args.levels,
            "duration_s": args.duration,
            "ramp_s": args.ramp,
            "turns": 3,
            "tokens": 20,
            "token_delay_ms": 50,
            "protocol": args.protocol,
            "max_turns": args.max_turns,
            "http_parser": _http_parser(),
            "event_loop": web_server.loop_name(),
        },
        "load_at_start": [round(x, 2) for x in os.getloadavg()],
        "targets": [],
        "skipped": [],
    }
    with ExitStack() as stack:
        logs = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-web-")))
        if args.keep_logs:
            logs = Path(tempfile.mkdtemp(prefix="bench-web-logs-"))
            print(f"logs in {logs}", flush=True)
        model = stack.enter_context(ModelServer())
        postgres = None
        if "postgres" in args.stores:
            sys.path.insert(0, str(ROOT / "tests"))
            import postgres_server

            postgres, reason = postgres_server.start()
            if postgres is None:
                results["skipped"].append(f"postgres: {reason}")
            else:
                stack.callback(postgres.stop)
        for number, target in enumerate(targets(args.stores, args.instances, args.peer, args.protocol)):
            if target.store == "postgres" and postgres is None:
                continue
            if target.store == "sqlite":
                store_url = f"sqlite:///{logs / f'conversations-{number}.db'}"
            elif target.store == "postgres":
                assert postgres is not None
                store_url = postgres.database(f"bench_web_{number}")
            else:
                store_url = "memory"
            print(f"{target.name}: starting", flush=True)
            try:
                start(target, model.base_url, store_url, args.max_turns, logs)
            except RuntimeError as error:
                results["skipped"].append(str(error))
                print(f"  {error}", flush=True)
                continue
            levels = []
            try:
                for level in args.levels:
                    measured = run_level(target, model, level, args.duration, args.ramp, logs)
                    levels.append(measured)
                    print("  " + report_web.line(measured), flush=True)
            finally:
                stop(target)
            results["targets"].append(
                {
                    "name": target.name,
                    "kind": target.kind,
                    "store": target.store,
                    "instances": target.instances,
                    "protocol": target.protocol,
                    "levels": levels,
                }
            )
    results["load_at_end"] = [round(x, 2) for x in os.getloadavg()]
    results["elapsed_s"] = round(time.time() - started, 1)
    results["goals"] = report_web.goals(results)
    return results


def _http_parser() -> str:
    """What uvicorn parses HTTP with in the instances (its ``http="auto"``): httptools when installed."""
    import importlib.util

    return "httptools" if importlib.util.find_spec("httptools") is not None else "h11"


def _ints(text: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated whole numbers, got {text!r}") from None
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"expected comma-separated positive numbers, got {text!r}")
    return values


def _stores(text: str) -> list[str]:
    values = [x.strip() for x in text.split(",") if x.strip()]
    unknown = [v for v in values if v not in STORES]
    if not values or unknown:
        raise argparse.ArgumentTypeError(f"--stores: each one of {', '.join(STORES)}, got {text!r}")
    return values


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="one level of 20, 8 s, the memory store and the peer")
    p.add_argument("--levels", type=_ints, help="concurrent conversations, comma-separated (default 200,500,1000)")
    p.add_argument("--duration", type=float, help="seconds measured at each level, after the ramp (default 30)")
    p.add_argument("--ramp", type=float, help="seconds to start all users (default 5)")
    p.add_argument("--stores", type=_stores, help="comma-separated: memory, sqlite, postgres (default all)")
    p.add_argument("--instances", type=_ints, help="instance counts, comma-separated (default 1,2)")
    p.add_argument("--no-peer", dest="peer", action="store_false", help="leave pydantic-ai's AG-UI app out")
    p.add_argument(
        "--protocol",
        choices=["agui", "aisdk", "mixed"],
        default="mixed",
        help="what our targets' users speak (default mixed: half AG-UI, half the AI SDK)",
    )
    p.add_argument("--max-turns", type=int, help="passed to the app as max_turns (when it has that option)")
    p.add_argument("--out", type=Path, help="results JSON (default benchmarks/web_results.json unless --quick)")
    p.add_argument("--docs", type=Path, help="the page to update (default docs/performance.md unless --quick)")
    p.add_argument("--render", type=Path, metavar="JSON", help="only rewrite the docs section from saved results")
    p.add_argument("--keep-logs", action="store_true", help="keep the instances' and Locust's logs (path printed)")
    return p


def main() -> None:
    args = parser().parse_args()
    quick = args.quick
    args.levels = args.levels or ([20] if quick else list(DEFAULT_LEVELS))
    args.duration = args.duration if args.duration is not None else (8.0 if quick else 30.0)
    args.ramp = args.ramp if args.ramp is not None else (1.0 if quick else 5.0)
    args.stores = args.stores or (["memory"] if quick else list(STORES))
    args.instances = args.instances or ([1] if quick else [1, 2])
    if args.duration <= 0 or args.ramp <= 0:
        parser().error("--duration and --ramp must be positive seconds")
    results = json.loads(args.render.read_text()) if args.render else run(args)
    results["goals"] = report_web.goals(results)  # marked again on a --render: the rules may be newer
    print()
    print(report_web.tables(results))
    out = args.out or (None if quick or args.render else ROOT / "benchmarks" / "web_results.json")
    docs = args.docs or (None if quick else ROOT / "docs" / "performance.md")
    if out is not None:
        out.write_text(json.dumps(results, indent=2) + "\n")
        print(f"wrote {out}")
    if docs is not None:
        report_web.write_section(docs, results)
        print(f"wrote the web section of {docs}")


if __name__ == "__main__":
    main()
