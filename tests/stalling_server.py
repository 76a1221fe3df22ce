"""An OpenAI-compatible endpoint that never finishes its answer, and says when the client hung up.

Each connection's request is read whole (headers, then ``Content-Length`` bytes); the server then
sends ``sent`` streamed chunks of text (``sent=0``: nothing at all, a model still thinking; for a
request without ``"stream": true`` nothing is ever sent) and waits until the client closes the
connection, which sets ``closed``. Stdlib sockets only, so both of DSPy's engines (the native one
and LiteLLM) talk to it. ``waiting`` is set once the chunks are sent: the request is in flight.
"""

from __future__ import annotations

import json
import socket
import threading
from typing import Any


class StallingServer:
    def __init__(self, sent: int = 0) -> None:
        self.sent = sent
        self.bodies: list[Any] = []
        self.waiting, self.closed = threading.Event(), threading.Event()
        self._socket = socket.create_server(("127.0.0.1", 0))
        self._socket.settimeout(0.1)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="stalling-server", daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._socket.getsockname()[1]}/v1"

    def __enter__(self) -> StallingServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)
        self._socket.close()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                connection, _ = self._socket.accept()
            except TimeoutError:
                continue
            threading.Thread(target=self._answer, args=(connection,), daemon=True).start()

    def _answer(self, connection: socket.socket) -> None:
        with connection:
            body = _read_request(connection)
            self.bodies.append(body)
            if isinstance(body, dict) and body.get("stream"):
                head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
                connection.sendall(head.encode())
                for number in range(self.sent):
                    delta = {"role": "assistant", "content": f"word{number} "}
                    chunk = {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "gpt-4o-mini"}
                    chunk["choices"] = [{"index": 0, "delta": delta, "finish_reason": None}]
                    data = f"data: {json.dumps(chunk)}\n\n".encode()
                    connection.sendall(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.waiting.set()
            connection.settimeout(0.1)
            while not self._stop.is_set():
                try:
                    if connection.recv(4096) == b"":
                        break
                except TimeoutError:
                    continue
                except OSError:
                    break
            else:
                return
            self.closed.set()


def _read_request(connection: socket.socket) -> Any:
    data = b""
    while b"\r\n\r\n" not in data:
        data += connection.recv(4096)
    head, _, rest = data.partition(b"\r\n\r\n")
    length = next(
        (int(line.split(b":", 1)[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")),
        0,
    )
    while len(rest) < length:
        rest += connection.recv(4096)
    return json.loads(rest) if rest else None
