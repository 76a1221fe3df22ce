"""Judging what a call came to: a tool's return or exception, a host-supplied answer, and its
``finish_on`` hook, each made the call's ``ToolResult`` (an error result is an observation the
model reads, and the loop goes on)."""

from __future__ import annotations

import re
from typing import Any

from dspy_imp._prompt import sentences
from dspy_imp._prompt.signature import Rejection
from dspy_imp._records.errors import error_text
from dspy_imp._records.media import contains_media
from dspy_imp._records.outcomes import Raised, Returned
from dspy_imp._records.steps import ToolCall, ToolResult, now_iso
from dspy_imp._records.text import result_text
from dspy_imp._turn.calls import CallContext, Finish, StepCalls
from dspy_imp._turn.limits import cut_result, misbehaved

_SURROGATE = re.compile("[\ud800-\udfff]")


def returned(ctx: CallContext, call: ToolCall, outcome: Returned | Raised, done: StepCalls) -> ToolResult:
    return judged(ctx, call, outcome, done)[0]


def judged(ctx: CallContext, call: ToolCall, outcome: Returned | Raised, done: StepCalls) -> tuple[ToolResult, bool]:
    """The call's result, and whether its ``finish_on`` hook rejected what the tool returned
    (the tool's own span is OK then, so the rejection is reported on its own)."""
    if isinstance(outcome, Raised):
        failed = misbehaved(call.name or "", outcome.error) or Rejection(
            "tool_error", sentences.tool_failed(call.name or "", message_of(outcome.error))
        )
        return error_result(call, failed, outcome.at), False
    value = readable_result(outcome.value)
    if isinstance(value, Rejection):
        unreadable = Rejection("tool_error", sentences.unreadable_result(call.name or "", value.sentence))
        return error_result(call, unreadable), False
    result = finish_hook(ctx, call, value, done, outcome.at)
    return cut_result(ctx.limits, ctx.renderer, call, result), result.error


def finish_hook(ctx: CallContext, call: ToolCall, value: Any, done: StepCalls, at: str | None) -> ToolResult:
    hook = ctx.finish_on.get(call.name or "")
    if hook is None:
        return ok_result(call, value, at)
    try:
        verdict = hook(dict(call.args), value, dict(ctx.inputs))
    except Exception as exc:  # the hook is host code at the tool boundary: an observation
        return error_result(call, Rejection("tool_error", sentences.tool_failed(call.name or "", message_of(exc))))
    if not isinstance(verdict, Finish):
        return ok_result(call, value, at)
    outputs = ctx.outputs.validate(verdict.outputs)
    if isinstance(outputs, Rejection):
        return error_result(call, outputs, at)
    if done.finished is None:
        done.finished = (call.name or "", outputs)
    return ok_result(call, value, at)


def readable_result(value: Any) -> Any:
    """``value`` if the model can be shown it as UTF-8 text; the text with lone surrogates
    replaced when only its encoding fails; a ``Rejection`` saying why when it cannot be
    rendered at all (a circular structure, a ``__str__`` that raises). Media are sent as media."""
    if contains_media(value):
        return value
    try:
        text = result_text(value)
    except (Exception, RecursionError) as exc:
        return Rejection("tool_error", message_of(exc))
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return _SURROGATE.sub("\ufffd", text)
    return value


def ok_result(call: ToolCall, value: Any, at: str | None = None) -> ToolResult:
    return ToolResult(call.id, call.name, value, False, at or now_iso())


def error_result(call: ToolCall, rejection: Rejection, at: str | None = None) -> ToolResult:
    return ToolResult(call.id, call.name, rejection.sentence, True, at or now_iso(), rejection.kind)


def message_of(error: BaseException) -> str:
    text = " ".join(error_text(error).split())
    return text or type(error).__name__
