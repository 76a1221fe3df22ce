"""`FakeClock`: the time a turn's deadline reads, moved by the test, never by the machine's speed."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

import dspy

# The settings keys dspy_imp's deadline reads its time from, and pauses with (``dspy_imp._records.clock``;
# this package imports nothing of dspy_imp, so they are spelled here and checked by its tests).
_CLOCK_KEY = "dspy_imp_clock"
_SLEEP_KEY = "dspy_imp_sleep"


class FakeClock:
    """A clock for `dspy_imp.deadline` that moves only when the test says.

    Inside `clock.running()`, deadlines are set and read on this clock: time passes when a script
    item made with `clock.after(seconds, item)` is answered, when the test calls `advance`, or
    when the loop pauses before a retry (the pause advances the clock by its length, at once, and
    is kept in `slept`). So a test of a deadline gives the same result on any machine, however
    loaded. Tools still run in real time: a tool's own time bound is real.

    Args:
        start: The clock's first reading, in epoch seconds.

    Example:
        ```python
        clock = FakeClock()
        lm = ScriptedLM([clock.after(30, reply("Thinking..."))])  # the reply takes 30 s
        with clock.running(), dspy.context(lm=lm), dspy_imp.deadline(seconds=10):
            pred = agent(question="What is the capital of France?")
        ```
    """

    def __init__(self, start: float = 1_800_000_000.0) -> None:
        self.now = float(start)
        self.slept: list[float] = []
        self._lock = threading.Lock()

    def time(self) -> float:
        """The current reading, in epoch seconds."""
        return self.now

    def advance(self, seconds: float) -> None:
        """Move the clock on by `seconds`."""
        with self._lock:
            self.now += seconds

    def sleep(self, seconds: float) -> None:
        """A pause on this clock: no real wait, the clock moves on by `seconds`."""
        self.slept.append(seconds)
        self.advance(seconds)

    def after(self, seconds: float, item: Any) -> Callable[[Any], Any]:
        """A `ScriptedLM` script item answered `seconds` later, on this clock."""

        def answer(request: Any) -> Any:
            self.advance(seconds)
            return item

        return answer

    @contextlib.contextmanager
    def running(self) -> Iterator[FakeClock]:
        """Deadlines set and read in this block (and the threads that copy DSPy's settings) use this clock."""
        with dspy.context(**{_CLOCK_KEY: self.time, _SLEEP_KEY: self.sleep}):
            yield self
