"""A guardrail's model calls on the turn's books: counted, and bounded by its limits and deadline.

A guardrail that is a ``dspy.Module`` (or a function that calls an LM) makes its own requests, not
the loop's: the machine never sees them. While a driver runs the guardrails, every LM call made in
that scope (``books``) passes a *gate* installed once on ``dspy.BaseLM.__call__``/``acall``:

- before it leaves: not once the deadline has passed or a usage limit is reached (the check's
  ``budget``, less what this check's calls used so far): the call raises ``GuardrailStopped`` and
  the check answers ``Checked(stopped=cause)``, whatever the guardrail makes of that error;
- under a deadline it waits at most the time left (the loop's ladder and native-engine bound,
  ``_routes.timeouts``) and DSPy's own retries are off, as for the loop's requests;
- its history entry is read (``recorder``, under ``disable_history`` too) into a ``RequestUsage``
  of kind ``"guardrail"``, which the check's answer carries to the machine's meter.

In the web app, such a call also holds one of the app's ``model_requests`` slots while it runs
(``slotted``, set by the driver around a guardrail check and a tool call), so the app's bound on
model requests in flight counts every request the process sends, and a call that waits for a slot is
seen waiting like the loop's own requests. It waits for the slot before the gate checks its limits
and deadline.

Outside a gate's scope an LM call is untouched. A call made inside another LM's call (an LM that
wraps another) is counted once, as the outer call. An LM class that overrides ``__call__`` itself
is not seen.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager
from contextvars import ContextVar
from typing import Any

import dspy

from dspy_imp._drivers.recorder import Recorder, history_disabled, measured, quiet, recording, unretried
from dspy_imp._records import clock
from dspy_imp._records.kinds import TerminationCause, UsageKind
from dspy_imp._records.scoped import scoped
from dspy_imp._records.usage import RequestUsage, UsageLimits
from dspy_imp._routes.dspy_private import adapter_call_to, request_seconds, wrap_once
from dspy_imp._routes.route import route_for
from dspy_imp._routes.timeouts import native_seconds
from dspy_imp._turn.meter import Meter


class GuardrailStopped(Exception):
    """A guardrail's model call was not sent: the turn's deadline passed or a usage limit was reached."""

    def __init__(self, cause: TerminationCause):
        super().__init__(f"a guardrail's model call was not sent ({cause})")
        self.cause: TerminationCause = cause


class Gate:
    """One guardrail check's model calls: what they used, and whether one was stopped."""

    def __init__(self, budget: UsageLimits | None, kind: UsageKind = "guardrail"):
        self.limits = budget
        self.kind: UsageKind = kind
        self.calls: list[RequestUsage] = []
        self.stopped: TerminationCause | None = None
        self.timeout: float | None = None  # on the deadline's ladder (``clock.rung``)
        self._lock = threading.Lock()  # a guardrail may call its LM from several threads

    def before(self, lm: Any, kwargs: dict[str, Any]) -> tuple[int, Any, dict[str, Any], float | None]:
        """The call's slot in ``calls``, the LM and options to send it with, and its native
        read/write bound; or ``GuardrailStopped`` when it may not leave."""
        with self._lock:
            meter = Meter(self.limits)
            meter.add(self.calls)
            cause: TerminationCause | None = "deadline_exceeded" if clock.passed() else None
            if cause is None and meter.reached():
                cause = "usage_limit_exceeded"
            if cause is not None:
                self.stopped = cause
                raise GuardrailStopped(cause)
            self.calls.append(RequestUsage(self.kind))  # counted as it leaves: a concurrent call sees it
            slot = len(self.calls) - 1
        options, sender, seconds = dict(kwargs), lm, None
        left = clock.time_left()
        if left is not None:
            options["timeout"] = self.timeout = clock.rung(left, self.timeout)
            seconds = native_seconds(lm, route_for(lm, options), options)
            if not isinstance(getattr(lm, "_engine_spec", "auto"), str):
                options.pop("timeout", None)  # a custom engine owns its connection and timeouts
            if getattr(lm, "num_retries", None):
                sender = unretried(lm)  # DSPy's retries would sleep past the deadline
        if history_disabled():
            sender = quiet(sender)
        return slot, sender, options, seconds

    def after(self, slot: int, recorder: Recorder) -> None:
        """The call in ``slot`` as the LM reported it (zeros when it reported nothing)."""
        (reading,) = measured(self.kind, recorder.history[:1], 0)
        with self._lock:
            self.calls[slot] = reading


