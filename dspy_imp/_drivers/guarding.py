"""Performing ``CheckGuardrails``: each guardrail in order until one trips (``_turn.guardrails``).

The answer is ``Checked(None)`` (all passed) or ``Checked({"name", "reason"})`` (the first that
tripped), with the model calls the guardrails made (``usage``) and, when one of those calls was not
sent (the deadline passed, a usage limit reached: ``guard_books``), ``stopped``: its cause. A
durable driver records and replays it like a tool's value. Guardrails are host code at the
boundary: one that raises blocks, with its error as the reason (fail closed), a library's own
``BaseException`` too; an interrupt or the caller's cancellation stops the turn.
"""

from __future__ import annotations

import inspect
from typing import Any

from dspy_imp._drivers.guard_books import Gate, GuardrailStopped, books
from dspy_imp._drivers.interrupts import tool_failure
from dspy_imp._prompt import sentences
from dspy_imp._records.errors import error_text
from dspy_imp._records.outcomes import Checked
from dspy_imp._turn.guardrails import CheckGuardrails, Guardrail, verdict


def check(effect: CheckGuardrails) -> Checked:
    with books(effect.budget) as gate:
        for guardrail in effect.guardrails:
            try:
                value = guardrail.call(effect.stage, effect.inputs, effect.outputs)
            except BaseException as exc:  # host code at the boundary: the guardrail blocks
                if not isinstance(exc, GuardrailStopped) and not tool_failure(exc):
                    raise  # an interrupt or the caller's cancellation stops the turn
                return _failed(gate, guardrail, exc)
            if inspect.isawaitable(value):
                _close(value)
                return _trip(gate, guardrail, sentences.guardrail_async_in_sync(guardrail.name))
            reason = verdict(value, guardrail.name)
            if reason is not None or gate.stopped is not None:
                return _trip(gate, guardrail, reason)
        return _trip(gate, None, None)


async def acheck(effect: CheckGuardrails) -> Checked:
    with books(effect.budget) as gate:
        for guardrail in effect.guardrails:
            try:
                value = await guardrail.acall(effect.stage, effect.inputs, effect.outputs)
            except BaseException as exc:
                if not isinstance(exc, GuardrailStopped) and not tool_failure(exc):
                    raise
                return _failed(gate, guardrail, exc)
            reason = verdict(value, guardrail.name)
            if reason is not None or gate.stopped is not None:
                return _trip(gate, guardrail, reason)
        return _trip(gate, None, None)


def _failed(gate: Gate, guardrail: Guardrail, error: BaseException) -> Checked:
    return _trip(gate, guardrail, sentences.guardrail_failed(guardrail.name, _message(error)))


def _trip(gate: Gate, guardrail: Guardrail | None, reason: str | None) -> Checked:
    """The check's answer: a model call that was not sent outweighs any verdict (the guardrail
    could not decide, whatever it made of the refusal)."""
    usage = tuple(gate.calls)
    if gate.stopped is not None:
        return Checked(None, usage=usage, stopped=gate.stopped)
    value = None if guardrail is None or reason is None else {"name": guardrail.name, "reason": reason}
    return Checked(value, usage=usage)


def _close(value: Any) -> None:
    close = getattr(value, "close", None)
    if callable(close):
        close()


def _message(error: BaseException) -> str:
    return " ".join(error_text(error).split()) or type(error).__name__
