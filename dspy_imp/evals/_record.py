"""What a metric reads: a prediction's record, as the calls the team made and how the turn ended.

A ``dspy_imp`` prediction carries its turn's record in ``pred.metadata``: the history (each step's
calls and results, each sub-agent's run with its own history under ``agent_runs``), the
termination reason and cause, and the usage. ``read`` turns it into a ``Record``: the calls in
the order they were made, a sub-agent's calls right after the caller's call that ran it, each
marked with the agent that made it (``None`` for the program's own, ``"researcher"`` for a
sub-agent's, ``"researcher/coder"`` for its own sub-agent's).

Only this call's steps count: when the example gives the program a ``dspy.History`` (a
conversation so far), its entries are skipped, since the prediction's history starts with them.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import dspy

from dspy_imp._program.prediction import Metadata
from dspy_imp._records.usage import Usage


@dataclass(frozen=True)
class Called:
    """One call the team made.

    Attributes:
        name: The tool's name (``None`` for a malformed call).
        args: Its arguments.
        agent: The agent that made it: ``None`` for the program itself, a sub-agent's tool name,
            ``"a/b"`` for ``a``'s own sub-agent ``b``.
        id: The call's id in its agent's history.
        result: What it returned (``None`` while it waits).
        error: Whether it failed.
        waiting: It waits for a decision (a paused turn's approval or external result).
    """

    name: str | None
    args: Mapping[str, Any]
    agent: str | None = None
    id: str = ""
    result: Any = None
    error: bool = False
    waiting: bool = False

    def __str__(self) -> str:
        by = f"{self.agent}/" if self.agent else ""
        waits = " [waiting]" if self.waiting else " [failed]" if self.error else ""
        return f"{by}{self.name}({show_args(self.args)}){waits}"


@dataclass(frozen=True)
class Record:
    """A prediction's record, as metrics read it (``read``).

    Attributes:
        calls: Every call of this turn, the sub-agents' included, in the order they were made.
        metadata: The prediction's ``dspy_imp.Metadata``.
        outputs: The prediction's outputs.
        conversation: For a ``Conversing`` program's prediction, the whole ``Conversation``.
    """

    calls: tuple[Called, ...]
    metadata: Metadata
    outputs: Mapping[str, Any] = field(default_factory=dict)
    conversation: Any = None

    @property
    def usage(self) -> Usage:
        return self.metadata.usage

    @property
    def requests(self) -> int:
        return self.metadata.usage.total_requests

    def ending(self) -> str:
        """How the turn ended, in words: ``ended `incomplete` (`max_iters`) after 12 requests``."""
        meta = self.metadata
        cause = f" (`{meta.termination_cause}`)" if meta.termination_cause else ""
        count = self.requests
        text = f"ended `{meta.termination_reason}`{cause} after {count} request{'' if count == 1 else 's'}"
        if meta.pending_calls:
            waits = ", ".join(f"`{p['name']}` ({p['kind']})" for p in meta.pending_calls)
            text += f", waiting for {waits}"
        if meta.guardrail:
            text += f", blocked by the {meta.guardrail['stage']} guardrail `{meta.guardrail['name']}`"
            text += f": {meta.guardrail['reason']}" if meta.guardrail.get("reason") else ""
        return text


class NotARecord(TypeError):
    """The prediction carries no ``dspy_imp`` record (another program's, or a failed call's)."""


def read(example: Any, pred: Any) -> Record:
    """The record of ``pred``, without the entries of a history ``example`` gave the program.

    Raises:
        NotARecord: ``pred`` is not a ``dspy_imp`` prediction.
    """
    metadata = pred.__dict__.get("_metadata") if isinstance(pred, dspy.Prediction) else None
    if not isinstance(metadata, Metadata):
        raise NotARecord(f"expected a dspy_imp prediction with `metadata`, got {type(pred).__name__}")
    entries = list(metadata.history.messages)[_given(example) :]
    return Record(tuple(calls_in(entries)), metadata, dict(pred.items()), pred.__dict__.get("_conversation"))


def _given(example: Any) -> int:
    """How many entries of the prediction's history the example gave the program (its ``dspy.History`` inputs)."""
    try:
        inputs = example.inputs() if isinstance(example, dspy.Example) else example
    except ValueError:  # an example without declared inputs: every field counts
        inputs = example
    values = inputs.values() if hasattr(inputs, "values") else ()
    return sum(len(v.messages) for v in values if isinstance(v, dspy.History))


def calls_in(entries: Sequence[Mapping[str, Any]], agent: str | None = None) -> Iterator[Called]:
    """The calls of these history entries, each sub-agent's own calls right after its call."""
    for entry in entries:
        results = {r.get("id"): r for r in entry.get("tool_call_results") or ()}
        waiting = {p.get("id") for p in entry.get("pending_calls") or ()}
        runs = entry.get("agent_runs") or {}
        for call in entry.get("tool_calls") or ():
            result = results.get(call.get("id"), {})
            yield Called(
                name=call.get("name"),
                args=dict(call.get("args") or {}),
                agent=agent,
                id=str(call.get("id", "")),
                result=result.get("result"),
                error=bool(result.get("error")),
                waiting=call.get("id") in waiting or _waits(call.get("id"), waiting),
            )
            run = runs.get(call.get("id"))
            if isinstance(run, Mapping):
                child = run.get("agent") or call.get("name")
                yield from calls_in(run.get("history") or (), f"{agent}/{child}" if agent else child)


def _waits(call_id: Any, waiting: set[Any]) -> bool:
    """A sub-agent's call waits when a pending call is under its id (``"<call id>/<child call id>"``)."""
    return any(isinstance(p, str) and p.startswith(f"{call_id}/") for p in waiting)


def show_args(args: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={show(v)}" for k, v in args.items())


def show(value: Any, limit: int = 80) -> str:
    """A value as the feedback shows it: its repr, cut at ``limit`` characters."""
    text = repr(value) if not isinstance(value, Mapping | list) else json.dumps(value, default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"
