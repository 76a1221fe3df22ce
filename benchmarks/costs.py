"""What a turn costs a user: dollars per answered turn at each provider's cache prices, and connections per turn.

Every loop runs the six shared scenarios and long turns (N tool steps, then the answer) against
the bench server three times: speaking Anthropic's Messages API as Claude Sonnet 4.5 and as
Claude Haiku 4.5 (their cache minimums differ), and speaking Chat Completions as ``gpt-4o-mini``.
Each loop runs the way its users run it, its own prompt caching on where it has one
(``benchmarks.loops``). The server reports each request's usage as the provider does, from its
cache emulator (``benchmarks.caches``): Anthropic's cache reads and writes behind the request's
``cache_control`` breakpoints, OpenAI's and DeepSeek's automatic prefix caches.

Dollars come from LiteLLM's price map (``input_cost_per_token``, ``cache_read_input_token_cost``,
``cache_creation_input_token_cost``, ``output_cost_per_token``), replies included. *Without
caching* prices the same requests with every prompt token at the input price: what the turn
costs where nothing is cached. A scenario set's cost is its dollars summed over the scenarios,
divided by the turns that ended with an answer. Failed requests (the scripted 400s and 500s)
are not billed, as the providers do not bill them.

*Connections* are counted at the server: the connections that carried a turn's requests, and of
those the ones opened during the turn.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Sequence
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import litellm

from .server import BenchServer

Turn = Callable[[], bool]
SONNET, HAIKU, GPT = "claude-sonnet-4-5", "claude-haiku-4-5", "gpt-4o-mini"
# A price: (the model the loops call, the usage it is read from, the price-map key).
# The Claude rows bill Anthropic's tool-use system prompt from its first public table (346 tokens under
# ``auto``, 313 under ``any``/``tool``); the ``496/588`` rows bill the same requests under the later one.
PRICES: dict[str, tuple[str, str, str]] = {
    "Claude Sonnet 4.5": (SONNET, "anthropic", "claude-sonnet-4-5"),
    "Claude Sonnet 4.5, tool-use prompt 496/588": (SONNET, "anthropic_later", "claude-sonnet-4-5"),
    "Claude Haiku 4.5": (HAIKU, "anthropic", "claude-haiku-4-5"),
    "Claude Haiku 4.5, tool-use prompt 496/588": (HAIKU, "anthropic_later", "claude-haiku-4-5"),
    "OpenAI gpt-4o-mini": (GPT, "openai", "gpt-4o-mini"),
    "DeepSeek V3.2": (GPT, "deepseek", "deepseek-chat"),
}
CLAUDE_KINDS = ("anthropic", "anthropic_later")
OURS_OFF = "dspy_imp (thinking off)"
OURS = ("dspy_imp", OURS_OFF)  # never a peer of each other
COST_LOOPS = ("dspy_imp", OURS_OFF, "dspy.ReActV2", "pydantic-ai", "openai-agents")
# Thinking tokens a thinking model writes each time it thinks: the bench model writes none, so each
# Claude figure is also given with these billed (as output, and the block carried as cached input).
THINKING_LENGTHS = (50, 200, 500)
THINKING_MODES = ("turn", "request")  # once per assistant turn (no interleaved beta), or per request
SCENARIO_KINDS = {"enum_output": "enum"}
STEP_LIMIT = 3
USAGE_KEYS = ("input", "write", "read", "output")


def _answer(kind: str) -> dict[str, Any]:
    return {"answer": "yes" if kind == "enum" else "found", "confidence": 0.9}


def summed(stats: dict[str, Any]) -> dict[str, dict[str, int]]:
    """A turn's usage, summed over its billed requests, per usage kind (``anthropic``, ``openai``, ``deepseek``)."""
    out: dict[str, dict[str, int]] = {}
    later_usage = stats.get("usage_later") or [None] * len(stats["usage"])
    for usage, deepseek, later in zip(stats["usage"], stats["deepseek"], later_usage, strict=True):
        if usage is None:
            continue
        if "input_tokens" in usage:
            parts = {kind: _anthropic_counts(u) for kind, u in (("anthropic", usage), ("anthropic_later", later)) if u}
        else:
            prompt, cached = usage["prompt_tokens"], usage["prompt_tokens_details"]["cached_tokens"]
            hit = deepseek["prompt_cache_hit_tokens"]
            output = usage["completion_tokens"]
            parts = {
                "openai": {"input": prompt - cached, "write": 0, "read": cached, "output": output},
                "deepseek": {"input": prompt - hit, "write": 0, "read": hit, "output": output},
            }
        for kind, counts in parts.items():
            into = out.setdefault(kind, dict.fromkeys(USAGE_KEYS, 0))
            for key, value in counts.items():
                into[key] += value
    return out


