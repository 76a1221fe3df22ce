"""The two drivers: they perform the machine's effects, sync or async, and decide nothing.

``drive``/``adrive`` run a ``Turn.run()`` generator to its end. ``Effects`` knows how to
send one request through the program's inner predictor (so traces, callbacks and usage
work as for any DSPy predictor), run one tool or several at once, report a call that ran no
tool to DSPy's tool callbacks (``tracing``), or ask the extractor. Each request's answer
carries the usage DSPy recorded for its model calls (``_records.usage``).

``RunTools`` runs its calls concurrently: asyncio tasks under ``adrive`` (a sync tool in a
worker thread), a bounded thread pool under ``drive``; each run sees the caller's DSPy
context, and each failure is that call's own ``Raised``.

The request boundary catches ``Exception``: whatever the LM client or the adapter raised is
the failed request's error, passed unchanged to the machine (which ends the turn with a
``StepError`` carrying it, or makes the last request the reference prescribes). The tool
boundary catches ``Exception`` too: a raising tool is an observation.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import copy
import inspect
import threading
import time
from collections.abc import Awaitable, Callable, Generator, Iterator
from concurrent.futures import CancelledError, ThreadPoolExecutor
from contextlib import AbstractContextManager
from dataclasses import dataclass, replace
from typing import Any

import anyio
import dspy

from dspy_imp._drivers import guarding
from dspy_imp._drivers.adapter import Exchange, ReActAdapter, current_exchange, finish_reason_of
from dspy_imp._drivers.bounded import arun_bounded, run_bounded
from dspy_imp._drivers.child import ChildCall, calling, ended, raised
from dspy_imp._drivers.finetune import attach
from dspy_imp._drivers.finetune import install as install_finetune_data
from dspy_imp._drivers.interrupts import tool_failure
from dspy_imp._drivers.measure import ameasure, measure
from dspy_imp._drivers.predicted import reply_from_prediction
from dspy_imp._drivers.recorder import Recorder, history_disabled, measured, quiet, recording
from dspy_imp._prompt.guidance import tool_listing
from dspy_imp._prompt.render import transcript
from dspy_imp._prompt.signature import make_extraction_signature
from dspy_imp._records.clock import check_before_send
from dspy_imp._records.outcomes import Extracted, Failed, Raised, Reply, Returned
from dspy_imp._records.steps import now_iso
from dspy_imp._routes.chat_extras import install as install_chat_extras
from dspy_imp._routes.failures import ContentFiltered, refused_call
from dspy_imp._routes.nameless import install as install_nameless_reader
from dspy_imp._routes.responses_bridge import install as install_responses_bridge
from dspy_imp._routes.warmup import warm_litellm
from dspy_imp._turn.effects import (
    Alongside,
    CheckGuardrails,
    DecidedCall,
    Extraction,
    Measure,
    ModelRequest,
    RunAgent,
    RunTool,
    RunTools,
    Sleep,
    Summarize,
)
from dspy_imp._turn.plan import Program
from dspy_imp._watch import tracing
from dspy_imp._watch.streaming import Watch

MAX_TOOL_THREADS = 8


"""The sync driver's bound on tools running at once for one ``RunTools``."""


def drive(turn: Generator[Any, Any, Any], effects: Effects) -> Any:
    sent: Any = None
    while True:
        try:
            effect = turn.send(sent)
        except StopIteration as stop:
            return effects.ended(stop.value)
        sent = effects.perform(effect)


async def adrive(turn: Generator[Any, Any, Any], effects: Effects) -> Any:
    sent: Any = None
    while True:
        try:
            effect = turn.send(sent)
        except StopIteration as stop:
            return await effects.aended(stop.value)
        sent = await effects.aperform(effect)


@dataclass
class _Job:
    """One effect's I/O, sync and async, and what to send back to the machine."""

    run: Callable[[], Any]
    arun: Callable[[], Awaitable[Any]]
    done: Callable[[Any], Any]
    failed: Callable[[Exception], Any]
    scope: Callable[[], AbstractContextManager[Any]] = contextlib.nullcontext
    exchange: Exchange | None = None
    catches: Callable[[BaseException], bool] = lambda error: isinstance(error, Exception)
    """Which errors of ``run`` are its failure; a tool's may be ``BaseException``s (``interrupts``)."""


