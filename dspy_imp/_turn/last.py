"""The last requests of an interrupted turn: forced submit, required retry, extraction, last text.

The machine decides that a turn is interrupted and which path applies (reference §4); this
module runs the path. With ``submit``: the forced submit (a named tool choice), the required
retry when the provider refuses a named choice, then the extraction when no ``submit`` came.
Without it: the last-text request (a refused call of the model's own is answered with an
observation and asked once more, ``_turn.refused``). Each one is preceded by the last request's
note, and none leaves once the deadline has passed or a usage limit is reached. A last request
that fails ends the turn by reference §4.3: deadline, then unreadable, then anything else.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from dspy_imp._prompt.signature import OutputSpec, Rejection
from dspy_imp._records import clock
from dspy_imp._records.kinds import RequestKind, TerminationCause
from dspy_imp._records.outcomes import Extracted, Failed, Reply
from dspy_imp._records.steps import Step
from dspy_imp._routes.failures import describe, is_unreadable, refuses_named_choice
from dspy_imp._turn import refused as refusal
from dspy_imp._turn.effects import Effect, Ending, Failure
from dspy_imp._turn.log import Outcome, calls_record
from dspy_imp._turn.sending import Sender, Sent
from dspy_imp._turn.tools import CallContext, Running, run_calls


class LastRequests:
    """The last requests after step ``index``, sent through the turn's ``Sender``."""

    def __init__(
        self, sender: Sender, calls: CallContext, outputs: OutputSpec, call_ids: set[str], index: int, note: str | None
    ):
        self.sender = sender
        self.log = sender.log
        self.calls = calls
        self.outputs = outputs
        self.call_ids = call_ids
        self.index = index
        self.note = note
        self.task = sender.guidance.task

    def last_text(self, cause: TerminationCause) -> Generator[Effect, Any, Outcome]:
        """The text answer, asked for once; calls in its reply run but none is asked for after."""
        stop = self.sender.stop()
        if stop is not None:
            return self.log.incomplete(stop)
        self.log.record_note(self.note, self.task.input_names)
        outcome = yield from self.sender.send("last_text")
        if isinstance(outcome, Reply) and refusal.refused(outcome):  # the provider refused the model's own call
            outcome = yield from self._asked_again(outcome)
        if not isinstance(outcome, Reply):
            return self._failed(outcome, "last_text", cause)
        running = Running(meter=self.sender.meter)
        done = yield from run_calls(self.calls, outcome.calls, "last_text", self.index, self.call_ids, running)
        name = self.task.output_names[0]
        text = outcome.text if outcome.said_something else None
        unexecuted = tuple(done.unexecuted)
        if done.finished is not None:  # recorded like any finishing step: without the hook's outputs
            self.log.record(calls_record(outcome, done, None))
            tool, finished = done.finished
            return Ending("finished_by_tool", finished, cause, finished_by_tool=tool, unexecuted=unexecuted)
        if text is not None or done.calls:
            self.log.record(calls_record(outcome, done, {name: text}))
        if text is None and outcome.calls:  # a completion with calls only is an empty answer (issue 23)
            text = ""
        return Ending("last_text", {name: text}, cause, unexecuted=unexecuted, finish_reason=outcome.finish_reason)

    def _asked_again(self, reply: Reply) -> Generator[Effect, Any, Sent]:
        """The refused call recorded as an observation asking for the text answer, then the
        last-text request once more (``_turn.refused``); a second refusal ends as any reply with calls."""
        done = yield from refusal.observe(self.calls, reply, self.index, self.call_ids, self.sender.meter)
        self.log.record(calls_record(reply, done, None))
        return (yield from self.sender.send("last_text"))

    def forced_submit(self, cause: TerminationCause) -> Generator[Effect, Any, Outcome]:
        """A ``submit`` asked for by name (or, refused, by ``"required"``), else the extraction."""
        stop = self.sender.stop()
        if stop is not None:
            return self.log.incomplete(stop)
        self.log.record_note(self.note, self.task.input_names)
        role: RequestKind = "forced_submit"
        outcome = yield from self.sender.send(role)
        if isinstance(outcome, Failed) and refuses_named_choice(outcome.error):
            self.log.errors[role] = describe(outcome.error)
            stop = self.sender.stop()
            if stop is not None:
                return self.log.incomplete(stop)
            role = "required_retry"
            outcome = yield from self.sender.send(role)
            if isinstance(outcome, Failed):  # fatal, filtered and context-window failures ended in send
                self.log.errors[role] = describe(outcome.error)
                return (yield from self.extract(cause))
        if not isinstance(outcome, Reply):
            return self._failed(outcome, role, cause)
        return (yield from self._forced_reply(outcome, cause))

    def _forced_reply(self, reply: Reply, cause: TerminationCause) -> Generator[Effect, Any, Outcome]:
        running = Running(meter=self.sender.meter)
        done = yield from run_calls(self.calls, reply.calls, "forced", self.index, self.call_ids, running)
        unexecuted = tuple(done.unexecuted)
        if done.calls or reply.said_something:
            self.log.record(calls_record(reply, done, done.submitted))
        if done.submitted is not None:
            return Ending("forced_submit", done.submitted, cause, unexecuted=unexecuted)
        if done.submit_denied:
            return self.log.incomplete(cause, unexecuted=unexecuted)
        return (yield from self.extract(cause, unexecuted))

    def extract(self, cause: TerminationCause, unexecuted: tuple = ()) -> Generator[Effect, Any, Outcome]:
        """The outputs read from the conversation by the extraction request, validated."""
        stop = self.sender.stop()
        if stop is not None:
            return self.log.incomplete(stop, unexecuted=unexecuted)
        outcome = yield from self.sender.send("extraction")
        if not isinstance(outcome, Extracted):
            return self._failed(outcome, "extraction", cause, unexecuted)
        outputs = self.outputs.validate(dict(outcome.outputs))
        if isinstance(outputs, Rejection):
            self.log.errors["extraction"] = outputs.sentence
            return self.log.incomplete(cause, unexecuted=unexecuted)
        self.log.record(Step(outputs=outputs))
        return Ending("extracted", outputs, cause, unexecuted=unexecuted)

    def _failed(self, outcome: Any, role: str, cause: TerminationCause, unexecuted: tuple = ()) -> Outcome:
        """Reference §4.3: deadline, then unreadable, then anything else.

        Fatal, filtered and context-window failures already ended the turn in ``Sender.send``.
        """
        if isinstance(outcome, Outcome):
            return outcome
        error = outcome.error
        self.log.errors[role] = describe(error)
        if clock.passed():
            return self.log.incomplete("deadline_exceeded", unexecuted=unexecuted)
        if is_unreadable(error):
            return self.log.incomplete(cause, unexecuted=unexecuted)
        return Failure(error)
