"""``ReActAdapter``: renders the loop's requests and reads its replies, for any DSPy adapter.

The loop hands each request's ``Guidance`` to the adapter through a context variable (no
private keys in ``config``, which could reach the provider or flip ``engine="auto"`` to
LiteLLM). The adapter

- sends the tool roster natively (or asks for written calls) and leaves ``tool_choice`` as the
  loop chose it; adds the base adapter's request options and, on ordinary requests to an LM
  that supports reasoning, ``reasoning_effort="low"`` as ``dspy.ReActV2`` does, unless the
  request or the LM sets it;
- renders the messages with ``_prompt.render`` (one ``on_adapter_format_start`` callback per
  request: ``format`` is wrapped once, and the parent's wrapped ``format`` is never called);
- reads the raw reply (text, provider tool calls with their ids, reasoning content) before
  DSPy's parsing could lose it, with DSPy's JSON fallback off, and the provider's finish
  reason of *this* request (correct under ``dspy.Parallel``; ``None`` when DSPy's history
  is disabled and it cannot be known).

Outside a ``dspy_imp`` turn it behaves as the adapter it wraps (or a plain ``ChatAdapter``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from typing import Any

import dspy
from dspy.utils.exceptions import AdapterParseError

from dspy_imp._drivers.finetune import sent_request, training_example
from dspy_imp._drivers.recorder import Recorder
from dspy_imp._prompt.dialect import Dialect, dialect_for, jsonable
from dspy_imp._prompt.guidance import Guidance, roster_for_provider
from dspy_imp._prompt.media import family_of, refuse_unsendable, tool_media_for
from dspy_imp._prompt.render import render_request
from dspy_imp._prompt.signature import STEP_CALLS, STEP_TEXT
from dspy_imp._records.clock import check_before_send, time_left
from dspy_imp._records.outcomes import RawCall, Reply
from dspy_imp._routes import dspy_private
from dspy_imp._routes.nameless import UNNAMED, as_received
from dspy_imp._routes.reasoning import blocks_of
from dspy_imp._routes.route import (
    Route,
    call_options,
    canonical_request,
    encrypted_reasoning,
    outputs_of,
    planned,
    remembered_capabilities,
    replays_state,
    settle_options,
)
from dspy_imp._routes.warmup import warm_litellm
from dspy_imp._watch import tracing


@dataclass
class Exchange:
    """One request in flight: the guidance, options and pinned LM in; the raw reply out.

    ``config`` (the request's options: ``tool_choice``, a deadline's ``timeout``, ...) and
    ``lm`` (an LM replacing the configured one, e.g. without retries under a deadline) are
    applied by the adapter, so they never appear among the step predictor's inputs.
    ``fallbacks`` counts the times DSPy's JSON fallback re-sent the request.
    """

    guidance: Guidance
    config: Mapping[str, Any] = field(default_factory=dict)
    lm: Any = None
    reply: Reply | None = None
    dialect: Dialect | None = None
    route: Route = field(default_factory=lambda: Route("custom"))
    media_family: str = "other"
    messages: list[dict[str, Any]] | None = None
    tools: list[dict[str, Any]] | None = None
    fallbacks: int = 0
    instructions: str | None = None  # a summary request: the program's, not its predictor's
    demos: list[Any] | None = None
    drop_block: bool = False  # a context policy changed the prefix: ask for drop_block (``settle_options``)
    context: Mapping[str, Any] | None = None  # what a context policy did before this request (for its span)


_EXCHANGE: ContextVar[Exchange | None] = ContextVar("dspy_imp_exchange", default=None)


# The format a loop without a configured adapter follows. One instance (it is only read), so
# a turn's rendering context is the same from request to request and its memo is reused.
_PLAIN_CHAT = dspy.ChatAdapter()


@dataclass
class _ReplyRecorder(Recorder):
    """Stands on DSPy's ``caller_modules`` stack to receive this request's history entry."""


class ReActAdapter(dspy.ChatAdapter):
    """The adapter that renders ``dspy_imp.ReActV2`` steps.

    You rarely build one: the loop wraps whatever adapter you configured. Configure it
    yourself to pass callbacks (``dspy.configure(adapter=dspy_imp.ReActAdapter(callbacks=[...]))``),
    to force written calls (``ReActAdapter(dspy.ChatAdapter(), native_calls=False)``), or as
    ``BootstrapFinetune``'s adapter, whose data is then each step's request as sent and its reply.

    A step the model answered in a format that cannot be read (a written-calls reply with
    broken JSON, say) gets DSPy's JSON fallback, as with ``ChatAdapter``: one more request,
    rendered by this adapter in JSON, so the guidance, the history rendering and the tool
    result renderer are the same. A JSON base has no fallback, nor a base built with
    ``use_json_adapter_fallback=False``; the extractor never has one.

    The base's request options reach every step request: ``parallel_tool_calls`` (native
    calls) and a ``JSONAdapter``'s ``response_format``. An LM that supports reasoning gets
    ``reasoning_effort="low"`` on ordinary requests, as with ``dspy.ReActV2``, unless the
    request's config or ``lm.kwargs`` sets it (``None`` turns it off).

    Args:
        base: The adapter whose format the steps follow, and which serves every call that is
            not a loop step. Defaults to a plain ``dspy.ChatAdapter``.
        callbacks: Adapter callbacks; defaults to ``base``'s.
        native_calls: ``False`` makes the model write its calls as text even when it supports
            native calls; ``True`` sends the tools natively even when DSPy's capability lookup
            does not know the model (a local vLLM, SGLang, Ollama or LM Studio model's name);
            ``None`` (default) uses native calls when the LM supports them (and follows a
            ``JSONAdapter(use_native_function_calling=False)`` base).

    Example, a local OpenAI-compatible server::

        lm = dspy.LM("openai/Qwen/Qwen3-8B", api_base="http://localhost:8000/v1", api_key="local")
        dspy.configure(lm=lm, adapter=dspy_imp.ReActAdapter(native_calls=True))
    """

    native_calls: bool | None = None

    def __init__(
        self,
        base: dspy.Adapter | None = None,
        callbacks: list[Any] | None = None,
        *,
        native_calls: bool | None = None,
    ):
        if isinstance(base, ReActAdapter):
            native_calls = base.native_calls if native_calls is None else native_calls
            base = base.base
        super().__init__(
            callbacks=callbacks if callbacks is not None else getattr(base, "callbacks", None),
            use_native_function_calling=True,
            use_json_adapter_fallback=_json_fallback(base),
            parallel_tool_calls=getattr(base, "parallel_tool_calls", None),
        )
        self.base: dspy.Adapter | None = base
        self.native_calls = native_calls
        self.fallback = False  # True on the adapter DSPy's JSON fallback sends through

    def _make_json_adapter_fallback(self) -> ReActAdapter:
        exchange = _EXCHANGE.get()
        if exchange is not None:  # counted as its own request in the turn's usage
            exchange.fallbacks += 1
        base = dspy.JSONAdapter(parallel_tool_calls=self.parallel_tool_calls)
        fallback = ReActAdapter(base=base, callbacks=self.callbacks, native_calls=self.native_calls)
        fallback.fallback = True
        return fallback

    def uses_native_calls(self, lm: Any) -> bool:
        """Native calls when the LM supports them, unless this adapter or its base says otherwise.

        ``native_calls`` wins over DSPy's lookup both ways: ``True`` for a model DSPy does not
        know (``lm.supports_function_calling`` is ``False`` for any unknown name), ``False`` to
        force written calls. A base adapter's
        ``use_native_function_calling=False`` is followed where it is a choice: on
        ``JSONAdapter``, whose default is native. ``ChatAdapter``/``XMLAdapter`` default to
        ``False``, so there the flag cannot tell a choice from the default and the LM decides.
        """
        if self.native_calls is not None:
            return self.native_calls
        if not lm.supports_function_calling:
            return False
        base = self.base
        return not (isinstance(base, dspy.JSONAdapter) and base.use_native_function_calling is False)

    # -- the call ----------------------------------------------------------------------------

    def __call__(self, lm, lm_kwargs, signature, demos, inputs):
        exchange = _EXCHANGE.get()
        if exchange is None:
            return (self.base or dspy.ChatAdapter())(lm, lm_kwargs, signature, demos, inputs)
        lm, lm_kwargs = _settled(exchange, lm, lm_kwargs)
        recorder = _ReplyRecorder()
        with _recording(recorder), remembered_capabilities(lm, lm_kwargs):
            if _sends_request(lm, exchange):
                values = self._call_with_state(lm, lm_kwargs, signature, demos, inputs)
            else:
                values = super().__call__(lm, lm_kwargs, signature, demos, inputs)
        _note_raw_reply(exchange, recorder)
        return values

    async def acall(self, lm, lm_kwargs, signature, demos, inputs):
        exchange = _EXCHANGE.get()
        if exchange is None:
            return await (self.base or dspy.ChatAdapter()).acall(lm, lm_kwargs, signature, demos, inputs)
        lm, lm_kwargs = _settled(exchange, lm, lm_kwargs)
        recorder = _ReplyRecorder()
        with _recording(recorder), remembered_capabilities(lm, lm_kwargs):
            if _sends_request(lm, exchange):
                values = await self._acall_with_state(lm, lm_kwargs, signature, demos, inputs)
            else:
                values = await super().acall(lm, lm_kwargs, signature, demos, inputs)
        _note_raw_reply(exchange, recorder)
        return values

    @planned
    def _call_with_state(self, lm, lm_kwargs, signature, demos, inputs):
        """DSPy's adapter pipeline, sending the native ``Request`` that carries the replay state."""
        processed = self._call_preprocess(lm, lm_kwargs, signature, inputs)
        request = canonical_request(lm, self.format(processed, demos, inputs), lm_kwargs)
        outputs = outputs_of(lm(request, **call_options(lm_kwargs)))
        return self._call_postprocess(processed, signature, outputs, lm, lm_kwargs)

    @planned
    async def _acall_with_state(self, lm, lm_kwargs, signature, demos, inputs):
        processed = self._call_preprocess(lm, lm_kwargs, signature, inputs)
        request = canonical_request(lm, self.format(processed, demos, inputs), lm_kwargs)
        outputs = outputs_of(await lm.acall(request, **call_options(lm_kwargs)))
        return self._call_postprocess(processed, signature, outputs, lm, lm_kwargs)

    # -- hooks of DSPy's adapter pipeline ---------------------------------------------------------

    def _call_preprocess(self, lm, lm_kwargs, signature, inputs):
        exchange = _current()
        native = self.uses_native_calls(lm)
        task = exchange.guidance.task
        exchange.dialect = dialect_for(self.base or _PLAIN_CHAT, task.signature, exchange.guidance.text_answer, native)
        exchange.media_family = family_of(lm)
        if native:
            lm_kwargs["tools"] = exchange.tools = roster_for_provider(exchange.guidance.roster)
            if self.parallel_tool_calls is not None and lm_kwargs.get("parallel_tool_calls") is None:
                lm_kwargs["parallel_tool_calls"] = self.parallel_tool_calls
        else:
            for key in ("tools", "tool_choice", "parallel_tool_calls"):
                lm_kwargs.pop(key, None)
        if isinstance(self.base, dspy.JSONAdapter) and "response_format" not in lm_kwargs:
            _json_response_format(self.base, lm, lm_kwargs, exchange.dialect)
        default_reasoning_effort(exchange.guidance.kind, lm, lm_kwargs)
        return signature

    def format(self, signature, demos, inputs):
        exchange = _current()
        if self.fallback:  # the fallback's own span (MLflow's format span, OpenInference's adapter span)
            tracing.annotate(self, tracing.request_attributes("json_fallback"))
        exchange.messages = _render(exchange, signature, demos, inputs)
        refuse_unsendable(exchange.messages, exchange.media_family)
        check_before_send()  # rendering (a slow tool_result_renderer) may have used up the time left
        return exchange.messages

    def preview(self, lm: Any, signature: Any, demos: Any, inputs: Mapping[str, Any]) -> tuple[list[Any], Any]:
        """The current exchange's request as it would be sent, ``(messages, tools)``: rendered as
        ``format`` renders it, with no callback, no deadline check and nothing sent."""
        exchange = _current()
        lm, lm_kwargs = exchange.lm or lm, dict(exchange.config)
        exchange.route = settle_options(lm, lm_kwargs)
        self._call_preprocess(lm, lm_kwargs, signature, inputs)
        return _render(exchange, signature, demos, inputs), lm_kwargs.get("tools")

    def format_finetune_data(self, signature, demos, inputs, outputs):
        """A traced loop step as the request the loop sent and its reply (``_drivers.finetune``);
        anything else as the base adapter would format it."""
        request = sent_request(outputs)
        if request is not None:
            return training_example(request)
        return (self.base or dspy.ChatAdapter()).format_finetune_data(signature, demos, inputs, outputs)

    def parse(self, signature, completion):
        exchange = _current()
        assert exchange.dialect is not None
        try:
            text, calls = exchange.dialect.read(completion)
        except ValueError as exc:  # calls written in a shape that cannot be read
            raise AdapterParseError(type(self).__name__, signature, completion, str(exc)) from exc
        return {STEP_TEXT: text, STEP_CALLS: [_call_dict(c) for c in calls]}

    def _call_postprocess(self, processed_signature, original_signature, outputs, lm, lm_kwargs):
        exchange = _current()
        output = outputs[0] if outputs else {}
        if not isinstance(output, Mapping):
            output = {"text": output}
        text = output.get("text")
        calls = tuple(_raw_call(c) for c in output.get("tool_calls") or [])
        if text:
            try:
                parsed = self.parse(processed_signature, text)
            except AdapterParseError:
                if not calls:
                    raise
                parsed = {STEP_TEXT: text, STEP_CALLS: []}  # native calls are the step; keep the text as written
            text = parsed[STEP_TEXT]
            calls = calls or tuple(_from_call_dict(c) for c in parsed[STEP_CALLS])
        exchange.reply = Reply(
            text=text,
            calls=calls,
            reasoning_content=output.get("reasoning_content"),
            reasoning_details=output.get("reasoning_details"),
        )
        return [{STEP_TEXT: text, STEP_CALLS: [_call_dict(c) for c in calls]}]


def _render(exchange: Exchange, signature: Any, demos: Any, inputs: Mapping[str, Any]) -> list[dict[str, Any]]:
    route = exchange.route
    guidance = replace(
        exchange.guidance,
        keep_reasoning=route.keeps_reasoning,
        replayed_kinds=route.replayed_kinds,
        dialect=exchange.dialect,
        tool_media=tool_media_for(exchange.media_family),
    )
    pending = {k: v for k, v in inputs.items() if k in guidance.task.inputs}
    instructions = exchange.instructions if exchange.instructions is not None else signature.instructions
    return render_request(guidance, instructions, exchange.demos if exchange.demos is not None else demos, pending)


def _sends_request(lm: Any, exchange: Exchange) -> bool:
    """The step goes out as a native ``Request``: it replays state, or must ask for encrypted reasoning."""
    if exchange.route.engine == "native" and encrypted_reasoning(lm):
        return True
    return replays_state(exchange.route, exchange.guidance.steps, exchange.guidance.memo)


def _json_fallback(base: dspy.Adapter | None) -> bool:
    """DSPy's JSON fallback, as the base adapter has it: a ``ChatAdapter`` (or ``XMLAdapter``) with
    the flag on; never a JSON base or an adapter that is no ``ChatAdapter`` (``TwoStepAdapter``)."""
    if base is None:
        return True
    if isinstance(base, dspy.JSONAdapter) or not isinstance(base, dspy.ChatAdapter):
        return False
    return bool(base.use_json_adapter_fallback)


def _json_response_format(base: dspy.JSONAdapter, lm: Any, lm_kwargs: dict[str, Any], dialect: Dialect) -> None:
    """The ``response_format`` a ``JSONAdapter`` sends, for the fields the step is shown.

    Written calls get JSON mode, as DSPy gives a ``ToolCalls`` field written as text (a strict
    schema cannot describe free-form call arguments). Otherwise DSPy's private
    ``_prepare_response_format`` decides between a structured schema and JSON mode from the
    LM's capabilities; it is reused rather than copied.
    """
    if dialect.calls_field is not None:
        if "response_format" in lm.supported_params:
            lm_kwargs["response_format"] = {"type": "json_object"}
        return
    base._prepare_response_format(lm, lm_kwargs, dialect.display)


def _settled(exchange: Exchange, lm: Any, lm_kwargs: Mapping[str, Any]) -> tuple[Any, dict[str, Any]]:
    """The request's LM and options under the provider rules (``settle_options``), its route on
    the exchange; LiteLLM's cold import paid before the last deadline check (in ``format``), not
    inside the send."""
    lm, settled = exchange.lm or lm, {**lm_kwargs, **exchange.config}
    default_reasoning_effort(exchange.guidance.kind, lm, settled)  # before the route: it can change it
    exchange.route = settle_options(lm, settled, exchange.guidance.edits_prefix or exchange.drop_block)
    if exchange.route.engine == "litellm" and time_left() is not None:
        warm_litellm()
    return lm, settled


def default_reasoning_effort(kind: str, lm: Any, lm_kwargs: dict[str, Any]) -> None:
    """``reasoning_effort="low"`` on an ordinary request to an LM that supports reasoning, as
    ``dspy.ReActV2`` sends it (its thought is a ``dspy.Reasoning`` field).

    An explicit setting wins: in the request's config (the forced requests set ``None``) or in
    ``lm.kwargs``, ``None`` included. DSPy's own exception is kept: GPT-5 models on the Chat
    Completions API return no reasoning content, so nothing is sent to them.
    """
    if kind not in ("step", "last_text", "summary") or "reasoning_effort" in lm_kwargs:
        return
    if "reasoning_effort" in (getattr(lm, "kwargs", None) or {}) or not _supports_reasoning(lm, lm_kwargs):
        return
    if "gpt-5" in str(getattr(lm, "model", "")) and getattr(lm, "model_type", None) == "chat":
        return
    lm_kwargs["reasoning_effort"] = "low"


def _supports_reasoning(lm: Any, lm_kwargs: dict[str, Any]) -> bool:
    """``lm.supports_reasoning`` read in the LM's remembered capability scope (``route``): DSPy works
    the capabilities out once per LM and option names, not on every request."""
    with remembered_capabilities(lm, lm_kwargs):
        return bool(getattr(lm, "supports_reasoning", False))


def _current() -> Exchange:
    exchange = _EXCHANGE.get()
    if exchange is None:  # pragma: no cover - __call__ routes such calls to the base adapter
        raise RuntimeError("ReActAdapter step hooks run only inside a dspy_imp turn")
    return exchange


def _call_dict(call: RawCall) -> dict[str, Any]:
    data = {"id": call.id, "name": call.name, "args": call.args}
    if call.received is not None:
        data["received"] = call.received
    return data


def _from_call_dict(data: dict[str, Any]) -> RawCall:
    return RawCall(data.get("id"), data.get("name"), data.get("args"), data.get("received"))


def _raw_call(provider_call: Any) -> RawCall:
    data = dspy_private.provider_tool_call(provider_call)
    name = data.get("name") if data.get("name") != UNNAMED else None  # lm15 read it nameless (_nameless)
    name = name or None
    return RawCall(
        id=data.get("id") or None,
        name=name,
        args=data.get("args"),
        received=None if name else as_received(jsonable(provider_call)),
    )


_FINISH_SPELLING = {
    "tool_calls": "tool_call",
    "function_call": "tool_call",
    "tool_use": "tool_call",
    "end_turn": "stop",
    "max_tokens": "length",
    "stop_sequence": "stop",
}


@contextlib.contextmanager
def _recording(recorder: _ReplyRecorder) -> Iterator[None]:
    with dspy.context(caller_modules=[*(dspy.settings.caller_modules or []), recorder]):
        yield


def _note_raw_reply(exchange: Exchange, recorder: _ReplyRecorder) -> None:
    """What only the raw response has: the finish reason and the provider's reasoning blocks."""
    if exchange.reply is None or not recorder.history:
        return
    response = recorder.history[-1].get("response")
    exchange.reply = replace(
        exchange.reply,
        finish_reason=finish_reason_of(response),
        reasoning_details=blocks_of(response) or exchange.reply.reasoning_details,
    )


def finish_reason_of(response: Any) -> str | None:
    """The finish reason of an lm15 ``Response`` or a LiteLLM ``ModelResponse``, one spelling."""
    if isinstance(response, list | tuple):
        response = response[0] if response else None
    reason = getattr(response, "finish_reason", None)
    if reason is None:
        choices = getattr(response, "choices", None)
        if choices:
            reason = getattr(choices[0], "finish_reason", None)
    if reason is None:
        return None
    reason = str(getattr(reason, "value", reason))
    return _FINISH_SPELLING.get(reason, reason)


def current_exchange() -> ContextVar[Exchange | None]:
    return _EXCHANGE
