"""End to end, the way a user runs each loop: a real client over HTTP to the local server.

Every loop is pointed at the benchmark server (``benchmarks.server``, its own process) as its
users would point it at a provider (``benchmarks.loops``): ``dspy.LM`` on the native lm15
engine and on LiteLLM for ours and for ``dspy.ReActV2``, pydantic-ai and the Agents SDK over the
OpenAI SDK. Each turn is N tool steps, then the answer in the loop's own form; every loop runs
the tool the same N times, and the server shapes each reply as that loop's real model writes it
(field markers for ``dspy.ReActV2``'s ChatAdapter, see ``benchmarks.server``).

The server stamps each request when it has read it and when it has written the reply
(``time.monotonic``, one clock for both processes). Two numbers per turn:

- *per request*: the loop's time between a reply and its next request (reading the reply,
  running the tool, building and sending the next request: everything but the provider), the
  median over the requests sent with at least 90% of the N steps recorded;
- *per turn*: the turn's wall time minus the server's time on its requests.

Rounds are interleaved (each round runs every loop once, in an order rotated from round to
round) and paired: a ratio is taken within each round, then the median over rounds is shown
with the lowest and highest round, so machine noise shows up as spread instead of moving one
number.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

from .server import BenchServer

Turn = Callable[[], bool]
OURS = ("dspy_imp", "dspy_imp (litellm)")
STOCK = {"dspy_imp": "dspy.ReActV2", "dspy_imp (litellm)": "dspy.ReActV2 (litellm)"}
PEERS = ("pydantic-ai", "openai-agents")
SHORT_REPEATS = 9  # short turns per round in the flatness ratio, their sampled gaps pooled


def gaps(times: Sequence[Sequence[float]]) -> list[float]:
    """Seconds between each reply and the next request (the loop's own time per request)."""
    return [times[i][0] - times[i - 1][1] for i in range(1, len(times))]


def sampled(values: Sequence[float], steps: int) -> list[float]:
    """The gaps before requests sent with at least 90% of the N steps recorded (at least one)."""
    first = max(1, math.floor(0.9 * steps))  # gap i comes before request i, which holds i steps
    return list(values[first - 1 :]) or list(values[-1:])


def one_turn(server: BenchServer, turn: Turn, steps: int) -> dict[str, Any]:
    server.reset("steps", steps)
    start = time.perf_counter()
    answered = turn()
    wall = time.perf_counter() - start
    times = server.stats()["times"]
    served = sum(t[1] - t[0] for t in times)
    per_turn = steps + 1  # an N-step turn sends N + 1 requests; repeated turns are split back into turns
    between = [g for i in range(0, len(times), per_turn) for g in sampled(gaps(times[i : i + per_turn]), steps)]
    return {
        "answered": answered,
        "requests": len(times),
        "turn_ms": (wall - served) * 1e3,
        "request_ms": statistics.median(between) * 1e3 if between else None,
    }


def rounds(server: BenchServer, turns: dict[str, tuple[Turn, int]], count: int) -> dict[str, list[dict[str, Any]]]:
    """``count`` interleaved rounds; each round runs every (turn, steps) once, in a rotated order."""
    names = list(turns)
    out: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
    for index in range(count):
        shift = index % len(names)
        for name in names[shift:] + names[:shift]:
            turn, steps = turns[name]
            out[name].append(one_turn(server, turn, steps))
    return out


def spread(values: Sequence[float | None]) -> dict[str, float] | None:
    kept = [v for v in values if v is not None]
    if not kept:
        return None
    return {"median": statistics.median(kept), "low": min(kept), "high": max(kept), "rounds": len(kept)}


def _ratio(top: list[dict[str, Any]], bottom: list[dict[str, Any]], key: str) -> dict[str, float] | None:
    return spread([a[key] / b[key] if a[key] and b[key] else None for a, b in zip(top, bottom, strict=True)])


def _built(loops: dict[str, Callable[..., Turn]], server: BenchServer, steps: int) -> dict[str, Turn]:
    turns = {}
    for name, make in loops.items():
        turn = make(server.base_url, "text", steps + 5)
        server.reset("steps", 1)
        turn()  # warm-up: imports, clients, connection pools
        turns[name] = turn
    return turns


def measure(
    server: BenchServer,
    loops: dict[str, Callable[..., Turn]],
    steps_list: Sequence[int],
    long: int,
    counts: dict[int, int],
    flat_loops: Sequence[str] = OURS[:1],
) -> dict[str, Any]:
    """Every loop at each N (interleaved rounds), then ``flat_loops`` at the first N against N=``long``
    (paired rounds)."""
    table: list[dict[str, Any]] = []
    ratios: list[dict[str, Any]] = []
    for steps in steps_list:
        built = _built(loops, server, steps)
        results = rounds(server, {name: (turn, steps) for name, turn in built.items()}, counts[steps])
        for name, rows in results.items():
            table.append(
                {
                    "loop": name,
                    "steps": steps,
                    "answered": all(r["answered"] for r in rows),
                    "requests": rows[0]["requests"],
                    "request_ms": spread([r["request_ms"] for r in rows]),
                    "turn_ms": spread([r["turn_ms"] for r in rows]),
                }
            )
        ratios += _step_ratios(results, steps)
        print(
            f"  N={steps:<5} "
            + ", ".join(
                f"{r['loop']} {r['request_ms']['median']:.2f}" for r in table if r["steps"] == steps and r["request_ms"]
            )
            + " ms/request",
            flush=True,
        )
    flat = _flatness(server, loops, steps_list[0], long, counts.get(long, 3), flat_loops)
    return {"table": table, "ratios": ratios, "flat": flat}


def _step_ratios(results: dict[str, list[dict[str, Any]]], steps: int) -> list[dict[str, Any]]:
    out = []
    for ours in OURS:
        if ours not in results:
            continue
        stock = STOCK[ours]
        if stock in results:
            out.append(
                {
                    "what": "request",
                    "steps": steps,
                    "top": ours,
                    "bottom": stock,
                    "ratio": _ratio(results[ours], results[stock], "request_ms"),
                }
            )
        for peer in PEERS:
            if peer in results:
                out.append(
                    {
                        "what": "turn",
                        "steps": steps,
                        "top": peer,
                        "bottom": ours,
                        "ratio": _ratio(results[peer], results[ours], "turn_ms"),
                    }
                )
    return out


def _flatness(
    server: BenchServer,
    loops: dict[str, Callable[..., Turn]],
    short: int,
    long: int,
    count: int,
    names: Sequence[str],
) -> list[dict[str, Any]]:
    """Ours per request at ``long`` steps against ``short``, each round running both (paired)."""
    out = []
    for name in names:
        small = _built({name: loops[name]}, server, short)[name]
        large = _built({name: loops[name]}, server, long)[name]

        def shorts(turn: Turn = small) -> bool:  # a short turn has one or two sampled gaps: take several turns
            return all([turn() for _ in range(SHORT_REPEATS)])

        results = rounds(server, {"short": (shorts, short), "long": (large, long)}, count)
        row: dict[str, Any] = {
            "loop": name,
            "short": short,
            "long": long,
            "short_ms": spread([r["request_ms"] for r in results["short"]]),
            "long_ms": spread([r["request_ms"] for r in results["long"]]),
            "ratio": _ratio(results["long"], results["short"], "request_ms"),
            "answered": all(r["answered"] for r in results["long"]),
        }
        out.append(row)
        assert row["ratio"] is not None
        print(f"  {name:<20} N={long} / N={short}: {row['ratio']['median']:.1f}x per request", flush=True)
    return out