def _anthropic_counts(usage: dict[str, int]) -> dict[str, int]:
    return {
        "input": usage["input_tokens"],
        "write": usage["cache_creation_input_tokens"],
        "read": usage["cache_read_input_tokens"],
        "output": usage["output_tokens"],
    }


def _starts_turn(body: dict[str, Any]) -> bool:
    """The request opens an assistant turn: its last message is the user's own (not tool results
    only). A tool-use loop is one assistant turn; Claude without the interleaved beta thinks at its start."""
    messages = body.get("messages") or []
    if not messages or messages[-1].get("role") != "user":
        return False
    content = messages[-1].get("content")
    if isinstance(content, str):
        return True
    return not all(isinstance(b, dict) and b.get("type") == "tool_result" for b in content or [])


def thinking_counts(bodies: Sequence[dict[str, Any]], betas: Sequence[str | None]) -> dict[str, int]:
    """How often a Claude turn's billed requests make the model think, as Anthropic documents it:
    without the interleaved-thinking beta once per assistant turn (the turn's first request, when it
    asks); with it, on every request that asks. ``carried_*``: the thinking blocks sent back, as input,
    on the later requests of the same assistant turn (a count of blocks, each as long as one thinking).

    ``turn``/``carried_turn`` are the turn as sent (the beta where a request carried it);
    ``request``/``carried_request`` the same requests as if every one carried the beta."""
    out = dict.fromkeys(("turn", "request", "carried_turn", "carried_request"), 0)
    in_turn = {"turn": 0, "request": 0}  # thinking blocks so far in the current assistant turn
    for body, beta in zip(bodies, betas, strict=True):
        if _starts_turn(body):
            in_turn = {"turn": 0, "request": 0}
        out["carried_turn"] += in_turn["turn"]
        out["carried_request"] += in_turn["request"]
        if not asks_thinking(body):
            continue
        interleaved = "interleaved-thinking" in (beta or "")
        if interleaved or _starts_turn(body):
            out["turn"] += 1
            in_turn["turn"] += 1
        out["request"] += 1
        in_turn["request"] += 1
    return out


def thinking_dollars(counts: dict[str, int], key: str, mode: str, tokens: int) -> float:
    """What ``tokens`` of thinking each time the model thinks adds to a turn: output tokens, and the
    carried blocks at the cache-read price (they sit in the cached prefix behind the breakpoints)."""
    entry = litellm.model_cost[key]
    read = entry.get("cache_read_input_token_cost") or entry["input_cost_per_token"]
    thought = counts.get(mode, 0) * entry["output_cost_per_token"]
    return tokens * (thought + counts.get(f"carried_{mode}", 0) * read)


def dollars(counts: dict[str, int], key: str, cached: bool = True) -> float:
    """The price of summed usage at ``key``'s prices; ``cached=False``: every prompt token at the input price."""
    entry = litellm.model_cost[key]
    rate = entry["input_cost_per_token"]
    read = entry.get("cache_read_input_token_cost") or rate
    write = entry.get("cache_creation_input_token_cost") or rate
    output = counts["output"] * entry["output_cost_per_token"]
    if not cached:
        return (counts["input"] + counts["write"] + counts["read"]) * rate + output
    return counts["input"] * rate + counts["write"] * write + counts["read"] * read + output


def asks_thinking(body: dict[str, Any]) -> bool:
    """The request asks the model to think (Anthropic's ``thinking``, or a ``reasoning_effort``)."""
    thinking = body.get("thinking")
    if isinstance(thinking, dict) and thinking.get("type") in ("enabled", "adaptive"):
        return True
    return body.get("reasoning_effort") not in (None, "none")


def run_one(server: BenchServer, turn: Turn, scenario: str, steps: int, answer: dict[str, Any]) -> dict[str, Any]:
    server.reset(scenario, steps, answer)
    answered = turn()
    stats = server.stats()
    rows = zip(stats["bodies"], stats["usage"], stats.get("betas") or [None] * len(stats["usage"]), strict=True)
    billed = [(json.loads(body), beta) for body, usage, beta in rows if usage]
    return {
        "answered": answered,
        "requests": len(stats["statuses"]),
        "thinking": sum(asks_thinking(body) for body, _ in billed),
        "thinking_counts": thinking_counts([b for b, _ in billed], [beta for _, beta in billed]),
        "connections": stats["connections"],
        "opened": stats["opened"],
        "usage": summed(stats),
    }


