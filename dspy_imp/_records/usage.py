"""What a turn's requests cost, and the limits that stop a turn before it costs more.

Counting rules (``docs/controls.md#usage-limits``):

- A *request* is one model call. Each request the machine sends counts once under its kind
  (``step``, ``last_text``, ``forced_submit``, ``required_retry``, ``extraction``), whether it
  succeeded or not; a JSON fallback DSPy's adapter made for a step counts under
  ``json_fallback``; a model call a guardrail made counts under ``guardrail`` (``_drivers.guard_books``),
  checked against the limits before it leaves as the loop's requests are. Retries DSPy's LM makes
  inside one request are not seen, so not counted.
- Tokens and cost are what the LM reported for each call (DSPy's history entry: LiteLLM's or
  lm15's usage and cost), read whether or not ``track_usage`` is on, and under
  ``dspy.configure(disable_history=True)`` too (``_drivers.recorder``). A call that failed or a
  cache hit reports none.
- A limit is checked before each request, never during one: a request leaves only while every
  total is strictly below its limit. Tokens are known only after a request returns, so the
  request that crosses a token or cost limit is counted after it was sent, and it is the last
  one: no limit is exceeded by more than one request. Under a token or cost limit the JSON
  fallback is off (its request would leave before the first one's usage is known); under a
  request limit it is allowed only while two requests remain.
- No reserve: once a limit is reached, no owed reply (forced submit, last text, extraction) is
  sent either; the turn ends ``"incomplete"`` with cause ``"usage_limit_exceeded"``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from dspy_imp._records.errors import ConfigurationError
from dspy_imp._records.kinds import UsageKind


@dataclass(frozen=True)
class UsageLimits:
    """Ceilings for one turn; ``None`` means no limit.

    Args:
        requests: Model requests of any kind (JSON fallbacks included).
        input_tokens: Prompt tokens, summed over the turn's requests.
        output_tokens: Completion tokens (reasoning included, as providers count them).
        total_tokens: Input plus output tokens.
        cost: Cost in USD, where the LM reports it (requests with no reported cost add 0).
        hosted_calls: Calls the provider ran for hosted tools (``dspy_imp.hosted``: searches, fetches),
            summed over the turn's requests as the provider counted them.

    Example:
        ```python
        agent = dspy_imp.ReActV2("q -> a", tools=[lookup], usage_limits=dspy_imp.UsageLimits(requests=5))
        ```
    """

    requests: int | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    total_tokens: int | None = None
    cost: float | None = None
    hosted_calls: int | None = None

    def __post_init__(self) -> None:
        for name in ("requests", "input_tokens", "output_tokens", "total_tokens", "hosted_calls"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
                raise ConfigurationError(f"`usage_limits.{name}` must be a non-negative integer or None, got {value!r}")
        cost = self.cost
        bad = isinstance(cost, bool) or not isinstance(cost, int | float) or not math.isfinite(cost) or cost < 0
        if cost is not None and bad:
            raise ConfigurationError(f"`usage_limits.cost` must be a non-negative number or None, got {cost!r}")

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in vars(self).items() if v is not None}


def check_usage_limits(value: Any, where: str = "usage_limits") -> UsageLimits | None:
    if value is None or isinstance(value, UsageLimits):
        return value
    if isinstance(value, Mapping):
        unknown = sorted(
            set(value) - {"requests", "input_tokens", "output_tokens", "total_tokens", "cost", "hosted_calls"}
        )
        if unknown:
            raise ConfigurationError(f"`{where}` has unknown key(s) {unknown!r}")
        return UsageLimits(**value)
    raise ConfigurationError(f"`{where}` must be a dspy_imp.UsageLimits or None, got {value!r}")


@dataclass(frozen=True)
class RequestUsage:
    """One model call: its kind and what the LM reported (zeros when it reported nothing)."""

    kind: UsageKind
    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    reasoning_tokens: int = 0
    cost: float | None = None
    agent: str | None = None
    """The sub-agent that sent it (``"researcher"``, ``"researcher/coder"`` for its own sub-agent), or
    ``None`` for the turn's own requests (``docs/agents-as-tools.md``)."""
    cache_write_tokens: int = 0
    """Prompt tokens it wrote to the provider's prompt cache (last: fields keep their positions)."""
    hosted_calls: Mapping[str, int] = field(default_factory=dict)
    """What the provider ran for hosted tools in it, as it counted them (Anthropic's
    ``usage.server_tool_use``: ``{"web_search_requests": 1, "web_fetch_requests": 0}``)."""


