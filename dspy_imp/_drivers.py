"""The two drivers: they perform the machine's effects, sync or async, and decide nothing.

``drive``/``adrive`` run a ``Turn.run()`` generator to its end. ``Effects`` knows how to
send one request through the program's inner predictor (so traces, callbacks and usage
work as for any DSPy predictor), run one tool, or ask the extractor.

The request boundary catches ``Exception``: whatever the LM client or the adapter raised is
the failed request's error, passed unchanged to the machine (which ends the turn with a
``StepError`` carrying it, or makes the last request the reference prescribes). The tool
boundary catches ``Exception`` too: a raising tool is an observation.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import functools
import importlib
import inspect
import time
from collections.abc import Awaitable, Callable, Generator, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import dspy
from dspy.clients._litellm import get_litellm  # private: DSPy's one cached LiteLLM import

from ._adapter import Exchange, ReActAdapter, current_exchange, finish_reason_of
from ._adapter import _recording as recording  # the step's reply recorder, reused for the extractor's
from ._adapter import _ReplyRecorder as ReplyRecorder
from ._deadline import check_before_send
from ._effects import Extracted, Extraction, Failed, ModelRequest, Raised, Reply, Returned, RunTool, Sleep
from ._failures import ContentFiltered
from ._guidance import tool_listing
from ._nameless import install as install_nameless_reader
from ._render import transcript
from ._signature import make_extraction_signature

if TYPE_CHECKING:
    from ._module import ReActV2


def drive(turn: Generator[Any, Any, Any], effects: Effects) -> Any:
    sent: Any = None
    while True:
        try:
            effect = turn.send(sent)
        except StopIteration as stop:
            return stop.value
        sent = effects.perform(effect)


async def adrive(turn: Generator[Any, Any, Any], effects: Effects) -> Any:
    sent: Any = None
    while True:
        try:
            effect = turn.send(sent)
        except StopIteration as stop:
            return stop.value
        sent = await effects.aperform(effect)


@dataclass
class _Job:
    """One effect's I/O, sync and async, and what to send back to the machine."""

    run: Callable[[], Any]
    arun: Callable[[], Awaitable[Any]]
    done: Callable[[Any], Any]
    failed: Callable[[Exception], Any]
    scope: Callable[[], AbstractContextManager[Any]] = contextlib.nullcontext


class Effects:
    """Performs effects for one program; ``perform`` and ``aperform`` differ only in awaiting."""

    def __init__(self, program: ReActV2):
        self.program = program
        install_nameless_reader(lambda: current_exchange().get() is not None)

    def perform(self, effect: Any) -> Any:
        job = self._job(effect)
        with job.scope():
            try:
                value = job.run()
            except Exception as exc:
                return job.failed(exc)
        return job.done(value)

    async def aperform(self, effect: Any) -> Any:
        job = self._job(effect)
        with job.scope():
            try:
                value = await job.arun()
            except Exception as exc:
                return job.failed(exc)
        return job.done(value)

    def _job(self, effect: Any) -> _Job:
        if isinstance(effect, RunTool):
            tool, args = effect.tool, effect.args
            return _Job(lambda: _run_sync(tool, args), lambda: tool.acall(**args), Returned, Raised)
        if isinstance(effect, Sleep):
            return _Job(lambda: time.sleep(effect.seconds), lambda: asyncio.sleep(effect.seconds), _nothing, _reraise)
        if isinstance(effect, ModelRequest):
            kwargs, exchange = self._step_call(effect)
            react = self.program.react

            def scope() -> AbstractContextManager[Any]:
                stack = contextlib.ExitStack()
                stack.enter_context(_exchanging(exchange))
                stack.enter_context(dspy.context(adapter=_step_adapter()))
                return stack

            return _Job(
                lambda: react(**kwargs), lambda: react.acall(**kwargs), lambda _: _reply(exchange), Failed, scope
            )
        predictor, kwargs = self._extraction_call(effect)
        recorder = ReplyRecorder()

        def extraction_scope() -> AbstractContextManager[Any]:
            stack = contextlib.ExitStack()
            stack.enter_context(dspy.context(adapter=_extraction_adapter()))
            stack.enter_context(recording(recorder))
            return stack

        return _Job(
            lambda: predictor(**kwargs),
            lambda: predictor.acall(**kwargs),
            lambda prediction: _filtered(recorder) or _extracted(prediction),
            lambda error: _filtered(recorder) or Failed(error),
            extraction_scope,
        )

    def _step_call(self, effect: ModelRequest) -> tuple[dict[str, Any], Exchange]:
        kwargs: dict[str, Any] = dict(effect.pending)
        kwargs.update(
            history=effect.guidance.history,
            tools=tool_listing(effect.guidance.roster),
            config=dict(effect.config),
        )
        self._pin_lm(kwargs, effect.no_retries)
        return kwargs, Exchange(effect.guidance)

    def _extraction_call(self, effect: Extraction) -> tuple[dspy.Module, dict[str, Any]]:
        instructions = self.program.react.signature.instructions
        signature = make_extraction_signature(self.program.signature, instructions)
        kwargs: dict[str, Any] = {**effect.inputs, "history": transcript(effect.guidance)}
        kwargs["config"] = {k: v for k, v in effect.config.items() if k not in ("tools", "tool_choice")}
        self._pin_lm(kwargs, effect.no_retries)
        return dspy.ChainOfThought(signature), kwargs

    def _pin_lm(self, kwargs: dict[str, Any], no_retries: bool) -> None:
        """Under a deadline: no DSPy retries (the machine retries while time remains)."""
        lm = self.program.react.lm or dspy.settings.lm
        if lm is None:
            return
        if not isinstance(getattr(lm, "_engine_spec", "auto"), str):
            kwargs["config"].pop("timeout", None)  # a custom engine owns its connection and timeouts
        if no_retries and getattr(lm, "num_retries", None):
            lm = lm.copy(num_retries=0)
        if no_retries and getattr(lm, "_engine_spec", None) == "litellm":
            _warm_litellm()
        kwargs["lm"] = lm


