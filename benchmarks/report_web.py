"""The "Web under load" section of ``docs/performance.md``, from ``benchmarks/web_results.json``.

``section`` renders it; ``write_section`` puts it in the page in place of the one there (or at
the end); ``benchmarks.report.page`` appends it too when the results file exists, so
``make bench`` keeps it. ``goals`` marks the targets of the issue that asked for the benchmark
as met or not from the measurement, as they were written.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from benchmarks.web_counts import regrouped

HEADING = "## Web under load"
RESULTS = Path(__file__).resolve().parent / "web_results.json"
LAG_GOAL_MS = 50.0


def _n(value: Any, digits: int = 1) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return f"{value:,}"


def line(m: dict[str, Any]) -> str:
    """One level's numbers on one line (printed as the benchmark runs)."""
    return (
        f"{m['level']:>5} conv: {m['turns_per_s']:6.1f} turns/s, end p50 {_n(m['end_ms']['p50'])} ms, "
        f"p99 {_n(m['end_ms']['p99'])} ms, errors {m['errors_total']}, lag p99 {_n(m['lag_ms']['p99'])} ms, "
        f"model in flight {_n(m['model_max_in_flight'])}, load {m['load_after'][0]:.1f}"
        + (
            f", loop waited for a core {m['loop_runqueue_wait_share']:.0%} (ran {m['loop_cpu_share']:.0%})"
            f", lag p99 less that wait {_n((m.get('own_lag_ms') or {}).get('p99'))} ms"
            if m.get("loop_runqueue_wait_share") is not None
            else ""
        )
        + (
            f", gc pauses >= 50 ms {m['gc_pauses_over_50ms']} (full {m['gc_full_collections']},"
            f" longest {_n(m['gc_full_pause_max_ms'])} ms)"
            if m.get("gc_pauses_over_50ms") is not None
            else ""
        )
    )


def _one_instance(results: dict[str, Any], level: int) -> dict[str, dict[str, Any]]:
    """Per store, the one-instance dspy-imp measurement at ``level``."""
    out = {}
    for target in results["targets"]:
        if target["kind"] != "dspy-imp" or target["instances"] != 1:
            continue
        for m in target["levels"]:
            if m["level"] == level:
                out[target["store"]] = m
    return out


def _verdict(checks: dict[str, bool], wanted: list[str] | None = None) -> str:
    if not checks:
        return "not measured"
    if wanted is not None and set(wanted) - set(checks):
        return "not met" if not all(checks.values()) else "not measured on every store"
    return "met" if all(checks.values()) else "not met"


def goals(results: dict[str, Any]) -> list[dict[str, Any]]:
    """The targets as the issue states them, each with the measured values and met / not met."""
    at500, at200, at1000 = (_one_instance(results, n) for n in (500, 200, 1000))
    stores = ["memory", "sqlite", "postgres"]
    in_flight = {s: (m["model_max_in_flight"] or 0) > 100 for s, m in at500.items()}
    rate = {s: m["turns_per_s"] >= 80 for s, m in at500.items()}
    lag = {s: m["lag_ms"]["p99"] is not None and m["lag_ms"]["p99"] <= LAG_GOAL_MS for s, m in at200.items()}
    refused = {
        s: m["refused_429_retry_after"] > 0 and m["lag_ms"]["p99"] is not None and m["lag_ms"]["p99"] <= LAG_GOAL_MS
        for s, m in at1000.items()
    }
    return [
        {
            "goal": "at 500 conversations one instance sends more than 100 model requests at once",
            "measured": {s: m["model_max_in_flight"] for s, m in at500.items()},
            "status": _verdict(in_flight),
        },
        {
            "goal": "at 500 conversations one instance answers >= 80 turns/s",
            "measured": {s: m["turns_per_s"] for s, m in at500.items()},
            "status": _verdict(rate),
        },
        {
            "goal": "at 200 conversations, event-loop lag p99 <= 50 ms on every store",
            "measured": {s: m["lag_ms"]["p99"] for s, m in at200.items()},
            "status": _verdict(lag, stores),
        },
        {
            "goal": "at 1,000 offered, the excess refused with 429 + Retry-After and the admitted keep that lag",
            "measured": {
                s: {"429 Retry-After": m["refused_429_retry_after"], "lag p99 ms": m["lag_ms"]["p99"]}
                for s, m in at1000.items()
            },
            "status": _verdict(refused),
        },
    ]


