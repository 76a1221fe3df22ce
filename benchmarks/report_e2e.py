"""The end-to-end tables, the token ledger's tables and the speed targets (from the results dict)."""

from __future__ import annotations

from typing import Any

from .ledger import CACHES, PARTS, made_hosted_calls

RATIO_LIMIT = 0.3  # ours against dspy.ReActV2, per request at 100 steps, end to end
AHEAD_LIMIT = 3.3  # pydantic-ai and the Agents SDK against ours, per turn (the cost issue raised it from 3)
FLAT_LIMIT = 10.0  # ours per request at the longest history against 10 steps
SHARED = ("thought_then_answer", "thought_then_tool", "step_limit", "provider_error", "enum_output", "never_submits")


def _f(value: Any, digits: int = 2) -> str:
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    return f"{value:,.{digits}f}"


def _spread(entry: dict[str, float] | None, digits: int = 2) -> str:
    if not entry:
        return "–"
    return f"{_f(entry['median'], digits)} ({_f(entry['low'], digits)}–{_f(entry['high'], digits)})"


def _table(header: list[str], rows: list[list[str]], align: str | None = None) -> str:
    align = align or "l" + "r" * (len(header) - 1)
    rule = ["---" if a == "l" else "---:" for a in align]
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join(rule) + " |"]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])


# -- end to end -------------------------------------------------------------------------------


def e2e_table(results: dict[str, Any]) -> str:
    rows = []
    for r in results["e2e"]["table"]:
        rows.append(
            [
                f"N={r['steps']}",
                f"`{r['loop']}`",
                _f(r["requests"]),
                _spread(r["request_ms"]),
                _spread(r["turn_ms"], 1),
                _f(r["answered"]),
            ]
        )
    header = ["turn", "loop", "requests", "ms/request (low–high)", "ms/turn (low–high)", "answered"]
    return _table(header, rows, "llrrrr")


def e2e_ratios_table(results: dict[str, Any]) -> str:
    rows = []
    for r in results["e2e"]["ratios"]:
        what = "per request" if r["what"] == "request" else "per turn"
        rows.append([f"N={r['steps']}", f"`{r['top']}` / `{r['bottom']}`", what, _spread(r["ratio"])])
    for r in results["e2e"]["flat"]:
        rows.append([f"N={r['long']} / N={r['short']}", f"`{r['loop']}`", "per request", _spread(r["ratio"])])
    return _table(["turn", "ratio", "of", "median over rounds (low–high)"], rows, "lllr")


# -- the token ledger -------------------------------------------------------------------------


