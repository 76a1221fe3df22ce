"""``engine="lm15"`` against the default engine selection, ours at a long history, end to end.

The default (``engine="auto"``) decides per request which engine serves it, and to decide it
resolves the route offline and converts the request to lm15's form once as a dry run; naming
the engine where the route is known skips that. Both run the same N-step turn against the
bench server in interleaved, paired rounds (``benchmarks.e2e``): the ratio of the per-request
times is taken within each round, then the median over rounds with the lowest and highest.
"""

from __future__ import annotations

from typing import Any

from . import e2e
from .loops import ours
from .server import BenchServer


def measure(server: BenchServer, steps: int, count: int) -> dict[str, Any]:
    """Per-request ms of ours on each engine setting, and lm15 / auto, per round."""
    turns = {
        "auto": (ours(server.base_url, "text", steps + 5), steps),
        "lm15": (ours(server.base_url, "text", steps + 5, engine="lm15"), steps),
    }
    for turn, _ in turns.values():
        server.reset("steps", 1)
        turn()  # warm-up: imports, the connection
    rounds = e2e.rounds(server, turns, count)
    ratios = [
        lm15["request_ms"] / auto["request_ms"]
        for auto, lm15 in zip(rounds["auto"], rounds["lm15"], strict=True)
        if auto["request_ms"] and lm15["request_ms"]
    ]
    out = {name: e2e.spread([r["request_ms"] for r in runs]) for name, runs in rounds.items()}
    print(f"  engine='lm15' / default at N={steps}: {e2e.spread(ratios)}", flush=True)
    return {"steps": steps, **out, "ratio": e2e.spread(ratios), "answered": all(r["answered"] for r in rounds["lm15"])}