class Effects:
    """Performs effects for one program; ``perform`` and ``aperform`` differ only in awaiting.

    Under ``dspy.streamify`` or live progress, a ``Watch`` (``_watch.streaming``) sees each effect
    before and after it is performed, and the outcome of the turn; it decides nothing.
    """

    def __init__(self, program: Program):
        self.program = program
        self.watch = Watch.of(program)
        install_chat_extras()
        install_responses_bridge()
        install_nameless_reader(lambda: current_exchange().get() is not None)
        install_finetune_data()

    def perform(self, effect: Any) -> Any:
        if self.watch is not None:
            self.watch.check()  # a closed stream stops the turn here (``StreamClosed``)
        if isinstance(effect, RunTools):
            return self._run_tools(effect)
        if isinstance(effect, Alongside):
            return self._alongside(effect)
        job = self._job(effect)
        watch = self.watch
        if watch is None or isinstance(effect, Measure):  # counting tokens is nothing to watch
            return self._outcome(job)
        watch.send(watch.before(effect))
        with watch.relaying(effect, job.exchange) as relay:
            outcome = self._outcome(job)
        watch.send([*(relay.close(outcome) if relay else ()), *watch.after(effect, outcome)])
        return outcome

    async def aperform(self, effect: Any) -> Any:
        if self.watch is not None:
            self.watch.check()
        if isinstance(effect, RunTools):
            return tuple(await asyncio.gather(*(self._arun_tool(run) for run in effect.runs)))
        if isinstance(effect, Alongside):  # both inside this effect (one durable step): not self.aperform
            check = self._aoutcome(self._job(effect.check))
            outcome, answer = await asyncio.gather(Effects.aperform(self, effect.request), check)
            if self.watch is not None:
                await self.watch.asend(self.watch.after(effect.check, answer))
            return outcome, answer
        job = self._job(effect)
        watch = self.watch
        if watch is None or isinstance(effect, Measure):
            return await self._aoutcome(job)
        await watch.asend(watch.before(effect))
        with watch.relaying(effect, job.exchange) as relay:
            outcome = await self._aoutcome(job)
        await watch.asend([*(relay.close(outcome) if relay else ()), *watch.after(effect, outcome)])
        return outcome

    def ended(self, outcome: Any) -> Any:
        if self.watch is not None:
            self.watch.send(self.watch.ended(outcome))
            self.watch.flush(outcome)
            self.watch.close()
        return outcome

    async def aended(self, outcome: Any) -> Any:
        if self.watch is not None:
            await self.watch.asend(self.watch.ended(outcome))
            await self.watch.aflush(outcome)
            self.watch.close()
        return outcome

    @staticmethod
    def _outcome(job: _Job) -> Any:
        with job.scope():
            try:
                value = job.run()
            except BaseException as exc:
                if not job.catches(exc):
                    raise
                return job.failed(exc)  # type: ignore[arg-type]
        return job.done(value)

    @staticmethod
    async def _aoutcome(job: _Job) -> Any:
        with job.scope():
            try:
                value = await job.arun()
            except BaseException as exc:
                if not job.catches(exc):
                    raise
                return job.failed(exc)  # type: ignore[arg-type]
        return job.done(value)

    def _run_tools(self, effect: RunTools) -> tuple[Any, ...]:
        if self.watch is not None and self.watch.stream is not None and _in_anyio_worker():
            return self._run_tools_in_anyio_workers(effect)
        with ThreadPoolExecutor(max_workers=min(len(effect.runs), MAX_TOOL_THREADS)) as pool:
            futures = [pool.submit(contextvars.copy_context().run, self.perform, run) for run in effect.runs]
            return tuple(future.result() for future in futures)

    def _run_tools_in_anyio_workers(self, effect: RunTools) -> tuple[Any, ...]:
        """Under ``dspy.streamify`` (a sync program runs in an AnyIO worker thread): the tools in
        AnyIO worker threads too, bounded as the pool is, so DSPy's status lines for them, sent with
        ``anyio.from_thread.run``, reach the stream (from a plain thread they are dropped)."""
        contexts = [contextvars.copy_context() for _ in effect.runs]
        outcomes: list[Any] = [None] * len(effect.runs)

        running: dict[int, threading.Event] = {}

        def work(index: int) -> None:  # kept by the thread: a consumer that closes the stream ends the loop
            running[index] = threading.Event()
            try:
                outcomes[index] = contexts[index].run(self.perform, effect.runs[index])
            finally:
                running[index].set()

        async def one(index: int, limiter: anyio.CapacityLimiter) -> None:
            await anyio.to_thread.run_sync(work, index, limiter=limiter)

        async def every() -> None:
            limiter = anyio.CapacityLimiter(MAX_TOOL_THREADS)
            async with anyio.create_task_group() as group:
                for index in range(len(effect.runs)):
                    group.start_soon(one, index, limiter)

        try:
            anyio.from_thread.run(every)
        except (CancelledError, asyncio.CancelledError):  # the stream's loop ended: its consumer closed it
            for done in list(running.values()):
                done.wait()  # the calls already running finish and are recorded
            if any(outcome is None for outcome in outcomes):
                if self.watch is not None:
                    self.watch.check()  # ``StreamClosed``
                raise
        return tuple(outcomes)  # when the stream was closed meanwhile, the next effect stops the turn

    async def _arun_tool(self, run: RunTool) -> Any:
        if _async_tool(run.tool):
            return await self.aperform(run)
        # A sync tool would block the other tasks: an AnyIO worker thread, from which DSPy's status
        # lines reach a stream (``asyncio.to_thread``'s threads cannot send them).
        context = contextvars.copy_context()
        return await anyio.to_thread.run_sync(context.run, self.perform, run, abandon_on_cancel=True)

    def _alongside(self, effect: Alongside) -> tuple[Any, Any]:
        """The first request here, the input guardrails in a worker thread with this context (both
        inside this one effect, so one durable step: not through ``self.perform``)."""
        box: dict[str, Any] = {}
        context = contextvars.copy_context()
        job = self._job(effect.check)
        worker = threading.Thread(target=lambda: box.update(answer=context.run(Effects._outcome, job)))
        worker.start()
        outcome = Effects.perform(self, effect.request)
        worker.join()
        if self.watch is not None:
            self.watch.send(self.watch.after(effect.check, box.get("answer")))
        return outcome, box.get("answer")

    def child(self, program: Program) -> Effects:
        """The driver of a sub-agent's turn: the same kind as this one (``_drivers.child``)."""
        return Effects(program)

    def _agent_job(self, effect: RunAgent) -> _Job:
        """A sub-agent's turn, run through its tool (so tracers nest it under the tool's span)."""
        tool, args = effect.tool, effect.args

        def call(asynchronous: bool) -> ChildCall:
            program = getattr(tool, "program", None)
            return ChildCall(program, effect.history, effect.decisions, effect.budget, self.child, asynchronous)

        def run() -> Any:
            with calling(call(False)):
                return tool(**args)

        async def arun() -> Any:
            with calling(call(True)):
                return await tool.acall(**args)

        return _Job(run, arun, lambda value: ended(value, now_iso()), lambda error: raised(error, now_iso()))

    def _job(self, effect: Any) -> _Job:
        if isinstance(effect, RunAgent):
            return self._agent_job(effect)
        if isinstance(effect, RunTool):
            return self._tool_job(effect)
        if isinstance(effect, CheckGuardrails):
            return _Job(lambda: guarding.check(effect), lambda: guarding.acheck(effect), _same, _reraise)
        if isinstance(effect, DecidedCall):
            renderer = self.program.options.tool_result_renderer
            report, areport = tracing.report, tracing.areport
            return _Job(lambda: report(effect, renderer), lambda: areport(effect, renderer), _nothing, _reraise)
        if isinstance(effect, Sleep):
            return _Job(lambda: time.sleep(effect.seconds), lambda: asyncio.sleep(effect.seconds), _nothing, _reraise)
        if isinstance(effect, Measure):
            return _Job(lambda: measure(self.program, effect), lambda: ameasure(self.program, effect), _same, _reraise)
        if isinstance(effect, ModelRequest):
            return self._step_job(effect)
        predictor, kwargs = self._extraction_call(effect)
        recorder = Recorder()

        def scope() -> AbstractContextManager[Any]:
            stack = contextlib.ExitStack()
            stack.enter_context(recording(recorder))
            stack.enter_context(dspy.context(adapter=_extraction_adapter()))
            return stack

        def usage() -> Any:
            return measured("extraction", recorder.history, 0)

        return _Job(
            lambda: predictor(**kwargs),
            lambda: predictor.acall(**kwargs),
            lambda prediction: _filtered(recorder, usage) or replace(_extracted(prediction), usage=usage()),
            lambda error: _filtered(recorder, usage) or Failed(error, usage()),
            scope,
        )

    @staticmethod
    def _tool_job(effect: RunTool) -> _Job:
        tool, args = effect.tool, effect.args

        def run() -> Any:
            return _run_sync(tool, args)

        def arun() -> Awaitable[Any]:
            return tool.acall(**args)

        if effect.timeout is not None:  # bounded: a worker the driver stops waiting for (``bounded``)
            return _Job(
                lambda: run_bounded(effect, run),
                lambda: arun_bounded(effect, arun, run, _async_tool(tool)),
                lambda value: Returned(value, now_iso()),
                lambda error: Raised(error, now_iso()),
                catches=tool_failure,
            )
        return _Job(
            run,
            arun,
            lambda value: Returned(value, now_iso()),
            lambda error: Raised(error, now_iso()),
            catches=tool_failure,
        )

    def _step_job(self, effect: ModelRequest) -> _Job:
        kwargs, exchange = self._step_call(effect)
        react, recorder = self.program.react, Recorder()
        if isinstance(effect, Summarize):  # the program's system message and demos, its own instruction
            react = self.program.summary_predictor()
            exchange.instructions, exchange.demos = self.program.react.signature.instructions, self.program.react.demos

        def scope() -> AbstractContextManager[Any]:
            stack = contextlib.ExitStack()
            stack.enter_context(_exchanging(exchange))
            stack.enter_context(recording(recorder))
            stack.enter_context(dspy.context(adapter=_step_adapter(effect.fallback)))
            return stack

        def usage() -> Any:
            return measured(effect.guidance.kind, recorder.history, exchange.fallbacks)

        return _Job(
            lambda: react(**kwargs),
            lambda: react.acall(**kwargs),
            lambda prediction: replace(_reply(exchange, prediction), usage=usage()),
            lambda error: _refused_step(error, usage) or Failed(error, usage()),
            scope,
            exchange,
        )

    def _step_call(self, effect: ModelRequest) -> tuple[dict[str, Any], Exchange]:
        """The step predictor's inputs, and the request's options and LM on the exchange.

        The options and a pinned LM travel on the exchange (the adapter applies them), not as
        ``config=``/``lm=`` arguments: tracers record a predictor's arguments as its inputs.
        """
        kwargs: dict[str, Any] = dict(effect.pending)
        kwargs.update(history=effect.guidance.history, tools=tool_listing(effect.guidance.roster))
        config, lm = self._pin_lm(dict(effect.config), effect.no_retries, effect.model)
        exchange = Exchange(effect.guidance, config=config, lm=lm, drop_block=effect.drop_block, context=effect.context)
        return kwargs, exchange

    def _extraction_call(self, effect: Extraction) -> tuple[dspy.Module, dict[str, Any]]:
        instructions = self.program.react.signature.instructions
        signature = make_extraction_signature(self.program.signature, instructions)
        kwargs: dict[str, Any] = {**effect.inputs, "history": transcript(effect.guidance)}
        options = {k: v for k, v in effect.config.items() if k not in ("tools", "tool_choice")}
        config, lm = self._pin_lm(options, effect.no_retries, effect.model)
        extractor = self.program.Extractor(signature, **config)  # built per request: its options are its own
        if lm is not None:
            extractor.set_lm(lm)
        return extractor, kwargs

    def _pin_lm(
        self, config: dict[str, Any], no_retries: bool, model: int = 0
    ) -> tuple[dict[str, Any], dspy.BaseLM | None]:
        """The request's options, and the LM to pin: the chain's ``model``-th fallback, and under a
        deadline an LM without DSPy's retries (the machine retries while time remains); ``None``
        when the configured LM serves as it is."""
        lm = self.program.options.fallback[model - 1] if model else self.program.react.lm or dspy.settings.lm
        if lm is None:
            return config, None
        if not isinstance(getattr(lm, "_engine_spec", "auto"), str):
            config.pop("timeout", None)  # a custom engine owns its connection and timeouts
        if no_retries and getattr(lm, "_engine_spec", None) == "litellm":
            warm_litellm()
        pinned = lm.copy(num_retries=0) if no_retries and getattr(lm, "num_retries", None) else None
        pinned = pinned or (lm if model else None)
        if history_disabled():  # usage and the finish reason are still read (``recorder``)
            return config, quiet(pinned or lm)
        return config, pinned


