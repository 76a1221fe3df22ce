"""The cost tables and targets: dollars per answered turn, with and without caching, and connections per turn."""

from __future__ import annotations

from typing import Any

from .costs import CLAUDE_KINDS, COST_LOOPS, OURS, OURS_OFF, PRICES, THINKING_LENGTHS, dollars

SAVING_LIMIT = 0.3  # ours with caching against ours without, a 100-step turn on Claude Sonnet 4.5
SAVING_PRICE, SAVING_STEPS = "Claude Sonnet 4.5", 100
PEER_CACHING = "pydantic-ai"  # the peer with a caching capability of its own on Claude


def _usd(value: float | None, scale: float = 1e6, digits: int = 0) -> str:
    return "–" if value is None else f"{value * scale:,.{digits}f}"


def _table(header: list[str], rows: list[list[str]], align: str) -> str:
    rule = ["---" if a == "l" else "---:" for a in align]
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join(rule) + " |"]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])


def targets(cost: dict[str, Any]) -> dict[str, Any]:
    """Caching's saving on a long Claude turn, ours against pydantic-ai there, ours per answered turn."""
    out: dict[str, Any] = {}
    loops = cost["prices"].get(SAVING_PRICE, {}).get("loops", {})
    key = f"steps:{SAVING_STEPS}"
    ours, peer = loops.get("dspy_imp", {}).get(key), loops.get(PEER_CACHING, {}).get(key)
    if ours and ours["cached"] is not None and ours["uncached"]:
        ratio = ours["cached"] / ours["uncached"]
        out["saving"] = {"ratio": ratio, "limit": SAVING_LIMIT, "met": ratio <= SAVING_LIMIT, **ours}
    if ours and peer:
        below = peer["cached"] is None or (ours["cached"] is not None and ours["cached"] < peer["cached"])
        out["below_peer"] = {"ours": ours["cached"], "peer": peer["cached"], "met": below}
    for label, entry in cost["prices"].items():
        loops = entry["loops"]
        for name, prefix in (("dspy_imp", "scenarios"), (OURS_OFF, "scenarios_off")):
            mine = loops.get(name, {}).get("scenarios_cached")
            if name not in loops:
                continue
            peers = {k: v["scenarios_cached"] for k, v in loops.items() if k not in OURS}
            met = mine is not None and all(v is None or mine <= v for v in peers.values())
            out[f"{prefix}:{label}"] = {"ours": mine, "peers": peers, "met": met}
        if PRICES[label][1] not in CLAUDE_KINDS or "scenarios_thinking" not in loops.get("dspy_imp", {}):
            continue
        for tokens in THINKING_LENGTHS:  # each loop's own thinking billed, once per assistant turn
            mine = loops["dspy_imp"]["scenarios_thinking"]["turn"][str(tokens)]
            peers = {
                k: (v.get("scenarios_thinking") or {}).get("turn", {}).get(str(tokens), v["scenarios_cached"])
                for k, v in loops.items()
                if k not in OURS
            }
            met = all(v is None or mine <= v for v in peers.values())
            out[f"scenarios_thinking:{label}:{tokens}"] = {"ours": mine, "peers": peers, "met": met, "tokens": tokens}
    return out


def _met(value: bool) -> str:
    return "yes" if value else "**no**"


