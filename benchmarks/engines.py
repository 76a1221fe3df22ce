"""``engine="lm15"`` against the default engine selection, and a frozen start-up heap against none,
ours at a long history, end to end.

The default (``engine="auto"``) decides per request which engine serves it, and to decide it
resolves the route offline and converts the request to lm15's form once as a dry run; naming
the engine where the route is known skips that. Both run the same N-step turn against the
bench server in interleaved, paired rounds (``benchmarks.e2e``): the ratio of the per-request
times is taken within each round, then the median over rounds with the lowest and highest.

The *frozen* turn is the default one run after ``gc.freeze()`` (and ``gc.unfreeze()`` after it, so
the other turns see the heap as it was): what an application gets by freezing its start-up heap.
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from typing import Any

from . import e2e
from .loops import ours
from .server import BenchServer


def measure(server: BenchServer, steps: int, count: int) -> dict[str, Any]:
    """Per-request ms of ours on each engine setting, and lm15 / auto, per round."""
    turns = {
        "auto": (ours(server.base_url, "text", steps + 5), steps),
        "lm15": (ours(server.base_url, "text", steps + 5, engine="lm15"), steps),
        "frozen": (_frozen(ours(server.base_url, "text", steps + 5)), steps),
    }
    for turn, _ in turns.values():
        server.reset("steps", 1)
        turn()  # warm-up: imports, the connection
    rounds = e2e.rounds(server, turns, count)
    ratio, frozen = _ratio(rounds, "lm15"), _ratio(rounds, "frozen")
    out = {name: e2e.spread([r["request_ms"] for r in runs]) for name, runs in rounds.items()}
    print(f"  engine='lm15' / default at N={steps}: {ratio}; gc.freeze() / none: {frozen}", flush=True)
    answered = all(r["answered"] for name in ("lm15", "frozen") for r in rounds[name])
    return {"steps": steps, **out, "ratio": ratio, "frozen_ratio": frozen, "answered": answered}


def _frozen(turn: Callable[[], bool]) -> Callable[[], bool]:
    def run() -> bool:
        gc.freeze()
        try:
            return turn()
        finally:
            gc.unfreeze()

    return run


def _ratio(rounds: dict[str, list[dict[str, Any]]], name: str) -> dict[str, float] | None:
    """Per-request ms of ``name`` over the default's, within each round."""
    pairs = zip(rounds["auto"], rounds[name], strict=True)
    return e2e.spread([b["request_ms"] / a["request_ms"] for a, b in pairs if a["request_ms"] and b["request_ms"]])
