"""A tiny OpenAI-compatible Chat Completions server for wire tests.

It binds to 127.0.0.1 on a free port, answers each ``POST`` with the next scripted
``chat.completion`` body (or ``HTTPReply``: any status, headers such as ``Retry-After``, a
delay), and records every request (path, parsed JSON body, arrival time) and the connections
it accepted (``keep_alive=True`` answers on the same connection, as a provider does). A request
with ``"stream": true`` gets the same reply the way OpenAI streams it: server-sent events
(``text/event-stream``, HTTP chunked transfer encoding), one ``chat.completion.chunk`` per
word of text and per few characters of each tool call's arguments, the finish reason in a
last delta-less chunk, a usage chunk when ``stream_options.include_usage`` asks for one,
then ``data: [DONE]``. Stdlib only
(``http.server`` in a background thread), so both of DSPy's engines can talk to it: the
native lm15 engine (raw sockets) and LiteLLM (OpenAI SDK over ``httpx2``).

Example:
    >>> with FakeOpenAIServer([tool_calls_completion(...), text_completion("Hi")]) as server:
    ...     lm = dspy.LM("openai/gpt-4o-mini", api_base=server.base_url, api_key="sk-test")
    ...     ...
    ...     server.requests[0].body["messages"]
"""

from __future__ import annotations

import json
import re
import sys
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class ReceivedRequest:
    """One request as the server received it."""

    method: str
    path: str
    headers: Mapping[str, str]  # lower-cased names
    body: Any  # the parsed JSON body (None when there was none)
    received_at: float = 0.0  # time.monotonic() when the request arrived (compare with a deadline's end)


@dataclass(frozen=True)
class HTTPReply:
    """A scripted reply other than a plain 200: any status, extra headers, a delay before answering."""

    body: Mapping[str, Any]
    status: int = 200
    headers: Mapping[str, str] | None = None
    delay: float = 0.0


def error_body(message: str, kind: str = "server_error", code: str | None = None) -> dict[str, Any]:
    """An OpenAI error body."""
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


def tool_calls_completion(
    calls: Iterable[tuple[str, str, Mapping[str, Any]]], *, content: str | None = None, model: str = "gpt-4o-mini"
) -> dict[str, Any]:
    """A ``chat.completion`` body with native tool calls, ``finish_reason: "tool_calls"``.

    Args:
        calls: ``(id, name, arguments)`` triples; arguments are JSON-encoded as a provider does.
        content: Optional text beside the calls.
        model: The model name reported back.
    """
    tool_calls = [
        {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
        for call_id, name, args in calls
    ]
    message = {"role": "assistant", "content": content, "tool_calls": tool_calls}
    return _completion(message, "tool_calls", model)


def text_completion(content: str, *, finish_reason: str = "stop", model: str = "gpt-4o-mini") -> dict[str, Any]:
    """A ``chat.completion`` body with plain text content."""
    return _completion({"role": "assistant", "content": content}, finish_reason, model)


def _completion(message: dict[str, Any], finish_reason: str, model: str) -> dict[str, Any]:
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": model,
        "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish_reason}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }


def stream_chunks(
    completion: Mapping[str, Any], *, include_usage: bool = False, piece: int = 6
) -> list[dict[str, Any]]:
    """A ``chat.completion`` body as the ``chat.completion.chunk`` events OpenAI would stream.

    Text comes one word (with its trailing space) per chunk; each tool call starts with a
    chunk carrying its id, name and empty arguments, then ``piece`` characters of arguments
    per chunk.
    """
    choice = completion["choices"][0]
    message = choice["message"]
    deltas: list[dict[str, Any]] = [{"role": "assistant", "content": ""}]
    deltas += [{"content": word} for word in re.findall(r"\s*\S+\s*", message.get("content") or "")]
    for index, call in enumerate(message.get("tool_calls") or []):
        function = call["function"]
        deltas.append(
            {
                "tool_calls": [
                    {
                        "index": index,
                        "id": call["id"],
                        "type": "function",
                        "function": {"name": function["name"], "arguments": ""},
                    }
                ]
            }
        )
        arguments = function["arguments"]
        for start in range(0, len(arguments), piece):
            deltas.append(
                {"tool_calls": [{"index": index, "function": {"arguments": arguments[start : start + piece]}}]}
            )
    head = {k: completion[k] for k in ("id", "created", "model")}
    chunks = [
        {
            **head,
            "object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": d, "logprobs": None, "finish_reason": None}],
        }
        for d in deltas
    ]
    last = {"index": 0, "delta": {}, "logprobs": None, "finish_reason": choice["finish_reason"]}
    chunks.append({**head, "object": "chat.completion.chunk", "choices": [last]})
    if include_usage:
        chunks.append({**head, "object": "chat.completion.chunk", "choices": [], "usage": completion.get("usage")})
    return chunks


