"""The top of ``docs/performance.md``: the summary table, the per-request split, and what a user can do today.

Every figure is read from the results dictionary; a figure the run did not measure shows as "–".
"""

from __future__ import annotations

from typing import Any

from .costs import PRICES, THINKING_LENGTHS

SPLIT_STEPS = (10, 100, 1000)


def _table(header: list[str], rows: list[list[str]], align: str) -> str:
    rule = ["---" if a == "l" else "---:" for a in align]
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join(rule) + " |"]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])


def _spread(entry: dict[str, Any] | None, digits: int = 2, suffix: str = "") -> str:
    if not entry:
        return "–"
    median, low, high = (f"{entry[k]:,.{digits}f}{suffix}" for k in ("median", "low", "high"))
    return f"{median} ({low}–{high}, {entry['rounds']} rounds)"


def _usd(value: float | None, scale: float = 1e6, digits: int = 0) -> str:
    return "–" if value is None else f"{value * scale:,.{digits}f}"


def _answered(loop: dict[str, Any]) -> str:
    """How many of the scenarios the loop answered: the cost is divided by that number."""
    return f" ({loop['answered']} of {loop['turns']})" if "answered" in loop else ""


def _cost_rows(results: dict[str, Any]) -> list[list[str]]:
    cost = results.get("cost")
    if not cost:
        return []
    rows = []
    for label in PRICES:
        loops = cost["prices"].get(label, {}).get("loops", {})
        if "dspy_imp" not in loops:
            continue
        peers = ", ".join(
            f"`{k}` {_usd(v['scenarios_cached'])}{_answered(v)}" for k, v in loops.items() if k != "dspy_imp"
        )
        ours = loops["dspy_imp"]
        thinks = "scenarios_thinking" in ours
        figure = f"µ$ per answered turn over six scenarios (turns answered), {label} prices, caching on"
        figure += ", no thinking billed" if thinks else ""
        rows.append([figure, _usd(ours["scenarios_cached"]) + _answered(ours), peers])
        if not thinks:
            continue
        lengths = " / ".join(str(n) for n in THINKING_LENGTHS)

        def billed(loop: dict[str, Any]) -> str:
            found = (loop.get("scenarios_thinking") or {}).get("turn")
            if not found:
                return _usd(loop["scenarios_cached"])
            return " / ".join(_usd(found[str(n)]) for n in THINKING_LENGTHS)

        peers = ", ".join(f"`{k}` {billed(v)}" for k, v in loops.items() if k != "dspy_imp")
        figure = f"the same, {lengths} thinking tokens billed once per assistant turn (each loop's own thinking)"
        rows.append([figure, billed(ours), peers])
    sonnet = cost["prices"].get("Claude Sonnet 4.5", {}).get("loops", {})
    for steps in cost["long"]:
        key = f"steps:{steps}"
        if key not in sonnet.get("dspy_imp", {}):
            continue
        ours = sonnet["dspy_imp"][key]
        peers = ", ".join(
            f"`{k}` {_usd(v[key]['cached'], 1e3, 1)}" for k, v in sonnet.items() if k != "dspy_imp" and key in v
        )
        rows.append(
            [
                f"m$ per {steps:,}-step turn, Claude Sonnet 4.5, with caching (without)",
                f"{_usd(ours['cached'], 1e3, 1)} ({_usd(ours['uncached'], 1e3, 1)})",
                peers,
            ]
        )
        opened = ", ".join(f"`{k}` {v[key]['opened']}" for k, v in sonnet.items() if k != "dspy_imp" and key in v)
        rows.append(
            [f"connections opened in a {steps:,}-step turn (counted at the server)", str(ours["opened"]), opened]
        )
    return rows


def _time_rows(results: dict[str, Any]) -> list[list[str]]:
    rows = []
    e2e = results.get("e2e") or {}
    for r in e2e.get("table", []):
        if r["loop"] == "dspy_imp" and r["steps"] in (10, 100):
            peers = ", ".join(
                f"`{x['loop']}` {x['request_ms']['median']:,.2f}"
                for x in e2e["table"]
                if x["steps"] == r["steps"]
                and x["loop"] in ("dspy.ReActV2", "pydantic-ai", "openai-agents")
                and x["request_ms"]
            )
            rows.append(
                [
                    f"ms of the loop's own time per request, {r['steps']}-step turn, end to end",
                    _spread(r["request_ms"]),
                    peers,
                ]
            )
    for r in e2e.get("flat", []):
        if r["loop"] == "dspy_imp":
            rows.append([f"the same at {r['long']:,} steps", _spread(r["long_ms"]), "–"])
    engines = results.get("engines")
    if engines:
        rows.append(
            [
                f'`engine="lm15"` / the default, per request at {engines["steps"]:,} steps',
                _spread(engines["ratio"]),
                "–",
            ]
        )
    return rows


