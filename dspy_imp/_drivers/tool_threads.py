"""Sync tools off the caller's thread: one mechanism for every path, public AnyIO only.

Theory of operation. A sync tool that must not block its caller runs in an AnyIO worker thread
(``anyio.to_thread.run_sync(..., abandon_on_cancel=True)``) with the caller's ``contextvars``
(DSPy's settings and callbacks, the deadline, a durable batch's position). Its bound, if it has
one, is a cancel scope around that wait whose deadline the worker thread sets when it starts the
call (``anyio.from_thread.run_sync``): a call waiting for a thread (one of a batch, or a thread
slow to start on a busy machine) is not running yet, and always starts before its bound counts;
a bound read then as none left starts nothing (``Overran``). When the bound passes, the driver
stops waiting (``Overran``): the function runs on until it returns by itself, and AnyIO drops
what it returns then (the abandoned call's future is cancelled). Because the thread is AnyIO's,
DSPy's status lines for the tool, sent with ``anyio.from_thread.run``, reach a ``dspy.streamify``
stream, and ``asyncio.run`` does not wait for it at exit (it waits only for the loop's default
executor).

``arun`` is the core, awaited by the async driver for every sync tool (single or parallel, bounded
or not): no sync tool runs on the event loop's thread. The sync driver reaches the same core
through ``call``: from an AnyIO worker (a sync program under ``dspy.streamify`` or the web page's
``--sync``) with ``anyio.from_thread.run``, on the stream's own loop; from a plain thread through
a blocking portal (``anyio.from_thread.start_blocking_portal``), a short-lived loop of its own.

What it costs: AnyIO's workers are not daemon threads, so a Python process whose abandoned tool
never returns waits for it when the interpreter exits (not when ``asyncio.run`` returns).
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import anyio
import anyio.from_thread
import anyio.to_thread

MAX_TOOL_THREADS = 8
"""Tools of one parallel batch that run at once in worker threads."""

T = TypeVar("T")


class Overran(Exception):
    """The bound passed before the tool returned: the driver stopped waiting (not the tool's own
    ``TimeoutError``, which is its failure like any other)."""


Bound = float | Callable[[], float | None] | None
"""Seconds a call may run, or a function the worker calls when it starts the call to read them
(the time left then); ``None``: unbounded."""


async def arun(work: Callable[[], T], bound: Bound = None, limiter: anyio.CapacityLimiter | None = None) -> T:
    """``work()`` in an AnyIO worker thread with this context; ``Overran`` after ``bound`` seconds.

    ``bound`` counts from when the worker thread starts the call (a batch's call waiting for a free
    thread, or a thread slow to start, is not running yet).
    """
    context = contextvars.copy_context()
    scope = anyio.CancelScope()

    def started() -> T:  # in the worker thread
        seconds = bound() if callable(bound) else bound
        if seconds is not None:
            if seconds <= 0:
                raise Overran
            anyio.from_thread.run_sync(_end_after, scope, seconds)
        return work()

    async with limiter or contextlib.nullcontext():  # acquired first: the bound is the tool's own time
        with scope:
            return await anyio.to_thread.run_sync(context.run, started, abandon_on_cancel=True)
    raise Overran  # the bound cancelled the wait; AnyIO drops what the worker returns later


def _end_after(scope: anyio.CancelScope, seconds: float) -> None:
    scope.deadline = anyio.current_time() + seconds


def run(work: Callable[[], T], bound: Bound = None) -> T:
    """``arun`` from sync code with this thread's context: on the AnyIO loop this thread works for
    when it has one, else on a portal's."""
    return call(arun, functools.partial(contextvars.copy_context().run, work), bound)


def call(function: Callable[..., Coroutine[Any, Any, T]], *args: Any) -> T:
    """``function(*args)`` awaited from sync code: on the event loop of the AnyIO worker this thread
    is (so status lines reach its stream), else on a blocking portal's loop started for it."""
    if in_anyio_worker():
        return anyio.from_thread.run(function, *args)
    with anyio.from_thread.start_blocking_portal() as portal:
        return portal.call(function, *args)


def in_anyio_worker() -> bool:
    """Whether this thread is an AnyIO worker thread (``anyio.from_thread`` works without a token)."""
    try:
        anyio.from_thread.check_cancelled()
    except RuntimeError:  # not an AnyIO worker thread
        return False
    return True