class Extractor(dspy.ChainOfThought):
    """The tool-less extractor (one request); its span says ``dspy_imp.request.kind=extraction``.

    Built per extraction request, so a test that mocks the steps (``agent.react``) mocks the
    extraction here: ``mock.patch.object(dspy_imp.ReActV2.Extractor, "forward", return_value=
    dspy.Prediction(reasoning="...", answer="..."))`` (``"aforward"`` for ``acall``).
    """

    def forward(self, **kwargs: Any) -> dspy.Prediction:
        tracing.annotate(self, tracing.request_attributes("extraction"))
        return super().forward(**kwargs)

    async def aforward(self, **kwargs: Any) -> dspy.Prediction:
        tracing.annotate(self, tracing.request_attributes("extraction"))
        return await super().aforward(**kwargs)


@contextlib.contextmanager
def _exchanging(exchange: Exchange) -> Iterator[None]:
    token = current_exchange().set(exchange)
    try:
        yield
    finally:
        current_exchange().reset(token)


def _run_sync(tool: dspy.Tool, args: dict[str, Any]) -> Any:
    if _async_only(tool):
        raise RuntimeError(f"{tool.name} is async and this turn runs sync")
    return tool(**args)


def _same(value: Any) -> Any:
    return value


def _nothing(_: Any) -> None:
    return None


