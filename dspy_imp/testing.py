"""`ScriptedLM`: a scripted, recording `dspy.LM` for testing DSPy programs offline.

It runs on DSPy's custom-engine API, so every call goes through DSPy's own plumbing (adapters,
callbacks, history, error projection) to an engine that answers from a script and records requests.

Example:
    ```python
    lm = ScriptedLM([reply(calls=[call("look", {"where": "shelf"}, id="c1")]), fail.server_error()])
    ```
"""

from __future__ import annotations

import asyncio
import functools
import json
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeAlias

import dspy
from dspy import lm15
from dspy.lm15 import Request, Response
from dspy.utils.exceptions import LMError

__all__ = [
    "Call",
    "Fail",
    "Failure",
    "RecordedRequest",
    "Reply",
    "Responder",
    "ScriptError",
    "ScriptItem",
    "ScriptedLM",
    "call",
    "fail",
    "reply",
]


class ScriptError(LMError, AssertionError):
    """The script and the program disagree (script exhausted, or a callable returned junk).

    An `AssertionError` for test runners, and an `LMError` so DSPy passes it through unwrapped.
    """


@dataclass(frozen=True)
class Call:
    """One native tool call the scripted model makes.

    `id=None` (the default) gets a stable generated id, `scripted_{request number}_{index}`, as a
    provider would send (so `cache=True` and `dspy.streamify` work); `id=""` models a provider that
    sent no id.
    """

    name: str
    args: dict[str, Any] = field(default_factory=dict)
    id: str | None = None


@dataclass(frozen=True)
class Reply:
    """A successful (HTTP 200) model reply. Build it with `reply(...)`."""

    text: str = ""
    calls: tuple[Call, ...] = ()
    finish_reason: str | None = None
    reasoning: str | None = None
    delay: float = 0.0
    usage: tuple[int, int] | lm15.Usage | None = None


@dataclass(frozen=True)
class Failure:
    """A failed model call: the engine raises `make()`'s exception. Build it with `fail.*`."""

    make: Callable[[], BaseException]
    delay: float = 0.0


@dataclass(frozen=True)
class RecordedRequest:
    """One request as the engine received it, converted back to OpenAI Chat Completions form.

    The conversion is the Chat Completions serializer of DSPy's native engine (the one DSPy uses to
    hand a Request to LiteLLM), set to keep reasoning as `reasoning_content` and the `max_tokens`
    spelling.
    Tool-call `arguments` are re-serialized compactly (`{"a":1}`): the engine gets parsed
    arguments, not the caller's string.

    Attributes:
        messages: `{"role", "content"}` dicts; assistant ones carry `tool_calls` (`[{"id", "type":
            "function", "function": {"name", "arguments"}}]`) only when they have calls,
            `reasoning_content` only when they carried reasoning, and `content` None when they had
            no text; tool ones carry `tool_call_id` (DSPy does not pass a tool message's `name`).
        tools: The OpenAI function tools as sent, or None.
        tool_choice: As sent: "auto", "required", "none", `{"type": "function", "function":
            {"name": ...}}`, or None.
        options: Every other option under its Chat Completions name: `temperature`, `max_tokens`
            (also for `max_completion_tokens`), `top_p`, `top_k`, `stop`, `seed`, `parallel_tool_calls`,
            `response_format`, `reasoning_effort`, `user`, `logit_bias`, ... (None-valued options
            never reach the engine, so they are absent).
        asynchronous: True when the call came through `acall`.
        request: The `dspy.lm15.Request` itself.
    """

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None
    tool_choice: str | dict[str, Any] | None
    options: dict[str, Any]
    asynchronous: bool
    request: Request = field(repr=False, compare=False)

    @property
    def roles(self) -> list[str]:
        """The message roles in order, e.g. `["system", "user", "assistant", "tool"]`."""
        return [message["role"] for message in self.messages]

    @property
    def tool_names(self) -> list[str]:
        """The names of the tools offered in this request (empty when none)."""
        return [tool["function"]["name"] for tool in self.tools or ()]


ScriptItem: TypeAlias = Reply | Failure | Callable[[RecordedRequest], Reply | Failure]
"""One item of a script: a reply, a failure, or a callable that makes either from the request."""
Responder: TypeAlias = Callable[[RecordedRequest], Reply | Failure]
"""A whole script as one callable: ``ScriptedLM(responder)`` asks it for every request's answer."""