_GATE: ContextVar[Gate | None] = ContextVar("dspy_imp_guardrail_gate", default=None)
Slot = Callable[[], AbstractAsyncContextManager[None]]
Held = tuple[Slot, asyncio.AbstractEventLoop | None]
_SLOT: ContextVar[Held | None] = ContextVar("dspy_imp_model_slot", default=None)


@contextlib.contextmanager
def slotted(slot: Slot, loop: asyncio.AbstractEventLoop | None) -> Iterator[None]:
    """A gated LM call made in this block holds one ``slot()`` while it runs; ``slot`` belongs to
    ``loop`` (the web app's), which a call made in a worker thread or on another loop waits on."""
    with scoped(_SLOT, (slot, loop)):
        yield


def _running() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


@contextlib.contextmanager
def _held() -> Iterator[None]:
    """A sync call's slot, taken on the slot's loop from this thread (never on that loop's own
    thread, which would wait on itself: such a call is not bounded)."""
    held = _SLOT.get()
    loop = held[1] if held is not None else None
    if held is None or loop is None or loop.is_closed() or _running() is loop:
        yield
        return
    manager = held[0]()
    asyncio.run_coroutine_threadsafe(manager.__aenter__(), loop).result()
    try:
        yield
    finally:
        asyncio.run_coroutine_threadsafe(manager.__aexit__(None, None, None), loop).result()


@contextlib.asynccontextmanager
async def _aheld() -> AsyncIterator[None]:
    """An async call's slot: on this loop when it is the slot's, else awaited on the slot's loop."""
    held = _SLOT.get()
    if held is None:
        yield
        return
    slot, loop = held
    if loop is None or loop is _running():
        async with slot():
            yield
        return
    if loop.is_closed():
        yield
        return
    manager = slot()
    await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(manager.__aenter__(), loop))
    try:
        yield
    finally:
        await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(manager.__aexit__(None, None, None), loop))


@contextlib.contextmanager
def books(budget: UsageLimits | None) -> Iterator[Gate]:
    """The LM calls made in this block (a guardrail check) pass one gate, which this yields.

    Under ``dspy.streamify`` the block streams nothing: a guardrail's replies are not the turn's
    answer, and a module run off the event loop (``asyncio.to_thread``) could not reach the stream.
    """
    install()
    gate = Gate(budget)
    with scoped(_GATE, gate), dspy.context(send_stream=None):
        yield gate


@contextlib.contextmanager
def tool_books(budget: UsageLimits | None) -> Iterator[Gate]:
    """The gate of the model calls made for the turn during one tool call (an MCP server's sampling
    requests, answered in the call's context: ``dspy_imp.mcp``), counted as ``"sampling"``. Unlike
    ``books`` the call's stream stays: its progress lines are the turn's."""
    install()
    gate = Gate(budget, "sampling")
    with scoped(_GATE, gate):
        yield gate


def install() -> None:
    """Put the gate on ``dspy.BaseLM``'s two entry points (once per process)."""
    wrap_once(dspy.BaseLM, "__call__", _gated)
    wrap_once(dspy.BaseLM, "acall", _agated)


@contextlib.contextmanager
def _sending(gate: Gate, lm: Any, kwargs: dict[str, Any]) -> Iterator[tuple[Any, dict[str, Any]]]:
    slot, sender, options, seconds = gate.before(lm, kwargs)
    recorder = Recorder()
    try:
        with scoped(_GATE, None), recording(recorder), request_seconds(seconds), adapter_call_to(lm, sender):
            yield sender, options
    finally:
        gate.after(slot, recorder)


def _gated(call: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(call)
    def __call__(lm: Any, *args: Any, **kwargs: Any) -> Any:
        gate = _GATE.get()
        if gate is None:
            return call(lm, *args, **kwargs)
        with _held(), _sending(gate, lm, kwargs) as (sender, options):
            return call(sender, *args, **options)

    return __call__


def _agated(call: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(call)
    async def acall(lm: Any, *args: Any, **kwargs: Any) -> Any:
        gate = _GATE.get()
        if gate is None:
            return await call(lm, *args, **kwargs)
        async with _aheld():
            with _sending(gate, lm, kwargs) as (sender, options):
                return await call(sender, *args, **options)

    return acall