def _reraise(error: Exception) -> Any:
    raise error


def _async_only(tool: dspy.Tool) -> bool:
    """An async tool in a sync turn (DSPy would create its coroutine and never await it)."""
    return _async_tool(tool) and not dspy.settings.allow_tool_async_sync_conversion


def _in_anyio_worker() -> bool:
    try:
        anyio.from_thread.check_cancelled()
    except RuntimeError:  # not an AnyIO worker thread
        return False
    return True


def _async_tool(tool: dspy.Tool) -> bool:
    function = tool.func if inspect.isfunction(tool.func) else getattr(tool.func, "__call__", None)  # noqa: B004
    return inspect.iscoroutinefunction(function)


def _reply(exchange: Exchange, prediction: Any) -> Reply | Failed:
    """The raw reply the adapter captured, else the step the returned prediction carries."""
    if exchange.reply is not None:
        attach(prediction, exchange.messages, exchange.tools, exchange.dialect, exchange.reply)
        return exchange.reply
    try:
        reply = reply_from_prediction(prediction)
    except ValueError as exc:  # calls in a shape that cannot be read
        return Failed(exc)
    if reply is None:
        return Failed(RuntimeError("the step request returned without a reply"))
    return reply


def _filtered(recorder: Recorder, usage: Callable[[], Any]) -> Failed | None:
    """The extractor's reply was stopped by the provider's content filter (read, not parsed)."""
    if not recorder.history or finish_reason_of(recorder.history[-1].get("response")) != "content_filter":
        return None
    return Failed(ContentFiltered("the provider's content filter stopped the extraction reply"), usage())


