"""A context-local deadline for turns.

``deadline`` sets a monotonic end time in DSPy's settings overrides (``dspy.context``), so it
is local to the thread or task that set it and reaches the worker threads of
``dspy.Parallel`` and ``dspy.Evaluate``, which copy those overrides. A deadline inside
another never extends it: the earlier end wins. The loop reads it before every request,
and ``check_before_send`` reads it again at the last moment before bytes leave
(after rendering, a tool result renderer and any lazy import of the LM client).

The loop's own pauses (a retry's ``Sleep``) are this module's ``sleep``/``asleep``: the clock that
decides the deadline is the one that pauses, so a test that moves the clock by hand (``time`` here,
or ``dspy_imp.testing.FakeClock``, which puts its clock and its pause in DSPy's settings) moves both.

A durable driver replays a turn from recorded results, so the time that decides the turn must
replay too: ``recorded_clock`` makes the turns inside read a clock the driver advances from its
records (epoch seconds), for the deadline and for ``returned_at``, and a turn's duration
(``metadata.duration``, two readings of ``now``) is the same on replay.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime

import dspy

from dspy_imp._records.errors import ConfigurationError

_KEY = "dspy_imp_deadline"


_CLOCK = "dspy_imp_clock"


_SLEEP = "dspy_imp_sleep"  # a test clock's pause (``dspy_imp.testing.FakeClock.running``)


class DeadlinePassed(Exception):
    """A request was about to leave after the deadline; it was not sent."""


MAX_SECONDS = 10 * 365 * 24 * 3600.0  # ten years: every request's timeout stays a usable number


@contextlib.contextmanager
def deadline(*, seconds: float | None = None, at: datetime | float | None = None) -> Iterator[None]:
    """Bound the turns run inside this block.

    Once the deadline has passed, no further request is sent: the turn ends ``"incomplete"``
    with ``termination_cause="deadline_exceeded"``. While it is set, each request waits at most
    the time left (on one connection per model: ``_routes.timeouts``) and DSPy's own retries are
    disabled (they would sleep past it).

    Args:
        seconds: Time from now, in seconds.
        at: An aware ``datetime``, or a ``time.monotonic()`` value. Naive datetimes are refused.

    Raises:
        ConfigurationError: Both or neither given, a naive datetime, or a time that is not a
            finite number or lies more than ten years away (NaN, infinity, ``1e308``).

    Example:
        ```python
        with dspy_imp.deadline(seconds=30):
            pred = agent(ticket="I was charged twice.")
        ```
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
        return _now() + _bounded("seconds", seconds, float(seconds))
    if isinstance(at, datetime):
        if at.tzinfo is None or at.utcoffset() is None:
            raise ConfigurationError(f"deadline `at` must be an aware datetime, got naive {at!r}")
        return _now() + _bounded("at", at, (at - utc_now()).total_seconds())
    if isinstance(at, bool) or not isinstance(at, int | float):
        raise ConfigurationError(f"deadline `at` must be a datetime or a monotonic time, got {at!r}")
    now = _now()
    return now + _bounded("at", at, float(at) - now)


def _bounded(name: str, value: object, seconds: float) -> float:
    """``seconds`` from now, refused when it is not a number or lies beyond any usable timeout."""
    if not math.isfinite(seconds) or seconds > MAX_SECONDS:
        raise ConfigurationError(
            f"deadline `{name}` must be a finite time at most {MAX_SECONDS:.0f} s away, got {value!r}"
        )
    return seconds


def _end() -> float | None:
    end = dspy.settings.get(_KEY)
    return end if isinstance(end, float) else None


def time_left() -> float | None:
    """Seconds left before the current deadline (may be negative), or ``None`` without one."""
    end = _end()
    return None if end is None else end - _now()


RUNG = 0.9


def rung(left: float, previous: float | None) -> float:
    """A request's ``timeout`` under the deadline: the turn's ``previous`` one while it still fits in
    the time ``left``, else nine tenths of the time left (at least a millisecond).

    A ladder, so that a turn's requests share one timeout (an HTTP client is keyed on it, and a new
    one is a new connection) and it is never longer than the time left: at most a tenth shorter.
    """
    if previous is not None and previous <= left:
        return previous
    return max(left * RUNG, 0.001)


def rung_spent(timeout: float | None) -> bool:
    """Whether a request sent with ``timeout`` (a rung) and timed out has left no time worth a retry.

    A rung is at least nine tenths of the time left when the request left, so once a request has
    waited all of it, at most a ninth of the rung is left: the deadline has come, less the ladder's
    slack. Decided by the clock alone, not by how long the machine took to notice the timeout (a
    retry in that sliver timed out again before the deadline on a fast machine, after it on a slow
    one). A shorter timeout of the LM's own fires with more left, and is retried as before.
    """
    left = time_left()
    return timeout is not None and left is not None and left <= timeout * (1 - RUNG) / RUNG + 1e-6


def passed() -> bool:
    """Whether a deadline is set and has passed."""
    left = time_left()
    return left is not None and left <= 0


@contextlib.contextmanager
def recorded_clock(clock: Callable[[], float], end: float | None) -> Iterator[None]:
    """Turns inside read ``clock()`` (epoch seconds) as the time, and end at ``end`` on that clock.

    ``end`` replaces any outer deadline: the durable driver took it from the caller already.
    """
    with dspy.context(**{_CLOCK: clock, _KEY: end}):
        yield


@contextlib.contextmanager
def reading(clock: Callable[[], float]) -> Iterator[None]:
    """Inside a recorded turn, read ``clock`` (epoch seconds) instead: a durable step's live time."""
    with dspy.context(**{_CLOCK: clock}):
        yield


def wall_end() -> float | None:
    """The current deadline as epoch seconds (what a durable turn carries), or ``None``."""
    left = time_left()
    return None if left is None else time.time() + left


def utc_now() -> datetime:
    """The current UTC time, from the recorded clock when one is set."""
    clock = dspy.settings.get(_CLOCK)
    return datetime.now(UTC) if clock is None else datetime.fromtimestamp(clock(), UTC)


def _now() -> float:
    clock = dspy.settings.get(_CLOCK)
    return time.monotonic() if clock is None else clock()


def now() -> float:
    """The turn's clock, in seconds: the one the deadline reads (``time.monotonic()``, or the recorded
    clock inside a durable turn). Only differences of two readings mean anything: a turn's duration."""
    return _now()


def sleep(seconds: float) -> None:
    """The loop's own pause (a retry's ``Sleep``), on this module's clock."""
    fake = dspy.settings.get(_SLEEP)
    if fake is not None:
        fake(seconds)
        return
    time.sleep(seconds)


async def asleep(seconds: float) -> None:
    """``sleep`` for the async driver."""
    fake = dspy.settings.get(_SLEEP)
    if fake is not None:
        fake(seconds)
        return
    await asyncio.sleep(seconds)


def check_before_send() -> None:
    """Raise ``DeadlinePassed`` when a deadline is set and has passed: the request is not sent."""
    if passed():
        raise DeadlinePassed("the deadline passed before the request was sent")
