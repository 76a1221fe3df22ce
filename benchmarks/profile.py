"""Where a loop spends its time: one profiled turn, own time summed by the package it runs in.

``cProfile`` slows everything by a similar factor, so only the shares are reported.
"""

from __future__ import annotations

import cProfile
import pstats
import sysconfig
from collections.abc import Callable
from pathlib import Path
from typing import Any

_STDLIB = Path(sysconfig.get_paths()["stdlib"]).resolve()


def package_of(filename: str) -> str:
    """``dspy``, ``dspy_imp``, ``openai``...; ``stdlib:json``; ``builtins`` for C functions."""
    if filename.startswith("~") or filename.startswith("<"):
        return "builtins"
    path = Path(filename).resolve()
    parts = path.parts
    if "site-packages" in parts:
        name = parts[parts.index("site-packages") + 1]
        return name.removesuffix(".py")
    if "dspy_imp" in parts:
        return "dspy_imp"
    if "benchmarks" in parts:
        return "benchmarks"
    try:
        return "stdlib:" + path.relative_to(_STDLIB).parts[0].removesuffix(".py")
    except ValueError:
        return path.name


def shares(turn: Callable[[], Any], top: int = 6) -> list[tuple[str, float]]:
    """The ``top`` packages by share of the turn's own (not cumulative) time, and the rest."""
    profiler = cProfile.Profile()
    profiler.runcall(turn)
    stats = pstats.Stats(profiler).stats  # type: ignore[attr-defined]
    totals: dict[str, float] = {}
    for (filename, _line, _name), (_cc, _nc, tottime, _ct, _callers) in stats.items():
        package = package_of(filename)
        totals[package] = totals.get(package, 0.0) + tottime
    whole = sum(totals.values()) or 1.0
    ranked = sorted(totals.items(), key=lambda item: -item[1])
    head = [(name, value / whole) for name, value in ranked[:top]]
    rest = sum(value for _, value in ranked[top:]) / whole
    return [*head, ("other", rest)]
