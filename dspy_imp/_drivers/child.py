"""Running a sub-agent's turn for a ``RunAgent``: the child call the driver hands to the child program.

The driver performs a ``RunAgent`` by calling its tool (``agent.as_tool()``) like any tool, so a
tracer's tool span wraps the child's turn, with a ``ChildCall`` in the context: what the child's
program reads when it starts its turn (``current``). It says how to resume a paused child (its
recorded history and the decisions meant for it), the budget the caller's usage limits leave it,
the caller's fallback LMs (the child's own chain when it has none), its path and the id path of
the call it runs for (what a watcher's events name: ``_watch.events``), and which driver runs it: the
caller's kind (``effects``), so that under the durable driver each of the child's requests and
tools is a checkpointed step of the caller's workflow. What came back, a prediction or a
``StepError``, is read into an ``AgentEnded`` record for the machine.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from dspy_imp._records.outcomes import AgentEnded
from dspy_imp._records.scoped import scoped
from dspy_imp._records.step_error import StepError
from dspy_imp._records.usage import Usage, UsageLimits
from dspy_imp._turn.approval import Decisions


@dataclass(frozen=True)
class ChildCall:
    """What a sub-agent's program runs its turn with (set by the driver around the tool call)."""

    program: Any
    history: tuple[Mapping[str, Any], ...] | None
    decisions: Decisions
    budget: UsageLimits | None
    effects: Callable[[Any], Any]
    asynchronous: bool
    fallback: tuple[Any, ...] = ()  # the caller's LM chain after its first LM: the child's when it has none
    name: str = ""  # the agent's path as watchers name it: its tool's name ("researcher", "researcher/coder")
    call_id: str = ""  # the id path of the call it runs for, from the outermost turn's ("p1", "p1/r1")

    def resume(self) -> dict[str, Any] | None:
        """The resuming call's keyword arguments, or ``None`` for a new turn on the tool's arguments."""
        if self.history is None:
            return None
        return {
            "history": {"messages": [dict(entry) for entry in self.history]},
            "approvals": {**self.decisions.approvals, **self.decisions.forms},  # forms: answers to its questions
            "results": dict(self.decisions.results),
        }


_CHILD: ContextVar[ChildCall | None] = ContextVar("dspy_imp_child_call", default=None)


def current(program: Any) -> ChildCall | None:
    """The child call ``program`` is running for, if a driver is running it as a sub-agent now."""
    child = _CHILD.get()
    return child if child is not None and child.program is program else None


def calling(child: ChildCall) -> contextlib.AbstractContextManager[None]:
    """Mark ``child`` as the call the sub-agent run in this block is for (``current``)."""
    return scoped(_CHILD, child)


def ended(value: Any, at: str) -> AgentEnded:
    """What a sub-agent's returned prediction says about its turn."""
    meta = getattr(value, "metadata", None)
    if meta is None:  # not one of our predictions: its fields are the outputs
        return AgentEnded("answered", dict(value.items()) if hasattr(value, "items") else {"result": value}, at=at)
    outputs = dict(value.items()) if meta.complete else None
    return AgentEnded(
        meta.termination_reason,
        outputs,
        meta.termination_cause,
        tuple(dict(p) for p in meta.pending_calls),
        tuple(meta.history.messages),
        meta.usage,
        at=at,
    )


def raised(error: Exception, at: str) -> AgentEnded:
    """A sub-agent that raised: its ``StepError`` keeps its history and usage."""
    if isinstance(error, StepError):
        history = tuple(error.history.messages) if error.history is not None else ()
        usage = error.usage if isinstance(error.usage, Usage) else Usage()
        return AgentEnded("step_error", history=history, usage=usage, error=error, at=at)
    return AgentEnded("raised", error=error, at=at)
