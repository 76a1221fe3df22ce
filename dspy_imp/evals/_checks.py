"""How the turn ended, what it used, and what it answered."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, get_args

import dspy

from dspy_imp._records.errors import ConfigurationError
from dspy_imp._records.kinds import TerminationCause, TerminationReason
from dspy_imp._records.usage import Usage
from dspy_imp.evals._metric import Metric, Verdict
from dspy_imp.evals._record import Record, show
from dspy_imp.evals._users import Conversation


class Ended(Metric):
    """How the turn ended: its termination reason (and cause), or simply whether it answered.

    Args:
        reasons: The reasons that pass (one or several); ``None`` (default): any ending that
            carries an answer (not ``"incomplete"``, ``"paused"`` or ``"blocked"``).
        cause: The cause that must go with it (e.g. ``"max_iters"`` for a turn meant to run out).

    Example:
        ```python
        evals.Ended(("answered", "submit"))  # feedback: "ended `incomplete` (`max_iters`) after 12 requests"
        ```
    """

    def __init__(
        self,
        reasons: TerminationReason | Sequence[TerminationReason] | None = None,
        *,
        cause: TerminationCause | None = None,
        name: str = "ended",
    ):
        wanted = (reasons,) if isinstance(reasons, str) else tuple(reasons) if reasons is not None else None
        bad = [r for r in wanted or () if r not in get_args(TerminationReason)]
        if bad or wanted == ():
            raise ConfigurationError(
                f"`reasons` must be termination reasons {get_args(TerminationReason)!r}, got {reasons!r}"
            )
        if cause is not None and cause not in get_args(TerminationCause):
            raise ConfigurationError(f"`cause` must be one of {get_args(TerminationCause)!r}, got {cause!r}")
        super().__init__(name=name)
        self.reasons = wanted
        self.cause = cause

    def judge(self, example: Any, record: Record) -> Verdict:
        meta = record.metadata
        reason_ok = meta.complete if self.reasons is None else meta.termination_reason in self.reasons
        cause_ok = self.cause is None or meta.termination_cause == self.cause
        wanted = "an answer" if self.reasons is None else " or ".join(f"`{r}`" for r in self.reasons)
        wanted += f" (`{self.cause}`)" if self.cause else ""
        if reason_ok and cause_ok:
            return Verdict(1.0, f"The turn {record.ending()}, as expected.", self.name)
        return Verdict(0.0, f"The turn {record.ending()}; expected it to end with {wanted}.", self.name)


_BUDGETS = {
    "requests": ("requests", lambda r: r.requests),
    "input_tokens": ("input tokens", lambda r: r.usage.input_tokens),
    "output_tokens": ("output tokens", lambda r: r.usage.output_tokens),
    "total_tokens": ("tokens", lambda r: r.usage.total_tokens),
    "cost": ("USD", lambda r: r.usage.cost or 0.0),
    "tool_calls": ("tool calls", lambda r: len(r.calls)),
}


class Budget(Metric):
    """What the turn used, against a budget (its sub-agents' requests and calls included).

    Each limit given is one part; the score is the share of them kept. ``None`` means no limit.
    On a ``Conversing`` program's prediction it counts the whole conversation's agent turns (the
    simulated user's requests and time apart).

    Args:
        requests: Model requests of any kind. input_tokens, output_tokens, total_tokens: Tokens.
        cost: USD, where the LM reported it. tool_calls: Calls made by the whole team.
        seconds: Wall time, ``metadata.duration`` (a conversation: its agent turns' durations summed).
        agent: Count only this sub-agent's requests, tokens and cost (``Usage.agents``) and calls.

    Example:
        ```python
        evals.Budget(requests=8, seconds=10)  # "used 12 requests (budget 8, over) and took 12.5 s (budget 10 s, over)"
        ```
    """

    def __init__(
        self,
        *,
        requests: int | None = None,
        input_tokens: int | None = None,
        output_tokens: int | None = None,
        total_tokens: int | None = None,
        cost: float | None = None,
        tool_calls: int | None = None,
        seconds: float | None = None,
        agent: str | None = None,
        name: str = "budget",
    ):
        given = dict(
            requests=requests,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            total_tokens=total_tokens,
            cost=cost,
            tool_calls=tool_calls,
            seconds=seconds,
        )
        limits = {k: v for k, v in given.items() if v is not None}
        for key, value in limits.items():
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < math.inf:
                raise ConfigurationError(f"`{key}` must be a non-negative number or None, got {value!r}")
        if not limits:
            raise ConfigurationError("Budget needs at least one limit (`requests`, `tool_calls`, `cost`, ...)")
        if seconds is not None and agent is not None:
            raise ConfigurationError(
                f"Budget(seconds=...) times the whole turn; it cannot be scoped to `agent` {agent!r}"
                " (a sub-agent's time is part of its caller's)"
            )
        super().__init__(name=name)
        self.limits = limits
        self.agent = agent

    def judge(self, example: Any, record: Record) -> Verdict:
        record = self._scoped(record)
        kept, used, took = 0, [], []
        for key, limit in self.limits.items():
            if key == "seconds":
                seconds = _seconds(record)
                ok = seconds is not None and seconds <= limit
                took.append(_took(seconds, limit, ok))
            else:
                label, value = _BUDGETS[key][0], _BUDGETS[key][1](record)
                label = label[:-1] if value == 1 and label.endswith("s") else label
                ok = value <= limit
                used.append(f"{_number(value)} {label} (budget {_number(limit)}{'' if ok else ', over'})")
            kept += ok
        parts = ([f"used {', '.join(used)}"] if used else []) + took
        text = f"{self._who(record)} {' and '.join(parts)}."
        over = kept < len(self.limits)
        return Verdict(
            kept / len(self.limits), f"Over budget: {text}" if over else text[0].upper() + text[1:], self.name
        )

    def _who(self, record: Record) -> str:
        if self.agent is not None:
            return f"`{self.agent}`"
        return "the agent's turns" if isinstance(record.conversation, Conversation) else "the turn"

    def _scoped(self, record: Record) -> Record:
        """The record with the usage the limits count: a conversation's agent turns', or one sub-agent's."""
        talk = record.conversation
        usage = talk.agent_usage if isinstance(talk, Conversation) else record.usage
        calls = record.calls
        if self.agent is not None:
            usage = usage.agents.get(self.agent, Usage())
            calls = tuple(c for c in calls if c.agent and c.agent.split("/")[0] == self.agent)
        return replace(record, calls=calls, metadata=replace(record.metadata, usage=usage))


def _seconds(record: Record) -> float | None:
    talk = record.conversation
    return talk.agent_duration if isinstance(talk, Conversation) else record.metadata.duration


def _took(seconds: float | None, limit: float, ok: bool) -> str:
    if seconds is None:
        return f"has no recorded duration (budget {_number(limit)} s)"
    return f"took {_number(seconds)} s (budget {_number(limit)} s{'' if ok else ', over'})"


def _number(value: float) -> str:
    return str(value) if isinstance(value, int) else f"{value:.4g}"


class JudgeAnswer(dspy.Signature):
    """Judge whether the answer to the task is correct, given the expected answer."""

    task: str = dspy.InputField(desc="what the program was asked")
    expected: str = dspy.InputField(desc="the expected answer")
    answer: str = dspy.InputField(desc="the program's answer")
    correct: bool = dspy.OutputField()
    reason: str = dspy.OutputField(desc="one sentence: what is right or wrong in the answer")


class Judge(dspy.Module):
    """An LM judge of an answer, itself a DSPy module: saveable, and optimizable like any program.

    ``Answer(field, match=Judge())`` asks it; it uses its own LM when set (``judge.set_lm(lm)``),
    else the context's.
    """

    def __init__(self, signature: type[dspy.Signature] = JudgeAnswer):
        super().__init__()
        self.judge = dspy.Predict(signature)

    def forward(self, task: str, expected: str, answer: str) -> dspy.Prediction:
        return self.judge(task=task, expected=expected, answer=answer)


class Answer(Metric):
    """One output field of the answer against the example's.

    Args:
        field: The output field.
        match: ``"exact"`` (default), a function ``fn(actual, expected)`` returning a bool or a
            score, or a ``Judge``.
        expected: The example's field with the expected value (``field`` by default).

    Example:
        ```python
        evals.Answer("reply", match=lambda got, want: want.lower() in got.lower())
        ```
    """

    def __init__(
        self,
        field: str,
        *,
        match: str | Callable[[Any, Any], bool | float] | Judge = "exact",
        expected: str | None = None,
        name: str | None = None,
    ):
        if not isinstance(field, str) or not field:
            raise ConfigurationError(f"`field` must be an output field's name, got {field!r}")
        if not (match == "exact" or callable(match)):
            raise ConfigurationError(f"`match` must be 'exact', a function or a dspy_imp.evals.Judge, got {match!r}")
        if isinstance(match, dspy.Module) and not isinstance(match, Judge):  # called as fn(actual, expected): TypeError
            raise ConfigurationError(
                f"`match` takes a dspy.Module only as a dspy_imp.evals.Judge (or wrap it in a function), got {match!r}"
            )
        super().__init__(name=name or f"answer.{field}")
        self.field = field
        self.match = match
        self.expected = expected or field

    def judge(self, example: Any, record: Record) -> Verdict:
        want = getattr(example, self.expected, None)
        if self.field not in record.outputs or not record.metadata.complete:
            return Verdict(0.0, f"No `{self.field}` in the answer: the turn {record.ending()}.", self.name)
        got = record.outputs[self.field]
        if isinstance(self.match, Judge):
            task = "; ".join(
                f"{k}: {v}" for k, v in (example.inputs() if isinstance(example, dspy.Example) else {}).items()
            )
            ruling = self.match(task=task, expected=str(want), answer=str(got))
            score = float(bool(ruling.correct))
            return Verdict(
                score, f"The judge found `{self.field}` {'right' if score else 'wrong'}: {ruling.reason}", self.name
            )
        value = got == want if self.match == "exact" else self.match(got, want)  # type: ignore[operator]
        score = float(value)
        if score >= 1:
            return Verdict(1.0, f"`{self.field}` was right: {show(got)}.", self.name)
        return Verdict(score, f"`{self.field}` was {show(got)}, expected {show(want)}.", self.name)
