"""Checking the options for tools and models that misbehave (``_turn.limits``, ``_turn.guardrails``,
``_turn.fallback``): at construction and per call, each error naming the option and the value."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import dspy

from dspy_imp._records.errors import ConfigurationError
from dspy_imp._turn.guardrails import Guardrail
from dspy_imp._turn.limits import ANY_TOOL, UNBOUNDED

MAX_TIMEOUT = 10 * 365 * 24 * 3600.0

LIMIT_OPTIONS = ("tool_timeouts", "tool_retries", "max_result_chars", "repeat_limit")
"""The per-call options of this module (each replaces the program's value for the call)."""


def call_limits(given: Mapping[str, Any], held: Mapping[str, dspy.Tool]) -> dict[str, Any]:
    """The per-call limits among a call's options, checked, as ``ProgramOptions`` changes."""
    changes: dict[str, Any] = {}
    if "tool_timeouts" in given:
        changes["tool_timeouts"] = check_tool_timeouts(given["tool_timeouts"], held)
    if "tool_retries" in given:
        changes["tool_retries"] = check_tool_retries(given["tool_retries"], held)
    if "max_result_chars" in given:
        changes["max_result_chars"] = check_max_result_chars(given["max_result_chars"], held)
    if "repeat_limit" in given:
        changes["repeat_limit"] = check_repeat_limit(given["repeat_limit"])
    return changes


def check_tool_timeouts(value: Any, held: Mapping[str, dspy.Tool]) -> dict[str, float]:
    return _per_tool(value, held, "tool_timeouts", _seconds)


def check_tool_retries(value: Any, held: Mapping[str, dspy.Tool]) -> dict[str, int]:
    return _per_tool(value, held, "tool_retries", lambda v: _count(v, minimum=0))


def check_max_result_chars(value: Any, held: Mapping[str, dspy.Tool]) -> dict[str, int]:
    return _per_tool(value, held, "max_result_chars", lambda v: _count(v, minimum=1))


def check_repeat_limit(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 2:
        raise ConfigurationError(f"`repeat_limit` must be an integer of at least 2, or None (off); got {value!r}")
    return value


def _per_tool(value: Any, held: Mapping[str, dspy.Tool], where: str, check: Any) -> dict[str, Any]:
    """``None``, one value for every tool, or ``{tool name or tool: value, "*": value for the rest}``."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        checked = check(value)
        if checked is None:
            raise ConfigurationError(f"`{where}` must be a number or a dict of tool name -> number, got {value!r}")
        return {ANY_TOOL: checked}
    table: dict[str, Any] = {}
    for key, item in value.items():
        name = key.name if isinstance(key, dspy.Tool) else getattr(key, "__name__", key)
        if not isinstance(name, str) or (name != ANY_TOOL and name not in held):
            raise ConfigurationError(f"`{where}` names a tool the program does not hold: {key!r}")
        checked = check(item)
        if checked is None:
            raise ConfigurationError(f"`{where}[{name!r}]` is not a valid value: {item!r}")
        table[name] = checked
    return table


def _seconds(value: Any) -> float | None:
    if value is None:  # unbounded, even by the deadline: a sync call runs the tool in its own thread
        return UNBOUNDED
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if not math.isfinite(value) or value <= 0 or value > MAX_TIMEOUT:
        return None
    return float(value)


def _count(value: Any, minimum: int) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        return None
    return value


def check_guardrails(value: Any, where: str) -> tuple[Guardrail, ...]:
    if value is None:
        return ()
    if callable(value) or isinstance(value, str | bytes | Mapping) or not isinstance(value, Iterable):
        raise ConfigurationError(f"`{where}` must be a list of guardrails (functions or dspy.Module), got {value!r}")
    guardrails = tuple(item if isinstance(item, Guardrail) else _wrap(item, where) for item in value)
    names = [g.name for g in guardrails]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ConfigurationError(
            f"`{where}` has two guardrails named {twice!r}; name them (dspy_imp.Guardrail(name=...))"
        )
    if where == "input_guardrails" and any(g.retry for g in guardrails):
        raise ConfigurationError("`input_guardrails`: `retry=True` is for output guardrails (the model wrote no input)")
    if where == "output_guardrails" and any(g.run != "before" for g in guardrails):
        raise ConfigurationError("`output_guardrails`: `run='alongside'` is for input guardrails")
    return guardrails


def _wrap(item: Any, where: str) -> Guardrail:
    if not callable(item):
        raise ConfigurationError(f"`{where}` must hold functions or dspy.Module, got {item!r}")
    return Guardrail(item)


def check_fallback(value: Any) -> tuple[dspy.BaseLM, ...]:
    if value is None:
        return ()
    if isinstance(value, dspy.BaseLM | str | bytes | Mapping) or not isinstance(value, Iterable):
        raise ConfigurationError(f"`fallback` must be a list of dspy.LM, got {value!r}")
    models = tuple(value)
    for lm in models:
        if not isinstance(lm, dspy.BaseLM):
            raise ConfigurationError(f"`fallback` must hold dspy.LM (or dspy.BaseLM) objects, got {lm!r}")
    return models


def model_name(lm: Any) -> str:
    """What metadata and traces call an LM."""
    name = getattr(lm, "model", None)
    return name if isinstance(name, str) and name else type(lm).__name__
