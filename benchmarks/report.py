"""Tables, the targets, the ``docs/performance.md`` page and its SVG chart, all from the results.

Every number on the page is read from the results dictionary that ``benchmarks/results.json``
stores; the prose around them says what was measured and names no number of its own.
"""

from __future__ import annotations

import math
from typing import Any

from . import report_cost, report_e2e, report_summary, report_web

FLAT_LIMIT = 1.5  # ours at 1,000 steps against ours at 10
RATIO_LIMIT = 0.2  # ours + DSPy's plumbing against dspy.ReActV2, per request at 100 steps


def _row(curve: list[dict[str, Any]], steps: int) -> dict[str, Any]:
    return next((r for r in curve if r["steps"] == steps), {})


def targets(results: dict[str, Any]) -> dict[str, Any]:
    curve = results["curve"]
    steps = sorted(r["steps"] for r in curve if "ours_ms" in r)
    small = 10 if 10 in steps else steps[0]
    large = steps[-1]
    near = (
        100
        if any(r["steps"] == 100 and "dspy_ms" in r for r in curve)
        else max(r["steps"] for r in curve if "dspy_ms" in r)
    )
    base, top, mid = _row(curve, small), _row(curve, large), _row(curve, near)
    flat = top["ours_ms"] / base["ours_ms"]
    quiet = top["ours_no_history_ms"] / base["ours_no_history_ms"] if "ours_no_history_ms" in top else None
    alone = top["render_alone_ms"] / base["render_alone_ms"] if "render_alone_ms" in top else None
    matched = top["ours_ms"] / base["ours_matched_ms"] if "ours_matched_ms" in base else None
    whole = mid["whole_ms"] / mid["dspy_ms"]
    plumbing = mid["plumbing_ms"] / mid["dspy_ms"]
    return {
        "flat": {"small": small, "large": large, "ratio": flat, "limit": FLAT_LIMIT, "met": flat <= FLAT_LIMIT},
        "flat_no_history": {
            "small": small,
            "large": large,
            "ratio": quiet,
            "limit": FLAT_LIMIT,
            "met": quiet is not None and quiet <= FLAT_LIMIT,
        },
        "flat_matched": {
            "small": small,
            "large": large,
            "ratio": matched,
            "limit": FLAT_LIMIT,
            "met": matched is not None and matched <= FLAT_LIMIT,
            "churn": base.get("matched_churn"),
        },
        "render_alone": {
            "small": small,
            "large": large,
            "ratio": alone,
            "small_ms": base.get("render_alone_ms"),
            "large_ms": top.get("render_alone_ms"),
        },
        "whole_vs_dspy": {"steps": near, "ratio": whole, "limit": RATIO_LIMIT, "met": whole <= RATIO_LIMIT},
        "plumbing_vs_dspy": {"steps": near, "ratio": plumbing},
        "ours_vs_dspy": {"steps": near, "ratio": mid["ours_ms"] / mid["dspy_ms"]},
    }


def _f(value: Any, digits: int = 2) -> str:
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    return f"{value:,.{digits}f}"


def _table(header: list[str], rows: list[list[str]], align: str | None = None) -> str:
    align = align or "l" + "r" * (len(header) - 1)
    rule = ["---" if a == "l" else "---:" for a in align]
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join(rule) + " |"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def curve_table(results: dict[str, Any]) -> str:
    rows = []
    for r in results["curve"]:
        ratio = r["whole_ms"] / r["dspy_ms"] if "whole_ms" in r and "dspy_ms" in r else None
        rows.append(
            [
                _f(r["steps"]),
                _f(r.get("ours_ms")),
                _f(r.get("plumbing_ms")),
                _f(r.get("whole_ms")),
                _f(r.get("dspy_ms")),
                _f(ratio),
                _f(r.get("ours_no_history_ms")),
            ]
        )
    header = [
        "recorded steps",
        "ours ms/request",
        "DSPy's plumbing ms/request",
        "whole loop ms/request",
        "`dspy.ReActV2` ms/request",
        "whole / `dspy.ReActV2`",
        "ours, DSPy history off",
    ]
    return _table(header, rows)


