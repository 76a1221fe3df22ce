"""Hand-over under load: two instances on one Postgres, one stopped mid-load (``make bench-web``).

    python -m benchmarks.web_handover                     # SIGKILL, SIGTERM, SIGKILL with presence=True
    python -m benchmarks.web_handover --signals kill --conversations 50 --quick

For each signal, a fresh Postgres database and two ``dspy_imp.web.app`` instances
(``benchmarks.web_server``) on the loopback model of the load benchmark (``benchmarks.web_model``:
a turn is a tool call then the answer, about 2 s). Each conversation (AG-UI, one turn after
another, the history carried by the client) has a *home* instance, half on each. After a warm-up
the first instance gets the signal. A conversation whose home is gone (its connection refused or
cut, or a 503 from a draining instance) moves to the other instance and asks again every 100 ms
while it answers 409 (the lease the dead instance held), so the figure measured is when the other
instance first *accepts* the conversation, not when a client that sleeps for ``Retry-After`` would
come back; the largest ``Retry-After`` given is recorded beside it.

Measured per signal: for the moved conversations, the seconds from the signal to their first
accepted turn on the other instance (p50/max, and how many within 3 s); turns cut (started and
not ended with ``RUN_FINISHED``); and, once the stopped instance has exited, the lease rows it
left in ``dspy_imp_web_turns``. SIGKILL cuts the turns running on the instance (a non-durable
turn cannot outlive its process); SIGTERM drains (running turns end, leases released, new turns
refused with 503). Results go to ``benchmarks/web_handover.json`` and the "Hand-over under load"
section of ``docs/performance.md``; ``--quick`` writes neither unless asked.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
import tempfile
import time
import uuid
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import sqlalchemy as sa

from . import report_web
from .web_counts import percentile
from .web_load import ROOT, Target, start, stop
from .web_model import ModelServer

RESULTS = ROOT / "benchmarks" / "web_handover.json"
HEADING = "## Hand-over under load"
WITHIN = 3.0  # seconds: the hand-over the web app promises (a lease of 2.5 s, renewed every lease/3)
POLL = 0.1  # seconds between a moved conversation's asks while the other instance answers 409


@dataclass
class Conversation:
    key: str
    home: int
    at: int  # the instance it is sent to now
    turns: int = 0
    history: list[dict[str, Any]] = field(default_factory=list)
    moved_at: float | None = None  # when it first found its home gone
    accepted_after: float | None = None  # seconds from the signal to its first accepted turn elsewhere
    accepted_after_move: float | None = None  # ... from when it found its home gone


@dataclass
class Tally:
    started: int = 0  # turns answered 200 (their stream begun)
    finished: int = 0
    cut: dict[str, int] = field(default_factory=dict)  # started, not ended with RUN_FINISHED: by kind
    refused: dict[str, int] = field(default_factory=dict)  # HTTP statuses before a stream
    retry_after: list[float] = field(default_factory=list)
    signalled: float | None = None

    def count(self, where: dict[str, int], kind: str) -> None:
        where[kind] = where.get(kind, 0) + 1


def body(conversation: Conversation) -> dict[str, Any]:
    key, turn = conversation.key, conversation.turns
    user = {"id": f"{key}-u{turn}", "role": "user", "content": f"question {turn}"}
    return {
        "threadId": key,
        "runId": f"{key}-r{turn}-{uuid.uuid4().hex[:6]}",
        "messages": [*conversation.history, user],
        "state": {},
        "tools": [],
        "context": [],
        "forwardedProps": {},
    }


async def one_turn(http: httpx.AsyncClient, host: str, conversation: Conversation, tally: Tally) -> str:
    """One turn read to its end: ``"ok"``, ``"moved"`` (ask elsewhere), or ``"again"`` (same place)."""
    request = body(conversation)
    answer: list[str] = []
    started = False
    try:
        async with http.stream("POST", f"{host}/ag-ui", json=request, headers={"accept": "text/event-stream"}) as r:
            if r.status_code != 200:
                await r.aread()
                tally.count(tally.refused, str(r.status_code))
                retry = r.headers.get("retry-after")
                if retry is not None:
                    tally.retry_after.append(float(retry))
                return "moved" if r.status_code == 503 else "again"
            started = True
            tally.started += 1
            accepted = time.monotonic()
            end = None
            async for line in r.aiter_lines():
                data = line.partition("data: ")[2].strip()
                if not data:
                    continue
                event = json.loads(data)
                kind = event.get("type")
                if kind == "TEXT_MESSAGE_CONTENT":
                    answer.append(event.get("delta", ""))
                elif kind == "RUN_FINISHED":
                    end = "ok"
                elif kind == "RUN_ERROR":
                    end = "RUN_ERROR: " + str(event.get("message", ""))[:60]
    except httpx.TransportError as error:
        if started:
            tally.count(tally.cut, f"connection: {type(error).__name__}")
        return "moved"
    finally:
        if started and conversation.moved_at is not None and conversation.accepted_after is None:
            assert tally.signalled is not None
            conversation.accepted_after = accepted - tally.signalled
            conversation.accepted_after_move = accepted - conversation.moved_at
    if end != "ok":
        tally.count(tally.cut, end or "stream ended before its last event")
        return "again"
    tally.finished += 1
    conversation.history += [
        request["messages"][-1],
        {"id": f"{conversation.key}-a{conversation.turns}", "role": "assistant", "content": "".join(answer)},
    ]
    conversation.turns += 1
    return "ok"


async def converse(
    http: httpx.AsyncClient, hosts: list[str], conversation: Conversation, tally: Tally, until: asyncio.Event
) -> None:
    while not until.is_set():
        outcome = await one_turn(http, hosts[conversation.at], conversation, tally)
        if outcome == "moved" and conversation.at == 0 and tally.signalled is not None:
            conversation.at = 1
            conversation.moved_at = time.monotonic()
        elif outcome != "ok":
            await asyncio.sleep(POLL)


def median_and_max(name: str, seconds: list[float]) -> dict[str, float | None]:
    """``{name}_p50_s`` and ``{name}_max_s`` of ``seconds`` (rounded to 10 ms; ``None`` when empty)."""
    p50 = percentile(seconds, 0.5)
    return {
        f"{name}_p50_s": None if p50 is None else round(p50, 2),
        f"{name}_max_s": round(max(seconds), 2) if seconds else None,
    }


def lease_rows(url: str) -> dict[str, str]:
    """The lease rows in the store: conversation key -> holder (an instance's id)."""
    engine = sa.create_engine(url.replace("postgresql://", "postgresql+psycopg://", 1))
    try:
        with engine.connect() as c:
            rows = c.execute(sa.text("SELECT key, holder FROM dspy_imp_web_turns")).all()
    finally:
        engine.dispose()
    return {str(key): str(holder) for key, holder in rows}


async def measure(
    target: Target, url: str, how: str, conversations: int, warmup: float, after: float
) -> dict[str, Any]:
    tally = Tally()
    talks = [Conversation(f"h-{how}-{i}-{uuid.uuid4().hex[:8]}", i % 2, i % 2) for i in range(conversations)]
    until = asyncio.Event()
    limits = httpx.Limits(max_connections=conversations * 2, max_keepalive_connections=conversations * 2)
    timeout = httpx.Timeout(60.0, connect=5.0)
    load_before = [round(x, 2) for x in os.getloadavg()]
    async with httpx.AsyncClient(limits=limits, timeout=timeout) as http:
        tasks = [asyncio.create_task(converse(http, target.hosts, t, tally, until)) for t in talks]
        await asyncio.sleep(warmup)
        before = await asyncio.to_thread(lease_rows, url)
        victim = target.processes[0]
        tally.signalled = time.monotonic()
        victim.send_signal(signal.SIGTERM if how == "term" else signal.SIGKILL)
        exited = await asyncio.to_thread(victim.wait, 60)
        exited_after = time.monotonic() - tally.signalled
        left = await asyncio.to_thread(lease_rows, url)
        await asyncio.sleep(max(0.0, after - (time.monotonic() - tally.signalled)))
        until.set()
        await asyncio.wait(tasks, timeout=30)
        for task in tasks:
            task.cancel()
    moved = [t for t in talks if t.home == 0]
    waits = sorted(t.accepted_after for t in moved if t.accepted_after is not None)
    after_move = sorted(t.accepted_after_move for t in moved if t.accepted_after_move is not None)
    homes = {t.key for t in moved}
    stopped = {holder for key, holder in before.items() if key in homes}  # the stopped instance's id
    return {
        "signal": {"kill": "SIGKILL", "term": "SIGTERM"}.get(how, "SIGKILL, presence=True"),
        "conversations": conversations,
        "moved": len(moved),
        "accepted": len(waits),
        "within_3s": sum(w <= WITHIN for w in waits),
        **median_and_max("accepted", waits),
        **median_and_max("after_move", after_move),
        "retry_after_max_s": max(tally.retry_after) if tally.retry_after else None,
        "started": tally.started,
        "finished": tally.finished,
        "cut": dict(sorted(tally.cut.items())),
        "refused": dict(sorted(tally.refused.items())),
        "exit_code": exited,
        "exited_after_s": round(exited_after, 2),
        "leases_before": len(before),
        "leases_left_by_stopped": sum(holder in stopped for holder in left.values()),
        "load_before": load_before,
        "load_after": [round(x, 2) for x in os.getloadavg()],
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    started = time.time()
    results: dict[str, Any] = {
        "machine": {"cpus": os.cpu_count(), "load_before": [round(x, 2) for x in os.getloadavg()]},
        "conversations": args.conversations,
        "warmup_s": args.warmup,
        "after_s": args.after,
        "runs": [],
        "skipped": [],
    }
    sys.path.insert(0, str(ROOT / "tests"))
    import postgres_server

    with ExitStack() as stack:
        logs = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-handover-")))
        model = stack.enter_context(ModelServer())
        postgres, reason = postgres_server.start()
        if postgres is None:
            results["skipped"].append(f"postgres: {reason}")
            return results
        stack.callback(postgres.stop)
        for number, how in enumerate(args.signals):
            url = postgres.database(f"bench_handover_{number}")
            target = Target(f"dspy-imp postgres x2 {how}", "dspy-imp", "postgres", 2, "agui")
            start(target, model.base_url, url, None, logs, presence=how == "kill-presence")
            try:
                measured = asyncio.run(measure(target, url, how, args.conversations, args.warmup, args.after))
            finally:
                stop(target)
            results["runs"].append(measured)
            print("  " + line(measured), flush=True)
    results["elapsed_s"] = round(time.time() - started, 1)
    return results


def line(run: dict[str, Any]) -> str:
    return (
        f"{run['signal']}: {run['accepted']}/{run['moved']} moved conversations accepted on the other instance"
        f" (p50 {run['accepted_p50_s']} s, max {run['accepted_max_s']} s, {run['within_3s']} within 3 s);"
        f" {sum(run['cut'].values())} turns cut; {run['leases_left_by_stopped']} leases left"
    )


def section(results: dict[str, Any]) -> str:
    out = [
        HEADING,
        "",
        "Two instances of the web app on one Postgres, "
        f"{results['conversations']} conversations (AG-UI, one turn after another on the loopback model of"
        " the load benchmark, half of them on each instance), the first instance stopped after"
        f" {results['warmup_s']:g} s. A conversation whose instance is gone moves to the other and asks"
        f" every {POLL * 1000:.0f} ms while it answers 409, so *accepted* is when the other instance"
        " first took the conversation. `python -m benchmarks.web_handover` (run by `make bench-web`).",
        "",
        "| signal | moved | accepted on the other | within 3 s of the signal | after the signal: p50 / max (s) |"
        " after the move: p50 / max (s) | largest Retry-After (s) | turns cut | leases left by the stopped"
        " instance | the stopped instance exited after (s) | load before → after |",
        "|---|---:|---:|---:|---:|---:|---:|---|---:|---:|---|",
    ]
    for run in results["runs"]:
        cut = ", ".join(f"{k}: {v}" for k, v in run["cut"].items()) or "0"
        retry = run["retry_after_max_s"]
        out.append(
            f"| {run['signal']} | {run['moved']} | {run['accepted']} | {run['within_3s']} |"
            f" {run['accepted_p50_s']} / {run['accepted_max_s']} | {run['after_move_p50_s']} /"
            f" {run['after_move_max_s']} | {retry if retry is not None else '–'} | {cut} |"
            f" {run['leases_left_by_stopped']} | {run['exited_after_s']} |"
            f" {run['load_before'][0]} → {run['load_after'][0]} |"
        )
    out += [
        "",
        "SIGKILL cuts the turns that were running on the killed instance: a turn that is not durable"
        " cannot outlive its process (a `DurableAgent`'s turn resumes on the other worker). Their"
        " conversations are accepted by the other instance once the dead instance's lease ends"
        " (2.5 s by default), or, with `DatabaseStore(presence=True)` (its row), a tick (0.83 s) after"
        " the lease's last renewal, once Postgres has freed the dead instance's presence lock."
        " SIGTERM drains: the running turns end, their leases are released, and"
        " new turns are refused (503, or a refused connection once the server stops listening) until"
        " the instance exits; a conversation moves when its running"
        " turn has ended and its next one is refused, so its time *after the move* is the hand-over. The"
        " SIGKILL row's leases left are the killed instance's rows, expired; a claim made a lease after"
        " they expired deletes them. A load above 2 means other work shared the 2 cores: the hand-over"
        " then includes the time the other instance waited for a core.",
    ]
    goals = goals_of(results)
    if goals:
        out += ["", "| target | measured | status |", "|---|---|---|"]
        out += [f"| {g['target']} | {g['measured']} | {'met' if g['met'] else '**not met**'} |" for g in goals]
    return "\n".join(out) + "\n"


def saved_section() -> str | None:
    """The section from ``benchmarks/web_handover.json``, ``None`` when it was never run."""
    return section(json.loads(RESULTS.read_text())) if RESULTS.exists() else None


def goals_of(results: dict[str, Any]) -> list[dict[str, Any]]:
    runs = {r["signal"]: r for r in results["runs"]}
    goals = []
    if "SIGKILL" in runs:
        r = runs["SIGKILL"]
        goals.append(
            {
                "target": "one of two instances SIGKILLed under load: every conversation usable on the other"
                " within 3 s of the kill",
                "measured": f"{r['within_3s']} of {r['moved']} within 3 s (max {r['accepted_max_s']} s)",
                "met": r["moved"] > 0 and r["within_3s"] == r["moved"],
            }
        )
    if "SIGKILL, presence=True" in runs:
        r = runs["SIGKILL, presence=True"]
        goals.append(
            {
                "target": "the same with `DatabaseStore(presence=True)` (off by default): every conversation usable"
                " on the other within 3 s of the kill",
                "measured": f"{r['within_3s']} of {r['moved']} within 3 s (max {r['accepted_max_s']} s)",
                "met": r["moved"] > 0 and r["within_3s"] == r["moved"],
            }
        )
    if "SIGTERM" in runs:
        r = runs["SIGTERM"]
        cut = sum(r["cut"].values())
        goals.append(
            {
                "target": "SIGTERM instead: no turn cut, no lease left",
                "measured": f"{cut} cut, {r['leases_left_by_stopped']} leases left",
                "met": cut == 0 and r["leases_left_by_stopped"] == 0 and r["accepted"] == r["moved"],
            }
        )
    return goals


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--conversations", type=int, default=100)
    p.add_argument("--warmup", type=float, default=8.0, help="seconds of load before the signal")
    p.add_argument("--after", type=float, default=12.0, help="seconds of load after the signal")
    p.add_argument(
        "--signals",
        type=lambda s: s.split(","),
        default=["kill", "term", "kill-presence"],
        help="kill, term, kill-presence (SIGKILL with DatabaseStore(presence=True)), comma-separated",
    )
    p.add_argument("--quick", action="store_true", help="write nothing unless --out/--docs are given")
    p.add_argument("--render", type=Path, metavar="JSON", help="rebuild the page's section from saved results")
    p.add_argument("--out", type=Path)
    p.add_argument("--docs", type=Path)
    return p


def main() -> None:
    args = parser().parse_args()
    bad = [s for s in args.signals if s not in ("kill", "term", "kill-presence")]
    if bad:
        parser().error(f"--signals: {', '.join(bad)} (kill, term or kill-presence)")
    results = json.loads(args.render.read_text()) if args.render else run(args)
    out = args.out or (None if args.quick or args.render else RESULTS)
    docs = args.docs or (None if args.quick else ROOT / "docs" / "performance.md")
    if out is not None:
        out.write_text(json.dumps(results, indent=2) + "\n")
        print(f"wrote {out}")
    if docs is not None:
        report_web.write_section(docs, results, HEADING, section(results))
        print(f"wrote the hand-over section of {docs}")


if __name__ == "__main__":
    main()