def _waited(m: dict[str, Any]) -> str:
    """The share of the time the loop's thread waited for a core, and the lag p99 less that wait."""
    share = m.get("loop_runqueue_wait_share")
    if share is None:
        return "–"
    return f"{share:.0%} ({_n((m.get('own_lag_ms') or {}).get('p99'))})"


def _full(m: dict[str, Any]) -> str:
    """The full garbage collections in the measured time (the worst instance's), with the longest pause."""
    count = m.get("gc_full_collections")
    if count is None:
        return "–"
    return f"{count} ({_n(m.get('gc_full_pause_max_ms'))})" if count else "0"


def levels_table(results: dict[str, Any]) -> str:
    readyz = any(200 in m.get("readyz", []) for t in results["targets"] for m in t["levels"])
    head = [
        "target",
        "conversations",
        "turns/s",
        "model requests/s ÷ 2",
        "first event p50 / p95 / p99 ms",
        "end p50 / p95 / p99 ms",
        "errors",
        "429 (Retry-After)",
        "409",
        "loop lag p50 / p99 ms",
        "loop waited for a core (lag p99 less that wait, ms)",
        "full collections (longest ms)",
        "model requests at once",
        "server CPU ms/turn",
        "RSS KB/conversation",
        "load (1 min) before → after",
    ]
    if readyz:
        head.append("/readyz")
    rows = ["| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1)]
    for target in results["targets"]:
        for m in target["levels"]:
            f, e, lag = m["first_event_ms"], m["end_ms"], m["lag_ms"]
            cells = [
                target["name"],
                _n(m["level"]),
                _n(m["turns_per_s"]) + (" *" if _short(m) else ""),
                _n(_from_model(m)),
                f"{_n(f['p50'], 0)} / {_n(f['p95'], 0)} / {_n(f['p99'], 0)}",
                f"{_n(e['p50'], 0)} / {_n(e['p95'], 0)} / {_n(e['p99'], 0)}",
                _n(m["errors_total"]),
                f"{_n(m['refused_429'])} ({_n(m['refused_429_retry_after'])})",
                _n(m["refused_409"]),
                f"{_n(lag['p50'])} / {_n(lag['p99'])}",
                _waited(m),
                _full(m),
                _n(m["model_max_in_flight"]),
                _n(m["server_cpu_ms_per_turn"]),
                _n(m["rss_kb_per_conversation"], 0),
                f"{m['load_before'][0]:.1f} → {m['load_after'][0]:.1f}",
            ]
            if readyz:
                bodies = [json.dumps(b, separators=(",", ":"))[:60] for b in m.get("readyz_body", []) if b is not None]
                cells.append("<br>".join(f"`{b}`" for b in bodies) or "–")
            rows.append("| " + " | ".join(cells) + " |")
    if any(_short(m) for t in results["targets"] for m in t["levels"]):
        per_ended = any(_short(m) and m.get("cpu_basis") != "model" for t in results["targets"] for m in t["levels"])
        rows.append(
            "\n\\* A turn took more than a third of the measured time (or none ended in it): fewer than "
            "three turns per conversation fit in it, the conversations were still starting, and the rate of "
            "ended turns is a lower bound. *Model requests/s ÷ 2* (a turn is two requests, counted as they "
            "reach the model over the same time) is the rate of work done either way."
            + (" In such a row the CPU per turn, counted per ended turn, is too high." if per_ended else "")
        )
    return "\n".join(rows)


def _from_model(m: dict[str, Any]) -> float | None:
    """The model's requests over the measured time, halved (a turn is two requests)."""
    requests = m.get("model_requests")
    return round(requests / 2 / m["window_s"], 1) if requests is not None and m["window_s"] else None


def _short(m: dict[str, Any]) -> bool:
    """Whether the turns were too long for the measured time to show a steady rate."""
    return m["end_ms"]["p50"] is None or m["end_ms"]["p50"] > m["window_s"] * 1000 / 3


def _sharing(results: dict[str, Any]) -> str:
    """Whether other work shared the machine: the load before the run says (the run's own processes
    make the load during it)."""
    if results["load_at_start"][0] < 1.0:
        return "Nothing else ran on the machine (the load during the run is the run's own processes)."
    return "The machine was shared with other work while it ran."


def errors_table(results: dict[str, Any]) -> str:
    rows = []
    for target in results["targets"]:
        for m in target["levels"]:
            for kind, n in regrouped(m["errors"]).items():
                rows.append(f"| {target['name']} | {m['level']:,} | `{kind.replace('|', '/')}` | {n:,} |")
    if not rows:
        return (
            "No errors of any kind: no refusal, no error event, no cut or unfinished stream (the turns still "
            "running when a level stopped are not counted)."
        )
    table = "\n".join(["| target | conversations | error | count |", "|---|---:|---|---:|", *rows])
    if any("LeaseLost" in row for row in rows):
        table += (
            "\n\n*LeaseLost* is a running turn the app stopped because its lease on the conversation ran out "
            "before a renewal landed (the renewal statement, bounded by the first lease's expiry, did not "
            "answer in time on this loaded database store): the turn was cut, not lost silently, and the client "
            "was told in the stream. A turn cut this way is a defect of the lease's defaults under this load, "
            "not a refusal."
        )
    return table


def goals_table(results: dict[str, Any]) -> str:
    rows = ["| target | measured (one instance, per store) | status |", "|---|---|---|"]
    for goal in results["goals"]:
        measured = ", ".join(f"{s}: {_measured(v)}" for s, v in goal["measured"].items()) or "not run"
        rows.append(f"| {goal['goal']} | {measured} | **{goal['status']}** |")
    return "\n".join(rows)


def _measured(value: Any) -> str:
    if isinstance(value, dict):
        return " ".join(f"{k} {_n(v)}" for k, v in value.items())
    return _n(value)


def capacity(results: dict[str, Any]) -> str:
    """What one instance sustained, per store: the best turns/s measured and where."""
    parts = []
    for target in results["targets"]:
        if target["instances"] != 1 or not target["levels"]:
            continue
        best = max(target["levels"], key=lambda m: (m["turns_per_s"], _from_model(m) or 0))
        clean = "no errors" if best["errors_total"] == 0 else f"{best['errors_total']:,} errors"
        parts.append(
            f"- **{target['name']}**: {best['turns_per_s']:,.1f} turns/s ended at {best['level']:,} conversations "
            f"({_n(_from_model(best))} by the model's requests), "
            f"{clean}, end p50 {_n(best['end_ms']['p50'], 0)} ms, loop lag p99 {_n(best['lag_ms']['p99'])} ms, "
            f"at most {_n(best['model_max_in_flight'])} model requests at once"
        )
    return "\n".join(parts) or "- nothing was measured on one instance"


def _health(results: dict[str, Any]) -> str:
    codes = {
        (tuple(m["healthz"]), tuple(m["readyz"]))
        for t in results["targets"]
        if t["kind"] == "dspy-imp"
        for m in t["levels"]
    }
    health = sorted({c for pair in codes for c in pair[0]})
    ready = sorted({c for pair in codes for c in pair[1]})
    return (
        f"`/healthz` answered {', '.join(map(str, health)) or '–'} and `/readyz` "
        f"{', '.join(map(str, ready)) or '–'} at the end of each level (404: the app has no such route)."
    )


def _served(settings: dict[str, Any]) -> str:
    """How uvicorn served the instances, when the run recorded it (runs before it did not)."""
    parser, loop = settings.get("http_parser"), settings.get("event_loop")
    return f" ({parser} parsing HTTP, on {loop}'s event loop)" if parser and loop else ""


def section(results: dict[str, Any]) -> str:
    s = results["settings"]
    loads = [m["load_after"][0] for t in results["targets"] for m in t["levels"]]
    load = f"{min(loads):.1f}–{max(loads):.1f}" if loads else "–"
    skipped = "".join(f"\n- skipped: {x}" for x in results.get("skipped", []))
    return f"""{HEADING}

`make bench-web` (`benchmarks/web_load.py`) measures the web app from outside. Locust, headless,
runs N concurrent conversations of {s["turns"]} turns each, one after another ({s["ramp_s"]:g} s to
start them all, then {s["duration_s"]:g} s measured), against uvicorn processes{_served(s)} of `dspy_imp.web.app`
(a `ReActV2` agent with one tool, on `dspy.LM`) and against pydantic-ai's AG-UI adapter on the same
model. Our users speak {_protocol(s["protocol"])}; pydantic-ai's speak AG-UI. Every request
carries the conversation so far, and each stream is read to its last event (`RUN_FINISHED` or
`RUN_ERROR`, `[DONE]`). The model is a loopback server streaming {s["tokens"]} tokens
{s["token_delay_ms"]} ms apart per request; a turn is a tool call then the answer, about 2.1 s
unloaded. Two instances share the store, and each user keeps to one of them. A refusal with
`Retry-After` is counted and the turn sent again after the wait (at most 10 s).

The loop lag is measured inside each server (a task sleeping 10 ms, its overshoot; the worst
instance shown), the model requests at once by the model server, the RSS growth per concurrent
conversation and the CPU per turn from the server processes (both instances summed). Beside the
lag: the share of the measured time the loop's thread waited, runnable, for a core (Linux's
`schedstat`: the machine's part of the lag, not the app's), the lag p99 less that wait, and the
garbage collector's full collections in the measured time with the longest one's pause.

**Machine**: {results["machine"]["cpus"]} cores, Python {results["machine"]["python"]}; the whole run
took {results["elapsed_s"]:,.0f} s. {_sharing(results)} Load average
{results["load_at_start"][0]:.1f} at the start, {load} (1 min) after each level and
{results["load_at_end"][0]:.1f} at the end, against {results["machine"]["cpus"]} cores. The load
generator, the model server and the instances ran on it too. Read the numbers as what this machine
gave at that load, not as the app's ceiling.{_busy(results, loads)}{skipped}

What one instance sustained (the most turns/s measured; {", ".join(f"{n:,}" for n in s["levels"])}
conversations offered):

{capacity(results)}

{levels_table(results)}

{errors_table(results)}

{_health(results)}

The targets, as set when the benchmark was asked for, marked from this measurement:

{goals_table(results)}
"""


def _busy(results: dict[str, Any], loads: list[float]) -> str:
    cpus = results["machine"]["cpus"] or 1
    if not loads or max(loads) <= cpus:
        return ""
    return (
        f" With more runnable processes than cores (load up to {max(loads):.1f} on {cpus}), the loop lag "
        "includes the time each server waited for a core, and every process of the run, the load generator "
        "included, got less than the core it could use."
    )


def _protocol(protocol: str) -> str:
    return {"agui": "AG-UI", "aisdk": "the AI SDK stream", "mixed": "half AG-UI, half the AI SDK stream"}[protocol]


def tables(results: dict[str, Any]) -> str:
    return "\n\n".join([levels_table(results), errors_table(results), goals_table(results)])


def write_section(page: Path, results: dict[str, Any], heading: str = HEADING, new: str | None = None) -> None:
    """``page`` with its section under ``heading`` replaced by ``new`` (this module's web section by
    default; appended when the page has none)."""
    text = page.read_text() if page.exists() else ""
    new = section(results) if new is None else new
    if heading in text:
        head, rest = text.split(heading, 1)
        after = rest.find("\n## ")
        tail = rest[after + 1 :] if after >= 0 else ""
        text = head + new + ("\n" + tail if tail else "")
    else:
        text = text.rstrip("\n") + "\n\n" + new
    page.write_text(text)


def saved_section() -> str | None:
    """The section from ``benchmarks/web_results.json``, ``None`` when it was never run."""
    return section(json.loads(RESULTS.read_text())) if RESULTS.exists() else None
