"""What a turn records: its steps, their history entries, the inputs not yet on a step, its errors.

``Log`` is the turn's memory, written only through its methods: ``record`` appends a step (the
call's new inputs go on the first one, a context policy's view on each), ``replace_last`` is an
output guardrail's verdict on the step recorded last, ``record_note`` the last request's note.
The endings without an answer (``incomplete``, ``blocked``) are made here too, since they carry
what the log holds (the errors; a blocked input left out of the conversation).

Invariants: the caller's history is never mutated (``recorded`` and ``entries`` are copies);
every step is appended once, in order, with its entry beside it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from dspy_imp._records import clock
from dspy_imp._records.kinds import TerminationCause
from dspy_imp._records.outcomes import Reply
from dspy_imp._records.steps import Step, to_entry
from dspy_imp._records.window import Window
from dspy_imp._routes.reasoning import with_call_ids
from dspy_imp._turn.context import Policy
from dspy_imp._turn.effects import Ending, Failure
from dspy_imp._turn.guardrails import Stopped, Tripped
from dspy_imp._turn.tools import StepCalls

Outcome = Ending | Failure
"""How a turn ends: as data, or with no model response (becomes ``StepError``)."""


class Log:
    """The prior steps then this turn's, their entries, the pending inputs and the errors."""

    def __init__(
        self,
        prior: Sequence[Step],
        prior_entries: Sequence[Mapping[str, Any]],
        inputs: Mapping[str, Any],
        policy: Policy | None,
    ):
        self.prior = len(prior)
        self.recorded: list[Step] = list(prior)  # prior then this turn's steps; only ever appended
        self.entries: list[Mapping[str, Any]] = list(prior_entries)
        self.pending: dict[str, Any] = dict(inputs)  # the call's inputs not yet on a recorded step
        self.errors: dict[str, str] = {}
        self.note_index: int | None = None
        self.policy = policy

    @property
    def steps(self) -> Window[Step]:
        """The steps this turn recorded (after the prior history)."""
        return Window(self.recorded, self.prior)

    def record(self, step: Step, resumed: Step | None = None) -> None:
        """Append a step; the call's new inputs go on it, unless it is a resumed paused step."""
        if self.pending and resumed is None:
            step = replace(step, inputs={**self.pending, **step.inputs})
            self.pending = {}
        view = self.policy.take_view() if self.policy is not None else None
        if view is not None:
            step = replace(step, view=view)
        self.recorded.append(step)
        self.entries.append(to_entry(step))

    def replace_last(self, step: Step | None) -> None:
        """Change the step recorded last, before any request showed it (a guardrail's verdict)."""
        self.recorded.pop()
        self.entries.pop()
        if step is not None:
            self.recorded.append(step)
            self.entries.append(to_entry(step))

    def record_note(self, note: str | None, input_names: Sequence[str]) -> None:
        """The last request's note, as a step of its own on the first input field."""
        if not note or not input_names:
            return
        if self.pending:
            self.record(Step())
        self.note_index = len(self.recorded)
        self.record(Step(inputs={input_names[0]: note}))

    def resumable_entries(self) -> list[Mapping[str, Any]]:
        """A ``StepError``'s history: the call's inputs kept even before any step, to resume."""
        if self.pending:
            self.record(Step())
        return self.entries

    def turn_start(self, new_inputs: bool) -> int:
        """Where the current turn starts, for ``history_replay="actions"`` (reference §7.6).

        The call's new inputs, else its own note, else (a resume mid-turn) the last recorded
        step that carries inputs.
        """
        if new_inputs:
            return self.prior
        if self.note_index is not None:
            return self.note_index
        steps = self.recorded
        return next((i for i in range(len(steps) - 1, -1, -1) if steps[i].inputs), 0)

    def incomplete(self, cause: TerminationCause, unexecuted: tuple = ()) -> Ending:
        """No answer. A passed deadline is named instead of the interruption (reference §4.2)."""
        if cause != "context_window_exceeded" and clock.passed():
            cause = "deadline_exceeded"
        return Ending("incomplete", None, cause, error=dict(self.errors) or None, unexecuted=unexecuted)

    def blocked(self, trip: Tripped | Stopped, unexecuted: tuple = ()) -> Ending:
        """A guardrail tripped; a blocked input is not part of the conversation. A guardrail stopped
        before its model call (``Stopped``) decided nothing: the turn is ``incomplete`` for that cause."""
        if isinstance(trip, Stopped):
            return self.incomplete(trip.cause, unexecuted)
        self.pending = {}
        return Ending("blocked", None, guardrail=trip.metadata(), unexecuted=unexecuted)


def calls_record(reply: Reply, done: StepCalls, outputs: Mapping[str, Any] | None) -> Step:
    """The step a reply with calls records, with what its calls came to."""
    return Step(
        thought=reply.text if reply.said_something else None,
        calls=tuple(done.calls),
        results=tuple(done.results),
        outputs=dict(outputs) if outputs is not None and not done.pending else None,
        pending=tuple(done.pending),
        agent_runs=dict(done.agent_runs),
        **reasoning(reply, done.renamed),
    )


def reasoning(reply: Reply, renamed: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The reply's reasoning, its blocks naming the calls by the ids recorded (``StepCalls.renamed``)."""
    details = with_call_ids(reply.reasoning_details, renamed) if renamed else reply.reasoning_details
    return {"reasoning_content": reply.reasoning_content, "reasoning_details": details}
