"""The turn's state machine: which request comes next and how the turn ends. No I/O.

Theory of operation. A *turn* is one call of the program; a *step* is one ordinary
request. ``Turn.run`` is a generator that yields effects (``_turn.effects``) and is sent what
came of them; the sync and async drivers perform them. Every rule that decides the next
request, what is recorded and which reason and cause end the turn lives here (reference
§3, §4, §5, §9); the rendering of what the model reads lives in ``_prompt.render``.

State, all local to one call: ``steps`` (recorded this call), ``pending`` (the call's
inputs not yet attached to a recorded step), ``step_index`` (ordinary requests sent),
``thoughts`` (consecutive thought-only steps; only a step with a call resets it),
``retried`` (the one extra step a ``"tools"`` turn gets after a failed request),
``projection`` (leading prior entries left out after a context-window refusal, ``_turn.projection``),
``meter`` (the model calls sent so far and the usage limits, ``_records.usage``),
``watchdog`` (retries each tool asked for, repeated calls: ``_turn.limits``), ``models`` (which
LM of the fallback chain the current request goes to, and the hops: ``_turn.fallback``),
``guards`` (the input guardrails still to run, the output retry: ``_turn.guardrails``).

Guardrails wrap the loop: input ones before the first request (or alongside it), output ones
on the outputs of the ending; a tripped one ends the turn ``"blocked"``. An output guardrail's
verdict may change the step recorded last (nothing has shown it to the model yet): its
``submit`` becomes an error observation (the one retry) or the blocked answer is withdrawn.

A turn that resumes a paused one (``Setup.paused``: the history's last step waits for
approvals or external results, ``_turn.approval``) first answers that step's calls with the
caller's decisions, then goes on like any turn. A step whose calls need a decision records
the reply with its pending calls and ends ``"paused"``; none of its calls runs.

Invariants: the caller's history is never mutated; every recorded step is appended once, in
order (only an output guardrail's verdict replaces the last one, before any request); no request
is sent once the deadline has passed or a usage limit is reached; every call of a recorded step
is answered before the next request (a paused step ends the turn); a turn ends exactly once, as
an ``Ending`` (data) or a ``Failure`` (becomes ``StepError``).
"""

from __future__ import annotations

from collections.abc import Generator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from dspy_imp._prompt.guidance import Guidance, submit_only
from dspy_imp._prompt.memo import RenderMemo
from dspy_imp._prompt.sentences import SUMMARY_INSTRUCTIONS
from dspy_imp._prompt.signature import SUBMIT, OutputSpec, Rejection
from dspy_imp._records import clock
from dspy_imp._records.kinds import RequestKind, TerminationCause
from dspy_imp._records.outcomes import Extracted, Failed, RawCall, Reply
from dspy_imp._records.steps import Step, make_history, to_entry
from dspy_imp._records.usage import RequestUsage, UsageLimits, tighter
from dspy_imp._records.view import PromptView
from dspy_imp._records.window import Window
from dspy_imp._routes.failures import (
    ContentFiltered,
    cause_of,
    describe,
    is_blocked_reply,
    is_context_window,
    is_fatal,
    is_unreadable,
    refuses_named_choice,
    retry_delay,
)
from dspy_imp._routes.reasoning import with_call_ids
from dspy_imp._turn import refused as refusal
from dspy_imp._turn.approval import Decisions
from dspy_imp._turn.context import Policy
from dspy_imp._turn.effects import (
    Alongside,
    CheckGuardrails,
    DecidedCall,
    Ending,
    Extraction,
    Failure,
    Measure,
    ModelRequest,
    RunAgent,
    RunTool,
    RunTools,
    Sleep,
    Summarize,
)
from dspy_imp._turn.fallback import ModelChain
from dspy_imp._turn.guardrails import Guards, Tripped
from dspy_imp._turn.limits import Watchdog
from dspy_imp._turn.meter import Meter
from dspy_imp._turn.plan import CallPlan
from dspy_imp._turn.projection import Projection
from dspy_imp._turn.tools import CallContext, Running, StepCalls, run_calls