def headline(results: dict[str, Any]) -> dict[str, Any]:
    """The timed headline figures of one run, kept in ``results["runs"]`` to show their spread across runs."""
    cost = results.get("cost") or {}
    engines = results.get("engines") or {}
    e2e = results.get("e2e") or {}
    request = next(
        (r["request_ms"] for r in e2e.get("table", []) if r["loop"] == "dspy_imp" and r["steps"] == 100), None
    )
    return {
        "load": (cost.get("machine") or results["machine"]).get("load_before"),
        "engine_ratio": (engines.get("ratio") or {}).get("median"),
        "request_ms_100": (request or {}).get("median"),
    }


def runs_line(results: dict[str, Any]) -> str:
    runs = results.get("runs") or []
    parts = []
    for key, what in (
        ("request_ms_100", "ours per request at 100 steps (ms)"),
        ("engine_ratio", '`engine="lm15"` / the default'),
    ):
        values = sorted({r[key] for r in runs if r.get(key) is not None})
        if values:
            shown = f"{values[0]:,.2f}" + (f"–{values[-1]:,.2f}" if len(values) > 1 else "")
            parts.append(f"{what} {shown}")
    if not parts:
        return ""
    where = "In the one run" if len(runs) == 1 else f"Across the {len(runs)} runs"
    return f"{where} kept in `benchmarks/results.json` (medians of each run): " + "; ".join(parts) + "."


def summary_table(results: dict[str, Any]) -> str:
    rows = _cost_rows(results) + _time_rows(results)
    return _table(["figure", "`dspy_imp`", "peers, same run"], rows, "lrl")


def split_table(results: dict[str, Any]) -> str:
    """Ours against DSPy's share of each request at 10, 100 and 1,000 recorded steps (in-process)."""
    rows = []
    for r in results["curve"]:
        if r["steps"] not in SPLIT_STEPS or "ours_ms" not in r:
            continue
        ours, plumbing = r["ours_ms"], r["plumbing_ms"]
        rows.append(
            [
                f"{r['steps']:,}",
                f"{ours:,.2f}",
                f"{plumbing:,.2f}",
                f"{100 * ours / (ours + plumbing):.0f}%",
                f"{r['dspy_ms']:,.2f}" if r.get("dspy_ms") else "–",
            ]
        )
    header = [
        "recorded steps",
        "ours ms/request",
        "DSPy's ms/request (`Predict`, adapter base, `dspy.LM`)",
        "ours, share of the two",
        "`dspy.ReActV2` whole, ms/request",
    ]
    return _table(header, rows, "rrrrr")


def _load(machine: dict[str, Any]) -> str | None:
    before, after = machine.get("load_before"), machine.get("load_after")
    if not before:
        return None
    return f"{before[0]:.2f} at the start" + (f" and {after[0]:.2f} at the end" if after else "")


def load_line(results: dict[str, Any]) -> str:
    """The load (1-minute load average) each part ran under, on how many CPUs."""
    cpus = results["machine"]["cpus"]
    cost = (results.get("cost") or {}).get("machine")
    lines = []
    if cost and cost.get("engines_kept"):
        lines.append(
            f"The cost part ran in {cost['elapsed_s']:,.0f} s under a load average (1 minute) of "
            f"{_load(cost)}, on {cpus} CPUs, while other work kept both CPUs busy; its dollars do not depend "
            "on the load. The engine part and every time figure are kept from the run before, not measured "
            "under that load"
        )
    elif cost:
        lines.append(
            f"The cost and engine parts ran in {cost['elapsed_s']:,.0f} s under a load average (1 minute) of "
            f"{_load(cost)}, on {cpus} CPUs"
        )
    added = (cost or {}).get("added")
    if added:
        loops = ", ".join(f"`{name}`" for name in added["loops"])
        lines.append(
            f"the longest cost turn of {loops} was added afterwards, "
            f"in {added['elapsed_s']:,.0f} s under {_load(added)}"
        )
    rerun = (cost or {}).get("rerun")
    if rerun:
        loops = ", ".join(f"`{name}`" for name in rerun["loops"])
        lines.append(
            f"the six scenarios of {loops} were run again afterwards (the loop changed how it answers "
            f"them, not its long turns), in {rerun['elapsed_s']:,.0f} s under {_load(rerun)}"
        )
    again = (results.get("e2e") or {}).get("machine")
    if again:
        lines.append(
            f"the end-to-end part was run again afterwards (the loop changed what it pays per turn), in "
            f"{again['elapsed_s']:,.0f} s under {_load(again)}"
        )
    rest = _load(results["machine"])
    before = " (in the run before)" if cost and cost.get("engines_kept") else ""
    lines.append(f"the other parts{before} under {rest}" if rest else "the other parts recorded no load average")
    return "; ".join(lines) + ". Other work shared the machine: that is what the spreads show."


