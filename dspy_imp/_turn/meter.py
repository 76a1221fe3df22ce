"""The usage meter: what a turn's requests cost so far, checked against its limits before each request."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from dspy_imp._records.usage import RequestUsage, Usage, UsageLimits, plus


class Meter:
    """The turn's running usage and its limits (owned by the machine)."""

    def __init__(self, limits: UsageLimits | None):
        self.limits = limits or UsageLimits()
        self.calls: list[RequestUsage] = []
        self._sums = Usage()  # running sums (no calls), so checking the limits costs the same at every step

    def add(self, calls: Sequence[RequestUsage]) -> None:
        self.calls.extend(calls)
        sums = self._sums
        for call in calls:
            sums = plus(sums, call)
        self._sums = sums

    def usage(self) -> Usage:
        return replace(self._sums, calls=tuple(self.calls))

    def reached(self) -> bool:
        """Whether any limit is reached: then no request may leave."""
        usage, limits = self._sums, self.limits
        pairs = (
            (usage.total_requests, limits.requests),
            (usage.input_tokens, limits.input_tokens),
            (usage.output_tokens, limits.output_tokens),
            (usage.total_tokens, limits.total_tokens),
            (usage.cost or 0.0, limits.cost),
            (usage.total_hosted_calls, limits.hosted_calls),
        )
        return any(limit is not None and used >= limit for used, limit in pairs)

    def allows_fallback(self) -> bool:
        """A JSON fallback leaves unseen by the machine: only when it cannot overshoot a limit."""
        limits = self.limits
        if any(v is not None for v in (limits.input_tokens, limits.output_tokens, limits.total_tokens, limits.cost)):
            return False
        return limits.requests is None or limits.requests - len(self.calls) >= 2

    def remaining(self) -> UsageLimits | None:
        """What is left under each limit: the budget of a sub-agent this turn calls (``None``: no limits)."""
        usage, limits = self._sums, self.limits
        used = {
            "requests": usage.total_requests,
            "input_tokens": usage.input_tokens,
            "output_tokens": usage.output_tokens,
            "total_tokens": usage.total_tokens,
            "cost": usage.cost or 0.0,
            "hosted_calls": usage.total_hosted_calls,
        }
        left = {k: None if getattr(limits, k) is None else max(getattr(limits, k) - v, 0) for k, v in used.items()}
        if all(v is None for v in left.values()):
            return None
        return UsageLimits(**left)