def targets_table(results: dict[str, Any]) -> str:
    t = results["targets_cost"]
    rows = []
    if "saving" in t:
        s = t["saving"]
        rows.append(
            [
                f"`dspy_imp`, one {SAVING_STEPS}-step turn on {SAVING_PRICE}: with caching / without",
                f"≤ {s['limit']:.2f}",
                f"{s['ratio']:.2f} (µ$ {_usd(s['cached'])} / {_usd(s['uncached'])})",
                _met(s["met"]),
            ]
        )
    if "below_peer" in t:
        b = t["below_peer"]
        rows.append(
            [
                f"the same turn, `dspy_imp` against `{PEER_CACHING}` with its caching on (µ$)",
                f"< {_usd(b['peer'])}",
                _usd(b["ours"]),
                _met(b["met"]),
            ]
        )
    for label in PRICES:
        found = [
            (t.get(f"scenarios:{label}"), "`dspy_imp` (its default), no thinking billed"),
            *(
                (t.get(f"scenarios_thinking:{label}:{n}"), f"`dspy_imp` (its default), {n} thinking tokens billed")
                for n in THINKING_LENGTHS
            ),
            (t.get(f"scenarios_off:{label}"), f"`{OURS_OFF}`"),
        ]
        for s, who in found:
            if s is None:
                continue
            peers = ", ".join(f"{k} {_usd(v)}" for k, v in s["peers"].items())
            rows.append(
                [
                    f"µ$ per answered turn, six scenarios, {label}, {who}: no higher than any peer's",
                    f"≤ {peers}",
                    _usd(s["ours"]),
                    _met(s["met"]),
                ]
            )
    return _table(["target", "limit", "measured", "met"], rows, "lrrr")


def summary_table(results: dict[str, Any]) -> str:
    """Per price and loop: µ$ per answered turn over the six scenarios, and per long turn, with caching (without)."""
    cost = results["cost"]
    rows = []
    for label, entry in cost["prices"].items():
        for loop in COST_LOOPS:
            r = entry["loops"].get(loop)
            if r is None:
                continue
            cells = [f"{_usd(r['scenarios_cached'])} ({_usd(r['scenarios_uncached'])})"]
            for steps in cost["long"]:
                turn = r.get(f"steps:{steps}")
                if not turn:
                    cells.append("–")
                elif not turn["answered"]:
                    cells.append("no answer")
                else:
                    cells.append(f"{_usd(turn['cached'], 1e3, 1)} ({_usd(turn['uncached'], 1e3, 1)})")
            rows.append([label, f"`{loop}`", *cells, f"{r['opened_per_turn']:.2f}"])
    header = [
        "prices",
        "loop",
        "µ$ per answered turn, six scenarios: cached (uncached)",
        *(f"m$ per {steps:,}-step turn: cached (uncached)" for steps in cost["long"]),
        "connections opened per turn",
    ]
    return _table(header, rows, "ll" + "r" * (len(cost["long"]) + 2))


def scenarios_table(results: dict[str, Any], label: str = SAVING_PRICE) -> str:
    """Per scenario and loop, at ``label``'s prices: requests sent, µ$ with caching, and whether it answered."""
    cost = results["cost"]
    model, kind, key = PRICES[label]
    loops = [loop for loop in COST_LOOPS if any(r["loop"] == loop for r in cost.get("rows", []))]
    rows = []
    for scenario in cost["scenarios"]:
        cells = []
        for loop in loops:
            row = next((r for r in cost["rows"] if (r["loop"], r["model"], r["what"]) == (loop, model, scenario)), None)
            counts = (row or {}).get("usage", {}).get(kind)
            if row is None or counts is None:
                cells.append("–")
                continue
            mark = "" if row["answered"] else ", no answer"
            cells.append(f"{row['requests']} · {_usd(dollars(counts, key))}{mark}")
        rows.append([f"*{scenario.replace('_', ' ')}*", *cells])
    return _table(["scenario", *(f"`{loop}`" for loop in loops)], rows, "l" + "r" * len(loops))


def _thinking_cells(figures: dict[str, Any] | None, mode: str, scale: float, digits: int) -> str:
    if not figures:
        return "–"
    return " / ".join(_usd(figures[mode][str(n)], scale, digits) for n in THINKING_LENGTHS)


