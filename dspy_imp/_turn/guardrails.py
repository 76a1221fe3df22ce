"""Guardrails: host checks on a turn's inputs and outputs that end it with reason ``"blocked"``.

A guardrail is a function or a DSPy module, optionally wrapped in ``dspy_imp.Guardrail`` to name
it and say when it runs. An input guardrail is given the call's inputs (``check(inputs)``; a module
is called as ``module(**inputs)``); an output guardrail the outputs and the inputs
(``check(outputs, inputs)``; a module as ``module(**inputs, **outputs)``). It answers:

- pass: ``None`` or ``True``, or a prediction/object whose ``blocked`` attribute is false;
- a block: a reason (a string), ``False`` (no reason given), or a prediction/object whose
  ``blocked`` attribute is true (its ``reason`` attribute, if any, is the reason).

A guardrail that raises, or answers anything else, blocks (it fails closed).

When they run: input guardrails before the first request (``run="before"``, the default), or
alongside it (``run="alongside"``: the first request and the guardrails run at once; a tripped
guardrail discards that request's reply and nothing more is sent). A turn that resumes a paused
one has no new inputs and runs none. Output guardrails run on the outputs of a turn that has some,
before it ends; one made with ``retry=True`` may once per turn ask the model to try again instead, when the
outputs came from an ordinary step: the ``submit`` call's result becomes the reason (an error
observation), or a text answer becomes a thought followed by the line "Your message above was not
sent: <reason>" (``Step.not_sent``); the loop goes on. Outputs of a last request block.

A tripped guardrail ends the turn ``"blocked"``: no further request, ``metadata.guardrail`` says
which one and why, and the blocked answer is not replayed in a later turn (``_turn.machine``).
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal

from dspy_imp._prompt.signature import SUBMIT
from dspy_imp._records.errors import ConfigurationError
from dspy_imp._records.kinds import GuardrailStage, TerminationCause
from dspy_imp._records.steps import Step, ToolResult
from dspy_imp._turn.effects import Alongside, CheckGuardrails, ModelRequest
from dspy_imp._turn.meter import Meter

GuardrailRun = Literal["before", "alongside"]
"""When an input guardrail runs: before the first request, or at the same time."""

GUARDRAIL_RUNS: tuple[str, ...] = ("before", "alongside")


class Guardrail:
    """A check on a turn's inputs or outputs (see ``docs/controls.md#guardrails``).

    Args:
        check: A function or a ``dspy.Module`` (async functions and ``acall`` under ``acall``).
        name: What ``metadata.guardrail`` calls it; the function's or the module's class name.
        run: For an input guardrail, ``"before"`` the first request (default) or ``"alongside"`` it.
        retry: For an output guardrail, ask the model once to try again instead of blocking.

    Example:
        ```python
        no_pii = dspy_imp.Guardrail(lambda outputs, inputs: "has an email" if "@" in outputs["reply"] else None,
                                    name="no_pii", retry=True)
        agent = dspy_imp.ReActV2("ticket -> reply", tools=[lookup], output_guardrails=[no_pii])
        ```
    """

    def __init__(self, check: Any, *, name: str | None = None, run: str = "before", retry: bool = False):
        if isinstance(check, Guardrail) or not callable(check):
            raise ConfigurationError(f"a guardrail must be a function or a dspy.Module, got {check!r}")
        if name is not None and (not isinstance(name, str) or not name.strip()):
            raise ConfigurationError(f"a guardrail's `name` must be a non-blank string, got {name!r}")
        if run not in GUARDRAIL_RUNS:
            raise ConfigurationError(f"a guardrail's `run` must be 'before' or 'alongside', got {run!r}")
        if not isinstance(retry, bool):
            raise ConfigurationError(f"a guardrail's `retry` must be True or False, got {retry!r}")
        self.check = check
        self.module = is_module(check)
        self.name = name or _name_of(check, self.module)
        self.run: GuardrailRun = "alongside" if run == "alongside" else "before"
        self.retry = retry

    def __repr__(self) -> str:
        return f"Guardrail({self.name!r}, run={self.run!r}, retry={self.retry!r})"

    def call(self, stage: GuardrailStage, inputs: Mapping[str, Any], outputs: Mapping[str, Any] | None) -> Any:
        """Run the check (sync); a coroutine it returns is the caller's to refuse."""
        if self.module:
            return self.check(**_module_kwargs(inputs, outputs))
        return self.check(dict(inputs)) if stage == "input" else self.check(dict(outputs or {}), dict(inputs))

    async def acall(self, stage: GuardrailStage, inputs: Mapping[str, Any], outputs: Mapping[str, Any] | None) -> Any:
        if self.module:
            kwargs = _module_kwargs(inputs, outputs)
            if callable(getattr(self.check, "aforward", None)):
                return await self.check.acall(**kwargs)
            return await asyncio.to_thread(self.check, **kwargs)  # no ``aforward``: its ``forward``, off the loop
        value = self.call(stage, inputs, outputs)
        return await value if inspect.isawaitable(value) else value


