"""The engine behind ``ScriptedLM``: one script and one recording, answering DSPy's custom-engine
calls sync and async."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import replace
from typing import Any

from dspy import lm15
from dspy.lm15 import Request, Response

from dspy_imp.testing._script import Failure, RecordedRequest, Reply, Responder, ScriptError, ScriptItem
from dspy_imp.testing._wire import record


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
        recorded = record(request, asynchronous)
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
        item, number, recorded = self.next(request, asynchronous=False)
        if item.delay:
            time.sleep(item.delay)
        for event, pause in _pieces(lm15.response_to_events(self.answer(item, number, recorded)), item):
            if pause:
                time.sleep(pause)
            yield event


class _AsyncScript:
    def __init__(self, script: _Script) -> None:
        self.script = script

    async def complete(self, request: Request) -> Response:
        item, number, recorded = self.script.next(request, asynchronous=True)
        if item.delay:
            await asyncio.sleep(item.delay)
        return self.script.answer(item, number, recorded)

    async def stream(self, request: Request) -> Any:
        item, number, recorded = self.script.next(request, asynchronous=True)
        if item.delay:
            await asyncio.sleep(item.delay)
        for event, pause in _pieces(lm15.response_to_events(self.script.answer(item, number, recorded)), item):
            if pause:
                await asyncio.sleep(pause)
            yield event


def _pieces(events: Iterator[Any], item: Any) -> Iterator[tuple[Any, float]]:
    """The stream's events, a text delta cut into ``item.chunk``-character pieces (or pieces of
    the lengths ``item.chunk`` lists, then the rest), each with the pause before it
    (``item.chunk_delay`` between pieces)."""
    size, pause = getattr(item, "chunk", 0), getattr(item, "chunk_delay", 0.0)
    for event in events:
        delta = getattr(event, "delta", None)
        if not size or not isinstance(delta, lm15.TextDelta) or (isinstance(size, int) and len(delta.text) <= size):
            yield event, 0.0
            continue
        for start, end in _cuts(len(delta.text), size):
            piece = replace(delta, text=delta.text[start:end])
            if start:
                piece = replace(piece, logprobs=(), logprobs_complete=True)
            yield replace(event, delta=piece), pause if start else 0.0


def _cuts(length: int, size: int | tuple[int, ...]) -> Iterator[tuple[int, int]]:
    """``(start, end)`` of each piece of a text of ``length`` characters."""
    if isinstance(size, int):
        yield from ((start, min(start + size, length)) for start in range(0, length, size))
        return
    start = 0
    for piece in size:
        end = min(start + piece, length)
        if end > start:
            yield start, end
        start = end
    if start < length:
        yield start, length