_SUMMARY = """## Summary

Dollars are computed from the requests each loop sent and the usage the bench server reported
for them as each provider does (cache reads and writes), at LiteLLM's price map: they do not
depend on the machine. Times do: each is the median over interleaved rounds, with the lowest
and highest round and the number of rounds. {load}

{table}

{thinking}

{off}

{runs}

## The per-request split at 10, 100 and 1,000 steps

In-process, one turn of N tool steps against a scripted engine that answers at once (the
method is in *Where a request's time goes* below). *Ours* is the state machine, the rendering
and reading of each request; *DSPy's* is `Predict`, the adapter base and `dspy.LM`, which on the
default native engine validated the whole message list and wrote it into the body on every
request (since 2026-12-04 a turn's rows are read into lm15's types once, and each message is
written into the body and encoded as JSON once; this table is from the full `make bench` before
that, the end-to-end figures above from after it). Ours stays flat; DSPy's grew with the
history.

{split}

## What you can do today

- **Name the engine where the route is known.** `dspy.LM("openai/gpt-4o-mini", engine="lm15")`
  sends through DSPy's native engine directly; the default (`engine="auto"`) decides on every
  request whether lm15 can carry it, and falls back to LiteLLM when it cannot. Measured here,
  ours on `engine="lm15"` against the default, per request at {engine_steps} steps, end to end:
  {engine}. `engine="lm15"` raises where a request needs LiteLLM (a client setting only LiteLLM
  has, a route lm15 does not know), so use it on the routes you know it serves.
- **Freeze the start-up heap.** Python's cyclic garbage collector walks every tracked object on
  a full collection, and a long turn allocates enough to trigger them. An application can call
  `gc.freeze()` once after start-up (imports done, programs built): what is alive then moves
  to a permanent generation the collector no longer walks. Measured here, ours per request at
  {engine_steps} steps with the heap frozen before the turn, against none: {frozen}.
- **Leave `prompt_cache` on** (the default): on Claude the breakpoints are what the cost table
  above prices as *with caching*.
"""


def thinking_line(results: dict[str, Any], label: str = "Claude Sonnet 4.5") -> str:
    """What the default's thinking costs on Claude, said plainly (the bench model thinks none)."""
    loops = ((results.get("cost") or {}).get("prices", {}).get(label) or {}).get("loops", {})
    ours, off = loops.get("dspy_imp") or {}, loops.get("dspy_imp (thinking off)") or {}
    found = (ours.get("scenarios_thinking") or {}).get("turn")
    if not found or off.get("scenarios_cached") is None:
        return ""
    each = " / ".join(_usd(found[str(n)]) for n in THINKING_LENGTHS)
    lengths = " / ".join(str(n) for n in THINKING_LENGTHS)
    per_request = " / ".join(_usd(ours["scenarios_thinking"]["request"][str(n)]) for n in THINKING_LENGTHS)
    return (
        f"**What the default's thinking costs.** On {label}, `dspy_imp`'s default asks for thinking on "
        f'every ordinary step (`thinking="every"`, DSPy\'s `reasoning_effort="low"`). Billed as Anthropic '
        f"documents it, once per assistant turn, at {lengths} thinking tokens each time, the six scenarios "
        f'cost {each} µ$ per answered turn, against {_usd(off["scenarios_cached"])} with `thinking="off"` '
        f"(and {per_request} if every request thought, as with the interleaved beta). Which lengths a real "
        "Claude writes is not measured here: the bench model writes none."
    )


def off_line(results: dict[str, Any]) -> str:
    """Where ``thinking="off"`` is no higher per answered turn than every peer, and where not, said plainly."""
    found = {
        k.split(":", 1)[1]: v for k, v in (results.get("targets_cost") or {}).items() if k.startswith("scenarios_off:")
    }
    if not found:
        return ""
    held = [label for label, t in found.items() if t["met"]]
    missed = [label for label, t in found.items() if not t["met"]]

    def named(labels: list[str]) -> str:
        return "; ".join(f"{label} {_usd(found[label]['ours'])} µ$" for label in labels)

    line = (
        '**With `thinking="off"`.** Under `finish="auto"` with `submit` each step asks for a call '
        '(`tool_choice="required"`, Anthropic\'s `any`): a bare thought would be followed by the forced '
        "submit anyway, so the model answers in the step itself. Per answered turn over the six scenarios "
        f"it is no higher than any peer's at {named(held) if held else 'no price'}"
    )
    return line + (f"; it is higher at {named(missed)}." if missed else ": at every price shown.")


def summary_page(results: dict[str, Any]) -> str:
    engines = results.get("engines")
    return _SUMMARY.format(
        thinking=thinking_line(results),
        off=off_line(results),
        load=load_line(results),
        table=summary_table(results),
        runs=runs_line(results),
        split=split_table(results),
        engine_steps=f"{engines['steps']:,}" if engines else "1,000",
        engine=_spread(engines["ratio"]) if engines else "not measured in this run",
        frozen=_spread(engines["frozen_ratio"])
        if engines and engines.get("frozen_ratio")
        else "not measured in this run",
    )
