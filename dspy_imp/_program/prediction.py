"""The prediction a turn returns: the outputs as fields, everything else as metadata."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import dspy

from dspy_imp._records.kinds import TerminationCause, TerminationReason
from dspy_imp._records.usage import Usage
from dspy_imp._watch import html

_FROM_METADATA = ("history", "termination_reason")


@dataclass(frozen=True)
class Metadata:
    """How a turn went.

    Attributes:
        history: The full record after the turn (prior entries and this call's); pass it
            back as ``history=`` to continue the conversation.
        termination_reason: How the turn ended.
        termination_cause: Why it was interrupted (``None`` when it was not).
        termination_error: For ``"incomplete"``, the redacted errors of the requests that
            failed, by role (``initial``, ``retry`` (the one extra step of a ``"tools"``
            turn), ``last_text``, ``forced_submit``, ``required_retry``, ``extraction``).
        finished_by_tool: The ``finish_on`` tool that ended the turn.
        unexecuted_tool_calls: Calls the last request made that were not run.
        context_projection: How many prior entries were left out after a context-window
            refusal (``None`` when none were).
        finish_reason: For a text answer (``"answered"``, ``"last_text"``), why the
            provider stopped that reply (``"stop"``, ``"length"``, ...), when known.
        usage: What this turn's requests used (``dspy_imp.Usage``): requests by kind, tokens,
            cost where reported.
        pending_calls: For a ``"paused"`` turn, the calls waiting for a decision, in call
            order: ``{"id", "name", "args", "kind"}`` with kind ``"approval"`` (resume with
            ``approvals=``) or ``"external"`` (resume with ``results=``).
        guardrail: For a ``"blocked"`` turn, the guardrail that tripped: ``{"stage", "name",
            "reason"}`` (stage ``"input"`` or ``"output"``).
        fallbacks: Each time a request went to the next LM of the chain, in order:
            ``{"kind", "model", "error", "next"}`` (``fallback=``).
        context: With a context policy (``dspy_imp.Context``), one record per request of the
            turn, in order: ``{"request": kind, "tokens_before", "tokens", "applied": [...]}``,
            each applied tier ``{"tier": "clear" | "summarize" | "leave_out", "tokens_before",
            "tokens_after", ...counts}``; ``()`` without a policy.
        duration: How long the call took, in seconds, on the turn's clock (the one the deadline
            reads; a test's fake clock makes it exact): from the turn's start to its ending, its
            sub-agents' turns and tools included. A resumed call counts itself only, not the wait
            for the decision; a durable turn's is the time between its records, the same on replay.
            ``None`` for a prediction no turn made (a durable workflow's pending view).
        cache_busts: Each request that did not extend the one before it, so the provider's
            prompt cache served only the prefix they share: ``{"request", "kind", "reason"}``,
            ``request`` its index in ``usage.calls``, ``reason`` a ``CacheBustReason``
            (``"context_policy"``, ``"fallback"``, ``"tools_changed"``, ``"history_edited"``,
            ``"history_replay"``, ``"tool_choice_changed"``).
        citations: The citations the provider attached to this turn's text while it ran hosted
            tools (``dspy_imp.hosted``), in order, each as served (Anthropic: ``{"type":
            "web_search_result_location", "url", "title", "cited_text", "encrypted_index"}``) plus
            ``cited_for``, the text it supports.
    """

    history: dspy.History
    termination_reason: TerminationReason
    termination_cause: TerminationCause | None = None
    termination_error: Mapping[str, str] | None = None
    finished_by_tool: str | None = None
    unexecuted_tool_calls: tuple[Mapping[str, Any], ...] = ()
    context_projection: Mapping[str, Any] | None = None
    finish_reason: str | None = None
    usage: Usage = field(default_factory=Usage)
    pending_calls: tuple[Mapping[str, Any], ...] = ()
    guardrail: Mapping[str, str] | None = None
    fallbacks: tuple[Mapping[str, str], ...] = ()
    context: tuple[Mapping[str, Any], ...] = ()
    duration: float | None = None
    cache_busts: tuple[Mapping[str, Any], ...] = ()
    citations: tuple[Mapping[str, Any], ...] = ()

    @property
    def complete(self) -> bool:
        """False exactly when the turn carries no answer: ``"incomplete"``, ``"paused"`` or ``"blocked"``."""
        return self.termination_reason not in ("incomplete", "paused", "blocked")

    def __repr__(self) -> str:
        return html.metadata_repr(self)

    def _repr_html_(self) -> str:
        """The notebook view: the termination, then the conversation (``html``)."""
        return html.metadata_html(self)


class Prediction(dspy.Prediction):
    """A ``dspy.Prediction`` whose keys are exactly the signature's outputs.

    ``pred.metadata`` holds everything else. For drop-in compatibility with
    ``dspy.ReActV2``, ``pred.history`` and ``pred.termination_reason`` read from the
    metadata when no output has that name.
    """

    @property
    def metadata(self) -> Metadata:
        return self.__dict__["_metadata"]

    def _repr_html_(self) -> str:
        """The notebook view: the termination, the outputs, then the conversation (``html``)."""
        if "_metadata" not in self.__dict__:
            return f"<pre>{html.html.escape(repr(self))}</pre>"
        return html.prediction_html(self)

    def __getattr__(self, key: str) -> Any:
        if key in _FROM_METADATA and "_metadata" in self.__dict__ and key not in self.__dict__.get("_store", {}):
            return getattr(self.__dict__["_metadata"], key)
        return super().__getattr__(key)


def make_prediction(outputs: Mapping[str, Any], metadata: Metadata) -> Prediction:
    prediction = Prediction(**outputs)
    prediction._metadata = metadata
    return prediction


def is_complete(prediction: Any) -> bool:
    """Whether a ``dspy_imp`` prediction carries an answer.

    False when its reason is ``"incomplete"``, ``"paused"`` or ``"blocked"``.
    """
    metadata = getattr(prediction, "metadata", None)
    if not isinstance(metadata, Metadata):
        raise TypeError(f"is_complete() takes a dspy_imp prediction, got {type(prediction).__name__}")
    return metadata.complete
