"""The token ledger: where each loop's prompt tokens go, what a provider's prompt cache reuses, what it costs.

Every request body the benchmark server received is split into four parts, counted with
``cl100k_base`` (an estimate of prompt tokens for every provider):

- *system*: the system (or developer) messages;
- *tools*: the tool definitions, plus a structured-output schema (``response_format``);
- *history*: messages the previous request of the same turn held at the same place, unchanged
  (what the loop replays);
- *new*: every other message (the inputs on a turn's first request, the newest exchange after).

*Cached* is what a provider's automatic prompt cache would reuse of a request: the leading
parts (tools, then messages in order) identical to the previous request's, under that provider's
rules (``CACHES``): OpenAI caches prompts of 1,024 tokens or more in 128-token steps, DeepSeek in
64-token units, and Anthropic only behind ``cache_control`` breakpoints, which none of these
loops sets. Dollars come from LiteLLM's price map (``litellm.model_cost``, the copy bundled with
LiteLLM): uncached prompt tokens at the input price, cached ones at the cache-read price, reply
tokens at the output price.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import litellm

_ENCODING = litellm.encoding  # cl100k_base, bundled with LiteLLM (no download)
PARTS = ("system", "tools", "history", "new")


@dataclass(frozen=True)
class Cache:
    """A provider's automatic prompt cache: the smallest prefix it keeps and its granularity."""

    model: str  # the LiteLLM price-map key
    minimum: int | None  # None: no automatic cache
    step: int = 1

    def cached(self, prefix: int) -> int:
        if self.minimum is None or prefix < self.minimum:
            return 0
        return prefix - (prefix - self.minimum) % self.step if self.step > 1 else prefix


CACHES = {
    "openai": Cache("gpt-4o-mini", 1024, 128),
    "deepseek": Cache("deepseek-chat", 64, 64),
    "anthropic": Cache("claude-haiku-4-5", None),
}


def tokens(text: str) -> int:
    return len(_ENCODING.encode(text, disallowed_special=()))


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _tool_part(body: dict[str, Any]) -> str:
    tools = _dumps(body.get("tools") or [])
    schema = body.get("response_format")
    return tools + (_dumps(schema) if schema else "")


def split(bodies: Sequence[str], replies: Sequence[dict[str, Any] | None] = ()) -> list[dict[str, int]]:
    """Each request of one turn: its prompt tokens by part, its cacheable prefix and its reply tokens."""
    rows: list[dict[str, int]] = []
    previous: dict[str, Any] | None = None
    for index, raw in enumerate(bodies):
        body = json.loads(raw)
        row = dict.fromkeys(PARTS, 0)
        tools = _tool_part(body)
        row["tools"] = tokens(tools) if tools != "[]" else 0
        same = previous is not None and _tool_part(previous) == tools
        prefix = row["tools"] if same else 0
        before = previous.get("messages", []) if previous is not None else []
        for position, message in enumerate(body.get("messages", [])):
            count = tokens(_dumps(message))
            kept = position < len(before) and before[position] == message
            if message.get("role") in ("system", "developer"):
                row["system"] += count
            else:
                row["history" if kept else "new"] += count
            same = same and kept
            prefix += count if same else 0
        row["prompt"] = sum(row[p] for p in PARTS)
        row["prefix"] = prefix
        reply = replies[index] if index < len(replies) else None
        row["output"] = tokens(_dumps(reply)) if reply else 0
        rows.append(row)
        previous = body
    return rows


def _price(model: str) -> dict[str, float]:
    entry = litellm.model_cost[model]
    cached = entry.get("cache_read_input_token_cost")
    return {
        "input": entry["input_cost_per_token"],
        "cached": cached if cached is not None else entry["input_cost_per_token"],
        "output": entry["output_cost_per_token"],
    }


def totals(rows: Sequence[dict[str, int]]) -> dict[str, Any]:
    """Sums over requests: the parts, prompt and reply tokens, and per provider the cached share and dollars."""
    out: dict[str, Any] = {key: sum(r[key] for r in rows) for key in (*PARTS, "prompt", "output")}
    out["requests"] = len(rows)
    for name, cache in CACHES.items():
        price = _price(cache.model)
        cached = sum(cache.cached(r["prefix"]) for r in rows)
        out[f"{name}_cached"] = cached
        out[f"{name}_usd"] = (
            (out["prompt"] - cached) * price["input"] + cached * price["cached"] + out["output"] * price["output"]
        )
    return out


def per_answered(summed: dict[str, Any], answered: int) -> dict[str, Any]:
    """A loop's totals over a set of turns, divided by the turns that ended with an answer."""
    keys = (*PARTS, "prompt", "output", "requests", *(f"{n}_cached" for n in CACHES), *(f"{n}_usd" for n in CACHES))
    return {key: (summed[key] / answered if answered else None) for key in keys}


def add(into: dict[str, Any], more: dict[str, Any]) -> dict[str, Any]:
    return {key: into.get(key, 0) + value for key, value in more.items()}
