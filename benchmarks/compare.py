"""Same model, four loops: one scripted turn (N tool steps, then the answer) through each loop.

For each loop and N: the bytes and (estimated) tokens it sent in the turn, split by the token
ledger (``benchmarks.ledger``), the share of each request that is a byte-identical prefix of the
one before it (what a provider's prompt cache can reuse), and the peak Python memory of one
turn (``tracemalloc``, a separate turn). Also: requests and tokens per answered turn over a
fixed set of scenarios (``benchmarks.server.SCENARIOS``). Time is ``benchmarks.e2e``'s.
"""

from __future__ import annotations

import json
import os
import tracemalloc
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import litellm

from . import ledger
from .loops import LOOPS
from .server import BenchServer

_ENCODING = litellm.encoding  # cl100k_base, bundled with LiteLLM (no download)


def prompt_text(body: dict[str, Any]) -> str:
    """A request as a provider's prompt cache sees it: the tools, then the messages, in order."""
    tools = json.dumps(body.get("tools") or [], ensure_ascii=False, separators=(",", ":"))
    messages = [json.dumps(m, ensure_ascii=False, separators=(",", ":")) for m in body.get("messages", [])]
    return tools + "".join(messages)


def _common_prefix(a: bytes, b: bytes) -> int:
    low, high = 0, min(len(a), len(b))
    while low < high:  # binary search on slice equality: C-speed comparisons
        middle = (low + high + 1) // 2
        if a[:middle] == b[:middle]:
            low = middle
        else:
            high = middle - 1
    return low


def request_stats(bodies: list[str]) -> dict[str, Any]:
    """Bytes and tokens sent, and the mean prefix share of requests 2..n."""
    parsed = [json.loads(b) for b in bodies]
    prompts = [prompt_text(p).encode() for p in parsed]
    shares = [_common_prefix(prompts[i - 1], prompts[i]) / len(prompts[i]) for i in range(1, len(prompts))]
    tokens = sum(len(_ENCODING.encode(p.decode(), disallowed_special=())) for p in prompts)
    return {
        "requests": len(bodies),
        "bytes": sum(len(b.encode()) for b in bodies),
        "tokens": tokens,
        "prefix_share": sum(shares) / len(shares) if shares else None,
        "min_prefix_share": min(shares) if shares else None,
    }


def compare(server: BenchServer, steps_list: list[int]) -> list[dict[str, Any]]:
    """One N-step turn per loop and N: what it sent (bytes, tokens by part, prefix share) and its peak memory.

    Time is measured end to end in ``benchmarks.e2e``, not here.
    """
    rows = []
    for name, make in LOOPS.items():
        turn = make(server.base_url, "text", max(steps_list) + 5)
        server.reset("steps", 1)
        turn()  # warm-up: imports, clients, connection pools
        for steps in steps_list:
            server.reset("steps", steps)
            answered = turn()
            hosted = dict(getattr(turn, "hosted", None) or {})  # the loop's own count (no body shows them)
            sent = server.stats()
            stats = request_stats(sent["bodies"])
            server.reset("steps", steps)
            tracemalloc.start()
            turn()
            peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
            rows.append(
                {
                    "loop": name,
                    "steps": steps,
                    "answered": answered,
                    "peak_mb": peak / 1e6,
                    **stats,
                    "ledger": ledger.totals(ledger.split(sent["bodies"], sent["replies"]), hosted),
                }
            )
            print(f"  {name:<20} N={steps:<4} {stats['tokens']:>9,} tokens", flush=True)
    return rows


# -- requests per answered turn ----------------------------------------------------------------

SCENARIO_KINDS = {"enum_output": "enum"}
STEP_LIMIT = 3


def scenarios(server: BenchServer, names: tuple[str, ...]) -> list[dict[str, Any]]:
    """Each loop through each scenario: requests sent, failed ones, whether it answered, its token ledger."""
    rows = []
    for name, make in LOOPS.items():
        turns = {kind: make(server.base_url, kind, 10) for kind in ("typed", "enum")}
        limited = make(server.base_url, "typed", STEP_LIMIT)
        for scenario in names:
            kind = SCENARIO_KINDS.get(scenario, "typed")
            turn = limited if scenario == "step_limit" else turns[kind]
            server.reset(scenario, 2 if scenario == "provider_error" else 1, _answer(kind))
            answered = turn()
            hosted = dict(getattr(turn, "hosted", None) or {})
            stats = server.stats()
            statuses = stats["statuses"]
            totals = ledger.totals(ledger.split(stats["bodies"], stats["replies"]), hosted)
            applies = scenario != "named_choice_refused" or 400 in statuses
            rows.append(
                {
                    "loop": name,
                    "scenario": scenario,
                    "applies": applies,
                    "requests": len(statuses),
                    "failed_requests": sum(1 for s in statuses if s != 200),
                    "answered": answered,
                    "ledger": totals,
                }
            )
    return rows


def ledger_summary(
    scenario_rows: list[dict[str, Any]], step_rows: list[dict[str, Any]], shared: tuple[str, ...]
) -> dict[str, Any]:
    """The token ledger: per loop over the shared scenarios (sums, and per answered turn), per scenario, per N."""
    loops: dict[str, Any] = {}
    kept = [r for r in scenario_rows if r["scenario"] in shared]
    for row in kept:
        entry = loops.setdefault(row["loop"], {"sum": {}, "answered": 0, "turns": 0})
        entry["sum"] = ledger.add(entry["sum"], row["ledger"])
        entry["answered"] += bool(row["answered"])
        entry["turns"] += 1
    for entry in loops.values():
        entry["per_answered"] = ledger.per_answered(entry["sum"], entry["answered"])
    return {
        "shared": list(shared),
        "loops": loops,
        "scenarios": [
            {"loop": r["loop"], "scenario": r["scenario"], "answered": r["answered"], "totals": r["ledger"]}
            for r in kept
        ],
        "steps": [{"loop": r["loop"], "steps": r["steps"], "totals": r["ledger"]} for r in step_rows],
    }


def _answer(kind: str) -> dict[str, Any]:
    return {"answer": "yes" if kind == "enum" else "found", "confidence": 0.9}
