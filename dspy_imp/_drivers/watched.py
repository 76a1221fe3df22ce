"""The drivers' watching glue: a ``Watch`` (``_watch.streaming``) sees an effect before and after it is
performed (with the effect's GenAI span current while it runs, and a tool call's ``Calling`` for
a tool that reports while it runs), and a request's reply as it is relayed; it decides nothing.

``watched``/``awatched`` wrap performing one job; with no watch (no ``dspy.streamify``, no live
progress), or for a ``Measure`` (counting tokens is nothing to watch) or a ``CheckArguments`` (the
call's own events tell its verdict), the job just runs.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from dspy_imp._drivers.job import Job
from dspy_imp._turn.effects import CheckArguments, Measure
from dspy_imp._watch.streaming import Watch


def watched(watch: Watch | None, effect: Any, job: Job, perform: Callable[[Job], Any]) -> Any:
    """``perform(job)``, with the watch told before and after (sync)."""
    if watch is None or isinstance(effect, Measure | CheckArguments):
        return perform(job)
    watch.send(watch.before(effect))
    with watch.spanning(effect, job) as spanned, watch.calling(effect):
        with watch.relaying(effect, job.exchange) as relay:
            outcome = perform(job)
        spanned(outcome)
    watch.send([*(relay.close(outcome) if relay else ()), *watch.after(effect, outcome)])
    return outcome


async def awatched(watch: Watch | None, effect: Any, job: Job, perform: Callable[[Job], Awaitable[Any]]) -> Any:
    """``watched``, awaiting ``perform`` and the watch's sends."""
    if watch is None or isinstance(effect, Measure | CheckArguments):
        return await perform(job)
    await watch.asend(watch.before(effect))
    with watch.spanning(effect, job) as spanned, watch.calling(effect):
        with watch.relaying(effect, job.exchange) as relay:
            outcome = await perform(job)
        spanned(outcome)
    await watch.asend([*(relay.close(outcome) if relay else ()), *watch.after(effect, outcome)])
    return outcome
