"""Calls of sub-agents (``agent.as_tool()``): what the caller's step makes of a child's turn.

A sub-agent tool is a tool whose run is another program's turn. The call is checked like any
call (policy, approval, arguments), then yielded as a ``RunAgent`` carrying what the caller's
usage limits have left (the child's limits are the tighter of its own and that budget); the
child reads the caller's deadline from the context, so it is bounded by both. What came back
(``AgentEnded``) becomes, for the caller's step:

- the call's result: the child's outputs (the one output's value, or all of them as a dict)
  when it answered, an observation when it ended without an answer or raised ``StepError``;
- the child's usage, counted in the caller's meter with each call tagged with the child's name
  (``"researcher"``, ``"researcher/coder"`` for a grandchild): ``Usage.agents`` reads it back;
- the child's record (``Step.agent_runs[call id]``): its ending, usage, pending calls and its
  whole history, so a resumed caller continues the same child conversation;
- when the child paused: no result, and the child's pending calls become the caller's, their ids
  and names prefixed with the call's (``"<call id>/<child call id>"``, ``"<tool>/<child tool>"``).
  The caller's step pauses (the calls that already ran keep their results). On resume, the
  decisions under the call's prefix go to the child, which resumes from its recorded history.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from dspy_imp._prompt import sentences
from dspy_imp._prompt.signature import Rejection
from dspy_imp._records.outcomes import AgentEnded, Raised, Returned
from dspy_imp._records.steps import PendingCall, ToolCall
from dspy_imp._records.usage import RequestUsage, Usage, UsageLimits
from dspy_imp._turn.approval import SEPARATOR, Decisions
from dspy_imp._turn.effects import RunAgent, Tool, carried


def is_agent(tool: Tool | None) -> bool:
    """A sub-agent tool (``agent.as_tool()`` sets ``runs_agent``)."""
    return carried(tool, "runs_agent", False) is True


def paused_run(record: Mapping[str, Any] | None) -> bool:
    return record is not None and record.get("termination_reason") == "paused"


def effect(
    tool: Tool, call: ToolCall, resumed: Mapping[str, Any] | None, decisions: Decisions, budget: UsageLimits | None
) -> RunAgent:
    """The child's turn for this call: a new one on the call's arguments, or the paused one resumed."""
    if resumed is None:
        return RunAgent(tool, dict(call.args), call=call, budget=budget)
    prefix = call.id + SEPARATOR
    child = Decisions(
        approvals={k[len(prefix) :]: v for k, v in decisions.approvals.items() if k.startswith(prefix)},
        results={k[len(prefix) :]: v for k, v in decisions.results.items() if k.startswith(prefix)},
        forms={k[len(prefix) :]: v for k, v in decisions.forms.items() if k.startswith(prefix)},
    )
    return RunAgent(
        tool, dict(call.args), call=call, history=tuple(resumed.get("history") or ()), decisions=child, budget=budget
    )


@dataclass(frozen=True)
class Came:
    """What a sub-agent call came to, for the caller's step (exactly one of the first three is set)."""

    outcome: Returned | Raised | None
    rejection: Rejection | None
    pending: tuple[PendingCall, ...]
    record: dict[str, Any]
    usage: tuple[RequestUsage, ...]


def came_to(tool: Tool, call: ToolCall, ended: AgentEnded, can_wait: bool) -> Came:
    """The call's result (or its pending calls), record and tagged usage. ``can_wait``: an ordinary step."""
    name = tool.name
    record = _record(name, ended)
    usage = tuple(
        replace(c, agent=name if c.agent is None else f"{name}{SEPARATOR}{c.agent}") for c in ended.usage.calls
    )
    outcome: Returned | Raised | None = None
    rejection: Rejection | None = None
    pending: tuple[PendingCall, ...] = ()
    if ended.error is not None:
        outcome = Raised(ended.error, ended.at)
    elif ended.reason == "paused" and can_wait:
        pending = tuple(_namespaced(call, name, p) for p in ended.pending)
    elif ended.reason == "paused":
        rejection = Rejection("tool_error", sentences.agent_paused_now(name))
    elif ended.outputs is None:
        rejection = Rejection("agent_incomplete", sentences.agent_unfinished(name, ended.cause))
    else:
        outputs = dict(ended.outputs)
        outcome = Returned(next(iter(outputs.values())) if len(outputs) == 1 else outputs, ended.at)
    return Came(outcome, rejection, pending, record, usage)


def _namespaced(call: ToolCall, name: str, pending: Mapping[str, Any]) -> PendingCall:
    return PendingCall(
        f"{call.id}{SEPARATOR}{pending['id']}",
        f"{name}{SEPARATOR}{pending.get('name')}",
        dict(pending.get("args") or {}),
        pending["kind"],
        _question(pending) if pending["kind"] == "elicitation" else None,
    )


def _question(pending: Mapping[str, Any]) -> dict[str, Any]:
    """A child's request for input as its caller shows it (the child's history holds how it resumes)."""
    return {key: pending.get(key) for key in ("server", "message", "schema")}


def _record(name: str, ended: AgentEnded) -> dict[str, Any]:
    record: dict[str, Any] = {"agent": name, "termination_reason": ended.reason}
    if ended.cause is not None:
        record["termination_cause"] = ended.cause
    if ended.pending:
        record["pending_calls"] = [dict(p) for p in ended.pending]
    record["usage"] = summary(ended.usage)
    record["history"] = [dict(entry) for entry in ended.history]
    return record


def summary(usage: Usage) -> dict[str, Any]:
    """A usage as plain data for the record: requests by kind, token sums, cost (when reported)."""
    data: dict[str, Any] = {
        "requests": dict(usage.requests),
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
    }
    if usage.cost is not None:
        data["cost"] = usage.cost
    return data
