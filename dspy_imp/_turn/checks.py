"""Checking one call before anything runs: which calls a request runs, and each call's refusal
(malformed, unknown tool, a caller's or the policy's denial, invalid arguments, an invalid
``submit``), approval wait, external wait, host-supplied answer, or runner."""

from __future__ import annotations

from typing import Any, Literal

from dspy_imp._prompt import sentences
from dspy_imp._prompt.signature import SUBMIT, Rejection
from dspy_imp._records.outcomes import Raised, Returned
from dspy_imp._records.steps import ToolCall
from dspy_imp._turn.approval import Decisions, asks_approval
from dspy_imp._turn.arguments import check_arguments
from dspy_imp._turn.calls import CallContext, CallMode, Checked, StepCalls, Verdict
from dspy_imp._turn.results import error_result, message_of, ok_result


def not_run(ctx: CallContext, call: ToolCall, mode: CallMode) -> Rejection:
    """Why a call of a last request was not run: what tracers show (the model reads nothing)."""
    name = call.name or "the call"
    if mode == "forced":
        return Rejection("unexecuted", f"{name} was not run: the forced submit request runs only {SUBMIT}.")
    tools = ", ".join(ctx.last_request_tools) or "no tools"
    return Rejection("unexecuted", f"{name} was not run: the last-text request runs only last_request_tools ({tools}).")


def runs_in(ctx: CallContext, name: str | None, mode: CallMode) -> bool:
    if mode == "forced":
        return name == SUBMIT
    if mode == "last_text":
        return name in ctx.last_request_tools
    return True


UNCHECKED: Any = object()
"""``check_call``'s ``arguments`` when they were not checked beforehand (``CheckArguments``)."""


def check_call(
    ctx: CallContext,
    call: ToolCall,
    args: Any,
    mode: CallMode,
    done: StepCalls,
    decisions: Decisions,
    arguments: Rejection | None = UNCHECKED,
) -> Checked:
    """The call checked; ``arguments``: its arguments' verdict when a driver checked them already
    (a schema someone else wrote, checked off the event loop: ``CheckArguments``)."""
    refusal = _refuse(ctx, call, args, mode, decisions, arguments)
    if isinstance(refusal, Rejection):
        if refusal.kind == "tool_denied" and call.name == SUBMIT:
            done.submit_denied = True
        return Checked(call, result=error_result(call, refusal))
    if refusal is not None:
        return Checked(call, pending=refusal)
    if call.name == SUBMIT:
        outputs = ctx.outputs.validate(args)
        if isinstance(outputs, Rejection):
            return Checked(call, result=error_result(call, outputs))
        done.submitted = outputs
        return Checked(call, result=ok_result(call, outputs))
    assert call.name is not None
    if call.id in decisions.results:
        value = decisions.results[call.id]
        return Checked(call, answer=Raised(value) if isinstance(value, BaseException) else Returned(value))
    if call.name in ctx.external:
        return Checked(call, pending="external")
    return Checked(call, runner=ctx.runners[call.name])


def _refuse(
    ctx: CallContext, call: ToolCall, args: Any, mode: CallMode, decisions: Decisions, arguments: Any
) -> Verdict:
    """An observation refusing the call, ``"approval"`` (a person must decide), or ``None``."""
    if call.name is None:
        return Rejection("malformed_tool_call", sentences.malformed_call(call.received))
    if call.name not in ctx.roster:
        return Rejection("unknown_tool", sentences.unknown_tool(call.name))
    decided = _decided(call, decisions)
    if isinstance(decided, Rejection):
        return decided
    verdict = _policy_verdict(ctx, call.name, dict(call.args))  # an approval never overrides the policy
    if decided == "approved" and verdict == "approval":
        verdict = None
    if isinstance(verdict, Rejection):
        return verdict
    if verdict == "approval" and mode != "step":  # a last request cannot wait for a person
        return Rejection("tool_denied", sentences.tool_not_allowed(call.name, sentences.NO_APPROVAL_NOW))
    if call.name == SUBMIT:
        return verdict
    if arguments is UNCHECKED:
        arguments = check_arguments(ctx.roster[call.name], args)
    return arguments or verdict


def _decided(call: ToolCall, decisions: Decisions) -> Rejection | Literal["approved"] | None:
    answer = decisions.approvals.get(call.id)
    if answer is None:
        return None
    if answer is True:
        return "approved"
    reason = answer if isinstance(answer, str) else None
    return Rejection("tool_denied", sentences.tool_not_allowed(call.name or "", reason))


def _policy_verdict(ctx: CallContext, name: str, args: dict[str, Any]) -> Verdict:
    policy = ctx.policy
    verdict: Any = True
    if isinstance(policy, frozenset):
        verdict = name in policy
    elif policy is not None:
        try:
            verdict = policy(name, args)
        except Exception as exc:  # host code at the tool boundary: the call is refused, the turn goes on
            return Rejection("tool_denied", sentences.policy_failed(name, message_of(exc)))
    if asks_approval(verdict) or (verdict is True and name in ctx.needs_approval):
        return "approval"
    if verdict is True:
        return None
    reason = verdict if isinstance(verdict, str) and verdict.strip() else None
    return Rejection("tool_denied", sentences.tool_not_allowed(name, reason))
