"""Running one tool under a time bound (``RunTool.timeout``): the driver stops waiting for it.

A Python function cannot be stopped from outside. So a sync tool with a bound runs in a daemon
worker thread that carries the caller's context (DSPy settings, callbacks), and the driver stops
waiting when the time is up: the model reads that the call timed out, and the function runs on
until it returns by itself; what it returns then is dropped. An async tool is cancelled
(``asyncio.wait_for``). Under ``acall`` a sync tool runs in such a worker too, so it blocks no
other task and the event loop never waits for it at exit. A bound of ``0`` (the deadline passed
before the call) starts nothing.

A tool with no bound runs as before, in the driver's own thread or task.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import threading
from collections.abc import Awaitable, Callable
from typing import Any

from dspy_imp._records.errors import ToolTimedOut
from dspy_imp._turn.effects import RunTool


def run_bounded(effect: RunTool, run: Callable[[], Any]) -> Any:
    """``run()`` in a worker thread, waited for at most ``effect.timeout`` seconds."""
    timeout = effect.timeout or 0.0
    if timeout <= 0:
        raise _timed_out(effect)
    box: dict[str, Any] = {}
    context, token = contextvars.copy_context(), _event_loop_token()

    def work() -> None:
        _adopt(token)
        try:
            box["value"] = context.run(run)
        except BaseException as exc:  # handed to the driver's thread, which decides
            box["error"] = exc

    worker = threading.Thread(target=work, name=f"dspy_imp tool {effect.tool.name}", daemon=True)
    worker.start()
    worker.join(timeout)
    if worker.is_alive():
        raise _timed_out(effect)
    if "error" in box:
        raise box["error"]
    return box["value"]


async def arun_bounded(
    effect: RunTool, arun: Callable[[], Awaitable[Any]], run: Callable[[], Any], is_async: bool
) -> Any:
    """An async tool awaited (and cancelled) within the bound; a sync one in a worker thread."""
    timeout = effect.timeout or 0.0
    if timeout <= 0:
        raise _timed_out(effect)
    try:
        if is_async:
            return await asyncio.wait_for(arun(), timeout)
        return await asyncio.wait_for(_in_worker(effect, run), timeout)
    except TimeoutError:
        raise _timed_out(effect) from None


def _in_worker(effect: RunTool, run: Callable[[], Any]) -> asyncio.Future[Any]:
    """``run()`` in a daemon thread, as a future of this loop (not the loop's executor, which
    ``asyncio.run`` would wait for at exit)."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Any] = loop.create_future()
    context, token = contextvars.copy_context(), _event_loop_token()

    def settle(value: Any, error: BaseException | None) -> None:
        if future.done():
            return  # the driver stopped waiting
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(value)

    def work() -> None:
        _adopt(token)
        value, error = None, None
        try:
            value = context.run(run)
        except BaseException as exc:
            error = exc
        with contextlib.suppress(RuntimeError):  # the loop has closed: nobody waits for this result
            loop.call_soon_threadsafe(settle, value, error)

    threading.Thread(target=work, name=f"dspy_imp tool {effect.tool.name}", daemon=True).start()
    return future


def _event_loop_token() -> Any:
    """The AnyIO event-loop token of this thread (an AnyIO worker's, or this event loop's), or None.

    Why: DSPy sends a tool's status messages with ``anyio.from_thread.run``, which works only in a
    thread that knows its event loop; a worker the driver starts must carry it, or a streamed turn
    loses the tool's "Calling ..." line. AnyIO keeps it in a private thread-local (4.x).
    """
    try:
        from anyio._core._eventloop import threadlocals
        from anyio.lowlevel import current_token
    except ImportError:  # another AnyIO: the tool runs, its status lines may be lost
        return None
    token = getattr(threadlocals, "current_token", None)
    if token is None:
        try:
            token = current_token()
        except Exception:  # no event loop in this thread
            return None
    return token


def _adopt(token: Any) -> None:
    if token is None:
        return
    from anyio._core._eventloop import threadlocals

    threadlocals.current_token = token


def _timed_out(effect: RunTool) -> ToolTimedOut:
    return ToolTimedOut(effect.tool.name, effect.timeout or 0.0, by_deadline=effect.by_deadline)
