"""A sync turn's effect performed where a stop can end it while it runs (the web page's Stop).

Theory of operation. An observer that can stop a turn (``_watch.events``: ``stopped()``, asked
before each effect) may also offer ``until_stopped()``, a coroutine of its own event loop that
returns once the stop is asked. A sync turn runs in an AnyIO worker thread of that loop (the web
app's ``sync=True``), where nothing can interrupt a blocking call: a model request waiting for
its first byte, a sync tool. So the sync driver hands each effect to the loop instead
(``perform``): it is performed there as the async driver performs it (``Effects.aperform``: the
request through the LM's async engine, a sync tool in a worker thread of its own), racing the
stop. When the stop comes first, the work is cancelled, as an async turn's task is: the request's
HTTP stream is closed, an async tool cancelled, a sync tool's thread left behind as a
``tool_timeouts`` bound leaves it (what it returns later is dropped). The turn then stops with
``StreamClosed`` and the history of its finished steps; the cut effect's result never reaches the
machine, so a reply cut mid-stream is no step.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from dspy_imp._drivers import tool_threads
from dspy_imp._records.errors import StreamClosed

T = TypeVar("T")

_CLOSE_SECONDS = 5.0
"""How long a cancelled effect is waited for (its stream closing); one that ignores its
cancellation longer is left behind."""

Stopping = Callable[[], Awaitable[None]]
"""An observer's ``until_stopped``: returns once the turn is asked to stop."""


def stoppable(watch: Any) -> Stopping | None:
    """The watch's ``until_stopped``, when this sync thread can hand effects to its loop."""
    until = getattr(watch, "until_stopped", None) if watch is not None else None
    if until is None or not tool_threads.in_anyio_worker():
        return None
    return until


def perform(work: Callable[[], Awaitable[T]], until_stopped: Stopping) -> T:
    """``work()`` awaited on the loop this AnyIO worker thread works for; ``StreamClosed`` once a stop
    comes first (the work cancelled)."""
    return tool_threads.call(race, work, until_stopped)


async def race(work: Callable[[], Awaitable[T]], until_stopped: Stopping) -> T:
    """``work()``, or ``StreamClosed`` with the work cancelled when ``until_stopped()`` returns first."""
    task: asyncio.Future[Any] = asyncio.ensure_future(work())
    stop: asyncio.Future[Any] = asyncio.ensure_future(until_stopped())
    try:
        await asyncio.wait({task, stop}, return_when=asyncio.FIRST_COMPLETED)
    except BaseException:  # this wait cancelled (the server shutting down): the work too
        task.cancel()
        raise
    finally:
        stop.cancel()
    if task.done():  # it finished first (or with the stop): its outcome reaches the machine
        result: T = task.result()
        return result
    task.cancel()
    await asyncio.wait({task}, timeout=_CLOSE_SECONDS)
    task.add_done_callback(_read)
    raise StreamClosed("the turn was stopped")


def _read(done: asyncio.Future[Any]) -> None:
    """Whatever a cancelled effect came to is dropped (read, so asyncio reports nothing unretrieved)."""
    if not done.cancelled():
        done.exception()