def thinking_table(results: dict[str, Any]) -> str:
    """Claude prices, every loop: the six scenarios per answered turn and the 100-step turn with no
    thinking billed, and with each thinking length billed once per assistant turn and per request."""
    cost = results["cost"]
    rows = []
    steps = min(cost["long"], default=None)
    for label, (_, kind, _) in PRICES.items():
        if kind not in CLAUDE_KINDS:
            continue
        for loop in COST_LOOPS:
            r = cost["prices"].get(label, {}).get("loops", {}).get(loop)
            if r is None:
                continue
            turn = r.get(f"steps:{steps}") or {}
            cells = [
                _usd(r["scenarios_cached"]),
                _thinking_cells(r.get("scenarios_thinking"), "turn", 1e6, 0),
                _thinking_cells(r.get("scenarios_thinking"), "request", 1e6, 0),
                _usd(turn.get("cached"), 1e3, 1),
                _thinking_cells(turn.get("with_thinking"), "turn", 1e3, 1),
                _thinking_cells(turn.get("with_thinking"), "request", 1e3, 1),
            ]
            rows.append([label, f"`{loop}`", *cells])
    lengths = " / ".join(f"{n:,}" for n in THINKING_LENGTHS)
    header = [
        "prices",
        "loop",
        "µ$ per answered turn, six scenarios, no thinking billed",
        f"the same, {lengths} thinking tokens, once per assistant turn",
        "the same, per request (interleaved)",
        f"m$ per {steps:,}-step turn, no thinking billed" if steps else "m$ per long turn",
        f"the same, {lengths} thinking tokens, once per assistant turn",
        "the same, per request (interleaved)",
    ]
    return _table(header, rows, "llrrrrrr") if rows else ""


def connections_table(results: dict[str, Any]) -> str:
    cost = results["cost"]
    rows = []
    for label, entry in cost["prices"].items():
        if PRICES[label][1] == "deepseek":
            continue  # the same run as OpenAI's
        for loop, r in entry["loops"].items():
            for steps in cost["long"]:
                turn = r.get(f"steps:{steps}")
                if turn:
                    rows.append(
                        [
                            PRICES[label][0],
                            f"`{loop}`",
                            f"{steps:,}",
                            f"{turn['requests']:,}",
                            str(turn["connections"]),
                            str(turn["opened"]),
                        ]
                    )
    return _table(["model", "loop", "steps", "requests", "connections used", "opened in the turn"], rows, "llrrrr")


