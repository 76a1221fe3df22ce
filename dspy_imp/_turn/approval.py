"""Pausing a turn for a person or an external runner, and the caller's decisions on resume.

A step whose reply holds a call that needs approval (``tool_policy`` answered
``NeedsApproval()``, or the tool is in ``needs_approval``) or that an external runner must
answer (``external_tools``) runs none of its calls: the turn ends ``"paused"``, the history
records the reply with its ``pending_calls`` and no results, and
``pred.metadata.pending_calls`` lists them. The caller resumes with
``agent(history=..., approvals={id: True | False | "reason"}, results={id: value})``: before
any request, the paused step's calls are answered (approved and ordinary calls run, refused
ones become observations, external ones take the given result), and the loop goes on. A call
that paused while it ran, on a person's input (kind ``"elicitation"``, ``_turn.elicitation``), is
answered through ``approvals`` too: the form's fields, ``True``, ``False`` or ``"cancel"``.

``check_resume`` validates the decisions against the history before any request: every
pending call must be decided, nothing else may be, and no new inputs are given (the resumed call
continues the paused turn).

The paused history is data the caller hands back, so it is not trusted to say what a person
approved. An approval may be the pending call as it was shown (an item of
``pred.metadata.pending_calls``): it then runs only if the history's call has that name and those
arguments. Whatever the approval, the ``tool_policy`` still applies (an approved call the policy
refuses is refused), and a paused entry that already holds results is refused: answered calls
never run again.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dspy_imp._records.errors import ConfigurationError
from dspy_imp._records.steps import PendingCall, Step
from dspy_imp._turn import elicitation


class NeedsApproval:
    """What a ``tool_policy`` returns to have a person decide on a call before it runs.

    The turn pauses before any call of that reply runs (``termination_reason == "paused"``).

    Example:
        ```python
        def policy(name, args):
            return dspy_imp.NeedsApproval() if name == "refund" and args["amount"] > 100 else True
        ```
    """

    def __repr__(self) -> str:
        return "NeedsApproval()"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, NeedsApproval)

    __hash__ = None  # type: ignore[assignment]


def asks_approval(verdict: Any) -> bool:
    """A policy verdict meaning "ask a person" (the class itself is accepted too)."""
    return isinstance(verdict, NeedsApproval) or verdict is NeedsApproval


SEPARATOR = "/"
"""Joins a call's id (and a tool's name) to its sub-agent's, in pending calls and usage tags (``_turn.agents``)."""


@dataclass(frozen=True)
class Decisions:
    """The caller's answers to a paused step's calls, keyed by call id."""

    approvals: Mapping[str, bool | str] = field(default_factory=dict)
    results: Mapping[str, Any] = field(default_factory=dict)
    shown: Mapping[str, tuple[Any, Any]] = field(default_factory=dict)
    """For approvals given as the pending call shown: ``id -> (name, args)`` the person saw."""
    forms: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """Approvals given as a dict that is not a pending call shown: the fields answering a request
    for input (``_turn.elicitation``); refused on resume for any other pending call."""

    @classmethod
    def of(cls, approvals: Any, results: Any) -> Decisions:
        verdicts, shown, forms = check_approvals(approvals)
        return cls(verdicts, check_results(results), shown, forms)

    def given(self, call_id: str) -> Any:
        """The caller's answer to ``call_id`` through ``approvals`` (a verdict or a form's fields)."""
        return self.forms[call_id] if call_id in self.forms else self.approvals.get(call_id)


def check_approvals(
    value: Any,
) -> tuple[dict[str, bool | str], dict[str, tuple[Any, Any]], dict[str, Mapping[str, Any]]]:
    """The verdicts by call id, the calls as shown for approvals given as a pending call, and the
    other dicts (answers to a request for input, checked on resume against what is pending)."""
    if value is None:
        return {}, {}, {}
    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        raise ConfigurationError(f"`approvals` must be a dict of call id -> True, False or a reason; got {value!r}")
    verdicts: dict[str, bool | str] = {}
    shown: dict[str, tuple[Any, Any]] = {}
    forms: dict[str, Mapping[str, Any]] = {}
    for key, verdict in value.items():
        if isinstance(verdict, Mapping):
            if verdict.get("id") != key or not isinstance(verdict.get("args"), Mapping) or "name" not in verdict:
                forms[key] = dict(verdict)
                continue
            shown[key] = (verdict["name"], dict(verdict["args"]))
            verdict = True
        if not isinstance(verdict, bool) and not (isinstance(verdict, str) and verdict.strip()):
            raise ConfigurationError(
                f"`approvals[{key!r}]` must be True, False or a non-blank reason the model reads (or the pending "
                f"call as shown); got {verdict!r}"
            )
        verdicts[key] = verdict
    return verdicts, shown, forms


