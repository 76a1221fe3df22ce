"""The session's transport, seen through: what the streams between a session and its server tell,
and what a transport tells the session's owner.

- **The stream from the server** is read through (``Watched``): its end sets the session's
  ``ended``, so a session whose server died while idle is replaced before the next request
  rather than failing it.
- **The stream to the server** is written through (``Sending``): the id of each ``tools/call``
  request is noted for the call that sent it (``SENT``), and the ids of the tasks its server
  created for it (``TASKS``, ``task_started``), for its ``execute_tool`` span (``annotate``).
- **A transport tells the owner** (from the tasks of the session's owner, where the context
  variables are set): why it ends the session on purpose (``note_fault``: a stdio message over its
  limit), and the time it spends waiting on a person (``waiting_on_a_person``: an OAuth sign-in),
  which the session's opening bound does not count (``OpeningClock``).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import anyio


class Watched:
    """A transport's stream from the server, read through: its end sets ``ended``, so a session whose
    server died while idle is replaced before the next request rather than failing it."""

    def __init__(self, stream: Any, ended: asyncio.Event):
        self._stream = stream
        self._ended = ended

    def __getattr__(self, name: str) -> Any:  # ``last_context`` and the like, as the stream has them
        return getattr(self._stream, name)

    async def receive(self) -> Any:
        try:
            return await self._stream.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
            self._ended.set()
            raise

    def __aiter__(self) -> Watched:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        await self._stream.aclose()

    async def __aenter__(self) -> Watched:
        await self._stream.__aenter__()
        return self

    async def __aexit__(self, *exc: Any) -> Any:
        self._ended.set()
        return await self._stream.__aexit__(*exc)


SENT: contextvars.ContextVar[list[Any] | None] = contextvars.ContextVar("dspy_imp_mcp_sent", default=None)
"""The JSON-RPC ids of the ``tools/call`` requests the current call sent (set by ``_server.Server._send``)."""
TASKS: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar("dspy_imp_mcp_tasks", default=None)
"""The ids of the tasks the current call's server created for it (set by ``_server.Server._send``)."""


def task_started(task_id: str) -> None:
    found = TASKS.get()
    if found is not None:
        found.append(task_id)


class Sending:
    """A transport's stream to the server, written through: the id of each ``tools/call`` request is
    noted for the call that sent it (its ``execute_tool`` span's ``jsonrpc.request.id``)."""

    def __init__(self, stream: Any):
        self._stream = stream

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)

    async def send(self, item: Any) -> None:
        sent = SENT.get()
        if sent is not None:
            message = getattr(item, "message", None)
            request: Any = getattr(message, "root", message)
            identifier = getattr(request, "id", None)
            if getattr(request, "method", None) == "tools/call" and identifier is not None:
                sent.append(identifier)
        await self._stream.send(item)

    async def aclose(self) -> None:
        await self._stream.aclose()

    async def __aenter__(self) -> Sending:
        await self._stream.__aenter__()
        return self

    async def __aexit__(self, *exc: Any) -> Any:
        return await self._stream.__aexit__(*exc)


@asynccontextmanager
async def watched(transport: Any, ended: asyncio.Event) -> AsyncIterator[tuple[Any, Any]]:
    async with transport as (read, write):
        yield Watched(read, ended), Sending(write)


class OpeningClock:
    """The time a session has taken to open, less the time spent waiting on a person (an OAuth
    sign-in in ``authorize``): ``connect_timeout`` bounds the machines, not the person."""

    def __init__(self) -> None:
        self._started = time.monotonic()
        self._waited = 0.0
        self._since: float | None = None
        self._depth = 0

    @property
    def paused(self) -> bool:
        return self._depth > 0

    def elapsed(self) -> float:
        waiting = time.monotonic() - self._since if self._since is not None else 0.0
        return time.monotonic() - self._started - self._waited - waiting

    def pause(self) -> None:
        self._depth += 1
        if self._depth == 1:
            self._since = time.monotonic()

    def resume(self) -> None:
        self._depth -= 1
        if self._depth == 0 and self._since is not None:
            self._waited += time.monotonic() - self._since
            self._since = None


OPENING: contextvars.ContextVar[OpeningClock | None] = contextvars.ContextVar("dspy_imp_mcp_opening", default=None)
FAULT: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar("dspy_imp_mcp_fault", default=None)
"""The opening session's ``_server._Session.fault`` (set by its owner, seen by the transport's tasks)."""


def note_fault(text: str) -> None:
    """Called by a transport (from the tasks of the session's owner) before it ends the session on
    purpose: ``text`` says why (``"wrote a message longer than ..."``), and the calls the end
    fails carry it."""
    found = FAULT.get()
    if found is not None:
        found.append(text)


@contextlib.contextmanager
def waiting_on_a_person() -> Iterator[None]:
    """Stop the opening session's clock while the block runs (a no-op outside a session's tasks)."""
    clock = OPENING.get()
    if clock is None:
        yield
        return
    clock.pause()
    try:
        yield
    finally:
        clock.resume()


def annotate(sent: list[Any], task_ids: list[str] | None = None) -> None:
    """The call's ``execute_tool`` span (current while the tool runs) gets the JSON-RPC id of the
    request that answered it (the last one sent: the SDK may send a call again, e.g. after the
    server asked for input), and the id of the task the server ran it as (``dspy_imp.mcp.task.id``,
    the last one). An in-process server called directly sends no JSON-RPC: no id."""
    if not sent and not task_ids:
        return
    try:
        from opentelemetry import trace
    except ImportError:  # no tracing installed: no span to annotate
        return
    span = trace.get_current_span()
    if sent:
        span.set_attribute("jsonrpc.request.id", str(sent[-1]))
    if task_ids:
        span.set_attribute("dspy_imp.mcp.task.id", task_ids[-1])
