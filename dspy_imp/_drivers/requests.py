"""Model requests for the drivers: a step (``ModelRequest``, ``Summarize``) or an extraction, as a ``Job``.

A step goes through the program's inner predictor and ``ReActAdapter`` (so traces, callbacks and
usage work as for any DSPy predictor); the extraction through a tool-less ``Extractor`` built per
request. Each answer carries the usage DSPy recorded for its model calls (``recorder``). The
request boundary catches ``Exception``: whatever the LM client or the adapter raised is the failed
request's error, passed unchanged to the machine (which ends the turn with a ``StepError`` carrying
it, or makes the last request the reference prescribes).
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager
from dataclasses import replace
from typing import Any

import dspy

from dspy_imp._drivers.adapter import Exchange, ReActAdapter, current_exchange, finish_reason_of
from dspy_imp._drivers.finetune import attach
from dspy_imp._drivers.job import Job
from dspy_imp._drivers.predicted import reply_from_prediction
from dspy_imp._drivers.recorder import Recorder, history_disabled, measured, quiet, recording, unretried
from dspy_imp._prompt.guidance import tool_listing
from dspy_imp._prompt.render import transcript
from dspy_imp._prompt.signature import make_extraction_signature
from dspy_imp._records.clock import check_before_send
from dspy_imp._records.outcomes import Extracted, Failed, Reply
from dspy_imp._routes.dspy_private import request_seconds
from dspy_imp._routes.failures import ContentFiltered, refused_call
from dspy_imp._routes.route import forced_keeps_thinking, route_for
from dspy_imp._routes.timeouts import native_seconds
from dspy_imp._routes.warmup import warm_litellm
from dspy_imp._turn.effects import Extraction, ModelRequest, Summarize
from dspy_imp._turn.plan import Program
from dspy_imp._watch import tracing


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


def step_job(program: Program, effect: ModelRequest) -> Job:
    """One step request through the program's inner predictor (a summary's through its own)."""
    kwargs, exchange = _step_call(program, effect)
    react, recorder = program.react, Recorder()
    if isinstance(effect, Summarize):  # the program's system message and demos, its own instruction
        react = program.summary_predictor()
        exchange.instructions, exchange.demos = program.react.signature.instructions, program.react.demos

    def scope() -> AbstractContextManager[Any]:
        stack = contextlib.ExitStack()
        stack.enter_context(_exchanging(exchange))
        stack.enter_context(recording(recorder))
        stack.enter_context(dspy.context(adapter=_step_adapter(effect.fallback)))
        return stack

    def usage() -> Any:
        return measured(effect.guidance.kind, recorder.history, exchange.fallbacks)

    return Job(
        lambda: react(**kwargs),
        lambda: react.acall(**kwargs),
        lambda prediction: replace(_reply(exchange, prediction), usage=usage()),
        lambda error: _refused_step(error, usage) or Failed(error, usage()),
        scope,
        exchange,
        lm_calls=lambda: recorder.history,
    )


def extraction_job(program: Program, effect: Extraction) -> Job:
    """The extraction request: the program's ``Extractor`` with its own options, DSPy's JSON fallback off."""
    predictor, kwargs, seconds = _extraction_call(program, effect)
    recorder = Recorder()

    def scope() -> AbstractContextManager[Any]:
        stack = contextlib.ExitStack()
        stack.enter_context(recording(recorder))
        stack.enter_context(request_seconds(seconds))
        stack.enter_context(dspy.context(adapter=_extraction_adapter()))
        return stack

    def usage() -> Any:
        return measured("extraction", recorder.history, 0)

    return Job(
        lambda: predictor(**kwargs),
        lambda: predictor.acall(**kwargs),
        lambda prediction: _filtered(recorder, usage) or replace(_extracted(prediction), usage=usage()),
        lambda error: _filtered(recorder, usage) or Failed(error, usage()),
        scope,
        lm_calls=lambda: recorder.history,
    )


def sends_async(program: Program, effect: ModelRequest | Extraction) -> bool:
    """Whether the LM that sends ``effect`` has an async path of its own: a ``dspy.LM`` on one of
    DSPy's engines or with an ``async_engine``, another ``BaseLM`` that implements ``aforward``."""
    lm = program.fallback_chain()[effect.model - 1] if effect.model else program.react.lm or dspy.settings.lm
    if isinstance(effect, Summarize):
        lm = program.summary_predictor().lm or lm
    if isinstance(lm, dspy.LM):
        spec = getattr(lm, "_engine_spec", "auto")
        return isinstance(spec, str) or getattr(lm, "_async_engine_spec", None) is not None
    return lm is not None and type(lm).aforward is not dspy.BaseLM.aforward