def call(name: str, args: dict[str, Any] | None = None, *, id: str | None = None) -> Call:
    """A native tool call for `reply(calls=[...])`, e.g. `call("send", {"text": "hi"}, id="c2")`.

    Without `id` the call gets a stable generated one; `id=""` models a provider that sent none.
    """
    return Call(name, dict(args or {}), id)


def reply(
    text: str = "",
    *,
    calls: Sequence[Call] = (),
    finish_reason: str | None = None,
    reasoning: str | None = None,
    delay: float = 0.0,
    usage: tuple[int, int] | lm15.Usage | None = None,
) -> Reply:
    """A scripted model reply.

    Args:
        text: The visible text (may be empty).
        calls: Native tool calls (`call(...)`); not allowed with `ScriptedLM(native=False)`.
        finish_reason: As DSPy's native engine spells it: "stop", "length", "tool_call", "content_filter" or "error".
            Defaults to "tool_call" when there are calls, else "stop".
        reasoning: Provider reasoning text (a ThinkingPart; DSPy's `reasoning_content`).
        delay: Seconds to wait before answering (`asyncio.sleep` on the async path).
        usage: `(prompt_tokens, completion_tokens)`, or a `dspy.lm15.Usage` (cached and reasoning
            tokens too); defaults to a rough chars/4 estimate.

    Example:
        ```python
        reply("cut", finish_reason="length").finish_reason  # 'length'
        ```
    """
    reason = finish_reason or ("tool_call" if calls else "stop")
    if reason not in lm15.FINISH_REASONS:
        raise ValueError(f"finish_reason must be one of {sorted(lm15.FINISH_REASONS)}, got {reason!r}")
    return Reply(text, tuple(calls), reason, reasoning, delay, usage)


class _NoTransport:
    def stream(self, request: Any) -> Any:
        raise RuntimeError("dspy_imp.testing never sends requests")


@functools.cache
def _dialect() -> lm15.OpenAIChatLM:
    compat = lm15.OpenAIChatCompat(
        thinking_replay="native", max_tokens_field="max_tokens", tool_result_name="include", tool_result_media="native"
    )
    return lm15.OpenAIChatLM(api_key="scripted", transport=_NoTransport(), compat=compat)


def _http_error(
    status: int,
    message: str,
    kind: str,
    code: str | None = None,
    retry_after: float | None = None,
    delay: float = 0.0,
    **extra: Any,
) -> Failure:
    """An error exactly as lm15 builds it from an OpenAI error body; DSPy projects it to its public class."""
    body = json.dumps({"error": {"message": message, "type": kind, "param": None, "code": code, **extra}})

    def make() -> BaseException:
        error = _dialect().normalize_error(status, body)
        error.retry_after = retry_after
        return error

    return Failure(make, delay)


_SERVER = "The server had an error while processing your request. Sorry about that!"
_CONTEXT = "This model's maximum context length is 128000 tokens. Please reduce the length of the messages."
_TOOL_USE = "Failed to call a function. Please adjust your prompt. See 'failed_generation' for more details."
_TOOL_CHOICE = "Invalid tool_choice type: 'object'. Supported string values: none, auto, required"


class Fail:
    """The failures a script can hold: use the instance ``fail`` (``fail.server_error()``, ...).

    Each is DSPy's native engine's reading of an OpenAI error reply, projected by DSPy to its
    public error classes, exactly as a real provider's error would arrive.
    """

    def server_error(self, status: int = 500, message: str | None = None, *, delay: float = 0.0) -> Failure:
        """HTTP 5xx -> `LMServerError` (DSPy retries it when `num_retries` > 0); `message`: OpenAI's own by default."""
        return _http_error(status, _SERVER if message is None else message, "server_error", delay=delay)

    def rate_limit(
        self, message: str = "Rate limit reached for requests", *, retry_after: float | None = None, delay: float = 0.0
    ) -> Failure:
        """HTTP 429 -> `LMRateLimitError`; `retry_after` as a Retry-After header would set it."""
        return _http_error(429, message, "requests", "rate_limit_exceeded", retry_after, delay)

    def context_window(self, message: str | None = None, *, delay: float = 0.0) -> Failure:
        """HTTP 400 `context_length_exceeded` -> `ContextWindowExceededError`; `message`: OpenAI's own by default."""
        text = _CONTEXT if message is None else message
        return _http_error(400, text, "invalid_request_error", "context_length_exceeded", delay=delay)

    def invalid_request(self, message: str, *, delay: float = 0.0) -> Failure:
        """HTTP 400 -> `LMInvalidRequestError` with `message`."""
        return _http_error(400, message, "invalid_request_error", delay=delay)

    def tool_choice_refused(self, *, delay: float = 0.0) -> Failure:
        """The 400 of a server that takes no named `tool_choice` -> `LMInvalidRequestError`."""
        return self.invalid_request(_TOOL_CHOICE, delay=delay)

    def tool_use_failed(self, failed_generation: str = "", *, delay: float = 0.0) -> Failure:
        """Groq's 400 `tool_use_failed`: the provider refused the model's own malformed tool call
        (`failed_generation`: what the model wrote) -> `LMInvalidRequestError`."""
        return _http_error(
            400, _TOOL_USE, "invalid_request_error", "tool_use_failed", delay=delay, failed_generation=failed_generation
        )

    def raises(self, error: BaseException, *, delay: float = 0.0) -> Failure:
        """The engine raises exactly `error`. DSPy passes LMErrors through, maps `dspy.lm15` errors
        and wraps anything else in `LMUnexpectedError` (with `error` as its cause)."""
        return Failure(lambda: error, delay)


