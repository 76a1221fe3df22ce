"""Running tools for the drivers: one call (``RunTool``), bounded or not, and a parallel batch (``RunTools``).

A sync tool runs where ``tool_threads`` puts it: under ``acall`` always in a worker thread (never on
the event loop's thread); in a sync call in the driver's own thread, or in a worker when it has a
bound (``RunTool.timeout``) the driver must be able to stop waiting for. An async tool is awaited,
and cancelled and left behind when its bound passes (``_awaited``: the driver never waits for a
tool that swallows its cancellation, and drops the late result of one that blocked the loop). A
bound of ``0`` (the deadline passed before the call) starts nothing. A bound that passes is
``ToolTimedOut``, the call's observation.

An async tool that runs on any event loop (``any_loop``: an MCP server's tool, whose request is
sent on the MCP layer's own loop) runs in a sync turn too: awaited on a short-lived loop (the
stream's, under ``dspy.streamify``) exactly as under ``acall``, so its bound cancels it (and the
cancellation reaches the server) instead of leaving a thread behind.

A batch runs its calls at once, each through the driver's ``perform``/``aperform`` (so a watcher
and the durable driver see each call): asyncio tasks under ``acall``, worker threads (at most
``MAX_TOOL_THREADS`` at once) in a sync call; each run sees the caller's DSPy context, and each
failure is that call's own ``Raised``.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import copy
import functools
import inspect
import threading
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import CancelledError
from dataclasses import replace
from typing import Any

import anyio
import dspy

from dspy_imp._drivers import guard_books, tool_threads
from dspy_imp._drivers.interrupts import tool_failure
from dspy_imp._drivers.job import Job
from dspy_imp._records.errors import ToolTimedOut
from dspy_imp._records.outcomes import Raised, Returned
from dspy_imp._records.steps import now_iso
from dspy_imp._records.usage import RequestUsage
from dspy_imp._turn.arguments import check_arguments, unchecked
from dspy_imp._turn.effects import CheckArguments, RunTool, RunTools, carried
from dspy_imp._turn.limits import bound_at_start


def check_job(effect: CheckArguments) -> Job:
    """A call's arguments checked against an untrusted schema in a worker thread (under ``acall``
    never on the event loop; in a sync call too, so the bound can stop the wait), for at most
    ``effect.bound`` seconds. Overrunning it, or failing, is a rejection naming the tool; the
    worker is left to finish by itself, as a timed-out tool's."""
    work = functools.partial(check_arguments, effect.tool, effect.args)

    def overran() -> Any:
        return unchecked(effect.tool, f"not within {effect.bound:g} s")

    def run() -> Any:
        try:
            return tool_threads.run(work, effect.bound)
        except tool_threads.Overran:
            return overran()

    async def arun() -> Any:
        try:
            return await tool_threads.arun(work, effect.bound)
        except tool_threads.Overran:
            return overran()

    def failed(error: Exception) -> Any:
        return unchecked(effect.tool, f"{type(error).__name__}: {error}")

    return Job(run, arun, lambda verdict: verdict, failed)


def tool_job(effect: RunTool) -> Job:
    """One call's I/O: the tool run sync or async, within its bound, its value or error recorded."""
    tool, args = effect.tool, effect.args

    def run() -> Any:
        if any_loop(tool):
            _check_time_left(_started(effect))
            return tool_threads.call(_awaited, _started(effect))
        if _async_only(tool):
            raise RuntimeError(f"{tool.name} is async and this turn runs sync")
        return tool(**args)

    started = [effect]  # the call as its bound stood when it started (read in the worker thread)

    def bound() -> float | None:
        started[0] = _started(effect)
        return started[0].timeout

    def bounded() -> Any:
        _check_time_left(_started(effect))
        try:
            return tool_threads.run(run, bound)
        except tool_threads.Overran:
            raise _timed_out(started[0]) from None

    async def arun() -> Any:
        _check_time_left(_started(effect))
        if async_tool(tool):
            return await _awaited(_started(effect))
        try:
            return await _off_the_loop(tool, bound if effect.timeout is not None else None).acall(**args)
        except tool_threads.Overran:
            raise _timed_out(started[0]) from None

    job = Job(
        run if effect.timeout is None or any_loop(tool) else bounded,
        arun,
        lambda value: Returned(value, now_iso()),
        lambda error: Raised(error, now_iso()),
        catches=tool_failure,
    )
    return _counting(job, effect) if carried(tool, "counts_model_calls", False) else job


def _counting(job: Job, effect: RunTool) -> Job:
    """``job`` for a tool whose server may ask the turn's model (MCP sampling): the model calls made
    during it pass the gate of the turn's limits, and its outcome carries their usage to the meter."""
    gates: list[guard_books.Gate] = []

    @contextlib.contextmanager
    def scope() -> Iterator[None]:
        with guard_books.tool_books(effect.budget) as gate:
            gates.append(gate)
            yield

    def used() -> tuple[RequestUsage, ...]:
        return tuple(gates[-1].calls) if gates else ()

    return replace(
        job,
        done=lambda value: Returned(value, now_iso(), used()),
        failed=lambda error: Raised(error, now_iso(), used()),
        scope=scope,
    )


