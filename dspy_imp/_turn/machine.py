"""The turn's state machine: which request comes next and how the turn ends. No I/O.

Theory of operation. A *turn* is one call of the program; a *step* is one ordinary
request. ``Turn.run`` is a generator that yields effects (``_turn.effects``) and is sent what
came of them; the sync and async drivers perform them. Every rule that decides the next
request and which reason and cause end the turn lives here (reference §3, §4, §5, §9); the
rendering of what the model reads lives in ``_prompt.render``.

The machine calls each capability through one small interface, all in ``_turn/``:

- ``log.Log``: what is recorded (the steps and their entries, the call's inputs not yet on a
  step, the errors) and the endings without an answer (``incomplete``, ``blocked``);
- ``sending.Sender.send(kind)``: one request, built, fitted to the context policy
  (``_turn.context``), sent with the alongside input guardrails, retried, moved along the
  fallback chain (``_turn.fallback``) and shortened after a context-window refusal
  (``_turn.projection``); ``Sender.stop()`` says why no request may leave (deadline, usage
  limits: ``_turn.meter``);
- ``last.LastRequests``: an interrupted turn's last requests (forced submit, required retry,
  extraction, last text), the path chosen here by the finish mode;
- ``tools.run_calls``: a step's calls, sub-agents (``_turn.agents``) and approvals
  (``_turn.approval``) included; ``limits.Watchdog``: the tool limits that interrupt a turn;
- ``guardrails.Guards``: input guardrails before the first request (or alongside it), output
  ones on the outputs of the ending.

State, all local to one call: the ``log``; ``step_index`` (ordinary requests sent),
``thoughts`` (consecutive thought-only steps; only a step with a call resets it),
``retried`` (the one extra step a ``"tools"`` turn gets after a failed request), ``call_ids``
(every call id recorded, so a new call never reuses one), ``watchdog``, ``started``/``ended`` (the
turn's clock, ``_records.clock.now``, read when ``run`` starts and when it returns: the duration);
and in the ``sender``:
``meter``, ``models``, ``projection``, ``guards``.

A tripped guardrail ends the turn ``"blocked"``; a check whose own model call a usage limit or the
deadline stopped (``guardrails.Stopped``) ends it ``"incomplete"`` for that cause. An output
guardrail's verdict may change the step recorded last (nothing has shown it to the model yet): its
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

from collections.abc import Generator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from dspy_imp._prompt.guidance import Guidance
from dspy_imp._prompt.memo import RenderMemo
from dspy_imp._prompt.sentences import SUMMARY_INSTRUCTIONS, agent_stopped
from dspy_imp._prompt.signature import OutputSpec, Rejection
from dspy_imp._records import clock
from dspy_imp._records.kinds import TerminationCause
from dspy_imp._records.outcomes import Failed, RawCall, Reply
from dspy_imp._records.steps import Step
from dspy_imp._records.usage import UsageLimits, tighter
from dspy_imp._records.window import Window
from dspy_imp._routes.failures import cause_of, describe
from dspy_imp._turn.approval import Decisions
from dspy_imp._turn.busts import CacheWatch
from dspy_imp._turn.context import Policy
from dspy_imp._turn.effects import Effect, Ending
from dspy_imp._turn.fallback import ModelChain
from dspy_imp._turn.guardrails import Guards
from dspy_imp._turn.last import LastRequests
from dspy_imp._turn.limits import Watchdog
from dspy_imp._turn.log import Log, Outcome, calls_record, reasoning
from dspy_imp._turn.meter import Meter
from dspy_imp._turn.plan import CallPlan
from dspy_imp._turn.projection import Projection
from dspy_imp._turn.results import error_result
from dspy_imp._turn.sending import Sender
from dspy_imp._turn.tools import CallContext, Running, StepCalls, run_calls


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
    history_edited: bool = False  # the history is not the one this conversation last returned


class Turn:
    """One call of the program, run as a generator of effects."""

    def __init__(self, plan: CallPlan, setup: Setup):
        self.plan = plan
        self.options = plan.options
        self.setup = setup
        self.guidance = replace(setup.guidance, memo=RenderMemo())  # incremental rendering, one per turn
        self.step_index = 0
        self.thoughts = 0
        self.retried = False
        self.started: float | None = None  # the turn's clock when ``run`` started, and when it ended
        self.ended: float | None = None
        self.call_ids = {call.id for step in setup.prior for call in step.calls}
        self.running_step: tuple[Reply, Running, Step | None] | None = None  # a step whose calls run
        self.watchdog = Watchdog(setup.calls.limits)
        context = self.options.context
        names = self.guidance.task.output_names
        policy = None if context is None else Policy(context, setup.prior, names)
        self.log = Log(setup.prior, setup.prior_entries, plan.inputs, policy)
        known = (*setup.prior, setup.paused) if setup.paused is not None else setup.prior
        earlier = next((step.inputs for step in reversed(known) if step.inputs), {})  # a resumed turn's inputs
        meter = Meter(tighter(self.options.usage_limits, setup.budget))  # the guardrails' model calls too
        self.sender = Sender(
            plan,
            self.guidance,
            self.log,
            meter=meter,
            guards=Guards(self.options, plan.inputs, setup.paused is not None, earlier, meter),
            models=ModelChain(setup.models),
            projection=Projection(setup.prior, names),
            retries=setup.retries,
            summary_instruction=setup.summary_instruction,
            cache=CacheWatch(setup.history_edited, setup.models),
        )

    # -- what the program reads after the turn -----------------------------------------------

    @property
    def steps(self) -> Window[Step]:
        """The steps this turn recorded (after the prior history)."""
        return self.log.steps

    @property
    def entries(self) -> list[Mapping[str, Any]]:
        """The history's entries: the prior ones, then this turn's steps."""
        return self.log.entries

    @property
    def errors(self) -> dict[str, str]:
        """The failed requests' errors, by role (``metadata.error``)."""
        return self.log.errors

    @property
    def cache_busts(self) -> tuple[Mapping[str, Any], ...]:
        """The requests that did not extend the one before (``metadata.cache_busts``)."""
        return tuple(self.sender.cache.busts)

    @property
    def meter(self) -> Meter:
        return self.sender.meter

    @property
    def models(self) -> ModelChain:
        return self.sender.models

    @property
    def projection(self) -> Projection:
        return self.sender.projection

    @property
    def policy(self) -> Policy | None:
        return self.log.policy

    def resumable_entries(self, agent_history: Any = None) -> list[Mapping[str, Any]]:
        """A ``StepError``'s or a stop's history: the call's inputs kept even before any step, to
        resume; a step stopped while its calls ran keeps the calls that ran, with their results
        (those not run yet are left out, as unexecuted calls are: every recorded call has its
        result). A sub-agent call stopped with the turn (``agent_history``: what its turn recorded)
        is kept as a call that did not finish, its record holding that history."""
        if self.running_step is not None:
            reply, running, resumed = self.running_step
            self.running_step = None
            done = running.done
            ran = replace(done, calls=list(done.calls), results=list(done.results), agent_runs=dict(done.agent_runs))
            ran.pending, ran.submitted = [], None
            call = done.running_agent
            if call is not None and agent_history is not None:
                entries = getattr(agent_history, "messages", agent_history)
                stopped = Rejection("agent_incomplete", agent_stopped(call.name or ""))
                ran.calls.append(call)
                ran.results.append(error_result(call, stopped))
                record = {"agent": call.name, "termination_reason": "incomplete", "history": [dict(e) for e in entries]}
                ran.agent_runs[call.id] = record
            if ran.results:
                self._record_calls(reply, ran, None, resumed)
        return self.log.resumable_entries()

    def _record_calls(self, reply: Reply, done: StepCalls, outputs: Any, resumed: Step | None) -> None:
        step = calls_record(reply, done, outputs)
        self.log.record(step if resumed is None else replace(step, inputs=resumed.inputs, extra=resumed.extra), resumed)

    # -- the step loop ---------------------------------------------------------------------

    def run(self) -> Generator[Effect, Any, Outcome]:
        self.started = clock.now()
        outcome = yield from self._start()
        while True:
            if outcome is None:
                outcome = yield from self._steps()
            final = yield from self._checked(outcome)
            if final is not None:
                self.ended = clock.now()
                return final
            outcome = None  # an output guardrail asked the model to try again

    @property
    def duration(self) -> float | None:
        """Seconds from the start of ``run`` to its ending, on the turn's clock (``None`` before it ended)."""
        return None if self.ended is None or self.started is None else max(self.ended - self.started, 0.0)

    def _start(self) -> Generator[Effect, Any, Outcome | None]:
        """Input guardrails that run before any request, then a paused step's calls."""
        trip = yield from self.sender.guards.check_inputs()
        if trip is not None:
            return self.log.blocked(trip)
        if self.setup.paused is not None:
            return (yield from self._resume(self.setup.paused))
        return None

    def _steps(self) -> Generator[Effect, Any, Outcome]:
        while True:
            if self.step_index >= self.options.max_iters:
                return (yield from self._interrupted("max_iters"))
            outcome = yield from self.sender.send("step")
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
        self.log.errors["retry" if "initial" in self.log.errors else "initial"] = describe(error)
        if self.options.finish != "tools":
            return (yield from self._interrupted(cause))
        if not self.retried and self.step_index < self.options.max_iters and self.sender.stop() is None:
            self.retried = True
            return None
        return self.log.incomplete(cause)

    def _after_reply(self, reply: Reply) -> Generator[Effect, Any, Outcome | None]:
        if reply.calls:
            self.thoughts = 0
            return (yield from self._calls_step(reply))
        if self.guidance.text_answer:
            return self._answered(reply)
        if not reply.said_something:
            return (yield from self._interrupted("empty_tool_calls"))
        self.log.record(Step(thought=reply.text, **reasoning(reply)))
        if self.options.finish == "auto" or self.thoughts >= 1:
            return (yield from self._interrupted("empty_tool_calls"))
        self.thoughts = 1
        return self.log.incomplete("deadline_exceeded") if clock.passed() else None

    def _calls_step(self, reply: Reply, resumed: Step | None = None) -> Generator[Effect, Any, Outcome | None]:
        decisions = self.setup.decisions if resumed is not None else Decisions()
        running = Running(decisions, resumed, self.sender.meter)
        index = self.step_index - 1
        self.running_step = (reply, running, resumed)  # a stop meanwhile records the calls that ran
        done = yield from run_calls(self.setup.calls, reply.calls, "step", index, self.call_ids, running)
        self.running_step = None
        outputs = done.submitted
        self._record_calls(reply, done, outputs, resumed)
        step = self.log.recorded[-1]
        if done.pending:
            return Ending("paused", pending=step.pending)
        if outputs is not None:
            return Ending("submit", outputs)
        if done.finished is not None:
            name, finished = done.finished
            return Ending("finished_by_tool", finished, finished_by_tool=name)
        cleared = self.policy.view.cleared if self.policy is not None else 0
        cause = self.watchdog.after(self.log.recorded[-1], len(self.log.recorded) - 1, cleared)
        return None if cause is None else (yield from self._interrupted(cause))

    def _resume(self, paused: Step) -> Generator[Effect, Any, Outcome | None]:
        """Answer the paused step's calls with the caller's decisions (before any request)."""
        calls = tuple(RawCall(c.id, c.name, dict(c.args), c.received) for c in paused.calls)
        reply = Reply(paused.thought, calls, paused.reasoning_content, paused.reasoning_details)
        return (yield from self._calls_step(reply, resumed=paused))

    def _answered(self, reply: Reply) -> Outcome:
        name = self.guidance.task.output_names[0]
        text = reply.text if reply.said_something else None
        self.log.record(Step(thought=text, outputs={name: text}, **reasoning(reply)))
        return Ending("answered", {name: text}, finish_reason=reply.finish_reason)

    # -- guardrails ------------------------------------------------------------------------

    def _checked(self, outcome: Outcome) -> Generator[Effect, Any, Outcome | None]:
        """The ending, after output guardrails on its outputs; ``None``: the model tries again."""
        if not isinstance(outcome, Ending):
            return outcome
        verdict = yield from self.sender.guards.check_outputs(outcome, self.log.recorded[-1] if self.steps else None)
        if verdict is None:
            return outcome
        if verdict.changed:
            self.log.replace_last(verdict.last)
        return None if verdict.retry else self.log.blocked(verdict.trip, outcome.unexecuted)

    # -- interruptions ---------------------------------------------------------------------

    def _interrupted(self, cause: TerminationCause) -> Generator[Effect, Any, Outcome]:
        """The turn was interrupted: the last requests, by the finish mode (``_turn.last``)."""
        if self.options.finish == "tools":  # nothing is ever forced
            return self.log.incomplete(cause)
        setup = self.setup
        note = self.options.last_request_note
        last = LastRequests(self.sender, setup.calls, setup.outputs, self.call_ids, self.step_index, note)
        if self.guidance.has_submit:
            return (yield from last.forced_submit(cause))
        return (yield from last.last_text(cause))