def _module_kwargs(inputs: Mapping[str, Any], outputs: Mapping[str, Any] | None) -> dict[str, Any]:
    return {**inputs, **(outputs or {})}


def is_module(check: Any) -> bool:
    """A DSPy module (the turn imports no DSPy: a module is what has ``acall`` and predictors)."""
    return callable(getattr(check, "acall", None)) and callable(getattr(check, "named_predictors", None))


def _name_of(check: Callable[..., Any], module: bool) -> str:
    if module:
        return type(check).__name__
    name = getattr(check, "__name__", None)
    return name if isinstance(name, str) and name != "<lambda>" else type(check).__name__


@dataclass(frozen=True)
class Tripped:
    """Which guardrail tripped, and why (``metadata.guardrail`` without ``retry``)."""

    stage: GuardrailStage
    name: str
    reason: str
    retry: bool = False

    def metadata(self) -> dict[str, str]:
        return {"stage": self.stage, "name": self.name, "reason": self.reason}


@dataclass(frozen=True)
class Stopped:
    """A guardrail's model call was not sent: the turn's deadline passed or a usage limit was
    reached. The guardrails could not decide, so the turn ends as for that cause (``"incomplete"``)."""

    stage: GuardrailStage
    cause: TerminationCause


def tripped(check: CheckGuardrails, answer: Any) -> Tripped | None:
    """The driver's answer to ``check`` (a ``Checked``'s value) as a ``Tripped``, or ``None``."""
    value = getattr(answer, "value", answer)
    if not isinstance(value, Mapping):
        return None
    name, reason = str(value.get("name")), str(value.get("reason"))
    retry = any(g.retry for g in check.guardrails if g.name == name)
    return Tripped(check.stage, name, reason, retry)


def verdict(value: Any, name: str) -> str | None:
    """A guardrail's answer as the reason it blocks, or ``None`` when it passes."""
    if value is None or value is True:
        return None
    if value is False:
        return f"{name} blocked it"
    if isinstance(value, str):
        return value.strip() or f"{name} blocked it"
    if hasattr(value, "blocked"):
        if not value.blocked:
            return None
        reason = getattr(value, "reason", None)
        return str(reason).strip() if isinstance(reason, str) and reason.strip() else f"{name} blocked it"
    return f"{name} answered {type(value).__name__}, not pass or a reason"


@dataclass(frozen=True)
class Verdict:
    """What a tripped output guardrail makes of the turn: ``retry`` (the model tries again) or a
    block (a ``Stopped``: the turn ends for its cause); ``changed``: the last recorded step becomes
    ``last`` (``None``: it goes)."""

    trip: Tripped | Stopped
    retry: bool = False
    changed: bool = False
    last: Step | None = None