def _step_call(program: Program, effect: ModelRequest) -> tuple[dict[str, Any], Exchange]:
    """The step predictor's inputs, and the request's options and LM on the exchange.

    The options and a pinned LM travel on the exchange (the adapter applies them), not as
    ``config=``/``lm=`` arguments: tracers record a predictor's arguments as its inputs.
    """
    kwargs: dict[str, Any] = dict(effect.pending)
    kwargs.update(history=effect.guidance.history, tools=tool_listing(effect.guidance.roster))
    config, lm = _pin_lm(program, dict(effect.config), effect.no_retries, effect.model)
    exchange = Exchange(
        effect.guidance,
        config=config,
        lm=lm,
        drop_block=effect.drop_block,
        context=effect.context,
        prompt_cache=effect.prompt_cache,
        thinking=effect.thinking,
        first_inputs=_first_inputs(effect),
        cache_bust=effect.cache_bust,
        hosted=tuple(getattr(program, "hosted_tools", ())),
    )
    return kwargs, exchange


def _first_inputs(effect: ModelRequest) -> Mapping[str, Any]:
    """The conversation's first inputs: its first recorded entry's, else this call's (the cache key's)."""
    names = effect.guidance.task.input_names
    for entry in getattr(effect.guidance.history, "messages", None) or ():
        found = {name: entry[name] for name in names if name in entry}
        if found:
            return found
    return dict(effect.pending)


def _extraction_call(program: Program, effect: Extraction) -> tuple[dspy.Module, dict[str, Any], float | None]:
    """The extractor, its inputs, and a native request's read and write bound (``_routes.timeouts``)."""
    instructions = program.react.signature.instructions
    signature = make_extraction_signature(program.signature, instructions)
    kwargs: dict[str, Any] = {**effect.inputs, "history": transcript(effect.guidance)}
    options = {k: v for k, v in effect.config.items() if k not in ("tools", "tool_choice")}
    config, lm = _pin_lm(program, options, effect.no_retries, effect.model)
    sends_with = lm or program.react.lm or dspy.settings.lm
    if sends_with is not None and not forced_keeps_thinking(sends_with):
        config["reasoning_effort"] = None  # it only extracts the answer: no thinking (``docs/providers.md#thinking``)
    seconds = native_seconds(sends_with, route_for(sends_with, config), config) if sends_with is not None else None
    extractor = program.Extractor(signature, **config)  # built per request: its options are its own
    if lm is not None:
        extractor.set_lm(lm)
    return extractor, kwargs, seconds


def _pin_lm(
    program: Program, config: dict[str, Any], no_retries: bool, model: int = 0
) -> tuple[dict[str, Any], dspy.BaseLM | None]:
    """The request's options, and the LM to pin: the chain's ``model``-th fallback, and under a
    deadline an LM without DSPy's retries (the machine retries while time remains); ``None``
    when the configured LM serves as it is."""
    lm = program.fallback_chain()[model - 1] if model else program.react.lm or dspy.settings.lm
    if lm is None:
        return config, None
    if not isinstance(getattr(lm, "_engine_spec", "auto"), str):
        config.pop("timeout", None)  # a custom engine owns its connection and timeouts
    if no_retries and getattr(lm, "_engine_spec", None) == "litellm":
        warm_litellm()
    pinned = unretried(lm) if no_retries and getattr(lm, "num_retries", None) else None
    pinned = pinned or (lm if model else None)
    if history_disabled():  # usage and the finish reason are still read (``recorder``)
        return config, quiet(pinned or lm)
    return config, pinned


@contextlib.contextmanager
def _exchanging(exchange: Exchange) -> Iterator[None]:
    token = current_exchange().set(exchange)
    try:
        yield
    finally:
        current_exchange().reset(token)


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