class FakeOpenAIServer:
    """Serves scripted Chat Completions bodies in order and records every request.

    A request that arrives after the script ran out gets HTTP 500 (an error DSPy raises, so a
    test with too few responses fails loudly instead of hanging); it is still recorded.
    """

    def __init__(self, responses: Sequence[Mapping[str, Any] | HTTPReply], *, keep_alive: bool = False) -> None:
        self.responses = list(responses)
        self.requests: list[ReceivedRequest] = []
        self.keep_alive = keep_alive  # answer on the same connection, as a provider does (HTTP/1.1)
        self.connections = 0  # the connections clients opened
        self._lock = threading.Lock()
        self._httpd = _Quiet(("127.0.0.1", 0), _handler_for(self))
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.05,), name="fake-openai", daemon=True)

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    @property
    def base_url(self) -> str:
        """The ``api_base`` to give ``dspy.LM``: ``http://127.0.0.1:<port>/v1``."""
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> FakeOpenAIServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> FakeOpenAIServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _next(self, request: ReceivedRequest) -> HTTPReply:
        with self._lock:
            self.requests.append(request)
            index = len(self.requests) - 1
        if index < len(self.responses):
            item = self.responses[index]
            return item if isinstance(item, HTTPReply) else HTTPReply(dict(item))
        message = f"fake server: request #{index + 1} arrived, but only {len(self.responses)} response(s) scripted"
        return HTTPReply(error_body(message), status=500)


class _Quiet(ThreadingHTTPServer):
    """A client that stopped waiting (its timeout fired) is no server error."""

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


def _handler_for(server: FakeOpenAIServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def setup(self) -> None:  # one handler per connection
            with server._lock:
                server.connections += 1
            super().setup()

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            body = json.loads(raw) if raw else None
            headers = {k.lower(): v for k, v in self.headers.items()}
            received = ReceivedRequest("POST", self.path, headers, body, time.monotonic())
            scripted = server._next(received)
            if scripted.delay:
                time.sleep(scripted.delay)
            if scripted.status == 200 and isinstance(body, dict) and body.get("stream"):
                usage = bool((body.get("stream_options") or {}).get("include_usage"))
                self._stream(stream_chunks(scripted.body, include_usage=usage))
                return
            data = json.dumps(scripted.body).encode()
            self.send_response(scripted.status)
            for name, value in (scripted.headers or {}).items():
                self.send_header(name, value)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            if not server.keep_alive:
                self.send_header("Connection", "close")  # one request per connection: nothing lingers at shutdown
            self.end_headers()
            self.wfile.write(data)
            self.close_connection = not server.keep_alive

        def _stream(self, chunks: list[dict[str, Any]]) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream; charset=utf-8")
            self.send_header("Transfer-Encoding", "chunked")
            self.send_header("Connection", "close")
            self.end_headers()
            for event in [*(json.dumps(c) for c in chunks), "[DONE]"]:
                data = f"data: {event}\n\n".encode()
                self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
            self.close_connection = True

        def log_message(self, format: str, *args: Any) -> None:  # keep pytest output clean
            pass

    return Handler
