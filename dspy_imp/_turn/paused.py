"""A reply the provider paused: it goes back at once, as served, so the provider goes on with it. No I/O.

With server tools (web search, web fetch, code execution) Anthropic may end a reply with
``stop_reason: "pause_turn"``: it paused a long-running turn of its own tool loop. The documented
handling is to send that reply back, unchanged, as the assistant's last message, in a request that
is otherwise the same; the provider then goes on from where it paused. The route reads the pause
off the raw body (``HostedRoute.paused``) and the driver marks the reply ``finish_reason ==
PAUSED``.

``go_on`` is the rule, called by ``Sender.send`` on such a reply (the machine never sees a paused
reply): the continuation is the same request again, built as any (``Sender.build``), with the
paused reply as ``Guidance.paused`` (rendered last, its served blocks byte for byte by the route's
writer). Each continuation is one ``ModelRequest`` effect: it is counted in the usage, shown to
watchers and tracers, stoppable, and checked against the deadline and usage limits before it
leaves (``Sender.stop``). The driver joins the paused reply's served blocks and the continuation's
into one record (``HostedRoute.joined``), so the step the machine records holds every block served,
in order, and goes back on later requests as one assistant message. A continuation is not a step of
the program: the step count is not advanced.

Bounded: a step's continuations are at most ``max_iters``. A provider that pauses past that, or a
deadline or usage limit reached before a continuation, ends the turn ``"incomplete"`` (cause
``"max_iters"``, with ``termination_error`` saying the provider kept pausing; ``"deadline_exceeded"``,
``"usage_limit_exceeded"``) with the paused reply recorded as a thought step (what the provider
served is kept for a later turn). No last request follows: it would carry the same hosted tools,
to the provider that kept pausing. A continuation
that fails records the paused reply the same way before the machine decides on the failure.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any, Protocol

from dspy_imp._records.kinds import RequestKind, TerminationCause
from dspy_imp._records.outcomes import Reply
from dspy_imp._records.steps import Step
from dspy_imp._turn.effects import Effect
from dspy_imp._turn.log import Log
from dspy_imp._turn.plan import CallPlan


class Sending(Protocol):
    """What ``go_on`` needs of the turn's ``_turn.sending.Sender``."""

    plan: CallPlan
    log: Log
    paused: Step | None

    def stop(self) -> TerminationCause | None: ...

    def send(self, kind: RequestKind) -> Generator[Effect, Any, Any]: ...


PAUSED = "pause_turn"  # the finish reason of a reply the provider paused (Anthropic's stop reason)


def is_paused(outcome: Any) -> bool:
    return isinstance(outcome, Reply) and outcome.finish_reason == PAUSED


def go_on(sender: Sending, kind: RequestKind, reply: Reply) -> Generator[Effect, Any, Any]:
    """Send ``reply``'s continuation until the provider ends its reply; that reply, joined with the paused ones."""
    paused = reply
    sent = 0
    while True:
        step = as_step(paused)
        stop: TerminationCause | None = sender.stop()
        if stop is None and sent >= sender.plan.options.max_iters:
            stop = "max_iters"
            sender.log.errors["initial" if kind == "step" else kind] = (
                f"PausedTurn: the provider paused its reply {sent + 1} times in a row (pause_turn); "
                f"a step goes on at most max_iters={sender.plan.options.max_iters} times"
            )
        if stop is not None:
            sender.log.record(step)
            return sender.log.incomplete(stop)
        sender.paused = step
        try:
            outcome = yield from sender.send(kind)
        finally:
            sender.paused = None
        sent += 1
        if not isinstance(outcome, Reply):
            sender.log.record(step)  # what the provider served is kept; the caller decides on the failure
            return outcome
        paused = joined(paused, outcome)
        if paused.finish_reason != PAUSED:
            return paused


def as_step(reply: Reply) -> Step:
    """A paused reply as the step it goes back as (and is recorded as when it cannot go on)."""
    return Step(
        thought=reply.text, reasoning_content=reply.reasoning_content, reasoning_details=reply.reasoning_details
    )


def joined(paused: Reply, continued: Reply) -> Reply:
    """One reply of a paused one and its continuation: both texts, the continuation's calls, its
    reasoning details (the driver joined the served blocks there) and finish reason."""
    return Reply(
        text=_both(paused.text, continued.text),
        calls=continued.calls,
        reasoning_content=_both(paused.reasoning_content, continued.reasoning_content),
        reasoning_details=continued.reasoning_details,
        finish_reason=continued.finish_reason,
        usage=continued.usage,  # each request's usage was counted when it came back (``Sender._perform``)
    )


def _both(first: str | None, second: str | None) -> str | None:
    parts = [p for p in (first, second) if p and p.strip()]
    return "\n".join(parts) if parts else (second if second is not None else first)
