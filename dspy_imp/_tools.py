"""Executing one step's tool calls: decisions only, the running is yielded to a driver.

Every problem with a call is an *observation* recorded as that call's error result (the
sentences of reference Appendix B) and the loop goes on: a malformed call, an unknown
tool, a policy refusal, invalid arguments, a tool that raises, an invalid ``submit`` or
``finish_on`` result. Which calls run depends on the request: an ordinary step runs every
call; the last-text request runs only ``last_request_tools``; the forced request runs only
``submit``. Calls that are not run are listed, never recorded.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import dspy
from jsonschema import ValidationError, validate

from . import _prompts
from ._effects import Raised, RawCall, Returned, RunTool
from ._errors import error_text
from ._records import ToolCall, ToolResult, now_iso
from ._render import result_text
from ._signature import SUBMIT, OutputSpec, Rejection

_SURROGATE = re.compile("[\ud800-\udfff]")

CallMode = Literal["step", "last_text", "forced"]


class Finish:
    """What a ``finish_on`` hook returns to end the turn with these outputs.

    Example:
        >>> def on_send(args, result, inputs):
        ...     return dspy_imp.Finish(reply=args["text"])
        >>> agent = dspy_imp.ReActV2("message -> reply", tools=[send], finish_on={"send": on_send})
    """

    def __init__(self, **outputs: Any):
        self.outputs = outputs

    def __repr__(self) -> str:
        return f"Finish({', '.join(f'{k}={v!r}' for k, v in self.outputs.items())})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Finish) and other.outputs == self.outputs

    __hash__ = None  # type: ignore[assignment]


@dataclass(frozen=True)
class CallContext:
    """What a step's calls are checked and run against (fixed for the call)."""

    roster: Mapping[str, dspy.Tool]
    runners: Mapping[str, dspy.Tool]
    outputs: OutputSpec
    inputs: Mapping[str, Any]
    policy: Callable[[str, dict[str, Any]], bool | str] | frozenset[str] | None = None
    finish_on: Mapping[str, Callable[..., Any]] = field(default_factory=dict)
    last_request_tools: tuple[str, ...] = ()


@dataclass
class StepCalls:
    """What came of a step's calls."""

    calls: list[ToolCall] = field(default_factory=list)
    results: list[ToolResult] = field(default_factory=list)
    submitted: dict[str, Any] | None = None
    submit_denied: bool = False
    finished: tuple[str, dict[str, Any]] | None = None
    unexecuted: list[dict[str, Any]] = field(default_factory=list)


def run_calls(
    ctx: CallContext, raw: Sequence[RawCall], mode: CallMode, step_index: int, taken: set[str]
) -> Generator[RunTool, Returned | Raised, StepCalls]:
    """Check and run a step's calls in call order; yields each tool run to the driver.

    Calls without an id get ``call_{step}_{index}``; an id the conversation already holds
    (a provider reusing ids, or a made-up id of an earlier turn) gets a ``_2``, ``_3``...
    suffix, so every call in a request has its own id. ``taken`` is updated.
    """
    done = StepCalls()
    for index, call in enumerate(raw):
        record = ToolCall(
            id=_unique(call.id or f"call_{step_index}_{index}", taken),
            name=call.name,
            args=dict(call.args) if isinstance(call.args, Mapping) else {},
            received=call.received,
        )
        if not _runs_in(ctx, call.name, mode):
            done.unexecuted.append({"id": record.id, "name": record.name, "args": dict(record.args)})
            continue
        result = yield from _run_one(ctx, record, call.args, done)
        done.calls.append(record)
        done.results.append(result)
    return done


def _unique(call_id: str, taken: set[str]) -> str:
    unique, suffix = call_id, 1
    while unique in taken:
        suffix += 1
        unique = f"{call_id}_{suffix}"
    taken.add(unique)
    return unique


def _runs_in(ctx: CallContext, name: str | None, mode: CallMode) -> bool:
    if mode == "forced":
        return name == SUBMIT
    if mode == "last_text":
        return name in ctx.last_request_tools
    return True