Effect = (
    ModelRequest
    | Extraction
    | RunTool
    | RunAgent
    | RunTools
    | DecidedCall
    | Sleep
    | CheckGuardrails
    | Alongside
    | Measure
)


Outcome = Ending | Failure


_NAMED_CHOICE = {"type": "function", "function": {"name": SUBMIT}}
_OVER_WINDOW = "ContextWindowExceeded: the request is over the model's window after every context tier (not sent)"


@dataclass(frozen=True)
class Setup:
    """What a turn needs beyond the call plan (from the program)."""

    guidance: Guidance
    outputs: OutputSpec
    calls: CallContext
    prior: tuple[Step, ...]
    prior_entries: tuple[Mapping[str, Any], ...]
    retries: int = 3
    paused: Step | None = None
    decisions: Decisions = field(default_factory=Decisions)
    models: tuple[str, ...] = ()
    summary_instruction: str = SUMMARY_INSTRUCTIONS
    budget: UsageLimits | None = None  # a sub-agent's: what its caller's limits have left


class Turn:
    """One call of the program, run as a generator of effects."""

    def __init__(self, plan: CallPlan, setup: Setup):
        self.plan = plan
        self.options = plan.options
        self.setup = setup
        self.guidance = replace(setup.guidance, memo=RenderMemo())  # incremental rendering, one per turn
        self.recorded: list[Step] = list(setup.prior)  # prior then this turn's steps; only ever appended
        self.entries: list[Mapping[str, Any]] = list(setup.prior_entries)
        self.pending: dict[str, Any] = dict(plan.inputs)
        self.step_index = 0
        self.thoughts = 0
        self.retried = False
        self.errors: dict[str, str] = {}
        self.note_index: int | None = None
        self.call_ids = {call.id for step in setup.prior for call in step.calls}
        self.projection = Projection(setup.prior, self.guidance.task.output_names)
        self.meter = Meter(tighter(self.options.usage_limits, setup.budget))
        self.watchdog = Watchdog(setup.calls.limits)
        self.models = ModelChain(setup.models)
        known = (*setup.prior, setup.paused) if setup.paused is not None else setup.prior
        earlier = next((step.inputs for step in reversed(known) if step.inputs), {})  # a resumed turn's inputs
        self.guards = Guards(self.options, plan.inputs, setup.paused is not None, earlier)
        context = self.options.context
        self.policy = None if context is None else Policy(context, setup.prior, self.guidance.task.output_names)

    @property
    def steps(self) -> Window[Step]:
        """The steps this turn recorded (after the prior history)."""
        return Window(self.recorded, len(self.setup.prior))

    # -- the step loop ---------------------------------------------------------------------

    def run(self) -> Generator[Effect, Any, Outcome]:
        outcome = yield from self._start()
        while True:
            if outcome is None:
                outcome = yield from self._steps()
            final = yield from self._checked(outcome)
            if final is not None:
                return final
            outcome = None  # an output guardrail asked the model to try again

    def _start(self) -> Generator[Effect, Any, Outcome | None]:
        """Input guardrails that run before any request, then a paused step's calls."""
        trip = yield from self.guards.check_inputs()
        if trip is not None:
            return self._blocked(trip)
        if self.setup.paused is not None:
            return (yield from self._resume(self.setup.paused))
        return None

    def _steps(self) -> Generator[Effect, Any, Outcome]:
        while True:
            if self.step_index >= self.options.max_iters:
                return (yield from self._interrupted("max_iters"))
            outcome = yield from self._send("step")
            self.step_index += 1
            if isinstance(outcome, Outcome):
                return outcome
            if isinstance(outcome, Reply):
                ending = yield from self._after_reply(outcome)
            else:
                assert isinstance(outcome, Failed)
                ending = yield from self._after_failed_step(outcome.error)
            if ending is not None:
                return ending

    def _after_failed_step(self, error: BaseException) -> Generator[Effect, Any, Outcome | None]:
        cause = cause_of(error)
        self.errors["retry" if "initial" in self.errors else "initial"] = describe(error)
        if self.options.finish != "tools":
            return (yield from self._interrupted(cause))
        if not self.retried and self.step_index < self.options.max_iters and self._stop() is None:
            self.retried = True
            return None
        return self._incomplete(cause)

    def _after_reply(self, reply: Reply) -> Generator[Effect, Any, Outcome | None]:
        if reply.calls:
            self.thoughts = 0
            return (yield from self._calls_step(reply))
        if self.guidance.text_answer:
            return self._answered(reply)
        if not reply.said_something:
            return (yield from self._interrupted("empty_tool_calls"))
        self._record(Step(thought=reply.text, **_reasoning(reply)))
        if self.options.finish == "auto" or self.thoughts >= 1:
            return (yield from self._interrupted("empty_tool_calls"))
        self.thoughts = 1
        return self._incomplete("deadline_exceeded") if clock.passed() else None

    def _calls_step(self, reply: Reply, resumed: Step | None = None) -> Generator[Effect, Any, Outcome | None]:
        decisions = self.setup.decisions if resumed is not None else Decisions()
        running = Running(decisions, resumed, self.meter)
        index = self.step_index - 1
        done = yield from run_calls(self.setup.calls, reply.calls, "step", index, self.call_ids, running)
        outputs = done.submitted
        step = _calls_record(reply, done, outputs)
        self._record(step if resumed is None else replace(step, inputs=resumed.inputs, extra=resumed.extra), resumed)
        if done.pending:
            return Ending("paused", pending=step.pending)
        if outputs is not None:
            return Ending("submit", outputs)
        if done.finished is not None:
            name, finished = done.finished
            return Ending("finished_by_tool", finished, finished_by_tool=name)
        cause = self.watchdog.after(self.recorded[-1])
        return None if cause is None else (yield from self._interrupted(cause))

    def _resume(self, paused: Step) -> Generator[Effect, Any, Outcome | None]:
        """Answer the paused step's calls with the caller's decisions (before any request)."""
        calls = tuple(RawCall(c.id, c.name, dict(c.args), c.received) for c in paused.calls)
        reply = Reply(paused.thought, calls, paused.reasoning_content, paused.reasoning_details)
        return (yield from self._calls_step(reply, resumed=paused))

    def _answered(self, reply: Reply) -> Outcome:
        name = self.guidance.task.output_names[0]
        text = reply.text if reply.said_something else None
        self._record(Step(thought=text, outputs={name: text}, **_reasoning(reply)))
        return Ending("answered", {name: text}, finish_reason=reply.finish_reason)

    # -- guardrails ------------------------------------------------------------------------

    def _checked(self, outcome: Outcome) -> Generator[Effect, Any, Outcome | None]:
        """The ending, after output guardrails on its outputs; ``None``: the model tries again."""
        if not isinstance(outcome, Ending):
            return outcome
        verdict = yield from self.guards.check_outputs(outcome, self.recorded[-1] if self.steps else None)
        if verdict is None:
            return outcome
        if verdict.changed:
            self._replace_last(verdict.last)
        return None if verdict.retry else self._blocked(verdict.trip, outcome.unexecuted)

    def _blocked(self, trip: Tripped, unexecuted: tuple = ()) -> Ending:
        self.pending = {}  # a blocked input is not part of the conversation
        return Ending("blocked", None, guardrail=trip.metadata(), unexecuted=unexecuted)

    def _replace_last(self, step: Step | None) -> None:
        """Change the step recorded last, before any request showed it (a guardrail's verdict)."""
        self.recorded.pop()
        self.entries.pop()
        if step is not None:
            self.recorded.append(step)
            self.entries.append(to_entry(step))

    # -- interruptions and last requests ---------------------------------------------------

    def _interrupted(self, cause: TerminationCause) -> Generator[Effect, Any, Outcome]:
        if self.options.finish == "tools":  # nothing is ever forced
            return self._incomplete(cause)
        if self.guidance.has_submit:
            return (yield from self._forced_submit(cause))
        return (yield from self._last_text(cause))

    def _last_text(self, cause: TerminationCause) -> Generator[Effect, Any, Outcome]:
        stop = self._stop()
        if stop is not None:
            return self._incomplete(stop)
        self._record_note()
        outcome = yield from self._send("last_text")
        if isinstance(outcome, Reply) and refusal.refused(outcome):  # the provider refused the model's own call
            outcome = yield from self._asked_again(outcome)
        if not isinstance(outcome, Reply):
            return self._last_request_failed(outcome, "last_text", cause)
        done = yield from run_calls(
            self.setup.calls, outcome.calls, "last_text", self.step_index, self.call_ids, Running(meter=self.meter)
        )
        name = self.guidance.task.output_names[0]
        text = outcome.text if outcome.said_something else None
        unexecuted = tuple(done.unexecuted)
        if done.finished is not None:  # recorded like any finishing step: without the hook's outputs
            self._record(_calls_record(outcome, done, None))
            tool, finished = done.finished
            return Ending("finished_by_tool", finished, cause, finished_by_tool=tool, unexecuted=unexecuted)
        if text is not None or done.calls:
            self._record(_calls_record(outcome, done, {name: text}))
        if text is None and outcome.calls:  # a completion with calls only is an empty answer (issue 23)
            text = ""
        return Ending("last_text", {name: text}, cause, unexecuted=unexecuted, finish_reason=outcome.finish_reason)

    def _asked_again(self, reply: Reply) -> Generator[Effect, Any, Reply | Extracted | Failed | Outcome]:
        """The refused call recorded as an observation asking for the text answer, then the
        last-text request once more (``_turn.refused``); a second refusal ends as any reply with calls."""
        done = yield from refusal.observe(self.setup.calls, reply, self.step_index, self.call_ids, self.meter)
        self._record(_calls_record(reply, done, None))
        return (yield from self._send("last_text"))

    def _forced_submit(self, cause: TerminationCause) -> Generator[Effect, Any, Outcome]:
        stop = self._stop()
        if stop is not None:
            return self._incomplete(stop)
        self._record_note()
        role: RequestKind = "forced_submit"
        outcome = yield from self._send(role)
        if isinstance(outcome, Failed) and refuses_named_choice(outcome.error):
            self.errors[role] = describe(outcome.error)
            stop = self._stop()
            if stop is not None:
                return self._incomplete(stop)
            role = "required_retry"
            outcome = yield from self._send(role)
            if isinstance(outcome, Failed):  # fatal, filtered and context-window failures ended in _send
                self.errors[role] = describe(outcome.error)
                return (yield from self._extract(cause))
        if not isinstance(outcome, Reply):
            return self._last_request_failed(outcome, role, cause)
        return (yield from self._forced_reply(outcome, cause))

    def _forced_reply(self, reply: Reply, cause: TerminationCause) -> Generator[Effect, Any, Outcome]:
        done = yield from run_calls(
            self.setup.calls, reply.calls, "forced", self.step_index, self.call_ids, Running(meter=self.meter)
        )
        unexecuted = tuple(done.unexecuted)
        if done.calls or reply.said_something:
            self._record(_calls_record(reply, done, done.submitted))
        if done.submitted is not None:
            return Ending("forced_submit", done.submitted, cause, unexecuted=unexecuted)
        if done.submit_denied:
            return self._incomplete(cause, unexecuted=unexecuted)
        return (yield from self._extract(cause, unexecuted))

    def _extract(self, cause: TerminationCause, unexecuted: tuple = ()) -> Generator[Effect, Any, Outcome]:
        stop = self._stop()
        if stop is not None:
            return self._incomplete(stop, unexecuted=unexecuted)
        outcome = yield from self._send("extraction")
        if not isinstance(outcome, Extracted):
            return self._last_request_failed(outcome, "extraction", cause, unexecuted)
        outputs = self.setup.outputs.validate(dict(outcome.outputs))
        if isinstance(outputs, Rejection):
            self.errors["extraction"] = outputs.sentence
            return self._incomplete(cause, unexecuted=unexecuted)
        self._record(Step(outputs=outputs))
        return Ending("extracted", outputs, cause, unexecuted=unexecuted)

    def _last_request_failed(self, outcome: Any, role: str, cause: TerminationCause, unexecuted: tuple = ()) -> Outcome:
        """Reference §4.3: deadline, then unreadable, then anything else.

        Fatal, filtered and context-window failures already ended the turn in ``_send``.
        """
        if isinstance(outcome, Outcome):
            return outcome
        error = outcome.error
        self.errors[role] = describe(error)
        if clock.passed():
            return self._incomplete("deadline_exceeded", unexecuted=unexecuted)
        if is_unreadable(error):
            return self._incomplete(cause, unexecuted=unexecuted)
        return Failure(error)

    def _record_note(self) -> None:
        note = self.options.last_request_note
        names = self.guidance.task.input_names
        if not note or not names:
            return
        if self.pending:
            self._record(Step())
        self.note_index = len(self.recorded)
        self._record(Step(inputs={names[0]: note}))

    # -- sending one request ---------------------------------------------------------------

    def _send(self, kind: RequestKind) -> Generator[Effect, Any, Reply | Extracted | Failed | Outcome]:
        """One request, with context-window recovery and deadline-bounded retries."""
        attempt = 0
        self.models.start()
        while True:
            stop = self._stop()
            if stop is not None:
                return self._incomplete(stop)
            outcome = yield from self._perform(kind)
            if isinstance(outcome, Ending):  # over the window after the policy, or an input guardrail tripped
                return outcome
            blocked = isinstance(outcome, Failed) and is_blocked_reply(outcome.error)
            if blocked or (isinstance(outcome, Reply) and outcome.finish_reason == "content_filter"):
                return Failure(ContentFiltered(f"the provider's content filter stopped the {kind} reply"))
            if not isinstance(outcome, Failed):
                return outcome
            error = outcome.error
            if isinstance(error, clock.DeadlinePassed):  # caught right before the send: nothing left
                return self._incomplete("deadline_exceeded")
            if self.models.next(kind, error):  # the same request, at once, to the next LM
                continue
            if is_fatal(error):
                return Failure(error)
            if is_context_window(error):
                if self.projection.leave_out_more(something_new=bool(self.pending or self.steps)):
                    continue
                self.errors["initial" if kind == "step" else kind] = describe(error)
                return self._incomplete("context_window_exceeded")
            delay = retry_delay(error, attempt, self.setup.retries)
            if delay is None:
                return outcome
            attempt += 1
            yield Sleep(delay)

    def _perform(self, kind: RequestKind) -> Generator[Effect, Any, Reply | Extracted | Failed | Ending]:
        """Fit one request to the context policy, yield it (the first with the alongside input
        guardrails) and count it."""
        if self.policy is not None and kind != "extraction":
            fits = yield from self.policy.fit(kind, self.recorded, self._build, self.meter, self._stop)
            if not fits:
                self.errors["initial" if kind == "step" else kind] = _OVER_WINDOW
                return self._incomplete("context_window_exceeded")
        outcome, trip = yield from self.guards.send(self._request(kind))
        self.meter.add(outcome.usage or (RequestUsage(kind),))
        return outcome if trip is None else self._blocked(trip)

    def _request(self, kind: RequestKind) -> ModelRequest | Extraction:
        return self._build(kind)

    def _build(
        self, kind: RequestKind, view: PromptView | None = None, steps: Sequence[Step] | None = None
    ) -> ModelRequest | Extraction:
        """A request of ``kind``; a context policy's measures and summary pass their ``view`` and ``steps``."""
        guidance = self._guidance(kind, view, steps)
        config = dict(self.plan.config)
        if kind == "forced_submit":
            config.update(tool_choice=_NAMED_CHOICE, reasoning_effort=None)
        elif kind == "required_retry":
            config.update(tool_choice="required", reasoning_effort=None)
        elif kind != "extraction":
            config["tool_choice"] = "auto"
        left = clock.time_left()
        if left is not None:
            config["timeout"] = max(left, 0.001)
        if kind == "extraction":
            return Extraction(
                guidance, dict(self.plan.inputs), config, no_retries=left is not None, model=self.models.index
            )
        made = Summarize if kind == "summary" else ModelRequest
        pending = {} if kind == "summary" else dict(self.pending)
        request = made(
            guidance,
            pending,
            config,
            no_retries=left is not None,
            fallback=self.meter.allows_fallback(),
            model=self.models.index,
        )
        return request if self.policy is None else self.policy.annotate(request, self.recorded)

    def _guidance(
        self, kind: RequestKind, view: PromptView | None = None, steps: Sequence[Step] | None = None
    ) -> Guidance:
        guidance = replace(
            self.guidance,
            kind=kind,
            steps=Window(self.recorded),  # not a copy: requests cost the same at any history length
            history=make_history(self.entries),
            omitted=self.projection.omitted,
            boundary=self._turn_start(),
        )
        if self.policy is not None:  # what its view shows; a summary request: its episodes, then the instruction
            guidance = self.policy.guidance(
                guidance, view, self.projection.omitted, steps, self.setup.summary_instruction
            )
        if kind == "required_retry":
            guidance = replace(guidance, roster=submit_only(guidance.roster))
        return guidance

    def _turn_start(self) -> int:
        """Where the current turn starts, for ``history_replay="actions"`` (reference §7.6).

        The call's new inputs, else its own note, else (a resume mid-turn) the last recorded
        step that carries inputs.
        """
        if self.plan.inputs:
            return len(self.setup.prior)
        if self.note_index is not None:
            return self.note_index
        steps = self.recorded
        return next((i for i in range(len(steps) - 1, -1, -1) if steps[i].inputs), 0)

    # -- recording and ending --------------------------------------------------------------

    def _stop(self) -> TerminationCause | None:
        """Why no request may leave now, if one may not."""
        if clock.passed():
            return "deadline_exceeded"
        if self.meter.reached():
            return "usage_limit_exceeded"
        return None

    def _record(self, step: Step, resumed: Step | None = None) -> None:
        """Append a step; the call's new inputs go on it, unless it is a resumed paused step."""
        if self.pending and resumed is None:
            step = replace(step, inputs={**self.pending, **step.inputs})
            self.pending = {}
        view = self.policy.take_view() if self.policy is not None else None
        if view is not None:
            step = replace(step, view=view)
        self.recorded.append(step)
        self.entries.append(to_entry(step))

    def resumable_entries(self) -> list[Mapping[str, Any]]:
        """A ``StepError``'s history: the call's inputs kept even before any step, to resume."""
        if self.pending:
            self._record(Step())
        return self.entries

    def _incomplete(self, cause: TerminationCause, unexecuted: tuple = ()) -> Ending:
        """No answer. A passed deadline is named instead of the interruption (reference §4.2)."""
        if cause != "context_window_exceeded" and clock.passed():
            cause = "deadline_exceeded"
        return Ending("incomplete", None, cause, error=dict(self.errors) or None, unexecuted=unexecuted)


def _calls_record(reply: Reply, done: StepCalls, outputs: Mapping[str, Any] | None) -> Step:
    return Step(
        thought=reply.text if reply.said_something else None,
        calls=tuple(done.calls),
        results=tuple(done.results),
        outputs=dict(outputs) if outputs is not None and not done.pending else None,
        pending=tuple(done.pending),
        agent_runs=dict(done.agent_runs),
        **_reasoning(reply, done.renamed),
    )


def _reasoning(reply: Reply, renamed: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The reply's reasoning, its blocks naming the calls by the ids recorded (``StepCalls.renamed``)."""
    details = with_call_ids(reply.reasoning_details, renamed) if renamed else reply.reasoning_details
    return {"reasoning_content": reply.reasoning_content, "reasoning_details": details}