def loops_table(results: dict[str, Any]) -> str:
    rows = []
    for r in results["loops"]:
        t = r["ledger"]
        rows.append(
            [
                f"N={r['steps']}",
                f"`{r['loop']}`",
                _f(r["requests"]),
                _f(r["bytes"] / 1000, 1),
                _f(r["tokens"]),
                *(_f(t[p]) for p in ("system", "tools", "history", "new")),
                _f(r["prefix_share"] and 100 * r["prefix_share"], 1),
                _f(r["min_prefix_share"] and 100 * r["min_prefix_share"], 1),
                _f(r["peak_mb"]),
                _f(r["answered"]),
            ]
        )
    header = [
        "turn",
        "loop",
        "requests",
        "kB sent",
        "tokens sent",
        "system",
        "tools",
        "history",
        "new",
        "prefix share %",
        "lowest prefix share %",
        "peak MB",
        "answered",
    ]
    return _table(header, rows, "ll" + "r" * 11)


def scenarios_table(results: dict[str, Any]) -> str:
    loops = list(dict.fromkeys(r["loop"] for r in results["scenarios"]))
    names = list(dict.fromkeys(r["scenario"] for r in results["scenarios"]))
    cells = {(r["loop"], r["scenario"]): r for r in results["scenarios"]}
    rows = []
    for name in names:
        row = [name.replace("_", " ")]
        for loop in loops:
            r = cells[(loop, name)]
            if not r["applies"]:
                row.append("n/a")
                continue
            failed = f" ({r['failed_requests']} failed)" if r["failed_requests"] else ""
            row.append(f"{r['requests']}{failed}, {'answered' if r['answered'] else 'no answer'}")
        rows.append(row)
    return _table(["scenario", *(f"`{loop}`" for loop in loops)], rows, "l" * (len(loops) + 1))


def profile_table(results: dict[str, Any]) -> str:
    rows = []
    for loop, entry in results["profile"].items():
        rows.append([f"`{loop}`", _f(entry["steps"]), ", ".join(f"{p} {100 * s:.0f}%" for p, s in entry["shares"])])
    return _table(["loop", "N", "share of the turn's own time, by package"], rows, "lrl")


def parallel_table(results: dict[str, Any]) -> str:
    rows = [
        [
            _f(r["calls"]),
            f"`{r['mode']}`",
            _f(r["tool_ms"], 0),
            _f(r["sequential_ms"], 1),
            _f(r["parallel_ms"], 1),
            _f(r["sequential_ms"] / r["parallel_ms"], 1),
        ]
        for r in results["parallel"]
    ]
    return _table(
        ["calls in one reply", "call", "tool sleeps ms", "sequential ms/turn", "parallel ms/turn", "speed-up ×"],
        rows,
        "rlrrrr",
    )


def targets_table(results: dict[str, Any]) -> str:
    t = results["targets"]
    flat, whole, quiet = t["flat"], t["whole_vs_dspy"], t["flat_no_history"]
    rows = [
        [
            f"ours at {_f(flat['large'])} steps / ours at {_f(flat['small'])} steps",
            f"≤ {_f(flat['limit'], 1)}",
            _f(flat["ratio"]),
            _f(flat["met"]),
        ],
        [
            "the same, with DSPy's `lm.history` off (`disable_history=True`)",
            f"≤ {_f(quiet['limit'], 1)}",
            _f(quiet["ratio"]),
            _f(quiet["met"]),
        ],
        [
            f"ours at {_f(flat['large'])} steps / ours at {_f(flat['small'])} steps"
            " with as much memory traffic between our calls (the interference control)",
            f"≤ {_f(flat['limit'], 1)}",
            _f(t.get("flat_matched", {}).get("ratio")),
            _f(t.get("flat_matched", {}).get("met")),
        ],
        [
            f"our rendering run alone (the last request's `format`), {_f(flat['large'])} / {_f(flat['small'])} steps",
            "",
            _f(t.get("render_alone", {}).get("ratio")),
            "",
        ],
        [
            f"whole loop / `dspy.ReActV2`, per request at {_f(whole['steps'])} steps, in-process (superseded by the "
            "end-to-end line above)",
            "",
            _f(whole["ratio"]),
            "",
        ],
        [
            f"DSPy's plumbing alone / `dspy.ReActV2` at {_f(t['plumbing_vs_dspy']['steps'])} steps",
            "",
            _f(t["plumbing_vs_dspy"]["ratio"]),
            "",
        ],
        [
            f"ours alone / `dspy.ReActV2` at {_f(t['ours_vs_dspy']['steps'])} steps",
            "",
            _f(t["ours_vs_dspy"]["ratio"], 3),
            "",
        ],
    ]
    return _table(["target", "limit", "measured", "met"], rows, "lrrr")


