"""Which new turns an instance starts: at most ``max_turns`` at once, none while its event loop runs
late, and the ``Retry-After`` a refused one is told.

One instance runs its turns on one event loop, on one core: what it can take is bounded by that
loop's CPU, not by the machine's cores, nor by how many turns wait for their model. Past the
point where the loop is busy all the time, each turn admitted makes every running one slower
(each event waits for the others' work) and turns end no sooner: measured on the load benchmark
(docs/performance.md), about 200 turns running at once kept one loop short of busy, 400 left it
lagging half a second. So two bounds, either of which refuses a new turn (429):

- ``max_turns`` turns running (``DEFAULT_MAX_TURNS``, 200, by default): a ceiling that holds even
  before the loop has shown any lag (a burst of conversations arriving together);
- the loop's own lag (``LoopLag``: a timer every 10 ms, how late it ran, less the time the loop's
  thread waited for a core meanwhile, where Linux tells it), its median over the last second
  above ``max_loop_lag`` (``MAX_LOOP_LAG``, 15 ms, by default; ``None``: not measured): turns
  heavier than the benchmark's (long prompts, many tools) saturate the loop with fewer running,
  and it is this that says so. The median is not moved by a single pause (a garbage collection
  of half a second moved a mean of the same second past the bound): only by a loop that stays
  late. The wait for a core is left out because it is the machine's (other processes on its
  cores), which refusing turns would not shorten.

The ``Retry-After`` of such a refusal is an estimate, not a constant: a client told 1 s comes
back every second, and on a saturated loop each refusal costs what the running turns needed. The
clients waiting are estimated by Little's law, as the refusals per second times the seconds each
was told to wait; the rate at which running turns end (and give their place) is observed; the
estimate is the seconds in which that many places free up, rounded up, at least 1 and at most
``RETRY_AFTER_MAX`` (30). Both rates decay over ``RATE_WINDOW`` (5 s). Until a turn has ended
there is nothing to estimate from: 1.
"""

from __future__ import annotations

import asyncio
import math
import os
import statistics
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from dspy_imp.web._guard import BeforeStream

DEFAULT_MAX_TURNS = 200
"""``max_turns``' default: turns running at once in one instance (its one event loop)."""

MAX_LOOP_LAG = 0.015
"""``max_loop_lag``' default, in seconds: above this median lag over the last second, new turns are refused."""

RETRY_AFTER = 1
"""The ``Retry-After`` seconds of a refusal whose end cannot be estimated: a conversation running a
turn in this process, an instance draining (its balancer sends the retry elsewhere), a full one
before any turn has ended."""

RETRY_AFTER_MAX = 30
"""The longest ``Retry-After`` a full instance tells, in seconds."""

RATE_WINDOW = 5.0
"""Seconds over which the rates of ended and refused turns decay (each event weighs e^(-age/5 s))."""

TICK = 0.01
"""Seconds between two ticks of the loop's lag probe."""

LAG_WINDOW = 1.0
"""Seconds of ticks the loop's lag is the median of."""


class LoopLag:
    """How late the event loop runs by its own work: once ``start``ed (on the loop: the app's
    lifespan does it), a timer every ``TICK`` records how much later than asked it ran, less what
    ``waited`` (the seconds the loop's thread has waited for a core, cumulative; by default Linux's
    ``schedstat``, else nothing) grew meanwhile; ``recent()`` is the median over the last
    ``LAG_WINDOW`` seconds, ``None`` when no tick is that recent (not started, stopped)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, waited: Callable[[], float] | None = None):
        self.clock = clock
        self.waited = waited
        self.samples: deque[tuple[float, float]] = deque()  # (when, seconds late)
        self._handle: asyncio.TimerHandle | None = None
        self._due = 0.0
        self._waited = 0.0
        self._schedstat: int | None = None

    def start(self) -> None:
        self.stop()
        if self.waited is None:
            self._schedstat = _open_schedstat()
        self._waited = self._waited_now()
        self._due = self.clock() + TICK
        self._handle = asyncio.get_running_loop().call_later(TICK, self._tick)

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        if self._schedstat is not None:
            os.close(self._schedstat)
            self._schedstat = None
        self.samples.clear()

    def _tick(self) -> None:
        now, waited = self.clock(), self._waited_now()
        self.record(now, max(0.0, now - self._due - (waited - self._waited)))
        self._due, self._waited = now + TICK, waited
        self._handle = asyncio.get_running_loop().call_later(TICK, self._tick)

    def _waited_now(self) -> float:
        if self.waited is not None:
            return self.waited()
        if self._schedstat is None:
            return 0.0
        try:  # "<ns on a core> <ns waiting for one> <slices>"
            return int(os.pread(self._schedstat, 100, 0).split()[1]) / 1e9
        except (OSError, ValueError, IndexError):
            return 0.0

    def record(self, now: float, late: float) -> None:
        """One tick that ran ``late`` seconds late at ``now``."""
        self.samples.append((now, late))
        self._forget(now)

    def recent(self) -> float | None:
        self._forget(self.clock())
        return statistics.median(late for _, late in self.samples) if self.samples else None

    def _forget(self, now: float) -> None:
        while self.samples and self.samples[0][0] < now - LAG_WINDOW:
            self.samples.popleft()


def _open_schedstat() -> int | None:
    """The calling thread's ``/proc/.../schedstat``, open for ``pread`` (``None`` off Linux)."""
    try:
        return os.open(f"/proc/self/task/{threading.get_native_id()}/schedstat", os.O_RDONLY)
    except (OSError, AttributeError):
        return None


