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

The request in flight is ``_drivers.exchange``'s; the options and route of a request are settled
in ``_drivers.request_options``, and the raw reply is read in ``_drivers.replies``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from dataclasses import replace
from typing import Any

import dspy
from dspy.utils.exceptions import AdapterParseError

from dspy_imp._drivers.exchange import Exchange, current, current_exchange
from dspy_imp._drivers.finetune import sent_request, training_example
from dspy_imp._drivers.replies import (
    ReplyRecorder,
    call_dict,
    from_call_dict,
    note_raw_reply,
    raw_call,
    recording,
)
from dspy_imp._drivers.replies import finish_reason_of as finish_reason_of  # re-exported
from dspy_imp._drivers.request_options import (
    default_reasoning_effort,
    json_fallback,
    json_response_format,
    sends_request,
    settled,
    thinking_of,
)
from dspy_imp._prompt.dialect import dialect_for
from dspy_imp._prompt.guidance import roster_for_provider
from dspy_imp._prompt.media import family_of, refuse_unsendable, tool_media_for
from dspy_imp._prompt.render import render_request
from dspy_imp._prompt.signature import STEP_CALLS, STEP_TEXT
from dspy_imp._records.clock import check_before_send
from dspy_imp._records.outcomes import Reply
from dspy_imp._routes.caching import marked, marking, marking_previous, native_cache
from dspy_imp._routes.dspy_private import request_seconds
from dspy_imp._routes.route import (
    call_options,
    canonical_request,
    outputs_of,
    planned,
    remembered_capabilities,
    settle_options,
)
from dspy_imp._watch import tracing

