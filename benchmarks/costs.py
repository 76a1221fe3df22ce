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
PRICES: dict[str, tuple[str, str, str]] = {
    "Claude Sonnet 4.5": (SONNET, "anthropic", "claude-sonnet-4-5"),
    "Claude Haiku 4.5": (HAIKU, "anthropic", "claude-haiku-4-5"),
    "OpenAI gpt-4o-mini": (GPT, "openai", "gpt-4o-mini"),
    "DeepSeek V3.2": (GPT, "deepseek", "deepseek-chat"),
}
COST_LOOPS = ("dspy_imp", "dspy.ReActV2", "pydantic-ai", "openai-agents")
SCENARIO_KINDS = {"enum_output": "enum"}
STEP_LIMIT = 3
USAGE_KEYS = ("input", "write", "read", "output")


def _answer(kind: str) -> dict[str, Any]:
    return {"answer": "yes" if kind == "enum" else "found", "confidence": 0.9}


def summed(stats: dict[str, Any]) -> dict[str, dict[str, int]]:
    """A turn's usage, summed over its billed requests, per usage kind (``anthropic``, ``openai``, ``deepseek``)."""
    out: dict[str, dict[str, int]] = {}
    for usage, deepseek in zip(stats["usage"], stats["deepseek"], strict=True):
        if usage is None:
            continue
        if "input_tokens" in usage:
            parts = {
                "anthropic": {
                    "input": usage["input_tokens"],
                    "write": usage["cache_creation_input_tokens"],
                    "read": usage["cache_read_input_tokens"],
                    "output": usage["output_tokens"],
                }
            }
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
    billed = [json.loads(body) for body, usage in zip(stats["bodies"], stats["usage"], strict=True) if usage]
    return {
        "answered": answered,
        "requests": len(stats["statuses"]),
        "thinking": sum(asks_thinking(body) for body in billed),
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
) -> list[dict[str, Any]]:
    """Every loop, on every model: each scenario once, each long turn once (a fresh loop for each).

    ``only`` limits a long turn to some models (``{1000: [SONNET]}``); ``long_loops`` limits the
    longest turn to some loops (a peer's 1,000-step turn takes many minutes).
    """
    longest = max(long_steps, default=0)
    rows = []
    for model in models:
        for name in COST_LOOPS:
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
            result["opened_per_turn"] = sum(r["opened"] for r in mine) / len(mine)
            result["connections_per_turn"] = sum(r["connections"] for r in mine) / len(mine)
            entry["loops"][loop] = result
    return out
