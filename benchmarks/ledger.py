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

*Hosted calls* are what the provider ran for a loop's hosted tools (``dspy_imp.hosted``: searches,
fetches), as the turn's ``pred.metadata.usage.hosted_calls`` counts them (``hosted``), priced per
call at the providers' listed fees (``HOSTED_PRICES``, the rates docs/hosted-tools.md gives). No
request body shows them, so a loop reports them itself (``benchmarks.loops``); a loop that made
none has no ``hosted_calls`` in its totals, and the tables show the columns only when one did.
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


# Per-call fees, by the provider's count name: Anthropic's web search and OpenAI's Responses web search
# $10 per 1,000, OpenAI's file search $2.50 per 1,000; fetches, code execution and remote MCP calls cost
# tokens (or container time) only. On Chat Completions a search preview model's search is $25 per 1,000.
# On OpenRouter its web search with Exa (the server tool or the web plugin) is $7 per 1,000 requests (its
# web search guides; the recorded replies' fee), the price used for every OpenRouter model here (a model's
# native search is billed at its provider's rate, which the turn's ``metadata.usage.cost`` holds as
# OpenRouter charged it).
HOSTED_PRICES = {"web_search_requests": 10.0 / 1000, "web_search_call": 10.0 / 1000, "file_search_call": 2.5 / 1000}
SEARCH_PREVIEW_PRICE = 25.0 / 1000
OPENROUTER_SEARCH_PRICE = 7.0 / 1000


def hosted(usage: Any, model: str = "") -> dict[str, Any]:
    """A turn's hosted calls from its ``pred.metadata.usage`` (``usage.hosted_calls``, the sum of the usage
    rows' ``calls[i].hosted_calls``): their number and their fees on ``model``. Empty when it made none."""
    counts = {str(k): int(v) for k, v in dict(getattr(usage, "hosted_calls", None) or {}).items() if v}
    if not counts:
        return {}
    preview = "-search-preview" in model.rsplit("/", 1)[-1].lower()
    prices = {**HOSTED_PRICES, "web_search_call": SEARCH_PREVIEW_PRICE} if preview else HOSTED_PRICES
    if model.startswith("openrouter/"):
        prices = {**HOSTED_PRICES, "web_search_requests": OPENROUTER_SEARCH_PRICE}
    return {"hosted_calls": sum(counts.values()), "hosted_usd": sum(prices.get(k, 0.0) * v for k, v in counts.items())}


def totals(rows: Sequence[dict[str, int]], hosted_calls: dict[str, Any] | None = None) -> dict[str, Any]:
    """Sums over requests: the parts, prompt and reply tokens, and per provider the cached share and dollars;
    with ``hosted_calls`` (``hosted``), the turn's hosted calls and their fees."""
    out: dict[str, Any] = {key: sum(r[key] for r in rows) for key in (*PARTS, "prompt", "output")}
    out["requests"] = len(rows)
    for name, cache in CACHES.items():
        price = _price(cache.model)
        cached = sum(cache.cached(r["prefix"]) for r in rows)
        out[f"{name}_cached"] = cached
        out[f"{name}_usd"] = (
            (out["prompt"] - cached) * price["input"] + cached * price["cached"] + out["output"] * price["output"]
        )
    if hosted_calls:
        out.update(hosted_calls)
    return out


def per_answered(summed: dict[str, Any], answered: int) -> dict[str, Any]:
    """A loop's totals over a set of turns, divided by the turns that ended with an answer."""
    keys = (*PARTS, "prompt", "output", "requests", *(f"{n}_cached" for n in CACHES), *(f"{n}_usd" for n in CACHES))
    keys += tuple(k for k in HOSTED if k in summed)  # only for a loop that made hosted calls
    return {key: (summed[key] / answered if answered else None) for key in keys}


HOSTED = ("hosted_calls", "hosted_usd")


def made_hosted_calls(totals_list: Sequence[dict[str, Any]]) -> bool:
    """Whether any of these totals counts a hosted call (the tables then show their columns)."""
    return any(t.get("hosted_calls") for t in totals_list)


def add(into: dict[str, Any], more: dict[str, Any]) -> dict[str, Any]:
    """Two totals summed, key by key (a key only one holds, such as ``hosted_calls``, is kept)."""
    return {key: into.get(key, 0) + more.get(key, 0) for key in {**into, **more}}