def tables(results: dict[str, Any]) -> str:
    parts = [
        ("End to end", report_e2e.e2e_table),
        ("End to end: paired ratios", report_e2e.e2e_ratios_table),
        ("What a turn costs", report_cost.summary_table),
        ("Cost targets", report_cost.targets_table),
        ("Speed targets", report_e2e.targets_table),
        ("Token ledger per answered turn", report_e2e.ledger_table),
        ("Per-request cost against recorded steps", curve_table),
        ("Same model, five loops", loops_table),
        ("Requests per answered turn", scenarios_table),
        ("Where each loop spends a turn", profile_table),
        ("Parallel tools", parallel_table),
        ("Targets", targets_table),
    ]
    if "context" in results:
        parts.append(("Long conversations: the prefix under a context policy", context_table))
    return "\n\n".join(f"## {title}\n\n{make(results)}" for title, make in parts)


def context_table(results: dict[str, Any]) -> str:
    from .context_prefix import table

    return table(results["context"])


# -- the chart --------------------------------------------------------------------------------

_SERIES = [
    ("ours_ms", "ours", "#1b7837"),
    ("plumbing_ms", "DSPy's plumbing (in our loop)", "#762a83"),
    ("whole_ms", "whole loop (ours + plumbing)", "#2166ac"),
    ("dspy_ms", "dspy.ReActV2", "#b2182b"),
]


