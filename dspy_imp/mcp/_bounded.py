"""An HTTP server's answers, bounded before they are parsed: ``max_message_bytes`` for HTTP.

The ``mcp`` SDK reads a streamable HTTP server's ``application/json`` answer whole
(``response.aread()``) before it parses it; its event streams it reads event by event, each bounded
(1 MiB, the SDK's ``max_sse_event_size``). ``Bounded`` is the ``httpx2`` transport under the
client a session uses: every answer that is not an event stream is read through ``_Capped``, which
stops at ``limit`` bytes (at once when ``Content-Length`` already says more) with an
``httpx2.StreamError``. The SDK answers that error to the one request the body was for (a JSON-RPC
error, "Failed to parse JSON response: ..."), so it ends only that call, an error observation
naming the bound; the session goes on.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx2


class Bounded(httpx2.AsyncBaseTransport):
    """``inner`` (an ``httpx2.AsyncHTTPTransport``), every answer but an event stream cut at ``limit`` bytes."""

    def __init__(self, inner: httpx2.AsyncBaseTransport, limit: int, label: str):
        self.inner, self.limit, self.label = inner, limit, label

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        response = await self.inner.handle_async_request(request)
        if response.headers.get("content-type", "").lower().startswith("text/event-stream"):
            return response  # read event by event, each bounded by the SDK
        declared = response.headers.get("content-length", "")
        stream = response.stream
        assert isinstance(stream, httpx2.AsyncByteStream)
        too_long = (
            f"{self.label} answered with a body longer than {self.limit:,} bytes (`max_message_bytes`); "
            "it was not read further"
        )
        response.stream = _Capped(stream, self.limit, too_long, int(declared) if declared.isdigit() else None)
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()


class _Capped(httpx2.AsyncByteStream):
    def __init__(self, inner: httpx2.AsyncByteStream, limit: int, too_long: str, declared: int | None):
        self.inner, self.limit, self.too_long, self.declared = inner, limit, too_long, declared

    async def __aiter__(self) -> AsyncIterator[bytes]:
        if self.declared is not None and self.declared > self.limit:  # not one byte of it read
            raise httpx2.StreamError(self.too_long)
        seen = 0
        async for chunk in self.inner:
            seen += len(chunk)
            if seen > self.limit:
                raise httpx2.StreamError(self.too_long)
            yield chunk

    async def aclose(self) -> None:
        await self.inner.aclose()
