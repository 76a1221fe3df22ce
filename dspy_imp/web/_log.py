"""The web server's one log line per turn, through ``logging`` (logger ``dspy_imp.web``).

    INFO     turn conversation='c1' ended=answered requests=2 duration=0.42s
    INFO     turn conversation='c2' ended=answered requests=2 duration=3.10s waited=1.20s
    WARNING  turn conversation='c1' ended=failed requests=1 duration=0.10s error=StepError: ...

A turn that ended (answered, paused, incomplete, ...) or was stopped (``ended=stopped``, its history
kept; no count of requests travels with a stop, so the line has none) is INFO; one that raised (a ``StepError``,
refused input, a bug) is WARNING, with its error on the same line. The logger has a
``NullHandler``, so a program (or a test) that configures no logging sees nothing; ``python -m
dspy_imp.web`` shows the INFO lines on standard error. ``waited=`` is how long the turn's model
requests waited for a slot of the app's ``model_requests`` (only when they waited at all).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from dspy_imp._records.errors import StreamClosed, describe_reason
from dspy_imp._records.step_error import StepError

logger = logging.getLogger("dspy_imp.web")
logger.addHandler(logging.NullHandler())

clock = time.monotonic  # the duration's clock (tests replace it)


def log_turn(key: str, ended: Any, started: float, waited: float = 0.0) -> None:
    """Log the turn of conversation ``key`` that started at ``clock()`` time ``started`` and ended
    as ``ended`` (a ``_turns.Ended``), its model requests having waited ``waited`` seconds for a slot."""
    error = ended.error
    took = f"duration={clock() - started:.2f}s" + (f" waited={waited:.2f}s" if waited > 0 else "")
    if isinstance(error, StreamClosed):  # Stop from the page: an ending chosen by a person, not a failure
        logger.info("turn conversation=%r ended=stopped %s", key, took)
        return
    if error is None:
        metadata = ended.prediction.metadata
        ending, usage = metadata.termination_reason, metadata.usage
    else:
        failed = isinstance(error, StepError)  # else refused input, or a bug: no request was the cause
        ending, usage = ("failed" if failed else "refused"), error.usage if failed else None
    requests = sum(usage.requests.values()) if usage is not None else 0
    line = f"turn conversation={key!r} ended={ending} requests={requests} {took}"
    if error is None:
        logger.info(line)
    else:
        logger.warning("%s error=%s", line, " ".join(describe_reason(error).split()))  # one line, always