def _refused_step(error: BaseException, usage: Callable[[], Any]) -> Reply | None:
    """A step whose malformed call the provider refused (``failures.refused_call``): a reply
    carrying that call, so the model reads why and the turn goes on."""
    call = refused_call(error)
    return None if call is None else Reply(calls=(call,), usage=usage())


def _extracted(prediction: dspy.Prediction) -> Extracted:
    return Extracted({k: v for k, v in prediction.items() if k != "reasoning"})


def _step_adapter(fallback: bool = True) -> ReActAdapter:
    configured = dspy.settings.adapter
    adapter = configured if isinstance(configured, ReActAdapter) else ReActAdapter(base=configured)
    if not fallback and adapter.use_json_adapter_fallback:  # a usage limit leaves no room for a second request
        adapter = copy.copy(adapter)
        adapter.use_json_adapter_fallback = False
    return adapter


def _extraction_adapter() -> dspy.Adapter:
    """The program's adapter, with DSPy's JSON fallback off: the extractor sends one request."""
    configured = dspy.settings.adapter
    base = configured.base if isinstance(configured, ReActAdapter) else configured
    callbacks = configured.callbacks if isinstance(configured, ReActAdapter) else None
    if base is None:
        base = dspy.ChatAdapter(callbacks=callbacks, use_json_adapter_fallback=False)
    adapter = copy.copy(base)
    if callbacks is not None:
        adapter.callbacks = callbacks
    adapter.__class__ = _single_callback(type(base))
    if isinstance(adapter, dspy.ChatAdapter):
        adapter.use_json_adapter_fallback = False
    return adapter


_SINGLE_CALLBACK: dict[type, type] = {}


def _single_callback(cls: type[Any]) -> type:
    """``cls`` with ``format``/``parse`` wrapped with callbacks once, and the deadline read
    again after ``format``.

    DSPy re-wraps them on every adapter subclass, so ``JSONAdapter.format`` fires
    ``on_adapter_format_start`` twice per request.
    """
    if cls not in _SINGLE_CALLBACK:
        render = _innermost(cls.format)

        def format(self: Any, *args: Any, **kwargs: Any) -> Any:
            messages = render(self, *args, **kwargs)
            check_before_send()  # the extractor's request never leaves after the deadline
            return messages

        methods = {"format": format, "parse": _innermost(cls.parse)}
        _SINGLE_CALLBACK[cls] = type(cls.__name__, (cls,), {**methods, "__module__": cls.__module__})
    return _SINGLE_CALLBACK[cls]


def _innermost(function: Any) -> Any:
    while hasattr(function, "__wrapped__"):
        function = function.__wrapped__
    return function
