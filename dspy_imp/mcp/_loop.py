"""The MCP layer's own event loop: one daemon thread per process where every session lives.

Why one loop: an MCP session (the ``mcp`` SDK's ``Client``) is bound to the event loop that
opened it, and dspy_imp's callers come from everywhere: a sync ``forward`` (a short-lived loop per
tool call, or none), ``acall`` under ``asyncio.run``, a notebook's running loop, the threads of
``dspy.Evaluate(num_threads=N)``. With every session on this one loop, a server has one session per
process whoever calls it, and a call from any thread or loop is a coroutine submitted here:
``run`` blocks a sync caller on it, ``arun`` awaits it from any loop. Cancelling an ``arun`` (a
tool's time bound, the deadline, Stop) cancels the coroutine here, so the SDK sends the server
``notifications/cancelled``.

At interpreter exit (``atexit``) every open server is closed on this loop (a stdio server's
process ended as the SDK ends it: stdin closed, then its process tree terminated), then the loop
stops. The thread is a daemon: it never holds the process at exit.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import threading
import weakref
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

EXIT_SECONDS = 15.0
"""The longest the exit hook waits for the servers to close (the SDK bounds each stdio shutdown)."""

_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None
_thread: threading.Thread | None = None
_open: weakref.WeakSet[Any] = weakref.WeakSet()


def loop() -> asyncio.AbstractEventLoop:
    """The layer's loop, started on first use."""
    global _loop, _thread
    with _lock:
        if _loop is not None and _thread is not None and _thread.is_alive():
            return _loop
        started = threading.Event()
        new = asyncio.new_event_loop()

        def main() -> None:
            asyncio.set_event_loop(new)
            started.set()
            new.run_forever()

        thread = threading.Thread(target=main, name="dspy_imp.mcp", daemon=True)
        thread.start()
        started.wait()
        if _thread is None:
            atexit.register(_shutdown)
        _loop, _thread = new, thread
        return new


def on_exit(server: Any) -> None:
    """Have ``server.aclose_here()`` awaited on the layer's loop at interpreter exit (held weakly:
    an open server is held by its session's task on the loop anyway)."""
    with _lock:
        _open.add(server)


def submit(coroutine: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
    """``coroutine`` scheduled on the layer's loop."""
    if threading.current_thread() is _thread:
        coroutine.close()
        raise RuntimeError(
            "dspy_imp.mcp: a blocking MCP call from the MCP layer's own loop (an in-process server's handler "
            "calling a sync program?) would wait for itself; call the program with `acall` there"
        )
    return asyncio.run_coroutine_threadsafe(coroutine, loop())


def run(coroutine: Coroutine[Any, Any, T]) -> T:
    """``coroutine`` run on the layer's loop, this thread waiting for it (a sync caller)."""
    return submit(coroutine).result()


async def arun(coroutine: Coroutine[Any, Any, T]) -> T:
    """``coroutine`` run on the layer's loop, awaited from this one; cancelling this cancels it there."""
    if asyncio.get_running_loop() is _loop:
        return await coroutine
    return await asyncio.wrap_future(submit(coroutine))


def _shutdown() -> None:
    running = _loop
    if running is None or _thread is None or not _thread.is_alive():
        return

    async def close_all() -> None:
        await asyncio.gather(*(server.aclose_here() for server in list(_open)), return_exceptions=True)

    try:
        asyncio.run_coroutine_threadsafe(close_all(), running).result(EXIT_SECONDS)
    except (concurrent.futures.TimeoutError, RuntimeError):  # a server that will not close is abandoned
        pass
    finally:
        running.call_soon_threadsafe(running.stop)