def ledger_rows(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Per loop over the shared scenarios: sums, answered turns, and the per-answered-turn figures."""
    out = []
    for loop, entry in results["ledger"]["loops"].items():
        out.append({"loop": loop, **entry})
    return out


def _hosted_cells(totals: dict[str, Any], shown: bool, usd: bool = True) -> list[str]:
    """A row's hosted calls (and their µ$), when the table shows them: a loop that made none shows 0."""
    if not shown:
        return []
    calls = totals.get("hosted_calls")
    cells = [_f(calls, 2) if calls is not None else "0"]
    if usd:
        fees = totals.get("hosted_usd")
        cells.append(_f(fees * 1e6, 0) if fees is not None else "0")
    return cells


def ledger_table(results: dict[str, Any]) -> str:
    rows = []
    shown = made_hosted_calls([r["sum"] for r in ledger_rows(results)])
    for r in ledger_rows(results):
        per = r["per_answered"]
        parts = [_f(per[p], 0) if per[p] is not None else "–" for p in PARTS]
        cached = [_f(100 * r["sum"][f"{n}_cached"] / r["sum"]["prompt"], 0) for n in CACHES]
        usd = [_f(per[f"{n}_usd"] * 1e6, 0) if per[f"{n}_usd"] is not None else "–" for n in CACHES]
        rows.append(
            [
                f"`{r['loop']}`",
                _f(r["answered"]),
                _f(r["sum"]["requests"]),
                _f(per["requests"], 2) if per["requests"] is not None else "–",
                _f(per["prompt"], 0) if per["prompt"] is not None else "–",
                *parts,
                _f(per["output"], 0) if per["output"] is not None else "–",
                *cached,
                *usd,
                *_hosted_cells(per, shown),
            ]
        )
    header = [
        "loop",
        "answered",
        "requests",
        "requests/answered",
        "prompt tokens/answered",
        *(f"{p}/answered" for p in PARTS),
        "reply tokens/answered",
        *(f"{n} cached %" for n in CACHES),
        *(f"{n} µ$/answered" for n in CACHES),
        *(["hosted calls/answered", "hosted µ$/answered"] if shown else []),
    ]
    return _table(header, rows)


def ledger_scenarios_table(results: dict[str, Any]) -> str:
    rows = []
    shown = made_hosted_calls([r["totals"] for r in results["ledger"]["scenarios"]])
    for r in results["ledger"]["scenarios"]:
        t = r["totals"]
        rows.append(
            [
                r["scenario"].replace("_", " "),
                f"`{r['loop']}`",
                _f(t["requests"]),
                _f(r["answered"]),
                *(_f(t[p]) for p in PARTS),
                _f(t["prompt"]),
                _f(t["output"]),
                *_hosted_cells(t, shown, usd=False),
            ]
        )
    header = [
        "scenario",
        "loop",
        "requests",
        "answered",
        *PARTS,
        "prompt",
        "reply",
        *(["hosted calls"] if shown else []),
    ]
    return _table(header, rows, "ll" + "r" * (8 + shown))


def ledger_steps_table(results: dict[str, Any]) -> str:
    rows = []
    shown = made_hosted_calls([r["totals"] for r in results["ledger"]["steps"]])
    for r in results["ledger"]["steps"]:
        t = r["totals"]
        rows.append(
            [
                f"N={r['steps']}",
                f"`{r['loop']}`",
                _f(t["requests"]),
                *(_f(t[p]) for p in PARTS),
                _f(t["prompt"]),
                _f(100 * t["openai_cached"] / t["prompt"], 0),
                _f(t["openai_usd"] * 1e6, 0),
                *_hosted_cells(t, shown),
            ]
        )
    header = ["turn", "loop", "requests", *PARTS, "prompt", "openai cached %", "openai µ$/turn"]
    header += ["hosted calls", "hosted µ$/turn"] if shown else []
    return _table(header, rows, "ll" + "r" * (8 + 2 * shown))


# -- targets ----------------------------------------------------------------------------------


def targets(results: dict[str, Any]) -> dict[str, Any]:
    e2e = results["e2e"]
    out: dict[str, Any] = {}
    for r in e2e["ratios"]:
        if r["what"] == "request" and r["steps"] == max(x["steps"] for x in e2e["ratios"]):
            value = r["ratio"]["median"]
            out[f"request_vs_stock:{r['top']}"] = {
                "steps": r["steps"],
                "ratio": value,
                "limit": RATIO_LIMIT,
                "met": value <= RATIO_LIMIT,
                "spread": r["ratio"],
            }
        if r["what"] == "turn" and r["bottom"] == "dspy_imp":
            value = r["ratio"]["median"]
            out[f"ahead:{r['top']}:{r['steps']}"] = {
                "steps": r["steps"],
                "ratio": value,
                "limit": AHEAD_LIMIT,
                "met": value >= AHEAD_LIMIT,
                "spread": r["ratio"],
            }
    for r in e2e["flat"]:
        value = r["ratio"]["median"]
        out[f"flat:{r['loop']}"] = {
            "short": r["short"],
            "long": r["long"],
            "ratio": value,
            "limit": FLAT_LIMIT,
            "met": value <= FLAT_LIMIT,
            "spread": r["ratio"],
        }
    loops = results["ledger"]["loops"]
    ours = loops["dspy_imp"]["per_answered"]
    peers = {k: v["per_answered"] for k, v in loops.items() if not k.startswith("dspy")}
    tokens_met = all(p["prompt"] is None or ours["prompt"] < p["prompt"] for p in peers.values())
    requests_met = all(p["requests"] is None or ours["requests"] <= p["requests"] for p in peers.values())
    out["tokens"] = {"ours": ours["prompt"], "peers": {k: v["prompt"] for k, v in peers.items()}, "met": tokens_met}
    out["requests"] = {
        "ours": ours["requests"],
        "peers": {k: v["requests"] for k, v in peers.items()},
        "met": requests_met,
    }
    return out


def targets_table(results: dict[str, Any]) -> str:
    t = results["targets_e2e"]
    rows = []
    for key, v in t.items():
        if key.startswith("request_vs_stock:"):
            loop = key.split(":", 1)[1]
            stock = "dspy.ReActV2 (litellm)" if "litellm" in loop else "dspy.ReActV2"
            rows.append(
                [
                    f"`{loop}` / `{stock}`, per request at {v['steps']} steps",
                    f"≤ {v['limit']}",
                    _spread(v["spread"]),
                    _f(v["met"]),
                ]
            )
        elif key.startswith("ahead:"):
            _, peer, steps = key.split(":")
            rows.append(
                [
                    f"`{peer}` / `dspy_imp`, per turn at {steps} steps",
                    f"≥ {v['limit']:g}",
                    _spread(v["spread"]),
                    _f(v["met"]),
                ]
            )
        elif key.startswith("flat:"):
            loop = key.split(":", 1)[1]
            rows.append(
                [
                    f"`{loop}` per request, {v['long']:,} / {v['short']} steps",
                    f"≤ {v['limit']:g}",
                    _spread(v["spread"], 1),
                    _f(v["met"]),
                ]
            )
    tok, req = t["tokens"], t["requests"]
    peers = ", ".join(f"{k} {_f(p, 0)}" for k, p in tok["peers"].items())
    rows.append(
        [
            "prompt tokens per answered turn (shared scenarios), below every peer's",
            f"< {peers}",
            _f(tok["ours"], 0),
            _f(tok["met"]),
        ]
    )
    peers = ", ".join(f"{k} {_f(p)}" for k, p in req["peers"].items())
    rows.append(
        ["requests per answered turn, no higher than any peer's", f"≤ {peers}", _f(req["ours"]), _f(req["met"])]
    )
    return _table(["target", "limit", "measured: median (low–high)", "met"], rows, "lrrr")


# -- the page's sections ----------------------------------------------------------------------

_E2E = """## End to end

Every loop runs the way its users run it, against one scripted OpenAI-compatible server on
127.0.0.1 (`benchmarks/server.py`, its own process, answering at once). How each is fed
(`benchmarks/loops.py`):

- `dspy_imp` and `dspy.ReActV2`: a real `dspy.LM("openai/gpt-4o-mini", api_base=..., api_key=...,
  cache=False)`, on the default native lm15 engine and with `engine="litellm"` (LiteLLM, then the
  OpenAI SDK over httpx); `dspy.ReActV2` with `ChatAdapter(use_native_function_calling=True)`.
- pydantic-ai: `OpenAIChatModel` over an `OpenAIProvider(base_url=..., api_key=...)`; the Agents
  SDK: `OpenAIChatCompletionsModel` over an `AsyncOpenAI` client, tracing off.
- The turn: N calls of the same `look` tool, which every loop runs N times, then the answer in the
  loop's own form (plain text for `dspy_imp`, pydantic-ai and the Agents SDK with a `str` output;
  a `submit` call for `dspy.ReActV2`, whose signature has no text answer of its own kind).
- Each reply is shaped as the loop's real model writes it: a request that asks for ChatAdapter
  field markers (`dspy.ReActV2`'s "Respond with the corresponding output fields, starting with the
  field `[[ ## next_thought ## ]]`...") gets its text in those markers, ending on
  `[[ ## completed ## ]]`, beside the native tool calls; a structured-output request
  (`response_format` with a JSON schema) gets JSON and never a bare thought.

The server stamps each request when it has read its body and when it has written the reply
(`time.monotonic`, one clock for both processes). *ms/request* is the loop's time between a
reply and its next request: reading the reply, running the tool, building and sending the next
request (everything but the provider), the median over the requests sent with at least 90% of
the N steps recorded. *ms/turn* is the turn's wall time minus the server's time on its requests.
Each cell is the median over interleaved rounds (every round runs every loop once, in an order
rotated from round to round), with the lowest and the highest round in brackets.

{table}

Ratios are taken within each round (the two loops of a ratio ran minutes apart at most, under
the same load), then the median over rounds, with the lowest and highest round:

{ratios}

## Speed targets

{targets}
"""

_LEDGER = """## Token ledger

Where each loop's prompt tokens go over the shared scenarios above ({shared}), per answered
turn: every scenario's tokens summed, divided by the scenarios that ended with an answer
(`benchmarks/ledger.py`). *system* is the system messages, *tools* the tool definitions and any
structured-output schema, *history* the messages the previous request of the turn held at the
same place (replayed), *new* every other message; *reply tokens* are the scripted model's
replies as each loop's model writes them. Tokens are `cl100k_base` counts of the serialized
parts, an estimate for every provider. *Cached* is what each provider's automatic prompt cache
would reuse: the leading parts identical to the previous request's, from 1,024 tokens in 128-token
steps on OpenAI, in 64-token units on DeepSeek, and nothing on Anthropic: these are Chat
Completions requests, which carry no `cache_control` breakpoints (*What a turn costs* above runs
every loop on Anthropic's own API, with the usage it reports). Dollars (millionths per answered turn)
use LiteLLM's bundled price map: {prices}. Where a loop's provider ran hosted tools (`dspy_imp.hosted`:
searches, fetches), the tables add its *hosted calls*, as the turn's `metadata.usage.hosted_calls`
counts them, and their fees (µ$) at the providers' per-call prices; they are left out when no loop
made one.

{table}

Per scenario (tokens summed over the scenario's requests):

{scenarios}

Per N-step turn of the comparison above:

{steps}
"""


def e2e_page(results: dict[str, Any]) -> str:
    return _E2E.format(table=e2e_table(results), ratios=e2e_ratios_table(results), targets=targets_table(results))


def ledger_page(results: dict[str, Any]) -> str:
    shared = ", ".join(f"*{s.replace('_', ' ')}*" for s in results["ledger"]["shared"])
    prices = "; ".join(f"{name} `{cache.model}`" for name, cache in CACHES.items())
    return _LEDGER.format(
        shared=shared,
        prices=prices,
        table=ledger_table(results),
        scenarios=ledger_scenarios_table(results),
        steps=ledger_steps_table(results),
    )