def _run_one(
    ctx: CallContext, call: ToolCall, args: Any, done: StepCalls
) -> Generator[RunTool, Returned | Raised, ToolResult]:
    refusal = _refuse(ctx, call, args)
    if refusal is not None:
        if refusal.kind == "tool_denied" and call.name == SUBMIT:
            done.submit_denied = True
        return _error(call, refusal)
    if call.name == SUBMIT:
        outputs = ctx.outputs.validate(args)
        if isinstance(outputs, Rejection):
            return _error(call, outputs)
        done.submitted = outputs
        return _ok(call, outputs)
    assert call.name is not None
    outcome = yield RunTool(ctx.runners[call.name], dict(call.args))
    if isinstance(outcome, Raised):
        return _error(call, Rejection("tool_error", _prompts.tool_failed(call.name, _message(outcome.error))))
    value = readable_result(outcome.value)
    if isinstance(value, Rejection):
        return _error(call, Rejection("tool_error", _prompts.unreadable_result(call.name, value.sentence)))
    return _finish_hook(ctx, call, value, done)


def _refuse(ctx: CallContext, call: ToolCall, args: Any) -> Rejection | None:
    if call.name is None:
        return Rejection("malformed_tool_call", _prompts.MALFORMED_CALL)
    if call.name not in ctx.roster:
        return Rejection("unknown_tool", _prompts.unknown_tool(call.name))
    denial = _policy_denial(ctx, call.name, dict(call.args))
    if denial is not None:
        return denial
    if call.name == SUBMIT:
        return None
    return check_arguments(ctx.roster[call.name], args)


def _policy_denial(ctx: CallContext, name: str, args: dict[str, Any]) -> Rejection | None:
    policy = ctx.policy
    if policy is None:
        return None
    if isinstance(policy, frozenset):
        verdict: Any = name in policy
    else:
        try:
            verdict = policy(name, args)
        except Exception as exc:  # host code at the tool boundary: the call is refused, the turn goes on
            return Rejection("tool_denied", _prompts.policy_failed(name, _message(exc)))
    if verdict is True:
        return None
    if isinstance(verdict, str) and verdict.strip():
        return Rejection("tool_denied", _prompts.tool_not_allowed_because(name, verdict))
    return Rejection("tool_denied", _prompts.tool_not_allowed(name))


def check_arguments(tool: dspy.Tool, args: Any) -> Rejection | None:
    """The call's arguments against the tool's JSON schema (reference §2.6 step 5)."""
    if not isinstance(args, Mapping):
        return Rejection("schema_validation", _prompts.invalid_arguments(["arguments must be a JSON object"]))
    schema = tool.args or {}
    missing = [k for k, s in schema.items() if k not in args and not (isinstance(s, dict) and "default" in s)]
    if missing:
        return Rejection("missing_required", _prompts.missing_arguments(missing))
    problems = []
    for key, value in args.items():
        if key not in schema:
            if not tool.has_kwargs:
                problems.append(f"{key} is not an argument of {tool.name}")
            continue
        try:
            spec = schema[key]
            if isinstance(spec, dict) and spec.get("type") not in (None, "Any"):
                validate(instance=value, schema=spec)
        except ValidationError as exc:
            problems.append(f"{key} {exc.message}")
    return Rejection("schema_validation", _prompts.invalid_arguments(problems)) if problems else None


def _finish_hook(ctx: CallContext, call: ToolCall, value: Any, done: StepCalls) -> ToolResult:
    hook = ctx.finish_on.get(call.name or "")
    if hook is None:
        return _ok(call, value)
    try:
        verdict = hook(dict(call.args), value, dict(ctx.inputs))
    except Exception as exc:  # the hook is host code at the tool boundary: an observation
        return _error(call, Rejection("tool_error", _prompts.tool_failed(call.name or "", _message(exc))))
    if not isinstance(verdict, Finish):
        return _ok(call, value)
    outputs = ctx.outputs.validate(verdict.outputs)
    if isinstance(outputs, Rejection):
        return _error(call, outputs)
    if done.finished is None:
        done.finished = (call.name or "", outputs)
    return _ok(call, value)


def readable_result(value: Any) -> Any:
    """``value`` if the model can be shown it as UTF-8 text; the text with lone surrogates
    replaced when only its encoding fails; a ``Rejection`` saying why when it cannot be
    rendered at all (a circular structure, a ``__str__`` that raises)."""
    try:
        text = result_text(value)
    except (Exception, RecursionError) as exc:
        return Rejection("tool_error", _message(exc))
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return _SURROGATE.sub("\ufffd", text)
    return value


def _ok(call: ToolCall, value: Any) -> ToolResult:
    return ToolResult(call.id, call.name, value, False, now_iso())


def _error(call: ToolCall, rejection: Rejection) -> ToolResult:
    return ToolResult(call.id, call.name, rejection.sentence, True, now_iso(), rejection.kind)


def _message(error: BaseException) -> str:
    text = " ".join(error_text(error).split())
    return text or type(error).__name__