class Guards:
    """One turn's guardrails: the input ones still to run, and whether the output retry is spent.

    Each method is a generator the machine delegates to: it yields the checks (and the first
    request, when input guardrails run alongside it) and returns what came of them. The model calls
    a guardrail makes are the turn's (``meter``): each check carries what the limits leave, and what
    the calls used is counted; a check that a limit or the deadline stopped is a ``Stopped``.
    """

    def __init__(
        self, options: Any, inputs: Mapping[str, Any], resumed: bool, earlier: Mapping[str, Any], meter: Meter
    ):
        guards = options.input_guardrails if inputs and not resumed else ()  # a resumed turn has no new inputs
        self.before = tuple(g for g in guards if g.run == "before")
        self.alongside = tuple(g for g in guards if g.run == "alongside")
        self.output: tuple[Guardrail, ...] = tuple(options.output_guardrails)
        self.inputs = dict(inputs) or dict(earlier)  # output guardrails of a call without inputs: the turn's
        self.retried = False
        self.meter = meter

    def check_inputs(self) -> Generator[CheckGuardrails, Any, Tripped | Stopped | None]:
        if not self.before:
            return None
        check = CheckGuardrails("input", self.before, self.inputs, budget=self.meter.remaining())
        return self._read(check, (yield check))

    def send(self, request: Any) -> Generator[Any, Any, tuple[Any, Tripped | Stopped | None]]:
        """Yield ``request``; the first step request goes together with the alongside guardrails
        (whose budget leaves out that request: it is sent at the same time)."""
        if not self.alongside or not isinstance(request, ModelRequest):
            return (yield request), None
        budget = self.meter.remaining()
        if budget is not None and budget.requests is not None:
            budget = replace(budget, requests=max(budget.requests - 1, 0))
        check = CheckGuardrails("input", self.alongside, self.inputs, budget=budget)
        self.alongside = ()
        outcome, answer = yield Alongside(request, check)
        return outcome, self._read(check, answer)

    def _read(self, check: CheckGuardrails, answer: Any) -> Tripped | Stopped | None:
        """What came of ``check``, its guardrails' model calls counted on the turn's meter."""
        self.meter.add(getattr(answer, "usage", ()))
        stopped = getattr(answer, "stopped", None)
        if stopped is not None:
            return Stopped(check.stage, stopped)
        return tripped(check, answer)

    def check_outputs(self, ending: Any, last: Step | None) -> Generator[CheckGuardrails, Any, Verdict | None]:
        """``None`` when the ending's outputs pass (or it has none); else the verdict on ``last``,
        the step recorded last in this turn (``None`` when the turn recorded none). Outputs the
        guardrails could not check (``Stopped``) are withdrawn like blocked ones (fail closed)."""
        if not self.output or ending.outputs is None or all(v is None for v in ending.outputs.values()):
            return None  # no outputs to check (an empty last-text answer is not an answer either)
        check = CheckGuardrails("output", self.output, self.inputs, dict(ending.outputs), self.meter.remaining())
        trip = self._read(check, (yield check))
        if trip is None:
            return None
        if isinstance(trip, Stopped):
            return Verdict(trip, changed=last is not None and last.is_answer, last=withdrawn(last) if last else None)
        if trip.retry and not self.retried and ending.reason in ("submit", "answered") and last is not None:
            self.retried = True
            turned_down = rejected_submit if ending.reason == "submit" else not_sent
            return Verdict(trip, retry=True, changed=True, last=turned_down(last, trip.reason))
        if last is not None and last.is_answer:
            return Verdict(trip, changed=True, last=withdrawn(last))
        return Verdict(trip)


OUTPUT_GUARDRAIL_KIND = "output_guardrail"
"""The ``error_kind`` of a ``submit`` result an output guardrail turned down (``retry=True``)."""


def rejected_submit(step: Step, reason: str) -> Step:
    """``step`` with its accepted ``submit`` turned into an error observation: ``reason``."""
    results = tuple(
        replace(r, value=reason, error=True, error_kind=OUTPUT_GUARDRAIL_KIND) if _accepted_submit(r) else r
        for r in step.results
    )
    return replace(step, results=results, outputs=None)


def not_sent(step: Step, reason: str) -> Step:
    """A text answer turned down: a thought, followed by a line saying why (``Step.not_sent``)."""
    return replace(step, outputs=None, not_sent=reason)


def withdrawn(step: Step) -> Step | None:
    """``step`` without the answer a guardrail blocked, so no later turn shows it to the model.

    Its ``submit`` call goes with its result, its text and outputs go; calls to other tools
    (they ran) stay. A step left with nothing keeps only its inputs (or goes, without any).
    """
    ids = {r.id for r in step.results if _accepted_submit(r)}
    calls = tuple(c for c in step.calls if c.id not in ids)
    if calls:
        results = tuple(r for r in step.results if r.id not in ids)
        return replace(step, thought=None, calls=calls, results=results, outputs=None)
    if not step.inputs:
        return None
    return Step(inputs=step.inputs, extra=step.extra)


def _accepted_submit(result: ToolResult) -> bool:
    return result.name == SUBMIT and not result.error
