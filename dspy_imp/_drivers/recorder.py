"""Reading each request's usage from DSPy's LM history, while a driver performs it.

Under ``dspy.configure(disable_history=True)`` DSPy writes no history entry at all, so neither
a request's usage (and with it every token and cost limit) nor its finish reason could be read.
The loop's own requests then go out through a *quiet* copy of the LM (``quiet``): DSPy writes the
entry, with history on for that request only, and the copy hands it to the loop's recorders on
the ``caller_modules`` stack and to nothing else: not DSPy's global history, not the LM's own
``history``, not the caller's modules. What the host switched off stays off.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import dspy

from dspy_imp._records.kinds import UsageKind
from dspy_imp._records.usage import RequestUsage
from dspy_imp._routes.hosted import usage_of


@dataclass
class Recorder:
    """Stands on DSPy's ``caller_modules`` stack to receive the history entry of each LM call."""

    history: list[dict[str, Any]] = field(default_factory=list)


@contextlib.contextmanager
def recording(recorder: Recorder) -> Iterator[None]:
    overrides: dict[str, Any] = {"caller_modules": [*(dspy.settings.caller_modules or []), recorder]}
    if dspy.settings.disable_history:  # the request's LM is ``quiet``: its entry reaches only the recorders
        overrides["disable_history"] = False
    with dspy.context(**overrides):
        yield


def history_disabled() -> bool:
    return bool(dspy.settings.disable_history)


def quiet(lm: Any) -> Any:
    """A shallow copy of ``lm`` whose history entries go only to the recorders on the stack."""
    silent = copy.copy(lm)
    silent.update_history = _to_recorders  # shadows BaseLM.update_history on this copy only
    return silent


def unretried(lm: Any) -> Any:
    """``lm`` without DSPy's retries (under a deadline the machine retries while time remains), its
    history entries still reaching ``lm.history`` (and so ``dspy.inspect_history`` on the user's
    LM): ``BaseLM.copy`` gives the copy a new list; DSPy only appends to and pops from it in place."""
    sender = lm.copy(num_retries=0)
    if isinstance(getattr(lm, "history", None), list):
        sender.history = lm.history
    return sender


def _to_recorders(entry: dict[str, Any]) -> None:
    for module in dspy.settings.caller_modules or ():
        if isinstance(module, Recorder):
            module.history.append(entry)


def measured(kind: UsageKind, entries: Sequence[Mapping[str, Any]], fallbacks: int) -> tuple[RequestUsage, ...]:
    """One request's calls: the first under ``kind``, DSPy's JSON fallbacks after it."""
    fallback: UsageKind = "json_fallback"
    kinds: list[UsageKind] = [kind, *([fallback] * fallbacks)]
    readings = [_reading(e) for e in entries]
    readings += [{}] * (len(kinds) - len(readings))
    return tuple(RequestUsage(k, **r) for k, r in zip(kinds, readings, strict=False))


def _reading(entry: Mapping[str, Any]) -> dict[str, Any]:
    """One call's usage, in Chat Completions' spelling or, where LiteLLM hands the Responses API's
    own usage (``input_tokens``, ``input_tokens_details``...), in that one."""
    usage = _plain(entry.get("usage")) or {}
    responses = "prompt_tokens" not in usage and "input_tokens" in usage
    prompt_details = _plain(usage.get("input_tokens_details" if responses else "prompt_tokens_details")) or {}
    completion_details = _plain(usage.get("output_tokens_details" if responses else "completion_tokens_details")) or {}
    given = entry.get("cost")
    cost: float | None = float(given) if isinstance(given, int | float) and not isinstance(given, bool) else None
    hosted = usage_of(entry.get("response"))  # hosted tool calls the provider counted, their fees
    if cost is None and hosted.charged is not None:  # DSPy priced nothing: what the provider says it charged
        cost = hosted.charged
    elif hosted.fee:
        cost = (cost or 0.0) + hosted.fee
    return {
        "hosted_calls": dict(hosted.counts),
        "input_tokens": _count(usage.get("input_tokens" if responses else "prompt_tokens")) + hosted.input_tokens,
        "output_tokens": _count(usage.get("output_tokens" if responses else "completion_tokens")),
        "cached_tokens": _count(prompt_details.get("cached_tokens")),
        # lm15's spelling (DSPy's native usage), else LiteLLM's (Anthropic's own, at the top)
        "cache_write_tokens": _count(
            prompt_details.get("cache_creation_tokens") or usage.get("cache_creation_input_tokens")
        ),
        "reasoning_tokens": _count(completion_details.get("reasoning_tokens")),
        "cost": cost,
    }


def _count(value: Any) -> int:
    """A token count as the provider reported it; 0 for what is not a count (a provider's response is
    untrusted input: a dict or a string there must not fail the request that used the tokens)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or value != value or value in (_INF, -_INF):
        return 0
    return int(value)


_INF = float("inf")


def _plain(value: Any) -> dict[str, Any] | None:
    """A usage block as a dict: LiteLLM hands pydantic objects, lm15 dicts."""
    if value is None or isinstance(value, Mapping):
        return dict(value) if value is not None else None
    dump = getattr(value, "model_dump", None)
    plain = dump() if callable(dump) else getattr(value, "__dict__", None)
    return dict(plain) if isinstance(plain, Mapping) else None  # a list or a number: no usage read
