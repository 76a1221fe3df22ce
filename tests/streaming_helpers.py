"""Consuming ``dspy.streamify`` in tests: every item in order, and views of them."""

from __future__ import annotations

import asyncio
from typing import Any

import dspy
from dspy.streaming import StatusMessage, StreamResponse

from dspy_imp import StatusMessageProvider


def stream_items(program: dspy.Module, how: str, listeners: list[Any], **kwargs: Any) -> list[Any]:
    """Everything ``streamify`` hands the consumer, in order (sync: a sync generator over a sync program)."""
    provider = kwargs.pop("provider", StatusMessageProvider())
    asynchronous = how == "async"
    streamed = dspy.streamify(
        program,
        stream_listeners=listeners,
        status_message_provider=provider,
        is_async_program=asynchronous,
        async_streaming=asynchronous,
    )
    if not asynchronous:
        return list(streamed(**kwargs))

    async def consume() -> list[Any]:
        return [item async for item in streamed(**kwargs)]

    return asyncio.run(consume())


def chunks(items: list[Any], field: str) -> list[StreamResponse]:
    return [i for i in items if isinstance(i, StreamResponse) and i.signature_field_name == field]


def statuses(items: list[Any]) -> list[str]:
    return [i.message for i in items if isinstance(i, StatusMessage)]


def segments(responses: list[StreamResponse]) -> list[str]:
    """The field's text per request: chunks up to and including each ``is_last_chunk``."""
    out, current = [], ""
    for response in responses:
        current += response.chunk
        if response.is_last_chunk:
            out.append(current)
            current = ""
    assert current == "", "every request's part of a field ends with is_last_chunk"
    return out
