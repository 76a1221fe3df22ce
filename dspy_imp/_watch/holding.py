"""Holding back what may be a blocked answer: nothing a guardrail could still block leaves the turn.

With output guardrails, a request's text may be the answer they turn down, and a ``submit``'s
arguments are the answer; with input guardrails that run alongside the first request, that
request's reply is discarded when they trip. So while a request that a guardrail may still block
is watched, everything it produces for a watcher is held here: the observer's events
(``_watch.events``: the request, its text and reasoning deltas, the calls decided without running,
such as ``submit``) and the items relayed to a ``dspy.streamify`` stream (field chunks, DSPy's raw
chunks, the tool lines of a decided call). What is held is

- *released*, in order, once it cannot be a blocked answer: a guardrail check passed (the input
  check alongside, when no output guardrails follow; the output check), or the turn moves on to
  something that is not the answer's check (a tool runs, another request starts, a retry
  sleeps), or the turn ends with its answer;
- *dropped* when a guardrail trips (its retry, if any, is the next request) or could not check
  (a model call of its was stopped by the deadline or a usage limit), or the turn ends
  ``"blocked"`` or fails.

Status lines the watch writes itself (a request starting, a guardrail tripping, the end) are not
held: they carry no answer.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from dspy_imp._turn.effects import CheckGuardrails, DecidedCall, Failure, ModelRequest


class Hold:
    """One turn's held events and stream items (``program``: its guardrails say when to hold)."""

    def __init__(self, program: Any, observer: Any = None):
        options = program.options
        self.output = bool(options.output_guardrails)
        self.alongside = any(g.run == "alongside" for g in options.input_guardrails)
        self.observer = observer
        self.holding = False
        self.events: list[Any] = []
        self.items: list[Any] = []

    def observe(self, event: Any) -> None:
        """The observer the turn's ``Reporter`` sends to: held while holding."""
        if self.holding:
            self.events.append(event)
        elif self.observer is not None:
            self.observer(event)

    def keep(self, items: Iterable[Any]) -> list[Any]:
        """Of stream ``items``, those to send now (none while holding: they are kept)."""
        if self.holding:
            self.items.extend(items)
            return []
        return list(items)

    def before(self, effect: Any) -> list[Any]:
        """Before ``effect``: what it releases (stream items to send first); a request may start holding."""
        if isinstance(effect, CheckGuardrails | DecidedCall):
            return []  # the answer's own check, or a call decided with it (``submit``): still held
        released = self.release()
        if isinstance(effect, ModelRequest) and (self.output or self.alongside):
            self.alongside = False  # only the first request runs beside the input guardrails
            self.holding = True
        return released

    def after(self, effect: Any, outcome: Any) -> list[Any]:
        """After a guardrail check: released when it passed (and nothing else may block), dropped when it tripped."""
        if not isinstance(effect, CheckGuardrails) or not self.holding:
            return []
        tripped = isinstance(getattr(outcome, "value", None), Mapping)  # ``{"name", "reason"}``
        if tripped or getattr(outcome, "stopped", None) is not None:  # stopped: nothing was checked
            self.drop()
            return []
        if effect.stage == "input" and self.output:
            return []  # the reply may still be an answer the output guardrails turn down
        return self.release()

    def ended(self, outcome: Any) -> list[Any]:
        """At the turn's end: released with an answer, dropped when it was blocked or failed."""
        if isinstance(outcome, Failure) or getattr(outcome, "reason", None) == "blocked":
            self.drop()
            return []
        return self.release()

    def release(self) -> list[Any]:
        self.holding = False
        events, self.events = self.events, []
        for event in events:
            self.observe(event)
        items, self.items = self.items, []
        return items

    def drop(self) -> None:
        self.holding = False
        self.events, self.items = [], []
