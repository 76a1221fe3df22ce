"""The context policy: long conversations kept under the model's window before a request is refused.

Theory of operation. Before each request of a turn with a policy, the policy yields ``Measure``
(the driver renders the request exactly as it would send it and counts its prompt tokens). A
count above ``trigger`` applies the tiers in order, each re-measured, until the count is at most
``target``:

1. **clear**: the tool results of every step but the last ``keep_results`` show as a placeholder
   naming the call (the model can call the tool again);
2. **summarize**: the prior episodes (whole turns before this call) are summarized by one
   ``Summarize`` request, rendered with the view the last request was sent with (so it shares that
   request's cached prefix), ending on the summary predictor's instruction as a note; the summary
   stands in the prompt for the episodes it covers;
3. **leave out**: the oldest prior episodes (and the summary with them) are left out.

What a request shows of the record is a ``PromptView`` (``_records.view``); the record itself is
never edited. The first step recorded under a new view carries it, so the next call (or a reloaded
history) restores the view and renders the same prompt: the cached prefix holds across calls. A
request still over the window after every tier is not sent: the turn ends ``"incomplete"``,
``"context_window_exceeded"``. The refusal path (``_turn.projection``) stays as the safety net.

On models that bind thinking blocks to the prefix before them, a view change unbinds every step
recorded so far (``PromptView.unbound``): their blocks are no longer replayed. Inside a call whose
tool loop already holds blocks (its last assistant message must start with its own), any tier
would edit the prefix those blocks are bound to, so the tiers wait for the next call while the
request still fits the window (``"deferred": "thinking_bound"``); past the window they apply and
the request asks the provider to drop the blocks whose prefix changed (``drop_block``).

No I/O, no DSPy: tokens are counted by the driver, the summary is a request the driver sends.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from dspy_imp._prompt.guidance import Guidance
from dspy_imp._records.errors import ConfigurationError
from dspy_imp._records.outcomes import Measured, Reply
from dspy_imp._records.steps import Step
from dspy_imp._records.usage import RequestUsage
from dspy_imp._records.view import NO_VIEW, PromptView
from dspy_imp._turn.effects import Measure, ModelRequest, Summarize
from dspy_imp._turn.meter import Meter
from dspy_imp._turn.projection import episode_ends

Counter = Callable[[list[dict[str, Any]], list[dict[str, Any]] | None, str], int]
"""``counter(messages, tools, model) -> tokens``: a request's prompt tokens, as the provider counts them."""