# Modules LiteLLM (1.110) and DSPy import lazily inside the first send, after the adapter's
# last deadline check; one that is missing or fails to import (another LiteLLM version) is skipped.
_LAZY_SEND_MODULES = (
    "dspy.clients.execution",
    "httpcore",
    "litellm._service_logger",
    "litellm.proxy.openai_files_endpoints.common_utils",
    "litellm.proxy.spend_tracking.savings",
    "litellm.llms.github_copilot.per_user_auth",
    "litellm.llms.fal_ai.image_generation",
    "litellm.llms.fal_ai.chat.transformation",
    "litellm.llms.custom_httpx.aiohttp_transport",
)


@functools.cache
def _warm_litellm() -> None:
    """Pay LiteLLM's cold import (seconds) before the last deadline check, not after it.

    DSPy imports LiteLLM inside the send, after the adapter read the deadline for the last
    time; under a deadline that import alone sent requests seconds late.
    """
    get_litellm(feature="dspy.LM")
    for name in _LAZY_SEND_MODULES:
        with contextlib.suppress(Exception):  # best effort: the send imports what is missing
            importlib.import_module(name)


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


def _nothing(_: Any) -> None:
    return None


def _reraise(error: Exception) -> Any:
    raise error


def _async_only(tool: dspy.Tool) -> bool:
    """An async tool in a sync turn (DSPy would create its coroutine and never await it)."""
    function = tool.func if inspect.isfunction(tool.func) else getattr(tool.func, "__call__", None)  # noqa: B004
    return inspect.iscoroutinefunction(function) and not dspy.settings.allow_tool_async_sync_conversion


def _reply(exchange: Exchange) -> Reply | Failed:
    if exchange.reply is None:
        return Failed(RuntimeError("the step request returned without a reply"))
    return exchange.reply


def _filtered(recorder: ReplyRecorder) -> Failed | None:
    """The extractor's reply was stopped by the provider's content filter (read, not parsed)."""
    if not recorder.history or finish_reason_of(recorder.history[-1].get("response")) != "content_filter":
        return None
    return Failed(ContentFiltered("the provider's content filter stopped the extraction reply"))


def _extracted(prediction: dspy.Prediction) -> Extracted:
    return Extracted({k: v for k, v in prediction.items() if k != "reasoning"})


def _step_adapter() -> ReActAdapter:
    configured = dspy.settings.adapter
    return configured if isinstance(configured, ReActAdapter) else ReActAdapter(base=configured)


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
