"""The switch for spans in the OpenTelemetry GenAI conventions, and the turn each context has open.

``dspy_imp.tracing.instrument()`` turns them on for the process; ``genai_spans`` writes them,
fed by what the drivers perform (a ``Watch`` holds one turn's ``TurnSpans``). This module imports
no OpenTelemetry: a process that never calls ``instrument()`` never loads it.

Which turn's span the end of a turn goes to: a turn's ``Watch`` is made where its ``forward`` runs
(``Effects``), and its end is written from the same ``forward`` (``_watch.tracing.trace_turn``). So
the open turn is a context variable: set when the turn's spans are made, restored to the caller's
(a sub-agent's turn runs inside its caller's) when the turn ends.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from dspy_imp._records.errors import ConfigurationError


@dataclass(frozen=True)
class Instrumentation:
    """What ``instrument()`` was given: where spans and metrics go, and whether content is captured."""

    tracer_provider: Any = None
    meter_provider: Any = None
    capture_content: bool = False


_ACTIVE: list[Instrumentation | None] = [None]  # process-wide, like ``show_progress``

_CONVERSATION: ContextVar[str | None] = ContextVar("dspy_imp_conversation", default=None)

_OPEN: ContextVar[Any] = ContextVar("dspy_imp_genai_turn", default=None)


def instrument(tracer_provider: Any = None, meter_provider: Any = None, capture_content: bool = False) -> None:
    """Emit GenAI spans and metrics for every turn from now on (see ``dspy_imp.tracing.instrument``)."""
    if not isinstance(capture_content, bool):
        raise ConfigurationError(f"capture_content must be True or False, got {capture_content!r}")
    for name, given, needs in (
        ("tracer_provider", tracer_provider, "get_tracer"),
        ("meter_provider", meter_provider, "get_meter"),
    ):
        if given is not None and not callable(getattr(given, needs, None)):
            raise ConfigurationError(f"{name} must be an OpenTelemetry {name} (with .{needs}), got {given!r}")
    from dspy_imp._watch import genai_facts  # loads OpenTelemetry: a clear ImportError when it is missing

    genai_facts.reset_instruments()
    _ACTIVE[0] = Instrumentation(tracer_provider, meter_provider, capture_content)


def uninstrument() -> None:
    """Stop emitting GenAI spans and metrics (turns already running finish as they started)."""
    _ACTIVE[0] = None


def active() -> Instrumentation | None:
    return _ACTIVE[0]


def conversation(conversation_id: str) -> contextlib.AbstractContextManager[None]:
    """Label the turns run in this block with ``gen_ai.conversation.id`` (checked now, not on entry)."""
    if not isinstance(conversation_id, str) or not conversation_id:
        raise ConfigurationError(f"conversation_id must be a non-empty string, got {conversation_id!r}")
    return _labelled(conversation_id)


@contextlib.contextmanager
def _labelled(conversation_id: str) -> Iterator[None]:
    token = _CONVERSATION.set(conversation_id)
    try:
        yield
    finally:
        _CONVERSATION.reset(token)


def conversation_id() -> str | None:
    return _CONVERSATION.get()


def turn_of(program: Any) -> Any:
    """The ``TurnSpans`` of a turn of ``program`` starting here, or ``None`` when not instrumented."""
    settings = _ACTIVE[0]
    if settings is None:
        return None
    from dspy_imp._watch.genai_spans import TurnSpans

    spans = TurnSpans(program, settings, conversation=_CONVERSATION.get(), previous=_OPEN.get())
    _OPEN.set(spans)
    return spans


def open_turn(program: Any) -> Any:
    """The turn of ``program`` whose spans this context has open, or ``None``."""
    spans = _OPEN.get()
    return spans if spans is not None and spans.program is program else None


def close_turn(spans: Any) -> None:
    """The turn's spans are done: this context's open turn is the caller's again."""
    if _OPEN.get() is spans:
        _OPEN.set(spans.previous)