_COST = """## What a turn costs

Every loop runs the six shared scenarios ({shared}) and long turns of N tool steps against the
bench server three times (`benchmarks/costs.py`): speaking Anthropic's Messages API as Claude
Sonnet 4.5 and as Claude Haiku 4.5, whose cache minimums differ (1,024 and 4,096 tokens), and
speaking Chat Completions as `gpt-4o-mini`, priced at OpenAI's and at DeepSeek's rates. Each
loop runs as its users run it, its own prompt caching on where it has one: `dspy_imp` with its
defaults; `dspy.ReActV2` with DSPy's `prompt_cache=dspy.lm15.CacheConfig(prefix="history")` on
Claude; pydantic-ai with its `Caching()` capability on Claude; the Agents SDK, which has no
cache setting, through its `LitellmModel` on Claude. {longest}

The server reports each request's usage as the provider does (`benchmarks/caches.py`): on
Anthropic, `cache_read_input_tokens` for the longest prefix an earlier breakpoint wrote (found
at one of the request's `cache_control` breakpoints or up to 20 blocks before one),
`cache_creation_input_tokens` for the rest up to its last breakpoint at or above the model's
minimum, `input_tokens` for what follows, and a 400 for more than four breakpoints; on Chat
Completions, `prompt_tokens_details.cached_tokens` for the longest prefix an earlier request
sent, from 1,024 tokens in 128-token steps (OpenAI), and in 64-token units for DeepSeek
(`prompt_cache_hit_tokens`). Tokens are `cl100k_base` counts of each block, an estimate for
every provider; every turn starts with a cold cache. On Anthropic a request with `tools` also
pays the tool-use system prompt Anthropic puts in front of them, read and written with the
prefix behind it. Anthropic has published two tables of it: 346 tokens under `tool_choice` `auto`
and 313 under `any` or `tool` (the Claude 4 models), and a later one, 496 under `auto`/`none` and
588 under `any`/`tool`, which reverses which choice is cheaper. The Claude rows bill the first;
the rows marked *496/588* bill the same requests under the second. Output tokens are counted from
what the model wrote (its text, each call's name and arguments), as the provider bills them, not
from the Chat Completions JSON around it. Dollars use LiteLLM's
price map (input, cache read, cache write and output prices), replies included; *uncached*
prices the same requests with every prompt token at the input price. Scenario cost is the
dollars summed over the six scenarios divided by the turns that ended with an answer (µ$:
millionths of a dollar; m$: thousandths); failed requests are not billed.

{table}

{targets}

Per scenario at Claude Sonnet 4.5 prices: requests sent (failed ones included) · µ$ with caching.
Where `dspy_imp` (its default) pays more than a peer, it is one of four things. In *thought then
answer* the bench model writes a thought first when `tool_choice` is `"auto"`; under
`finish="auto"` the thought ends the step and the forced submit follows: two requests, where
pydantic-ai (which sends `tool_choice="required"` when its output is a tool) and the Agents SDK
(structured output) get the answer in one. The default keeps `"auto"` on ordinary steps: on
Claude they ask for thinking, DSPy's default, and Anthropic refuses thinking with a forced
choice. In *step limit* `dspy_imp` answers with the forced submit after the third step where the
peers stop without an answer. In *never submits* it sends the forced submit and then the
extraction request before giving up. And on every ordinary step, `tool_choice="auto"` pays
Anthropic's 346-token tool-use prompt where pydantic-ai's `"required"` pays 313.
`thinking="off"` asks for no thinking, so under `finish="auto"` with `submit` its steps go with
`tool_choice="required"` (a bare thought would get the forced submit anyway): *thought then
answer* is one request, and each step pays the 313-token prompt. What is left between it and
pydantic-ai on a request of the same history is about 14 tokens (the input's `[[ ## question ## ]]`
header and the line saying how the turn ends, against pydantic-ai's longer output-tool
description). Under the later table (496 under `auto`, 588 under `any`) a forced step costs 92
tokens more, not 33 less: there `thinking="off"` is above the default, and still below every peer.

{scenarios}

**Thinking, billed as Anthropic documents it.** The bench model returns no thinking, so the
figures above bill none. On a real Claude, the thinking that `dspy_imp` (its default,
`thinking="every"`) and `dspy.ReActV2` ask for on each ordinary step (`reasoning_effort="low"`:
`budget_tokens` 2,048 on both engines; pydantic-ai and the Agents SDK ask for none) is billed as
output tokens. Without Anthropic's interleaved-thinking beta, which none of these loops sends,
Claude thinks once per assistant turn: on the first request after the user's message that asks
for it (a tool-use loop is one turn); with the beta (`thinking="interleaved"`) on every request
that asks. The table bills 50, 200 and 500 thinking tokens each time the model thinks, as output,
and the block sent back on each later request of the same assistant turn at the cache-read
price, counted from each request the loop sent (`benchmarks/costs.py`, `thinking_counts`). The
targets above are met only where they hold on every row. `thinking="off"` (or
`dspy.LM(..., reasoning_effort=None)`) turns it off: the `{off}` rows.

{thinking}

Connections: the ones that carried each long turn's requests, and of those the ones opened
during the turn, counted at the server (a loop built for the turn; a connection its client
kept from an earlier turn is used, not opened).

{connections}
"""


def cost_rows(results: dict[str, Any]) -> bool:
    return bool(results.get("cost", {}).get("rows"))


def cost_page(results: dict[str, Any]) -> str:
    if "cost" not in results:
        return ""
    shared = ", ".join(f"*{s.replace('_', ' ')}*" for s in results["cost"]["scenarios"])
    longest = results["cost"].get("longest") or {}
    text = ""
    if longest.get("models"):
        text = f"The {longest['steps']:,}-step turn runs on {', '.join(longest['models'])} only"
        loops = longest.get("loops")
        partial = loops and set(COST_LOOPS) - set(loops)
        text += f", for {', '.join(f'`{x}`' for x in loops)} in this run (`--long-loops`)." if partial else "."
    return _COST.format(
        longest=text,
        shared=shared,
        table=summary_table(results),
        targets=targets_table(results),
        scenarios=scenarios_table(results) if cost_rows(results) else "",
        thinking=thinking_table(results),
        off=OURS_OFF,
        connections=connections_table(results),
    )
