"""Performing ``CheckGuardrails``: each guardrail in order until one trips (``_turn.guardrails``).

The answer is ``Returned(None)`` (all passed) or ``Returned({"name", "reason"})`` (the first that
tripped): plain JSON, so a durable driver records and replays it like a tool's value. Guardrails
are host code at the boundary: one that raises blocks, with its error as the reason (fail closed),
a library's own ``BaseException`` too; an interrupt or the caller's cancellation stops the turn.
"""

from __future__ import annotations

import inspect
from typing import Any

from dspy_imp._drivers.interrupts import tool_failure
from dspy_imp._prompt import sentences
from dspy_imp._records.errors import error_text
from dspy_imp._records.outcomes import Returned
from dspy_imp._turn.guardrails import CheckGuardrails, Guardrail, verdict


def check(effect: CheckGuardrails) -> Returned:
    for guardrail in effect.guardrails:
        try:
            value = guardrail.call(effect.stage, effect.inputs, effect.outputs)
        except BaseException as exc:  # host code at the boundary: the guardrail blocks
            if not tool_failure(exc):  # an interrupt or the caller's cancellation stops the turn
                raise
            return _trip(guardrail, sentences.guardrail_failed(guardrail.name, _message(exc)))
        if inspect.isawaitable(value):
            _close(value)
            return _trip(guardrail, sentences.guardrail_async_in_sync(guardrail.name))
        reason = verdict(value, guardrail.name)
        if reason is not None:
            return _trip(guardrail, reason)
    return Returned(None)


async def acheck(effect: CheckGuardrails) -> Returned:
    for guardrail in effect.guardrails:
        try:
            value = await guardrail.acall(effect.stage, effect.inputs, effect.outputs)
        except BaseException as exc:
            if not tool_failure(exc):
                raise
            return _trip(guardrail, sentences.guardrail_failed(guardrail.name, _message(exc)))
        reason = verdict(value, guardrail.name)
        if reason is not None:
            return _trip(guardrail, reason)
    return Returned(None)


def _trip(guardrail: Guardrail, reason: str) -> Returned:
    return Returned({"name": guardrail.name, "reason": reason})


def _close(value: Any) -> None:
    close = getattr(value, "close", None)
    if callable(close):
        close()


def _message(error: BaseException) -> str:
    return " ".join(error_text(error).split()) or type(error).__name__
