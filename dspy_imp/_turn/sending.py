"""Sending one request: building it, fitting it to the context policy, and what its failures get.

``Sender.send(kind)`` is a generator that yields the request (and the ``Sleep``s between
retries) and returns what came of it: a ``Reply``, an ``Extracted``, a ``Failed`` the caller
decides on, or an ``Outcome`` when the request alone ends the turn. In order, for each attempt:
no request leaves once the deadline has passed or a usage limit is reached (``stop``); the context
policy fits the request (``_turn.context``) and the first one carries the alongside input
guardrails (``_turn.guardrails``); a content filter ends the turn; a provider failure goes to the
next LM of the chain at once (``_turn.fallback``); a fatal one ends the turn; a context-window
refusal leaves more earlier episodes out (``_turn.projection``) and sends again; anything else
is retried after the delay the failure allows (reference §3, §9). A reply the provider paused
(Anthropic's ``pause_turn``) is sent on at once, until the provider ends it (``_turn.paused``).

``build(kind)`` makes the request of each kind: its guidance (what the model reads, rendered by
``_prompt.render``), tool choice and timeout (under a deadline: the turn's rung of ``clock.rung``,
which ``_routes.timeouts`` sends where no HTTP client is keyed on it).
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from dataclasses import replace
from typing import Any

from dspy_imp._prompt.guidance import Guidance, submit_only
from dspy_imp._prompt.signature import SUBMIT
from dspy_imp._records import clock
from dspy_imp._records.kinds import RequestKind, TerminationCause
from dspy_imp._records.outcomes import Extracted, Failed, Reply
from dspy_imp._records.steps import Step, make_history
from dspy_imp._records.usage import RequestUsage
from dspy_imp._records.view import PromptView
from dspy_imp._records.window import Window
from dspy_imp._routes.failures import (
    ContentFiltered,
    describe,
    is_blocked_reply,
    is_context_window,
    is_fatal,
    is_timeout,
    retry_delay,
)
from dspy_imp._turn.busts import CacheWatch
from dspy_imp._turn.context import Policy
from dspy_imp._turn.effects import Effect, Ending, Extraction, Failure, ModelRequest, Sleep, Summarize
from dspy_imp._turn.fallback import ModelChain
from dspy_imp._turn.guardrails import Guards
from dspy_imp._turn.log import Log, Outcome
from dspy_imp._turn.meter import Meter
from dspy_imp._turn.paused import go_on, is_paused
from dspy_imp._turn.plan import CallPlan
from dspy_imp._turn.projection import Projection

Sent = Reply | Extracted | Failed | Outcome
"""What one ``send`` came to."""

_NAMED_CHOICE = {"type": "function", "function": {"name": SUBMIT}}
_OVER_WINDOW = "ContextWindowExceeded: the request is over the model's window after every context tier (not sent)"


class Sender:
    """Sends the turn's requests; holds what a request is made from and what it is counted against."""

    def __init__(
        self,
        plan: CallPlan,
        guidance: Guidance,
        log: Log,
        *,
        meter: Meter,
        guards: Guards,
        models: ModelChain,
        projection: Projection,
        retries: int,
        summary_instruction: str,
        cache: CacheWatch | None = None,
    ):
        self.plan = plan
        self.guidance = guidance
        self.log = log
        self.meter = meter
        self.guards = guards
        self.models = models
        self.projection = projection
        self.policy: Policy | None = log.policy
        self.retries = retries
        self.summary_instruction = summary_instruction
        self.cache = cache or CacheWatch()
        self.timeout: float | None = None  # the deadline's, on its ladder (``clock.rung``)
        self.paused: Step | None = None  # the reply a continuation goes on with (``_turn.paused``)

    def stop(self) -> TerminationCause | None:
        """Why no request may leave now, if one may not."""
        if clock.passed():
            return "deadline_exceeded"
        if self.meter.reached():
            return "usage_limit_exceeded"
        return None

    def send(self, kind: RequestKind) -> Generator[Effect, Any, Sent]:
        """One request, with context-window recovery and deadline-bounded retries."""
        attempt = 0
        self.models.start()
        while True:
            stop = self.stop()
            if stop is not None:
                return self.log.incomplete(stop)
            outcome = yield from self._perform(kind)
            if isinstance(outcome, Ending):  # over the window after the policy, or an input guardrail tripped
                return outcome
            if isinstance(outcome, Failed) and is_blocked_reply(outcome.error):
                return Failure(ContentFiltered(f"the provider's content filter stopped the {kind} reply"))
            if not isinstance(outcome, Failed):
                return (yield from self._settle(kind, outcome))
            error = outcome.error
            if self._cut_by_deadline(error):
                return self.log.incomplete("deadline_exceeded")
            if self.models.next(kind, error):  # the same request, at once, to the next LM
                continue
            if is_fatal(error):
                return Failure(error)
            if is_context_window(error):
                if self.projection.leave_out_more(something_new=bool(self.log.pending or self.log.steps)):
                    continue
                self.log.errors["initial" if kind == "step" else kind] = describe(error)
                return self.log.incomplete("context_window_exceeded")
            delay = retry_delay(error, attempt, self.retries)
            if delay is None:
                return outcome
            attempt += 1
            yield Sleep(delay)

    def _cut_by_deadline(self, error: BaseException) -> bool:
        """Caught right before the send (nothing left), or waited the deadline's rung out (what is
        left is the ladder's slack: no retry or last-text request goes into it)."""
        if isinstance(error, clock.DeadlinePassed):
            return True
        return is_timeout(error) and clock.rung_spent(self.timeout)

    def _settle(self, kind: RequestKind, outcome: Reply | Extracted) -> Generator[Effect, Any, Sent]:
        """A reply the content filter stopped ends the turn; one the provider paused goes on at once,
        until the provider ends it (``_turn.paused``; a continuation's own pause goes back to ``go_on``)."""
        if isinstance(outcome, Reply) and outcome.finish_reason == "content_filter":
            return Failure(ContentFiltered(f"the provider's content filter stopped the {kind} reply"))
        if is_paused(outcome) and self.paused is None:
            assert isinstance(outcome, Reply)
            return (yield from go_on(self, kind, outcome))
        return outcome

    def _perform(self, kind: RequestKind) -> Generator[Effect, Any, Reply | Extracted | Failed | Ending]:
        """Fit one request to the context policy (its summary request is one of the turn's: the
        limits and the deadline are read again after it), yield it (the first with the alongside
        input guardrails) and count it."""
        if self.policy is not None and kind != "extraction":
            fits = yield from self.policy.fit(kind, self.log.recorded, self.build, self.meter, self.stop)
            if not fits:
                self.log.errors["initial" if kind == "step" else kind] = _OVER_WINDOW
                return self.log.incomplete("context_window_exceeded")
            stop = self.stop()  # the policy's summary request may have reached a limit or the deadline
            if stop is not None:
                return self.log.incomplete(stop)
        request = self.build(kind)
        if isinstance(request, ModelRequest):  # does it extend the request before? (``_turn.busts``)
            request = self.cache.note(request, len(self.meter.calls))
        outcome, trip = yield from self.guards.send(request)
        self.meter.add(outcome.usage or (RequestUsage(kind),))
        return outcome if trip is None else self.log.blocked(trip)

    def build(
        self, kind: RequestKind, view: PromptView | None = None, steps: Sequence[Step] | None = None
    ) -> ModelRequest | Extraction:
        """A request of ``kind``; a context policy's measures and summary pass their ``view`` and ``steps``."""
        guidance = self._guidance(kind, view, steps)
        config = dict(self.plan.config)
        if kind == "forced_submit":  # no thinking on it (the adapter's ``default_reasoning_effort``)
            config.update(tool_choice=_NAMED_CHOICE)
        elif kind == "required_retry":
            config.update(tool_choice="required")
        elif kind != "extraction":
            config["tool_choice"] = "required" if kind == "step" and self._calls_only() else "auto"
        left = clock.time_left()
        if left is not None:
            config["timeout"] = self.timeout = clock.rung(left, self.timeout)
        if kind == "extraction":
            return Extraction(
                guidance, dict(self.plan.inputs), config, no_retries=left is not None, model=self.models.index
            )
        made = Summarize if kind == "summary" else ModelRequest
        pending = {} if kind == "summary" else dict(self.log.pending)
        request = made(
            guidance,
            pending,
            config,
            no_retries=left is not None,
            fallback=self.meter.allows_fallback(),
            model=self.models.index,
            prompt_cache=self.plan.options.prompt_cache,
            thinking=self.plan.options.thinking,
        )
        return request if self.policy is None else self.policy.annotate(request, self.log.recorded)

    def _calls_only(self) -> bool:
        """A step goes out with ``tool_choice="required"``: under ``finish="auto"`` with ``submit`` a
        reply without a call is never the answer (the forced submit follows it at once), and with
        ``thinking="off"`` no thinking is asked that a forced choice would refuse. The model then
        calls a tool, ``submit`` included, in the step itself: no second request for a bare thought,
        and on Claude the smaller tool-use system prompt of the first public table (``any``: 313
        tokens, against 346 under ``auto``; the later table has 588 against 496, where the saved
        second request still outweighs it)."""
        guidance = self.guidance
        return guidance.finish == "auto" and guidance.has_submit and self.plan.options.thinking == "off"

    def _guidance(
        self, kind: RequestKind, view: PromptView | None = None, steps: Sequence[Step] | None = None
    ) -> Guidance:
        guidance = replace(
            self.guidance,
            kind=kind,
            steps=Window(self.log.recorded),  # not a copy: requests cost the same at any history length
            history=make_history(self.log.entries),
            omitted=self.projection.omitted,
            boundary=self.log.turn_start(bool(self.plan.inputs)),
            paused=self.paused,
        )
        if self.policy is not None:  # what its view shows; a summary request: its episodes, then the instruction
            guidance = self.policy.guidance(guidance, view, self.projection.omitted, steps, self.summary_instruction)
        if kind == "required_retry":
            guidance = replace(guidance, roster=submit_only(guidance.roster))
        return guidance