# The format a loop without a configured adapter follows. One instance (it is only read), so
# a turn's rendering context is the same from request to request and its memo is reused.
_PLAIN_CHAT = dspy.ChatAdapter()


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
            use_json_adapter_fallback=json_fallback(base),
            parallel_tool_calls=getattr(base, "parallel_tool_calls", None),
        )
        self.base: dspy.Adapter | None = base
        self.native_calls = native_calls
        self.fallback = False  # True on the adapter DSPy's JSON fallback sends through

    def _make_json_adapter_fallback(self) -> ReActAdapter:
        exchange = current_exchange().get()
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
        exchange = current_exchange().get()
        if exchange is None:
            return (self.base or dspy.ChatAdapter())(lm, lm_kwargs, signature, demos, inputs)
        lm, lm_kwargs = settled(exchange, lm, lm_kwargs)
        recorder = ReplyRecorder()
        with recording(recorder), remembered_capabilities(lm, lm_kwargs), self._sending(exchange):
            if sends_request(lm, exchange):
                values = self._call_with_state(lm, lm_kwargs, signature, demos, inputs)
            else:
                values = super().__call__(lm, lm_kwargs, signature, demos, inputs)
        note_raw_reply(exchange, recorder)
        return values

    async def acall(self, lm, lm_kwargs, signature, demos, inputs):
        exchange = current_exchange().get()
        if exchange is None:
            return await (self.base or dspy.ChatAdapter()).acall(lm, lm_kwargs, signature, demos, inputs)
        lm, lm_kwargs = settled(exchange, lm, lm_kwargs)
        recorder = ReplyRecorder()
        with recording(recorder), remembered_capabilities(lm, lm_kwargs), self._sending(exchange):
            if sends_request(lm, exchange):
                values = await self._acall_with_state(lm, lm_kwargs, signature, demos, inputs)
            else:
                values = await super().acall(lm, lm_kwargs, signature, demos, inputs)
        note_raw_reply(exchange, recorder)
        return values

    @staticmethod
    @contextlib.contextmanager
    def _sending(exchange: Exchange) -> Iterator[None]:
        """A native request's read and write bound; natively to OpenRouter, its cache marks."""
        native_mark = exchange.caching.mark if exchange.route.engine == "native" else None
        previous = exchange.caching.previous if exchange.route.engine == "native" else None
        with request_seconds(exchange.seconds), marking(native_mark), marking_previous(previous):
            yield

    @planned
    def _call_with_state(self, lm, lm_kwargs, signature, demos, inputs):
        """DSPy's adapter pipeline, sending the native ``Request`` that carries the replay state."""
        processed = self._call_preprocess(lm, lm_kwargs, signature, inputs)
        request = canonical_request(lm, self.format(processed, demos, inputs), lm_kwargs, hosted_of(current(), lm))
        try:
            response = lm(request, **call_options(lm_kwargs))
        except Exception as error:
            again = _renewed(request, error)
            if again is None:
                raise
            response = lm(again, **call_options(lm_kwargs))
        outputs = outputs_of(response)
        return self._call_postprocess(processed, signature, outputs, lm, lm_kwargs)

    @planned
    async def _acall_with_state(self, lm, lm_kwargs, signature, demos, inputs):
        processed = self._call_preprocess(lm, lm_kwargs, signature, inputs)
        request = canonical_request(lm, self.format(processed, demos, inputs), lm_kwargs, hosted_of(current(), lm))
        try:
            response = await lm.acall(request, **call_options(lm_kwargs))
        except Exception as error:
            again = _renewed(request, error)
            if again is None:
                raise
            response = await lm.acall(again, **call_options(lm_kwargs))
        outputs = outputs_of(response)
        return self._call_postprocess(processed, signature, outputs, lm, lm_kwargs)

    # -- hooks of DSPy's adapter pipeline ---------------------------------------------------------

    def _call_preprocess(self, lm, lm_kwargs, signature, inputs):
        exchange = current()
        native = self.uses_native_calls(lm)
        task = exchange.guidance.task
        exchange.dialect = dialect_for(self.base or _PLAIN_CHAT, task.signature, exchange.guidance.text_answer, native)
        exchange.media_family = family_of(lm)
        exchange.sent = (lm, lm_kwargs)  # the dict DSPy sends with: ``format`` may add the prompt cache
        if native and exchange.hosted_route is not None and not exchange.hosted_route.functions:
            native = False  # no function tools on this route (``_routes.hosted_openai_chat``): none asked for
        if native and not exchange.guidance.roster:
            # No function tool to offer (``finish="auto"`` without tools): no ``tools``, ``tool_choice`` or
            # ``parallel_tool_calls`` either. Every provider refuses a choice without tools (OpenAI: "'tool_choice'
            # is only allowed when 'tools' are specified", Anthropic alike, Gemini's calling config "without
            # function_declarations", even beside its built-in tools) and OpenAI an empty ``tools``; DSPy 3.4
            # sends the one natively and the other on LiteLLM. Without tools the default is the same answer.
            native = False
        if native:
            lm_kwargs["tools"] = exchange.tools = roster_for_provider(exchange.guidance.roster)
            if self.parallel_tool_calls is not None and lm_kwargs.get("parallel_tool_calls") is None:
                lm_kwargs["parallel_tool_calls"] = self.parallel_tool_calls
        else:
            for key in ("tools", "tool_choice", "parallel_tool_calls"):
                lm_kwargs.pop(key, None)
        hosted = hosted_of(exchange, lm) if exchange.route.engine == "litellm" else None
        if hosted is not None:  # top-level fields (``_routes.hosted_openai_chat``); natively the Request's
            lm_kwargs.update(hosted.options)
            if hosted.tools:  # provider-run tools after the function tools (OpenRouter's server tool)
                lm_kwargs["tools"] = [*(lm_kwargs.get("tools") or ()), *hosted.tools]
        if isinstance(self.base, dspy.JSONAdapter) and "response_format" not in lm_kwargs:
            json_response_format(self.base, lm, lm_kwargs, exchange.dialect)
        default_reasoning_effort(exchange.guidance.kind, lm, lm_kwargs, *thinking_of(exchange))
        return signature

    def format(self, signature, demos, inputs):
        exchange = current()
        if self.fallback:  # the fallback's own span (MLflow's format span, OpenInference's adapter span)
            tracing.annotate(self, tracing.request_attributes("json_fallback"))
        exchange.messages = _render(exchange, signature, demos, inputs)
        refuse_unsendable(exchange.messages, exchange.media_family)
        check_before_send()  # rendering (a slow tool_result_renderer) may have used up the time left
        return _cached(exchange, exchange.messages)

    def preview(self, lm: Any, signature: Any, demos: Any, inputs: Mapping[str, Any]) -> tuple[list[Any], Any]:
        """The current exchange's request as it would be sent, ``(messages, tools)``: rendered as
        ``format`` renders it, with no callback, no deadline check and nothing sent."""
        exchange = current()
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
        exchange = current()
        assert exchange.dialect is not None
        try:
            text, calls = exchange.dialect.read(completion)
        except ValueError as exc:  # calls written in a shape that cannot be read
            raise AdapterParseError(type(self).__name__, signature, completion, str(exc)) from exc
        return {STEP_TEXT: text, STEP_CALLS: [call_dict(c) for c in calls]}

    def _call_postprocess(self, processed_signature, original_signature, outputs, lm, lm_kwargs):
        exchange = current()
        output = outputs[0] if outputs else {}
        if not isinstance(output, Mapping):
            output = {"text": output}
        text = output.get("text")
        calls = tuple(raw_call(c) for c in output.get("tool_calls") or [])
        if text:
            try:
                parsed = self.parse(processed_signature, text)
            except AdapterParseError:
                if not calls:
                    raise
                parsed = {STEP_TEXT: text, STEP_CALLS: []}  # native calls are the step; keep the text as written
            text = parsed[STEP_TEXT]
            calls = calls or tuple(from_call_dict(c) for c in parsed[STEP_CALLS])
        exchange.reply = Reply(
            text=text,
            calls=calls,
            reasoning_content=output.get("reasoning_content"),
            reasoning_details=output.get("reasoning_details"),
        )
        return [{STEP_TEXT: text, STEP_CALLS: [call_dict(c) for c in calls]}]


def _renewed(request: Any, error: BaseException) -> Any:
    """The request again for a provider refusal a second request fixes (an expired code interpreter
    container: ``_routes.hosted_openai.fresh_container``), once; None: the error stands."""
    exchange = current()
    if exchange.hosted_route is None or not exchange.hosted:
        return None
    return exchange.hosted_route.renewed(request, error)


def hosted_of(exchange: Exchange, lm: Any = None) -> Any:
    """What the request carries for the program's hosted tools (``_routes.hosted``), or None; ``lm``: the
    LM the request goes with (the exchange's when it names one)."""
    if exchange.hosted_route is None or not exchange.hosted:
        return None
    return exchange.hosted_route.request(exchange.hosted, exchange.lm or lm)


def _cached(exchange: Exchange, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages as sent, with the prompt cache's marks where they are ours to place (LiteLLM),
    or DSPy's own ``prompt_cache`` added to the options they go out with (``_routes.caching``)."""
    caching = exchange.caching
    if caching.mark is not None and exchange.route.engine == "litellm":
        return marked(messages, caching.mark, openrouter=exchange.route.provider == "openrouter")
    if caching.native is not None and exchange.sent is not None:
        lm, options = exchange.sent
        config = native_cache(lm, caching, messages)
        if config is not None:
            options["prompt_cache"] = config
    return messages


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