def check_results(value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        raise ConfigurationError(f"`results` must be a dict of call id -> result (or an exception); got {value!r}")
    return dict(value)


def paused_step(prior: Sequence[Step]) -> Step | None:
    """The history's paused step (its last entry), or ``None``; a paused step elsewhere is refused."""
    for index, step in enumerate(prior):
        if step.pending and index != len(prior) - 1:
            raise ConfigurationError(
                f"history entry {index} has pending calls but is not the last entry; "
                "a paused turn is resumed before anything is added to its history"
            )
    paused = prior[-1] if prior and prior[-1].pending else None
    # A paused step may hold results of the calls that ran before a sub-agent paused (``_turn.agents``);
    # a pending call with a result was answered already, and an answered call never runs again.
    answered = {r.id for r in paused.results} & {c.id for c in paused.pending} if paused is not None else set()
    if answered:
        raise ConfigurationError(
            f"history entry {len(prior) - 1} has pending calls with results ({sorted(answered)!r}): "
            "they were answered already, "
            "and an answered call never runs again; resume from the history the paused turn returned"
        )
    return paused


def check_resume(paused: Step | None, decisions: Decisions, inputs: Mapping[str, Any]) -> None:
    """Every pending call decided the right way, no decision for anything else, no new inputs."""
    if paused is not None and inputs:
        raise ConfigurationError(
            f"a paused turn is resumed without new inputs (it continues the turn that paused); got {sorted(inputs)!r}"
        )
    for call_id in sorted(decisions.approvals.keys() & decisions.results.keys()):
        raise ConfigurationError(f"call {call_id!r} is in both `approvals` and `results`")
    given = {
        **{k: "approvals" for k in (*decisions.approvals, *decisions.forms)},
        **{k: "results" for k in decisions.results},
    }
    if paused is None:
        if given:
            raise ConfigurationError(
                f"`{next(iter(given.values()))}` given, but the history has no paused turn to resume: {sorted(given)!r}"
            )
        return
    pending = {call.id: call for call in paused.pending}
    for call_id, option in given.items():
        if call_id not in pending:
            raise ConfigurationError(f"`{option}` names call {call_id!r}, which is not pending in the history")
        wanted = _option(pending[call_id])
        if option != wanted:
            raise ConfigurationError(f"call {call_id!r} ({pending[call_id].name}) is answered through `{wanted}`")
        if pending[call_id].kind == "elicitation":  # the answer checked against the form before anything is sent
            elicitation.answer(pending[call_id], decisions.given(call_id), f"approvals[{call_id!r}]")
        elif call_id in decisions.forms:
            raise ConfigurationError(
                f"`approvals[{call_id!r}]` as a pending call must be the call shown, with its `id`, `name` and "
                f"`args` (an item of pred.metadata.pending_calls); got {dict(decisions.forms[call_id])!r}"
            )
    undecided = [call for call in paused.pending if call.id not in given]
    if undecided:
        named = ", ".join(f"{c.id!r} ({c.name}, via `{_option(c)}`)" for c in undecided)
        raise ConfigurationError(f"the paused turn has undecided pending call(s): {named}")
    check_as_shown(paused, decisions)


def check_as_shown(paused: Step, decisions: Decisions) -> None:
    """An approval given as the call shown binds to it: the history's call must be that call, at
    any depth (a sub-agent's call, ``"<call id>/<child call id>"``, is the one its recorded history
    holds, the one the child resumes from)."""
    recorded = {call.id: call for call in paused.pending}
    top = [{"id": c.id, "name": c.name, "args": dict(c.args)} for c in paused.calls]
    for call_id, (name, args) in decisions.shown.items():
        held = _held(top, paused.agent_runs, call_id)
        pending = recorded[call_id]
        seen = (name, args)
        if held != seen or (pending.name, dict(pending.args)) != seen:
            found = None if held is None else {"name": held[0], "args": held[1]}
            raise ConfigurationError(
                f"`approvals[{call_id!r}]` approved {name}({args!r}), but the history's call {call_id!r} is {found!r}; "
                "nothing ran. Show the person the calls of the history you resume"
            )


def _held(calls: Sequence[Mapping[str, Any]], runs: Mapping[str, Any], call_id: str) -> tuple[str, Any] | None:
    """``(name, args)`` of the recorded call ``call_id`` among ``calls`` (a step's), or, for a
    namespaced id, in the paused entry of that call's sub-agent record (``runs``), its name
    namespaced the same way (``"<tool>/<child tool>"``); ``None`` when the record has no such call."""
    head, nested, rest = call_id.partition(SEPARATOR)
    call = next((c for c in calls if isinstance(c, Mapping) and c.get("id") == head), None)
    if call is None or not isinstance(call.get("args"), Mapping):
        return None
    if not nested:
        return str(call.get("name")), dict(call["args"])
    record = runs.get(head) if isinstance(runs, Mapping) else None
    history = record.get("history") if isinstance(record, Mapping) else None
    if not isinstance(history, list | tuple) or not history or not isinstance(history[-1], Mapping):
        return None
    entry = history[-1]  # the child's paused entry
    found = _held(entry.get("tool_calls") or (), entry.get("agent_runs") or {}, rest)
    return None if found is None else (f"{call.get('name')}{SEPARATOR}{found[0]}", found[1])


def _option(call: PendingCall) -> str:
    return "results" if call.kind == "external" else "approvals"


def pending_metadata(pending: Sequence[PendingCall]) -> tuple[dict[str, Any], ...]:
    """``pred.metadata.pending_calls``: each call as shown, and for a request for input its question
    (``server``, ``message``, ``schema``)."""
    return tuple(
        {"id": c.id, "name": c.name, "args": dict(c.args), "kind": c.kind,
         **(elicitation.shown(c) if c.kind == "elicitation" else {})}
        for c in pending
    )  # fmt: skip
