"""What a script is made of: replies, tool calls and failures, the requests it records, and the
error raised when the script and the program disagree."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from dspy import lm15
from dspy.lm15 import Request
from dspy.utils.exceptions import LMError


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
    chunk: int | tuple[int, ...] = 0
    chunk_delay: float = 0.0


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
    chunk: int | Sequence[int] = 0,
    chunk_delay: float = 0.0,
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
        chunk: When streamed, send the text in pieces of this many characters (0: in one piece), as
            a provider streams tokens; or a sequence of lengths, the pieces' (then the rest in one
            piece), to cut the text exactly where a test needs it (`chunk=(2, 5)`: `"[["`,
            `" ## a"`, then the rest).
        chunk_delay: Seconds to wait between those pieces (so a page visibly streams).

    Example:
        ```python
        reply("cut", finish_reason="length").finish_reason  # 'length'
        ```
    """
    reason = finish_reason or ("tool_call" if calls else "stop")
    if reason not in lm15.FINISH_REASONS:
        raise ValueError(f"finish_reason must be one of {sorted(lm15.FINISH_REASONS)}, got {reason!r}")
    sizes = chunk if isinstance(chunk, int) else tuple(chunk)
    if isinstance(sizes, tuple) and not all(isinstance(size, int) and size > 0 for size in sizes):
        raise ValueError(f"chunk must be a length or a sequence of positive lengths, got {chunk!r}")
    if (isinstance(sizes, int) and sizes < 0) or chunk_delay < 0:
        raise ValueError(f"chunk and chunk_delay must not be negative, got {chunk!r}, {chunk_delay!r}")
    return Reply(text, tuple(calls), reason, reasoning, delay, usage, sizes, chunk_delay)
