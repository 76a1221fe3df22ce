"""Which exceptions a tool may raise into its observation, and which stop the turn.

A tool is host code, and host code raises anything: a library's own ``BaseException``
subclass, or an ``asyncio.CancelledError`` a library raised on its own. Those are the tool's
failure, an observation the model reads, like any ``Exception``. What stops the turn is what
stops the caller: ``KeyboardInterrupt``, ``SystemExit``, ``GeneratorExit``, and the cancellation
of the caller's own task (``asyncio.Task.cancelling()`` counts the cancellations asked of the
task running the tool). Those propagate, and the program attaches the history recorded so far
(``attach_history``), so what ran is not lost on the way out.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

_PACKAGE = str(Path(__file__).resolve().parents[1])

HISTORY_ATTRIBUTE = "dspy_imp_history"
AGENT_HISTORY_ATTRIBUTE = "dspy_imp_agent_history"  # a sub-agent's history, on a stop out of its turn
_STOPS = (KeyboardInterrupt, SystemExit, GeneratorExit)


def tool_failure(error: BaseException) -> bool:
    """Whether ``error``, raised by a tool, is that call's failure (an observation) rather than a stop."""
    if isinstance(error, Exception) and not isinstance(error, asyncio.CancelledError):
        return True
    if isinstance(error, _STOPS):
        return False
    if isinstance(error, asyncio.CancelledError):
        return not _cancelling()
    return True


def _cancelling() -> bool:
    try:
        task = asyncio.current_task()
    except RuntimeError:  # no running loop: a sync tool, whose cancellation is never the caller's
        return False
    return task is not None and task.cancelling() > 0


def attach_history(error: BaseException, history: Any) -> None:
    """Put the turn's history on a propagating stop (``error.dspy_imp_history``), once."""
    if getattr(error, HISTORY_ATTRIBUTE, None) is None:
        with contextlib.suppress(AttributeError, TypeError):  # an exception class with __slots__
            setattr(error, HISTORY_ATTRIBUTE, history)


def host_hook(error: BaseException) -> str:
    """The host function ``error`` came from, for a message that names it (``'my_counter'``): the
    first frame outside ``dspy_imp`` after the last one inside, else ``""`` (dspy_imp refused its answer)."""
    frames, tb = [], error.__traceback__
    while tb is not None:
        frames.append(tb.tb_frame)
        tb = tb.tb_next
    inside = [i for i, f in enumerate(frames) if str(Path(f.f_code.co_filename).resolve()).startswith(_PACKAGE)]
    if inside and inside[-1] + 1 < len(frames):
        return repr(frames[inside[-1] + 1].f_code.co_qualname)
    return ""