def run_batch(effect: RunTools, perform: Callable[[RunTool], Any], check: Callable[[], None]) -> tuple[Any, ...]:
    """The sync driver's batch: each call through ``perform`` in a worker thread, at most
    ``MAX_TOOL_THREADS`` at once, on the loop of the stream this turn feeds when there is one (so
    DSPy's status lines reach it), else on a portal's. ``check`` raises ``StreamClosed``."""
    contexts = [contextvars.copy_context() for _ in effect.runs]
    outcomes: list[Any] = [None] * len(effect.runs)
    running: dict[int, threading.Event] = {}

    def work(index: int) -> None:  # kept by the thread: a consumer that closes the stream ends the loop
        running[index] = threading.Event()
        try:
            outcomes[index] = contexts[index].run(perform, effect.runs[index])
        finally:
            running[index].set()

    async def every() -> None:
        limiter = anyio.CapacityLimiter(tool_threads.MAX_TOOL_THREADS)
        async with anyio.create_task_group() as group:
            for index in range(len(effect.runs)):
                group.start_soon(tool_threads.arun, functools.partial(work, index), None, limiter)

    try:
        tool_threads.call(every)
    except (CancelledError, asyncio.CancelledError):  # the stream's loop ended: its consumer closed it
        for done in list(running.values()):
            done.wait()  # the calls already running finish and are recorded
        if any(outcome is None for outcome in outcomes):
            check()  # ``StreamClosed``
            raise
    return tuple(outcomes)  # when the stream was closed meanwhile, the next effect stops the turn


async def arun_batch(effect: RunTools, aperform: Callable[[RunTool], Awaitable[Any]]) -> tuple[Any, ...]:
    """The async driver's batch: each call a task through ``aperform`` (a sync tool in its worker)."""
    return tuple(await asyncio.gather(*(aperform(run) for run in effect.runs)))


async def _awaited(effect: RunTool) -> Any:
    """An async tool, awaited within its bound; past it, cancelled and left behind.

    The driver stops waiting at the bound whatever the tool does: one that swallows the
    cancellation runs on as an abandoned task, and what it returns later is dropped. One that
    blocks the event loop (a sync call inside ``async def``) cannot be interrupted: nothing on the
    loop runs until it yields, the driver included; when it comes back past its bound, its result
    is dropped all the same and the call reads as timed out.
    """
    if effect.timeout is None:
        return await effect.tool.acall(**effect.args)
    loop = asyncio.get_running_loop()
    start = loop.time()
    task = asyncio.ensure_future(effect.tool.acall(**effect.args))
    try:
        done, _ = await asyncio.wait({task}, timeout=effect.timeout)
    except BaseException:  # the caller's own cancellation: the tool's too
        task.cancel()
        raise
    if not done or loop.time() - start > effect.timeout:
        _abandon(task)
        raise _timed_out(effect)
    return task.result()


def _abandon(task: asyncio.Future[Any]) -> None:
    """Cancel ``task`` without waiting for it; whatever it comes to is dropped (and read, so that
    asyncio never reports an error nobody retrieved)."""
    task.cancel()
    task.add_done_callback(lambda done: done.cancelled() or done.exception())


def _off_the_loop(tool: dspy.Tool, bound: tool_threads.Bound) -> dspy.Tool:
    """A copy of the sync ``tool`` whose function runs in a worker thread (``tool_threads.arun``),
    awaited through DSPy's ``acall`` as any tool under ``acall`` is (its callbacks, tracers' spans)."""
    function, moved = tool.func, copy.copy(tool)

    async def in_worker(**kwargs: Any) -> Any:
        return await tool_threads.arun(functools.partial(function, **kwargs), bound)

    moved.func = in_worker
    return moved


def async_tool(tool: dspy.Tool) -> bool:
    function = tool.func if inspect.isfunction(tool.func) else getattr(tool.func, "__call__", None)  # noqa: B004
    return inspect.iscoroutinefunction(function)


def any_loop(tool: dspy.Tool) -> bool:
    """An async tool that may be awaited on any event loop, a sync turn's short-lived one too."""
    return carried(tool, "any_loop", False) is True and async_tool(tool)


def _async_only(tool: dspy.Tool) -> bool:
    """An async tool in a sync turn (DSPy would create its coroutine and never await it)."""
    return async_tool(tool) and not dspy.settings.allow_tool_async_sync_conversion


def _started(effect: RunTool) -> RunTool:
    """The call with its bound as it stands now that it starts (``limits.bound_at_start``)."""
    timeout, by_deadline = bound_at_start(effect.timeout, effect.by_deadline)
    return replace(effect, timeout=timeout, by_deadline=by_deadline)


def _check_time_left(effect: RunTool) -> None:
    if effect.timeout is not None and effect.timeout <= 0:
        raise _timed_out(effect)


def _timed_out(effect: RunTool) -> ToolTimedOut:
    return ToolTimedOut(effect.tool.name, effect.timeout or 0.0, by_deadline=effect.by_deadline)