@dataclass(frozen=True)
class Context:
    """A context policy: how a long conversation stays under the model's window.

    Args:
        trigger: When a request's prompt passes this, the tiers apply: a token count (``int``) or
            a share of the window (``float`` in ``(0, 1]``).
        target: The tiers apply until the prompt is at most this (same units); defaults to
            two thirds of ``trigger``.
        window: The model's input window in tokens; ``None`` reads LiteLLM's model map.
        keep_results: Tier 1: the results of the last ``keep_results`` steps stay whole, older ones
            show as a placeholder; ``None`` turns the tier off.
        summarize: Tier 2: summarize the earlier episodes in one request.
        leave_out: Tier 3: leave out the oldest episodes.
        counter: ``counter(messages, tools, model) -> int``; defaults to LiteLLM's ``token_counter``
            (the model's tokenizer where LiteLLM has it, tiktoken's otherwise).

    Example:
        ```python
        agent = dspy_imp.ReActV2("q -> a", tools=[search], context=dspy_imp.Context(trigger=0.7))
        ```
    """

    trigger: int | float = 0.75
    target: int | float | None = None
    window: int | None = None
    keep_results: int | None = 2
    summarize: bool = True
    leave_out: bool = True
    counter: Callable[[list[dict[str, Any]], list[dict[str, Any]] | None, str], int] | None = None

    def __post_init__(self) -> None:
        for name in ("trigger", "target"):
            _check_size(getattr(self, name), name, optional=name == "target")
        if self.target is not None and isinstance(self.target, float) != isinstance(self.trigger, float):
            raise ConfigurationError(f"`context.target` must be in the units of `trigger`, got {self.target!r}")
        for name in ("window", "keep_results"):  # a result must stay whole for the request that answers it
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ConfigurationError(f"`context.{name}` must be a positive integer or None, got {value!r}")
        for name in ("summarize", "leave_out"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigurationError(f"`context.{name}` must be True or False, got {getattr(self, name)!r}")
        if self.counter is not None and not callable(self.counter):
            raise ConfigurationError(f"`context.counter` must be callable, got {self.counter!r}")

    def limits(self, window: int | None) -> tuple[int, int]:
        """``(trigger, target)`` in tokens for a model with this window."""
        window = self.window if self.window is not None else window
        if isinstance(self.trigger, float) and window is None:
            raise ConfigurationError(
                "`context.window` is needed: the model's window is not in LiteLLM's model map and "
                f"`context.trigger` is a share of it ({self.trigger!r})"
            )
        trigger = _tokens(self.trigger, window)
        target = _tokens(self.target, window) if self.target is not None else (trigger * 2) // 3
        return trigger, min(target, trigger)


def _check_size(value: Any, name: str, optional: bool) -> None:
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigurationError(f"`context.{name}` must be a token count or a share of the window, got {value!r}")
    if isinstance(value, float) and not 0 < value <= 1:
        raise ConfigurationError(f"`context.{name}` as a share of the window must be in (0, 1], got {value!r}")
    if isinstance(value, int) and value <= 0:
        raise ConfigurationError(f"`context.{name}` must be a positive token count, got {value!r}")


def _tokens(size: int | float, window: int | None) -> int:
    return int(size * window) if isinstance(size, float) and window is not None else int(size)


def check_context(value: Any, where: str = "context") -> Context | None:
    if value is None or isinstance(value, Context):
        return value
    raise ConfigurationError(f"`{where}` must be a dspy_imp.Context or None, got {value!r}")


# The Claude models that bind thinking blocks to their prefix (issue 22's facts table has the sources).
# -- one turn's policy ---------------------------------------------------------------------------

Build = Callable[..., Any]
"""``build(kind, view, steps=None)``: the machine's request under a view (a ``Summarize`` for
``kind="summary"``: ``steps`` then the summary instruction as a note)."""


class Policy:
    """One turn's context policy: the view its requests show, and what it did (``metadata.context``)."""

    def __init__(self, context: Context, prior: Sequence[Step], output_names: Sequence[str]):
        self.context = context
        self.prior = len(prior)
        self.ends = episode_ends(prior, output_names)
        self.view = _restored(prior)
        self.sent = self.view  # the view of the last request sent
        self.fresh: PromptView | None = None  # a changed view not yet recorded on a step
        self.records: list[dict[str, Any]] = []
        self.binds = False

    def take_view(self) -> PromptView | None:
        """The changed view, for the step being recorded (once)."""
        fresh, self.fresh = self.fresh, None
        return fresh

    def guidance(
        self, guidance: Guidance, view: PromptView | None, recovered: int, steps: Sequence[Step] | None, note: str
    ) -> Guidance:
        """``guidance`` as the view shows the record; a summary request (``steps`` given) shows
        those episodes, then ``note`` (the summary instruction) as a note entry under the first input."""
        guidance = replace(guidance, **self.shown(view, recovered))
        if steps is None:
            return guidance
        names = guidance.task.input_names
        entry = Step(inputs={names[0] if names else "note": note})
        return replace(guidance, steps=[*steps, entry], memo=None, boundary=len(steps))

    def annotate(self, request: ModelRequest, recorded: Sequence[Step]) -> ModelRequest:
        """The request with what the policy did before it (for its span) and, on a binding model,
        whether it asks the provider to drop blocks bound to a changed prefix."""
        if isinstance(request, Summarize):
            return request
        context = self.records[-1] if self.records else None
        return replace(request, context=context, drop_block=self.drop_block(recorded))

    def shown(self, view: PromptView | None = None, recovered: int = 0) -> dict[str, Any]:
        """The guidance fields of a request under ``view`` (this call's steps keep their blocks);
        ``recovered``: entries the refusal path left out."""
        view = self.view if view is None else view
        return {
            "omitted": max(view.start, recovered),
            "summary": view.summary if view.shows_summary and view.summarized > recovered else None,
            "cleared": view.cleared,
            "unbound": min(view.unbound, self.prior),
        }

    def _bound_in_call(self, recorded: Sequence[Step]) -> bool:
        """This call's tool loop holds thinking blocks bound to the prefix (the model binds them)."""
        return self.binds and any(_has_thinking(step) for step in recorded[self.prior :])

    def drop_block(self, recorded: Sequence[Step]) -> bool:
        """A step of this call recorded before the view changed replays a block bound to the old prefix."""
        if not self.binds or self.view.unbound <= self.prior:
            return False
        return any(_has_thinking(step) for step in recorded[self.prior : self.view.unbound])

    def fit(
        self, kind: str, recorded: Sequence[Step], build: Build, meter: Meter, stop: Callable[[], Any]
    ) -> Generator[Any, Any, bool]:
        """Bring the request under ``target`` before it is sent; False when it cannot fit the window."""
        measured: Measured = yield Measure(build(kind, self.view), self.context.counter)
        self.binds = measured.binds
        trigger, target = self.context.limits(measured.window)
        window = self.context.window if self.context.window is not None else measured.window
        tokens = measured.tokens
        record: dict[str, Any] = {"request": kind, "tokens_before": tokens}
        if tokens > trigger and self._bound_in_call(recorded) and (window is None or tokens <= window):
            record["deferred"] = "thinking_bound"  # any tier would rebind this call's blocks: wait for the next call
        elif tokens > trigger:
            fit = _Fit(kind, recorded, build, meter, stop, target)
            tokens = yield from self._tiers(fit, tokens)
            record["applied"] = fit.applied
        record["tokens"] = tokens
        self.records.append(record)
        if window is not None and tokens > window:
            return False
        self.sent = self.view
        return True

    def _tiers(self, fit: _Fit, tokens: int) -> Generator[Any, Any, int]:
        start = self.view
        for tier in self._clear, self._summarize, self._leave_out:
            if tokens <= fit.target:
                break
            tokens = yield from tier(fit, tokens)
        if self.view != start:
            if self.binds:
                self.view = replace(self.view, unbound=len(fit.recorded))
            self.fresh = self.view
        return tokens

    def _adopt(self, fit: _Fit, view: PromptView, tier: str, tokens: int, **counts: Any) -> Generator[Any, Any, int]:
        """Measure the request under ``view``, take the view, and say what the tier did."""
        measured: Measured = yield Measure(fit.build(fit.kind, view), self.context.counter)
        self.view = view
        fit.applied.append({"tier": tier, **counts, "tokens_before": tokens, "tokens_after": measured.tokens})
        return measured.tokens

    def _clear(self, fit: _Fit, tokens: int) -> Generator[Any, Any, int]:
        keep = self.context.keep_results
        cleared = max(len(fit.recorded) - keep, 0) if keep is not None else 0
        if cleared <= self.view.cleared:
            return tokens
        shown = fit.recorded[max(self.view.cleared, self.view.start) : cleared]
        count = sum(1 for step in shown for result in step.results if not result.error)
        if not count:
            return tokens
        view = replace(self.view, cleared=cleared)
        return (yield from self._adopt(fit, view, "clear", tokens, results_cleared=count))

    def _summarize(self, fit: _Fit, tokens: int) -> Generator[Any, Any, int]:
        through = max((end for end in self.ends if end <= self.prior), default=0)
        if not self.context.summarize or through <= self.view.start or fit.stop() is not None:
            return tokens
        outcome = yield fit.build("summary", self.sent, steps=fit.recorded[:through])
        fit.meter.add(outcome.usage or (RequestUsage("summary"),))
        text = outcome.text.strip() if isinstance(outcome, Reply) and outcome.text else ""
        cut_short = isinstance(outcome, Reply) and outcome.finish_reason in UNFINISHED
        if not text or cut_short:  # none came back, or a fragment (filtered, cut at the token limit)
            return _unused(fit, tokens, outcome.finish_reason if cut_short else None)
        entries = through - self.view.start
        view = replace(self.view, omitted=min(self.view.omitted, through), summarized=through, summary=text)
        measured: Measured = yield Measure(fit.build(fit.kind, view), self.context.counter)
        if measured.tokens >= tokens:  # no shorter than what it replaces: the request as it was
            return _unused(fit, tokens, "longer")
        self.view = view
        fit.applied.append(
            {
                "tier": "summarize",
                "entries_summarized": entries,
                "tokens_before": tokens,
                "tokens_after": measured.tokens,
            }
        )
        return measured.tokens

    def _leave_out(self, fit: _Fit, tokens: int) -> Generator[Any, Any, int]:
        if not self.context.leave_out:
            return tokens
        view, after = self.view, tokens
        ends = [e for e in self.ends if view.start < e <= self.prior]
        for end in [view.summarized, *ends] if view.shows_summary else ends:
            view = replace(view, omitted=end)
            measured: Measured = yield Measure(fit.build(fit.kind, view), self.context.counter)
            after = measured.tokens
            if after <= fit.target:
                break
        if view == self.view:
            return tokens
        counts = {"entries_left_out": view.omitted - self.view.start, "summary_left_out": self.view.shows_summary}
        fit.applied.append({"tier": "leave_out", **counts, "tokens_before": tokens, "tokens_after": after})
        self.view = view
        return after

    def metadata(self) -> tuple[Mapping[str, Any], ...]:
        """``metadata.context``: one record per request of the turn the policy measured."""
        return tuple(self.records)


@dataclass
class _Fit:
    """One request's fitting: what the tiers need, and what they did."""

    kind: str
    recorded: Sequence[Step]
    build: Build
    meter: Meter
    stop: Callable[[], Any]
    target: int
    applied: list[dict[str, Any]] = field(default_factory=list)


UNFINISHED = frozenset({"content_filter", "length"})
"""A summary reply's finish reasons that say it is a fragment: never used as the summary."""


def _unused(fit: _Fit, tokens: int, reason: str | None) -> int:
    """A summary the policy did not use (the next tier follows); ``reason`` says why, when one came
    back: its finish reason (``"content_filter"``, ``"length"``), or ``"longer"`` than what it replaces."""
    record: dict[str, Any] = {"tier": "summarize", "failed": True}
    if reason is not None:
        record["reason"] = reason
    fit.applied.append({**record, "tokens_before": tokens, "tokens_after": tokens})
    return tokens


def _restored(prior: Sequence[Step]) -> PromptView:
    """The view of the latest prior step that recorded one, if it still fits this history."""
    for step in reversed(prior):
        if step.view is not None:
            view = step.view
            limit = len(prior)
            if max(view.omitted, view.summarized, view.cleared, view.unbound) <= limit:
                return view
            return NO_VIEW
    return NO_VIEW


def _has_thinking(step: Step) -> bool:
    details = step.reasoning_details
    return isinstance(details, list) and any(
        isinstance(b, Mapping) and b.get("type") in ("thinking", "redacted_thinking") for b in details
    )