def chart(curve: list[dict[str, Any]]) -> str:
    """A log-log line chart of ms per request against recorded steps, as standalone SVG."""
    width, height, left, right, top, bottom = 720, 420, 70, 230, 20, 50
    points = [(r["steps"], r[k]) for r in curve for k, _, _ in _SERIES if r.get(k)]
    xs = [math.log10(max(s, 1)) for s, _ in points]
    ys = [math.log10(v) for _, v in points]
    x0, x1 = min(xs), max(xs) or 1.0
    y0, y1 = math.floor(min(ys)), math.ceil(max(ys))

    def px(steps: float) -> float:
        return left + (math.log10(max(steps, 1)) - x0) / ((x1 - x0) or 1) * (width - left - right)

    def py(value: float) -> float:
        return top + (y1 - math.log10(value)) / ((y1 - y0) or 1) * (height - top - bottom)

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" '
        f'font-size="12"><rect width="100%" height="100%" fill="white"/>'
    ]
    for exponent in range(y0, y1 + 1):
        y = py(10**exponent)
        out.append(f'<line x1="{left}" x2="{width - right}" y1="{y:.1f}" y2="{y:.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">{10.0**exponent:g}</text>')
    for steps in sorted({r["steps"] for r in curve}):
        x = px(steps)
        out.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{top}" y2="{height - bottom}" stroke="#eee"/>')
        out.append(f'<text x="{x:.1f}" y="{height - bottom + 16}" text-anchor="middle">{steps:,}</text>')
    out.append(f'<text x="{(left + width - right) / 2}" y="{height - 10}" text-anchor="middle">recorded steps</text>')
    out.append(
        f'<text x="16" y="{(top + height - bottom) / 2}" text-anchor="middle" '
        f'transform="rotate(-90 16 {(top + height - bottom) / 2})">ms per request (log)</text>'
    )
    for index, (key, label, colour) in enumerate(_SERIES):
        series = [(r["steps"], r[key]) for r in curve if r.get(key)]
        path = " ".join(f"{px(s):.1f},{py(v):.1f}" for s, v in series)
        out.append(f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="2"/>')
        out += [f'<circle cx="{px(s):.1f}" cy="{py(v):.1f}" r="3" fill="{colour}"/>' for s, v in series]
        y = top + 20 + 22 * index
        out.append(
            f'<line x1="{width - right + 15}" x2="{width - right + 35}" y1="{y}" y2="{y}" stroke="{colour}" '
            'stroke-width="2"/>'
        )
        out.append(f'<text x="{width - right + 40}" y="{y + 4}">{label}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


# -- the page -----------------------------------------------------------------------------------

_INTRO = """# Performance

Generated by `make bench` (`benchmarks/run.py`) from `benchmarks/results.json`; do not edit by
hand. Every number below is read from that file. Nothing in the test suite asserts on time.

Reproduce from a fresh clone:

```bash
make bench            # installs the `bench` extra (pydantic-ai, OpenAI Agents SDK), runs everything
.venv/bin/python -m benchmarks.run --quick   # tiny sizes, writes nothing: checks the scripts run
```

This run: Python {python} on {platform}, {cpus} CPUs, {elapsed:.0f} s for the whole of `make bench`
(`.venv/bin/python -m benchmarks.run --cost-only benchmarks/results.json` reruns only the cost
and engine parts into the saved results; `--add-long benchmarks/results.json --long-loops a,b`
adds the longest cost turn of loops a `--long-loops` run left out).
The end-to-end figures are medians of interleaved rounds shown with their spread, and the
ratios are taken within a round; the in-process breakdown takes the least disturbed of several
samples, as its section says.
"""

_CURVE = """## Where a request's time goes (in-process)

A breakdown, not the headline figure (that is the end-to-end section above). One turn of N tool
steps, then a `submit`, in-process against `dspy_imp.testing.ScriptedLM`'s engine (answering at
once, and here keeping no copy of the requests). Timers around a few functions split each
request into *ours* (the state machine, bookkeeping, and `ReActAdapter`'s hooks: rendering the
request, reading the reply), *DSPy's plumbing* (`Predict`, the adapter base and `dspy.LM`, which
for the default engine converts the whole message list into an lm15 request and checks it, every
request) and the scripted engine (left out: it stands for the provider). Each of our values is
the least disturbed of the requests sent with at least 95% of the N steps recorded, taken from
repeated turns when the turn is short (at least 40 requests: one from each 10-step turn, 51 from
the 1,000-step turn); each measurement runs in a new Python process, so none inherits the heap
another left behind. `dspy.ReActV2` is timed whole, minus the engine, as the least disturbed of
the last 20 requests of its N-step turn, and only as far as its column goes (its per-request
cost grows with the history, so a 1,000-step turn alone would take many minutes).

![ms per request against recorded steps](performance.svg)

{curve}

Why ours no longer re-renders the history: within a turn every request is the previous one plus the newest
exchange, so the renderer keeps the messages of settled steps in a per-turn memo
and renders only what is new; the memo is keyed on the step
records themselves (by identity) and on the request's rendering context, and a request
whose context differs renders from scratch, so no byte of any request changes. Each tool
argument's JSON-schema validator is built once, instead of
`jsonschema.validate` re-checking the schema against its meta-schema on every call.
A request's steps are a window on the turn's one append-only step list,
never a copy, so the memo's check that a request starts with the
very steps it rendered takes constant time, as does finding which replayable reasoning
blocks the history holds; the request pinned on a prediction for fine-tuning is the sent
list itself, not a copy.

On `dspy.LM`'s native engine, for every request DSPy read the whole OpenAI-style message
list into an lm15 request (`_ingest_messages`) and walked it to refuse unencodable text
(`_check_encodable`), checked every message again at each of the three copies it makes of
that request, and lm15 wrote every message into the body again (`_build_messages`) and
encoded the whole body as JSON. Within a turn each of these is done once per message: a row
equal to the one the request before held at its place (compared with a copy made only of
dicts, lists, strings and `None`) keeps what lm15 made of it; a request whose leading lm15
messages are the very objects the request before held keeps the wire messages lm15 wrote of
them and their JSON, and lm15 writes and encodes only the new ones (a message holding media,
the one at a cache breakpoint, another writer or system prompt: written again); a tuple of
messages that passed lm15's check is not walked again; anything else goes through DSPy's and
lm15's own functions (the one place that touches DSPy's private names), so no byte of any
request changes. What still grows with the history per request runs in C: the comparison of
the rows with their copies, finding how many leading messages are the same objects, joining
the body's bytes and sending them; Python's garbage collector also walks a heap that grows
with DSPy's `lm.history`, which keeps every request. On LiteLLM (`engine="litellm"`), DSPy's
deep copy of each attempt's request is made in C (`marshal`) when its rows are plain data;
LiteLLM's and the OpenAI SDK's own passes over the messages (their checks, copies and the
body's JSON) still grow with the history.
"""

_TARGETS = """## In-process targets

{targets}

{flat}

The fifth line is bounded below by DSPy's plumbing: at that history length the plumbing by
itself costs the share of `dspy.ReActV2` in the sixth line, whatever our own part costs
(seventh line); the whole loop's ratio is about the sum of the two. The way around that
plumbing that public API offers, a typed `lm15.Request` built incrementally and sent as
`lm(request)`, is not taken: measured in development (a 100-step message list), DSPy's
conversion and checks cost 3.1 ms that way down to 1.0 ms (at 1,000 steps 24 ms against 12 ms,
since DSPy still converts a typed request to a dict, checks it and snapshots it), but DSPy's
LM callbacks would then receive a `Request` and return an `lm15.Response` instead of the
message list and outputs they see today, `lm.history` would record no options, and the
request could carry neither a deadline's `timeout` nor DSPy's JSON fallback
(`docs/decisions.md`).
"""

_LOOPS = """## Same model, five loops: what each sends

The end-to-end server and turns, one turn per loop and N (time is the end-to-end section's).
*kB* and *tokens sent* are the request bodies of one turn (tokens: `cl100k_base` over the
serialized tools and messages, an estimate of prompt tokens), split as the token ledger below
splits them. *Prefix share* is, for each
request after the first, the share of its prompt (tools, then messages, serialized) that is
a byte-identical prefix of the previous request's: what a provider's prompt cache can
reuse; the mean and the lowest over the turn. *Peak MB* is `tracemalloc`'s peak over one
separate turn (the client's memory, not the server's).

{loops}
"""

_SCENARIOS = """## Requests per answered turn

Each cell: requests the turn sent (failed ones included), and whether it ended with a usable
answer. The outputs are typed here (an answer and a confidence; for *enum output*, an answer
that must be `yes` or `no`), so every loop needs its own way to hand them over. The scripted
model: *thought then answer* writes a thought, then answers; *thought then tool* writes a
thought, calls a tool, then answers; *step limit* calls a tool every time, and the loop's
step limit is 3 (pydantic-ai: `request_limit=3`; Agents SDK: `max_turns=3`); *provider
error* gets one HTTP 500 on the second request; *named choice refused* gets an HTTP 400 for
any request naming a tool in `tool_choice` (n/a: the loop never names one); *enum output*
first answers `maybe`; *never submits* only ever writes text. A model under `tool_choice`
`"required"` or a JSON-schema structured output writes no bare thought; a named choice is
obeyed; a ChatAdapter request gets its reply in field markers (as in the end-to-end section).

{scenarios}
"""

_PROFILE = """## Where each loop spends a turn

One N-step turn of the comparison above under `cProfile`, each function's own time summed
by the package it lives in (`builtins` are C functions such as `isinstance` and JSON
encoding, called from all of them). Profiling slows every call, so only shares are shown.

{profile}
"""

_PARALLEL = """## Parallel tools

The scripted model asks for several calls of a tool that sleeps, in one reply, then
submits (`benchmarks/parallel.py`): the turn with `parallel_tools=False` against
`parallel_tools=True`, sync (a bounded thread pool) and under `acall` (tasks).

{parallel}
"""


_FLAT_COMMON = """The first two lines compare our own per-request cost at the longest history with a short one,
in the same run (the second with DSPy's `lm.history` off: `dspy.configure(disable_history=True)`,
which also hides the finish reason and usage from the loop). Our work per request does not grow
with the history: each request renders only the newest step and the one before it (asserted
in `tests/test_render_memo.py`); its steps are a window on the turn's step list, not a copy,
and the memo's prefix check and the scan for replayable reasoning take constant time on it
(`tests/test_window.py`); the usage meter keeps running sums. What is left in proportion to
the history is copying references into the two lists DSPy receives: the request's message
list and the `dspy.History` snapshot a trace keeps of each request."""

_FLAT_MET = (
    _FLAT_COMMON
    + """ The third line re-runs the short turn with
{churn} small objects built and dropped per request by its engine (see below); the fourth
re-runs the last request's rendering by itself, at both lengths."""
)

_FLAT_MISSED = (
    _FLAT_COMMON
    + """

Where the first line is above its limit, the rest is interference, not work. Between two of
our calls in the long turn, DSPy's plumbing builds, checks and drops lm15 objects for the
whole message list (the plumbing column), and our next calls run on cold caches: in
development, no garbage collection ran inside our part of the least disturbed long-turn
requests (checked with `gc.callbacks`), and functions whose work is constant (pinning the LM,
choosing the adapter) slowed by the same factor as the rest. The third line is the control:
the short turn again, its scripted engine building and dropping {churn} small objects per
request (about as long as DSPy's plumbing takes per request at the longest history; the
engine's time is left out of ours), against the long turn. The fourth line re-runs the last
request's rendering (`ReActAdapter.format`, the largest of our hooks) by itself, same request
and memo, at both lengths. The first line charges the interference to us, as it is time our
code takes in that turn; the third compares like with like."""
)


def _flat_text(targets: dict[str, Any]) -> str:
    met = targets["flat"]["met"] and targets["flat_no_history"]["met"]
    churn = (targets.get("flat_matched") or {}).get("churn")
    return (_FLAT_MET if met else _FLAT_MISSED).format(churn=_f(churn) if churn else "a heap of")


def page(results: dict[str, Any]) -> str:
    machine = results["machine"]
    parts = [
        _INTRO.format(elapsed=results["elapsed_s"], **machine),
        report_summary.summary_page(results),
        report_cost.cost_page(results),
        report_e2e.e2e_page(results),
        _CURVE.format(curve=curve_table(results)),
        _TARGETS.format(targets=targets_table(results), flat=_flat_text(results["targets"])),
        _LOOPS.format(loops=loops_table(results)),
        _SCENARIOS.format(scenarios=scenarios_table(results)),
        report_e2e.ledger_page(results),
        _PROFILE.format(profile=profile_table(results)),
        _PARALLEL.format(parallel=parallel_table(results)),
    ]
    if "context" in results:
        parts.append(_CONTEXT.format(context=context_table(results)))
    web = report_web.saved_section()  # `make bench-web`'s, kept when `make bench` rewrites the page
    if web is not None:
        parts.append(web)
    from . import web_handover  # the hand-over's, kept the same way (imported here: it needs the bench extra)

    handover = web_handover.saved_section()
    if handover is not None:
        parts.append(handover)
    return "\n".join(parts)


_CONTEXT = """## Long conversations: the prefix under a context policy

A scripted model reads three 20 kB pages per call under a 32k-token window with
`dspy_imp.Context(window=32_000)` (`benchmarks/context_prefix.py`). A request *breaks the prefix*
when it shares less than all but the last message of the request before it; each tier change
(`metadata.context`) may break it once, and the rest append (see `docs/context.md`).

{context}
"""
