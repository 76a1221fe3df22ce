"""A context-local deadline for turns.

``deadline`` sets a monotonic end time in DSPy's settings overrides (``dspy.context``), so it
is local to the thread or task that set it and reaches the worker threads of
``dspy.Parallel`` and ``dspy.Evaluate``, which copy those overrides. A deadline inside
another never extends it: the earlier end wins. The loop reads it before every request.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from datetime import UTC, datetime

import dspy

from ._errors import ConfigurationError

_KEY = "dspy_imp_deadline"


@contextlib.contextmanager
def deadline(*, seconds: float | None = None, at: datetime | float | None = None) -> Iterator[None]:
    """Bound the turns run inside this block.

    Once the deadline has passed, no further request is sent: the turn ends ``"incomplete"``
    with ``termination_cause="deadline_exceeded"``. While it is set, each request's timeout
    is the time left and DSPy's own retries are disabled (they would sleep past it).

    Args:
        seconds: Time from now, in seconds.
        at: An aware ``datetime``, or a ``time.monotonic()`` value. Naive datetimes are refused.

    Example:
        >>> with dspy_imp.deadline(seconds=30):
        ...     pred = agent(ticket="I was charged twice.")
    """
    if (seconds is None) == (at is None):
        raise ConfigurationError("deadline() takes exactly one of `seconds` or `at`")
    end = _resolve(seconds, at)
    outer = _end()
    with dspy.context(**{_KEY: end if outer is None else min(outer, end)}):
        yield


def _resolve(seconds: float | None, at: datetime | float | None) -> float:
    if seconds is not None:
        if isinstance(seconds, bool) or not isinstance(seconds, int | float):
            raise ConfigurationError(f"deadline `seconds` must be a number, got {seconds!r}")
        return time.monotonic() + float(seconds)
    if isinstance(at, datetime):
        if at.tzinfo is None or at.utcoffset() is None:
            raise ConfigurationError(f"deadline `at` must be an aware datetime, got naive {at!r}")
        return time.monotonic() + (at - datetime.now(UTC)).total_seconds()
    if isinstance(at, bool) or not isinstance(at, int | float):
        raise ConfigurationError(f"deadline `at` must be a datetime or a monotonic time, got {at!r}")
    return float(at)


def _end() -> float | None:
    end = dspy.settings.get(_KEY)
    return end if isinstance(end, float) else None


def time_left() -> float | None:
    """Seconds left before the current deadline (may be negative), or ``None`` without one."""
    end = _end()
    return None if end is None else end - time.monotonic()


def passed() -> bool:
    """Whether a deadline is set and has passed."""
    left = time_left()
    return left is not None and left <= 0