@dataclass(frozen=True)
class Usage:
    """What one turn's requests used (``pred.metadata.usage``, ``StepError.usage``).

    Attributes:
        requests: Requests sent, by kind (only kinds that were sent).
        input_tokens: Prompt tokens, summed over the calls.
        output_tokens: Completion tokens (reasoning included, as providers count them), summed.
        cached_tokens: Prompt tokens the provider read from its cache, summed.
        cache_write_tokens: Prompt tokens the provider wrote to its cache (Anthropic's
            ``cache_creation_input_tokens``; billed above the input price), summed.
        reasoning_tokens: Reasoning tokens, where the provider reports them, summed.
        cost: Summed cost in USD, or ``None`` when no call reported one.
        calls: Every model call in order, with its own usage.
        hosted_calls: The provider's counts of hosted tool calls (``dspy_imp.hosted``), summed by
            name (``{"web_search_requests": 2}``); their fees are in ``cost`` where priced.

    The sums count the requests of sub-agents the turn called (``agent.as_tool()``) too; ``agents``
    shows them again under each sub-agent's name.
    """

    requests: Mapping[str, int] = field(default_factory=dict)
    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    reasoning_tokens: int = 0
    cost: float | None = None
    calls: tuple[RequestUsage, ...] = ()
    cache_write_tokens: int = 0
    hosted_calls: Mapping[str, int] = field(default_factory=dict)

    @property
    def total_hosted_calls(self) -> int:
        return sum(self.hosted_calls.values())

    @property
    def total_requests(self) -> int:
        return sum(self.requests.values())

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    @property
    def agents(self) -> dict[str, Usage]:
        """What each sub-agent called by this turn used, by its tool name (its own sub-agents included)."""
        found: dict[str, list[RequestUsage]] = {}
        for call in self.calls:
            if call.agent is not None:
                name, _, rest = call.agent.partition("/")
                found.setdefault(name, []).append(replace(call, agent=rest or None))
        return {name: summed(calls) for name, calls in found.items()}


def plus(sums: Usage, call: RequestUsage) -> Usage:
    """``sums`` with one more call counted (its ``calls`` are left as they are)."""
    return Usage(
        requests={**sums.requests, call.kind: sums.requests.get(call.kind, 0) + 1},
        input_tokens=sums.input_tokens + call.input_tokens,
        output_tokens=sums.output_tokens + call.output_tokens,
        cached_tokens=sums.cached_tokens + call.cached_tokens,
        cache_write_tokens=sums.cache_write_tokens + call.cache_write_tokens,
        reasoning_tokens=sums.reasoning_tokens + call.reasoning_tokens,
        cost=sums.cost if call.cost is None else (sums.cost or 0) + call.cost,
        calls=sums.calls,
        hosted_calls=_summed_counts(sums.hosted_calls, call.hosted_calls),
    )


def _summed_counts(first: Mapping[str, int], second: Mapping[str, int]) -> Mapping[str, int]:
    if not second:
        return first
    return {**first, **{k: first.get(k, 0) + v for k, v in second.items()}}


def summed(calls: Sequence[RequestUsage]) -> Usage:
    """The usage of these calls."""
    sums = Usage()
    for call in calls:
        sums = plus(sums, call)
    return replace(sums, calls=tuple(calls))


def tighter(first: UsageLimits | None, second: UsageLimits | None) -> UsageLimits | None:
    """Each limit the lower of the two (a sub-agent's own, and what its caller has left)."""
    if first is None or second is None:
        return first or second
    values = {}
    for name in ("requests", "input_tokens", "output_tokens", "total_tokens", "cost", "hosted_calls"):
        a, b = getattr(first, name), getattr(second, name)
        values[name] = b if a is None else a if b is None else min(a, b)
    return UsageLimits(**values)
