"""A loopback OpenAI Chat Completions model for the web load benchmark (asyncio, stdlib only).

Every request streams ``TOKENS`` chunks ``DELAY`` seconds apart (Server-Sent Events when the
request asks for ``stream``, else one JSON reply after the same wait), so a request takes about
a second however many are in flight. What it answers is read off the request's messages alone,
so any instance (and any loop) can take any turn: when the last message is a tool result it
gives the answer (a ``final_result``/``submit`` call when such a tool is offered, else text),
otherwise it calls the first other tool offered. A turn is therefore a tool call then the
answer: two requests.

It counts the requests in flight and the most it saw at once: ``GET /_bench/stats`` returns
them, ``POST /_bench/reset`` starts a new count (``total`` counts on since the start).
``ModelServer`` runs it in a child process (its work never counts against the server measured).
``ModelServer(hold=True)`` (``BENCH_MODEL_HOLD=1``, for ``benchmarks.web_heap``) holds every
answer's stream halfway (``held`` counts them) until ``POST /_bench/release``: the turns then
all wait at the same point, however fast the machine is.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
import urllib.request
from typing import Any

TOKENS = 20
DELAY = 0.05
ANSWER_TOOLS = ("final_result", "submit")
HOLD = os.environ.get("BENCH_MODEL_HOLD") == "1"
RELEASED = {"event": None}  # the hold's event (made on the server's loop)


class Counts:
    def __init__(self) -> None:
        self.in_flight = 0
        self.max_in_flight = 0
        self.requests = 0
        self.calls = 0
        self.answers = 0
        self.total = 0  # every request since the start, never reset
        self.held = 0  # answers held halfway (``HOLD``) now

    def reset(self) -> None:
        """A new count; the requests still in flight stay counted."""
        self.max_in_flight = self.in_flight
        self.requests = self.calls = self.answers = 0

    def as_dict(self) -> dict[str, float]:
        return {**vars(self), "cpu_s": time.process_time()}


def decide(body: dict[str, Any]) -> tuple[str, str, str]:
    """``("call", name, arguments)`` or ``("text", "", text)`` for a request body."""
    messages = body.get("messages") or []
    tools = [t.get("function", {}).get("name", "") for t in body.get("tools") or []]
    last = messages[-1] if messages else {}
    if last.get("role") == "tool":
        answer = next((name for name in tools if name in ANSWER_TOOLS), None)
        words = " ".join(f"w{i}" for i in range(TOKENS))
        if answer:
            return "call", answer, json.dumps({"response": words, "reply": words})
        return "text", "", words
    tool = next((name for name in tools if name not in ANSWER_TOOLS), None)
    if tool is None:
        return "text", "", " ".join(f"w{i}" for i in range(TOKENS))
    return "call", tool, json.dumps({"where": "shelf"})


def _pieces(text: str, n: int) -> list[str]:
    size = max(1, -(-len(text) // n))
    parts = [text[i : i + size] for i in range(0, len(text), size)]
    return parts + [""] * (n - len(parts))


def _chunk(delta: dict[str, Any], finish: str | None = None, usage: dict[str, int] | None = None) -> bytes:
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    body: dict[str, Any] = {
        "id": "chatcmpl-web",
        "object": "chat.completion.chunk",
        "created": 1_700_000_000,
        "model": "gpt-4o-mini",
        "choices": [choice] if usage is None else [],
    }
    if usage is not None:
        body["usage"] = usage
    return b"data: " + json.dumps(body, separators=(",", ":")).encode() + b"\n\n"


USAGE = {"prompt_tokens": 100, "completion_tokens": TOKENS, "total_tokens": 100 + TOKENS}


async def _hold(counts: Counts) -> None:
    """An answer held halfway until ``POST /_bench/release`` (``HOLD``)."""
    released = RELEASED["event"]
    assert isinstance(released, asyncio.Event)
    counts.held += 1
    try:
        await released.wait()
    finally:
        counts.held -= 1


async def _stream(
    writer: asyncio.StreamWriter, kind: str, name: str, text: str, usage: bool, counts: Counts | None = None
) -> None:
    head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
    writer.write(head)

    def send(data: bytes) -> None:
        writer.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")

    for i, piece in enumerate(_pieces(text, TOKENS)):
        await asyncio.sleep(DELAY)
        if kind == "text":
            delta: dict[str, Any] = {"content": piece}
        else:
            call: dict[str, Any] = {"index": 0, "function": {"arguments": piece}}
            if i == 0:
                call.update(id=f"call_{time.monotonic_ns()}", type="function")
                call["function"]["name"] = name
            delta = {"tool_calls": [call]}
        if i == 0:
            delta["role"] = "assistant"
        send(_chunk(delta))
        await writer.drain()
        if HOLD and counts is not None and (kind == "text" or name in ANSWER_TOOLS) and i == TOKENS // 2:
            await _hold(counts)
    send(_chunk({}, "stop" if kind == "text" else "tool_calls"))
    if usage:
        send(_chunk({}, usage=USAGE))
    send(b"data: [DONE]\n\n")
    writer.write(b"0\r\n\r\n")
    await writer.drain()


def _whole(kind: str, name: str, text: str) -> bytes:
    if kind == "text":
        message: dict[str, Any] = {"role": "assistant", "content": text}
    else:
        call = {"id": f"call_{time.monotonic_ns()}", "type": "function", "function": {"name": name, "arguments": text}}
        message = {"role": "assistant", "content": None, "tool_calls": [call]}
    finish = "stop" if kind == "text" else "tool_calls"
    choice = {"index": 0, "message": message, "finish_reason": finish}
    return json.dumps(
        {
            "id": "chatcmpl-web",
            "object": "chat.completion",
            "created": 1_700_000_000,
            "model": "gpt-4o-mini",
            "choices": [choice],
            "usage": USAGE,
        }
    ).encode()


def _reply(writer: asyncio.StreamWriter, status: int, data: bytes) -> None:
    head = f"HTTP/1.1 {status} OK\r\ncontent-type: application/json\r\ncontent-length: {len(data)}\r\n\r\n"
    writer.write(head.encode() + data)


async def handle(counts: Counts, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            line = await reader.readline()
            if not line:
                return
            method, path, _ = line.decode().split(" ", 2)
            length = 0
            while (header := await reader.readline()) not in (b"\r\n", b"\n", b""):
                key, _, value = header.decode().partition(":")
                if key.strip().lower() == "content-length":
                    length = int(value)
            raw = await reader.readexactly(length) if length else b""
            if path.startswith("/_bench/"):
                if path == "/_bench/release":
                    released = RELEASED["event"]
                    assert isinstance(released, asyncio.Event)
                    released.set()
                    RELEASED["event"] = asyncio.Event()  # the next answers are held again
                elif method == "POST":
                    counts.reset()
                _reply(writer, 200, json.dumps(counts.as_dict()).encode())
                await writer.drain()
                continue
            body = json.loads(raw or b"{}")
            kind, name, text = decide(body)
            counts.requests += 1
            counts.total += 1
            counts.calls += kind == "call"
            counts.answers += kind == "text" or name in ANSWER_TOOLS
            counts.in_flight += 1
            counts.max_in_flight = max(counts.max_in_flight, counts.in_flight)
            try:
                if body.get("stream"):
                    usage = bool((body.get("stream_options") or {}).get("include_usage"))
                    await _stream(writer, kind, name, text, usage, counts)
                else:
                    await asyncio.sleep(DELAY * TOKENS)
                    _reply(writer, 200, _whole(kind, name, text))
                    await writer.drain()
            finally:
                counts.in_flight -= 1
    except (ConnectionError, asyncio.IncompleteReadError, ValueError):
        return
    except RuntimeError:  # uvloop's word for a write after the client closed (asyncio drops it silently)
        return
    finally:
        writer.close()


async def serve(port: int = 0) -> None:
    counts = Counts()
    RELEASED["event"] = asyncio.Event()
    server = await asyncio.start_server(lambda r, w: handle(counts, r, w), "127.0.0.1", port, backlog=4096)
    print(server.sockets[0].getsockname()[1], flush=True)
    async with server:
        await server.serve_forever()


class ModelServer:
    """The model in a child process: ``base_url`` (``.../v1``), ``reset()``, ``stats()``;
    ``hold``: answers held halfway until ``release()``."""

    def __init__(self, hold: bool = False) -> None:
        self.hold = hold

    def __enter__(self) -> ModelServer:
        env = {**os.environ, "BENCH_MODEL_HOLD": "1" if self.hold else "0"}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "benchmarks.web_model"], stdout=subprocess.PIPE, text=True, env=env
        )
        assert self.process.stdout is not None
        self.root = f"http://127.0.0.1:{int(self.process.stdout.readline())}"
        self.base_url = f"{self.root}/v1"
        return self

    def __exit__(self, *exc: Any) -> None:
        self.process.terminate()
        self.process.wait(timeout=10)
        if self.process.stdout is not None:
            self.process.stdout.close()

    def reset(self) -> dict[str, float]:
        request = urllib.request.Request(f"{self.root}/_bench/reset", data=b"{}", method="POST")
        with urllib.request.urlopen(request, timeout=30) as response:
            return dict(json.loads(response.read()))

    def release(self) -> None:
        """The held answers go on (``hold``); the next ones are held again."""
        request = urllib.request.Request(f"{self.root}/_bench/release", data=b"{}", method="POST")
        with urllib.request.urlopen(request, timeout=30) as response:
            response.read()

    def stats(self) -> dict[str, float]:
        with urllib.request.urlopen(f"{self.root}/_bench/stats", timeout=30) as response:
            return dict(json.loads(response.read()))


if __name__ == "__main__":
    from benchmarks.web_server import run

    run(serve(int(sys.argv[1]) if len(sys.argv) > 1 else 0))