fail = Fail()


def _record(request: Request, asynchronous: bool) -> RecordedRequest:
    payload = _dialect()._payload(request, stream=False)
    for key in ("model", "stream", "stream_options"):
        payload.pop(key, None)
    if request.config.top_k is not None:  # no top_k on the Chat Completions wire; DSPy's LiteLLM path adds it
        payload["top_k"] = request.config.top_k
    messages, tools = payload.pop("messages"), payload.pop("tools", None)
    return RecordedRequest(messages, tools, payload.pop("tool_choice", None), payload, asynchronous, request)


class _Script:
    """The engine: one script and one recording, shared by every copy of the LM."""

    supports_reasoning = False
    supports_response_schema = False

    def __init__(self, items: Sequence[ScriptItem] | Responder, native: bool, reasoning: bool = False) -> None:
        self.responder = items if callable(items) else None  # answers every request; never runs out
        self.items = [] if callable(items) else list(items)
        self.native, self.position = native, 0
        self.requests: list[RecordedRequest] = []
        self.overruns: list[int] = []
        self.supports_function_calling = native
        self.supports_reasoning = reasoning
        params = {"temperature", "max_tokens", "max_completion_tokens", "top_p", "stop", "seed", "user"}
        self.supported_params = frozenset(
            params | ({"tools", "tool_choice", "parallel_tool_calls", "response_format"} if native else set())
        )
        self._lock = threading.Lock()
        for number, item in enumerate(self.items, 1):
            self._check(item, f"script item {number}", ValueError)

    def __deepcopy__(self, memo: dict[int, Any]) -> _Script:
        return self  # a copied LM still talks to the same scripted "server"

    def _check(self, item: object, where: str, error: type[Exception]) -> None:
        if not isinstance(item, Reply | Failure) and not callable(item):
            raise error(f"ScriptedLM: {where} must be reply(...), fail.*(...) or a callable, got {item!r}")
        if isinstance(item, Reply) and item.calls and not self.native:
            raise error(
                f"ScriptedLM: {where} has native tool calls, but native=False: a model without "
                "native function calling writes its calls as text; script them in reply(text)"
            )

    def next(self, request: Request, asynchronous: bool) -> tuple[Reply | Failure, int, RecordedRequest]:
        recorded = _record(request, asynchronous)
        with self._lock:
            self.requests.append(recorded)
            number = len(self.requests)
            if self.position >= len(self.items) and self.responder is not None:
                item: ScriptItem = self.responder
            elif self.position >= len(self.items):
                self.overruns.append(number)
                raise ScriptError(
                    f"ScriptedLM: request #{number} (lm.requests[{number - 1}]) arrived, but "
                    f"the script has only {len(self.items)} item(s); last message: "
                    f"{recorded.messages[-1] if recorded.messages else None!r}"
                )
            else:
                item = self.items[self.position]
                self.position += 1
        if not isinstance(item, Reply | Failure):
            item = item(recorded)
            self._check(item, f"the callable for request #{number}", ScriptError)
            if not isinstance(item, Reply | Failure):
                raise ScriptError(f"ScriptedLM: the callable for request #{number} returned {item!r}")
        return item, number, recorded

    def answer(self, item: Reply | Failure, number: int, recorded: RecordedRequest) -> Response:
        if isinstance(item, Failure):
            raise item.make()
        parts: list[Any] = [lm15.ThinkingPart(item.reasoning)] if item.reasoning else []
        parts += [lm15.TextPart(item.text)] if item.text or not item.calls else []
        for index, scripted in enumerate(item.calls):
            made_up = scripted.id if scripted.id is not None else f"scripted_{number}_{index}"
            part = lm15.ToolCallPart(id=made_up or "-", name=scripted.name, input=scripted.args)
            if not made_up:  # lm15 requires an id; "" reaches DSPy's adapter as "no id" (None)
                object.__setattr__(part, "id", "")
            parts.append(part)
        size = len(json.dumps(recorded.messages))  # default usage: a rough chars/4 estimate
        if isinstance(item.usage, lm15.Usage):
            usage = item.usage
        else:
            prompt, completion = item.usage or (size // 4 + 1, len(item.text) // 4 + 1 + 10 * len(item.calls))
            usage = lm15.Usage(input_tokens=prompt, output_tokens=completion, total_tokens=prompt + completion)
        model = recorded.request.model
        return Response(
            id=f"scripted-{number}",
            model=model.partition("/")[2] or model,
            usage=usage,
            message=lm15.Message.assistant(parts),
            finish_reason=item.finish_reason or ("tool_call" if item.calls else "stop"),
        )

    def complete(self, request: Request) -> Response:
        item, number, recorded = self.next(request, asynchronous=False)
        if item.delay:
            time.sleep(item.delay)
        return self.answer(item, number, recorded)

    def stream(self, request: Request) -> Iterator[Any]:
        yield from lm15.response_to_events(self.complete(request))


class _AsyncScript:
    def __init__(self, script: _Script) -> None:
        self.script = script

    async def complete(self, request: Request) -> Response:
        item, number, recorded = self.script.next(request, asynchronous=True)
        if item.delay:
            await asyncio.sleep(item.delay)
        return self.script.answer(item, number, recorded)

    async def stream(self, request: Request) -> Any:
        for event in lm15.response_to_events(await self.complete(request)):
            yield event


class ScriptedLM(dspy.LM):
    """A `dspy.LM` that answers from a script and records every request (`lm.requests`).

    Items are used in order, one per request, sync (`lm(...)`, `Predict.forward`) and async
    (`lm.acall`, `Predict.aforward`) alike. Copies (`lm.copy()`, `copy.deepcopy`) share the script
    and the recording, like two handles on one server; each keeps its own DSPy `history`. Not
    savable (`dump_state` refuses its engine); streaming works except for calls scripted with `id=""`.

    Args:
        script: A list of `reply(...)`, `fail.*(...)`, or callables `fn(RecordedRequest) -> reply/fail
            item`, used one per request; or a single callable that answers every request.
        native: True (default): `supports_function_calling` is True and replies may carry native
            calls. False: a model without native function calling (it writes calls as text).
        reasoning: True: `supports_reasoning` is True (a reasoning model: DSPy and the loop send
            `reasoning_effort` where they would to one). Default False.
        model: The model string DSPy sees (the response's model is the part after the slash).
        **kwargs: Passed to `dspy.LM` (e.g. `temperature`, `callbacks`). `cache` defaults to
            False and `num_retries` to 0, so a scripted failure is raised once, with no sleep.

    Example:
        ```python
        lm = ScriptedLM([reply("[[ ## answer ## ]]\\ncat\\n\\n[[ ## completed ## ]]")])
        with dspy.context(lm=lm):
            dspy.Predict("question -> answer")(question="What is it?").answer  # 'cat'
        ```
    """

    def __init__(
        self,
        script: Sequence[ScriptItem] | Responder,
        *,
        native: bool = True,
        reasoning: bool = False,
        model: str = "openai/scripted",
        **kwargs: Any,
    ) -> None:
        engine = _Script(script, native, reasoning)
        kwargs.setdefault("cache", False)
        kwargs.setdefault("num_retries", 0)
        super().__init__(model, engine=engine, async_engine=_AsyncScript(engine), **kwargs)

    @property
    def requests(self) -> list[RecordedRequest]:
        """Every request received so far, in order, including failed and unscripted ones."""
        return list(self._engine_spec.requests)

    @property
    def remaining(self) -> int:
        """How many script items are still unused."""
        return len(self._engine_spec.items) - self._engine_spec.position

    def assert_complete(self) -> None:
        """Raise AssertionError unless every item was used and no request ran past the script."""
        script = self._engine_spec
        if script.overruns:
            raise AssertionError(f"ScriptedLM: request(s) {script.overruns} arrived after the script ran out")
        if self.remaining:
            raise AssertionError(
                f"ScriptedLM: {self.remaining} scripted item(s) unused after "
                f"{len(script.requests)} request(s): {script.items[script.position :]!r}"
            )
