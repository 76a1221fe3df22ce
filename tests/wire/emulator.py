"""A local emulator of the four provider APIs: serves scripted responses, records every request.

Stdlib only (``http.server`` in a background thread on 127.0.0.1), so both ``dspy.LM``
engines reach it: the native lm15 engine (stdlib sockets, which VCR cannot see) and LiteLLM
(httpx, which VCR records). The response bodies are built by ``responses.py`` in each
provider's own format; the emulator plays them in order, with the usage a provider's prompt
cache reports (``prompt_cache.py``: Anthropic's breakpoints, OpenAI's automatic cache). Headers
are fixed (no ``Date``, no ``Server`` version) so cassettes recorded from it are byte-for-byte
reproducible.

A request beyond the script gets HTTP 500 with a message naming it, and is still recorded:
a test with too few responses fails loudly instead of hanging.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prompt_cache import PromptCaches


@dataclass(frozen=True)
class Scripted:
    """One scripted answer: an HTTP status and a JSON body.

    ``shaped``, when given, makes the body from the request's body at answer time (a provider whose
    answer depends on what it was sent: Claude's thinking blocks bound to the request's prefix).
    """

    status: int
    body: dict[str, Any]
    shaped: Callable[[Any], dict[str, Any]] | None = None
    sse: str | None = None  # a streamed reply: the ``text/event-stream`` body, served as given (``body`` unused)

    def body_for(self, request: Any) -> dict[str, Any]:
        return self.shaped(request) if self.shaped is not None else self.body


@dataclass(frozen=True)
class Received:
    """One request as it arrived: method, path (with query) and parsed JSON body."""

    method: str
    path: str
    body: Any
    beta: str | None = None  # the ``anthropic-beta`` header, as sent


class Emulator:
    """Plays ``script`` in order on 127.0.0.1 (``port=0``: a free port) and records requests."""

    def __init__(self, script: Sequence[Scripted], port: int = 0) -> None:
        self.script = list(script)
        self.requests: list[Received] = []
        self.caches = PromptCaches()  # Anthropic's and OpenAI's prompt caches (``prompt_cache.py``)
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", port), _handler_for(self))
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.05,), name="emulator", daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def __enter__(self) -> Emulator:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def answer(self, received: Received) -> Scripted:
        with self._lock:
            self.requests.append(received)
            index = len(self.requests) - 1
        if index < len(self.script):
            return self.script[index]
        message = f"emulator: request #{index + 1} arrived, but only {len(self.script)} response(s) scripted"
        return Scripted(500, {"error": {"message": message, "type": "server_error"}})


def _handler_for(emulator: Emulator) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "emulator"
        sys_version = ""

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            received = Received("POST", self.path, json.loads(raw) if raw else None, self.headers.get("anthropic-beta"))
            scripted = emulator.answer(received)
            if scripted.sse is not None:
                self._send(scripted.status, "text/event-stream; charset=utf-8", scripted.sse.encode())
                return
            status, body = emulator.caches.answer(
                self.path, received.body, scripted.status, scripted.body_for(received.body)
            )
            self._send(status, "application/json", json.dumps(body, ensure_ascii=False).encode())

        def _send(self, status: int, content_type: str, data: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(data)
            self.close_connection = True

        def date_time_string(self, timestamp: float | None = None) -> str:
            return "Mon, 30 Nov 2026 00:00:00 GMT"  # fixed: recordings must not vary

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler
