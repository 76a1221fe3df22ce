"""``ReActAdapter``: renders the loop's requests and reads its replies, for any DSPy adapter.

The loop hands each request's ``Guidance`` to the adapter through a context variable (no
private keys in ``config``, which could reach the provider or flip ``engine="auto"`` to
LiteLLM). The adapter

- sends the tool roster natively and leaves ``tool_choice`` as the loop chose it, and never
  lets DSPy add ``reasoning_effort`` behind the loop's back;
- renders the messages with ``_render`` (one ``on_adapter_format_start`` callback per
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
from dspy.adapters.base import _provider_tool_call_to_tool_call_dict
from dspy.utils.exceptions import AdapterParseError

from ._deadline import check_before_send
from ._dialect import Dialect, dialect_for, jsonable
from ._effects import RawCall, Reply
from ._guidance import Guidance, roster_for_provider
from ._nameless import UNNAMED, as_received
from ._render import render_request
from ._signature import STEP_CALLS, STEP_TEXT


@dataclass
class Exchange:
    """One request in flight: the guidance in, the raw reply out."""

    guidance: Guidance
    reply: Reply | None = None
    dialect: Dialect | None = None
    keep_reasoning: bool = True


_EXCHANGE: ContextVar[Exchange | None] = ContextVar("dspy_imp_exchange", default=None)


@dataclass
class _ReplyRecorder:
    """Stands on DSPy's ``caller_modules`` stack to receive this request's history entry."""

    history: list[dict[str, Any]] = field(default_factory=list)


class ReActAdapter(dspy.ChatAdapter):
    """The adapter that renders ``dspy_imp.ReActV2`` steps.

    You rarely build one: the loop wraps whatever adapter you configured. Configure it
    yourself only to pass callbacks (``dspy.configure(adapter=dspy_imp.ReActAdapter(callbacks=[...]))``).

    A step the model answered in a format that cannot be read (a written-calls reply with
    broken JSON, say) gets DSPy's JSON fallback, as with ``ChatAdapter``: one more request,
    rendered by this adapter in JSON, so the guidance, the history rendering and the tool
    result renderer are the same. A JSON base has no fallback; the extractor never has one.

    Args:
        base: The adapter whose format the steps follow, and which serves every call that is
            not a loop step. Defaults to a plain ``dspy.ChatAdapter``.
        callbacks: Adapter callbacks; defaults to ``base``'s.
    """

    def __init__(self, base: dspy.Adapter | None = None, callbacks: list[Any] | None = None):
        if isinstance(base, ReActAdapter):
            base = base.base
        super().__init__(
            callbacks=callbacks if callbacks is not None else getattr(base, "callbacks", None),
            use_native_function_calling=True,
            use_json_adapter_fallback=not isinstance(base, dspy.JSONAdapter),
        )
        self.base: dspy.Adapter | None = base

    def _make_json_adapter_fallback(self) -> ReActAdapter:
        return ReActAdapter(base=dspy.JSONAdapter(), callbacks=self.callbacks)

    # -- the call ----------------------------------------------------------------------------

    def __call__(self, lm, lm_kwargs, signature, demos, inputs):
        exchange = _EXCHANGE.get()
        if exchange is None:
            return (self.base or dspy.ChatAdapter())(lm, lm_kwargs, signature, demos, inputs)
        recorder = _ReplyRecorder()
        with _recording(recorder):
            values = super().__call__(lm, lm_kwargs, signature, demos, inputs)
        _note_finish_reason(exchange, recorder)
        return values

    async def acall(self, lm, lm_kwargs, signature, demos, inputs):
        exchange = _EXCHANGE.get()
        if exchange is None:
            return await (self.base or dspy.ChatAdapter()).acall(lm, lm_kwargs, signature, demos, inputs)
        recorder = _ReplyRecorder()
        with _recording(recorder):
            values = await super().acall(lm, lm_kwargs, signature, demos, inputs)
        _note_finish_reason(exchange, recorder)
        return values

    # -- hooks of DSPy's adapter pipeline ---------------------------------------------------------

    def _call_preprocess(self, lm, lm_kwargs, signature, inputs):
        exchange = _current()
        native = bool(lm.supports_function_calling)
        task = exchange.guidance.task
        exchange.dialect = dialect_for(
            self.base or dspy.ChatAdapter(), task.signature, exchange.guidance.text_answer, native
        )
        exchange.keep_reasoning = _carries_reasoning(lm)
        if native:
            lm_kwargs["tools"] = roster_for_provider(exchange.guidance.roster)
        else:
            for key in ("tools", "tool_choice", "parallel_tool_calls"):
                lm_kwargs.pop(key, None)
        return signature

    def format(self, signature, demos, inputs):
        exchange = _current()
        guidance = replace(exchange.guidance, keep_reasoning=exchange.keep_reasoning, dialect=exchange.dialect)
        pending = {k: v for k, v in inputs.items() if k in guidance.task.inputs}
        messages = render_request(guidance, signature.instructions, demos, pending)
        check_before_send()  # rendering (a slow tool_result_renderer) may have used up the time left
        return messages

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


def _carries_reasoning(lm: Any) -> bool:
    """Whether replayed ``reasoning_content`` reaches the provider as reasoning.

    LiteLLM forwards it as its own key and a custom engine receives it as a thinking part;
    DSPy's native engine folds it into the visible assistant text, so there it is left out
    of the request (it stays in the record).
    """
    engine = getattr(lm, "_engine_spec", "auto")
    return not isinstance(engine, str) or engine == "litellm"


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
    data = _provider_tool_call_to_tool_call_dict(provider_call)
    name = data.get("name") if data.get("name") != UNNAMED else None  # lm15 read it nameless (_nameless)
    name = name or None
    return RawCall(
        id=data.get("id") or None,
        name=name,
        args=data.get("args"),
        received=None if name else as_received(jsonable(provider_call)),
    )


# -- the provider's finish reason ------------------------------------------------------------------

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


def _note_finish_reason(exchange: Exchange, recorder: _ReplyRecorder) -> None:
    if exchange.reply is None or not recorder.history:
        return
    reason = finish_reason_of(recorder.history[-1].get("response"))
    exchange.reply = replace(exchange.reply, finish_reason=reason)


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