def measure(
    server: BenchServer,
    loops: dict[str, Callable[..., Turn]],
    scenarios: Sequence[str],
    long_steps: Sequence[int],
    models: Iterable[str] = (SONNET, HAIKU, GPT),
    only: dict[int, list[str]] | None = None,
    long_loops: Sequence[str] | None = None,
    names: Sequence[str] = COST_LOOPS,
) -> list[dict[str, Any]]:
    """Every loop (of ``names``), on every model: each scenario once, each long turn once (a fresh loop for each).

    ``only`` limits a long turn to some models (``{1000: [SONNET]}``); ``long_loops`` limits the
    longest turn to some loops (a peer's 1,000-step turn takes many minutes).
    """
    longest = max(long_steps, default=0)
    rows = []
    for model in models:
        for name in names:
            make = loops[name]
            turns = {kind: make(server.base_url, kind, 10, model=model) for kind in ("typed", "enum")}
            limited = make(server.base_url, "typed", STEP_LIMIT, model=model)
            for scenario in scenarios:
                kind = SCENARIO_KINDS.get(scenario, "typed")
                turn = limited if scenario == "step_limit" else turns[kind]
                steps = 2 if scenario == "provider_error" else 1
                row = run_one(server, turn, scenario, steps, _answer(kind))
                rows.append({"loop": name, "model": model, "what": scenario, **row})
            for steps in long_steps:
                if only and steps in only and model not in only[steps]:
                    continue
                if long_loops is not None and steps == longest and name not in long_loops:
                    continue
                turn = make(server.base_url, "text", steps + 5, model=model)
                row = run_one(server, turn, "steps", steps, {"answer": "found"})
                rows.append({"loop": name, "model": model, "what": f"steps:{steps}", **row})
                print(f"  {model:<18} {name:<14} N={steps:<5} answered={row['answered']}", flush=True)
    return rows


def _priced(row: dict[str, Any], kind: str, key: str, cached: bool) -> float | None:
    counts = row["usage"].get(kind)
    return dollars(counts, key, cached) if counts is not None else None


def _thought(row: dict[str, Any], key: str, mode: str, tokens: int) -> float:
    counts = row.get("thinking_counts")
    return thinking_dollars(counts, key, mode, tokens) if counts else 0.0


def summary(rows: Sequence[dict[str, Any]], scenarios: Sequence[str], long_steps: Sequence[int]) -> dict[str, Any]:
    """Per price and loop: dollars per answered turn (scenarios), per long turn, cached and not; connections."""
    out: dict[str, Any] = {"scenarios": list(scenarios), "long": list(long_steps), "prices": {}}
    for label, (model, kind, key) in PRICES.items():
        entry = out["prices"].setdefault(label, {"model": model, "key": key, "loops": {}})
        for loop in COST_LOOPS:
            mine = [r for r in rows if r["loop"] == loop and r["model"] == model]
            if not mine:
                continue
            shared = [r for r in mine if r["what"] in scenarios]
            answered = sum(bool(r["answered"]) for r in shared)
            thinking = sum(r.get("thinking", 0) for r in shared)
            result: dict[str, Any] = {"answered": answered, "turns": len(shared), "thinking": thinking}
            for cached in (True, False):
                spent = [_priced(r, kind, key, cached) or 0.0 for r in shared]
                result["scenarios_cached" if cached else "scenarios_uncached"] = (
                    sum(spent) / answered if answered else None
                )
            if kind in CLAUDE_KINDS and answered:
                base = result["scenarios_cached"]
                result["scenarios_thinking"] = {
                    mode: {
                        str(n): base + sum(_thought(r, key, mode, n) for r in shared) / answered
                        for n in THINKING_LENGTHS
                    }
                    for mode in THINKING_MODES
                }
            for steps in long_steps:
                row = next((r for r in mine if r["what"] == f"steps:{steps}"), None)
                if row is None:
                    continue
                result[f"steps:{steps}"] = {
                    "answered": row["answered"],
                    "requests": row["requests"],
                    "cached": _priced(row, kind, key, True) if row["answered"] else None,
                    "uncached": _priced(row, kind, key, False) if row["answered"] else None,
                    "connections": row["connections"],
                    "opened": row["opened"],
                    "thinking": row.get("thinking", 0),
                }
                cached_cost = result[f"steps:{steps}"]["cached"]
                if kind in CLAUDE_KINDS and cached_cost is not None:
                    result[f"steps:{steps}"]["with_thinking"] = {
                        mode: {str(n): cached_cost + _thought(row, key, mode, n) for n in THINKING_LENGTHS}
                        for mode in THINKING_MODES
                    }
            result["opened_per_turn"] = sum(r["opened"] for r in mine) / len(mine)
            result["connections_per_turn"] = sum(r["connections"] for r in mine) / len(mine)
            entry["loops"][loop] = result
    return out
