"""A sync generator over an async stream that stops the stream's producer when it is closed.

DSPy's sync ``streamify`` runs the program's async stream in a daemon thread and never tells it
that the consumer stopped; ``dspy_private.install_closing_sync_streams`` puts this generator in
its place. It uses no DSPy API: only the items, errors and closing of a stream.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

_CLOSE_SECONDS = 5.0


def closing_sync_stream(stream: Any) -> Iterator[Any]:
    """The items of an async ``stream`` as a sync generator that, when its consumer closes it, cancels
    the producer's task on its own loop and waits for it, bounded (installed in DSPy's sync streamer by
    ``dspy_private.install_closing_sync_streams``)."""
    import asyncio
    import contextvars
    import queue
    import threading

    items: queue.Queue[tuple[str, Any]] = queue.Queue()
    running: dict[str, Any] = {}
    started = threading.Event()

    async def produce() -> None:
        running["loop"], running["task"] = asyncio.get_running_loop(), asyncio.current_task()
        started.set()
        try:
            async for item in stream:
                items.put(("item", item))
        except BaseException as error:  # the consumer gets the program's error, as DSPy hands it on
            items.put(("error", error))
        finally:
            items.put(("end", None))

    context = contextvars.copy_context()  # the caller's settings and request ids, as DSPy passes them
    producer = threading.Thread(target=context.run, args=(asyncio.run, produce()), daemon=True)
    producer.start()
    try:
        while True:
            kind, value = items.get()
            if kind == "end":
                return
            if kind == "error":
                raise value
            yield value
    except GeneratorExit:
        if producer.is_alive() and started.wait(_CLOSE_SECONDS):
            with contextlib.suppress(RuntimeError):  # its loop already closed: nothing left to stop
                running["loop"].call_soon_threadsafe(running["task"].cancel)
            producer.join(_CLOSE_SECONDS)
        raise


closing_sync_stream.dspy_imp_closing = True  # type: ignore[attr-defined]