class Rate:
    """Events per second, each weighing ``e^(-age / RATE_WINDOW)``: the recent rate, never reset."""

    def __init__(self) -> None:
        self.value = 0.0
        self.at: float | None = None

    def add(self, now: float, weight: float = 1.0) -> None:
        self.value = self._decayed(now) + weight
        self.at = now

    def per_second(self, now: float) -> float:
        return self._decayed(now) / RATE_WINDOW

    def _decayed(self, now: float) -> float:
        return 0.0 if self.at is None else self.value * math.exp(-max(0.0, now - self.at) / RATE_WINDOW)


class Admission:
    """The bounds on new turns (``max_turns``, ``max_loop_lag``) and the ``Retry-After`` of a refusal."""

    def __init__(
        self,
        max_turns: int = DEFAULT_MAX_TURNS,
        max_loop_lag: float | None = MAX_LOOP_LAG,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.max_turns = max_turns
        self.max_loop_lag = max_loop_lag
        self.clock = clock
        self.lag = LoopLag(clock)
        self.ended = Rate()  # turns that gave their place back
        self.waiting = Rate()  # the seconds each refused turn was told to wait: per second, the clients waiting

    def reason(self, running: int) -> tuple[str, dict[str, Any]] | None:
        """Why a new turn would be refused now (its message and details), or ``None``."""
        if running >= self.max_turns:
            message = f"this instance is running its most turns at once (max_turns={self.max_turns}): try again later"
            return message, {"limit": "max_turns", "max_turns": self.max_turns}
        lag = self.lag.recent() if self.max_loop_lag is not None else None
        if lag is not None and self.max_loop_lag is not None and lag > self.max_loop_lag:
            lag_ms, limit_ms = round(lag * 1000, 1), round(self.max_loop_lag * 1000, 1)
            message = (
                f"the event loop of this instance is running late ({lag_ms:g} ms, the median of the last second; "
                f"max_loop_lag={limit_ms:g} ms): try again later"
            )
            return message, {"limit": "max_loop_lag", "loop_lag_ms": lag_ms, "max_loop_lag_ms": limit_ms}
        return None

    def refusal(self, running: int) -> BeforeStream | None:
        """The 429 a new turn is refused with now (its ``Retry-After`` counted as told), or ``None``."""
        reason = self.reason(running)
        if reason is None:
            return None
        message, details = reason
        seconds = self.retry_after()
        self.waiting.add(self.clock(), seconds)
        return BeforeStream(429, message, retry_after=seconds, **details)

    def retry_after(self) -> int:
        """Whole seconds until a refused turn may find a place: the clients waiting over the rate at
        which running turns end, within ``RETRY_AFTER`` .. ``RETRY_AFTER_MAX``."""
        now = self.clock()
        ends = self.ended.per_second(now)
        if ends <= 0:  # no turn has ended yet: nothing to estimate from
            return RETRY_AFTER
        estimate = math.ceil(self.waiting.per_second(now) / ends - 1e-9)
        return max(RETRY_AFTER, min(RETRY_AFTER_MAX, estimate))

    def ended_turn(self) -> None:
        """A running turn gave its place back."""
        self.ended.add(self.clock())
