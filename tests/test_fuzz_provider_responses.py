"""Provider responses, fuzzed through the real ``dspy.LM`` path on both engines (native lm15 and
LiteLLM): OpenAI Chat Completions, the OpenAI Responses API, Anthropic Messages and Gemini, each
whole and streamed (server-sent events through ``dspy.streamify``), and cut short.

A local HTTP server on 127.0.0.1 answers every request of the turn with the example's bytes: a
real response body (or stream of events) with a few nodes replaced, deleted, inserted or nested,
then maybe cut at any byte (the length announced, the connection closed early). The property: the
turn ends with a prediction, or raises ``StepError`` (the documented failure: the turn got no
model response) whose reason was not raised by dspy_imp's own code as a raw ``TypeError``,
``KeyError``, ``AttributeError``, ``IndexError`` or ``RecursionError``; never another exception
or a hang.
"""

from __future__ import annotations

import json
import threading
import traceback
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import dspy
import pytest
from fuzz_helpers import JSONABLE, Deep, bounded, budget, encode, mutated
from hypothesis import example, given
from hypothesis import strategies as st
from streaming_helpers import stream_items

import dspy_imp
from dspy_imp import StreamListener

pytestmark = pytest.mark.block_network(allowed_hosts=[r"127\.0\.0\.1$"])

RAW = (TypeError, KeyError, AttributeError, IndexError, RecursionError, UnboundLocalError, NameError)


@dataclass(frozen=True)
class Reply:
    """What the server sends for every request: the whole body, or the events when the request asks
    to stream (``"stream": true``, Gemini's ``:streamGenerateContent``), and where to cut them."""

    body: bytes
    events: bytes
    cut: int | None = None  # send only the first ``cut`` bytes, then close (the announced length is the whole)


class Server:
    """One stdlib server for the module; each example sets ``reply``."""

    def __init__(self) -> None:
        self.reply = Reply(b"{}", b"")
        self.streamed: list[bool] = []  # per request: whether it asked to stream
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                streams = b'"stream":true' in raw.replace(b" ", b"") or "streamGenerateContent" in self.path
                server.streamed.append(streams)
                reply = server.reply
                body = reply.events if streams else reply.body
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream" if streams else "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.write(body if reply.cut is None else body[: reply.cut])
                self.wfile.flush()
                self.close_connection = True

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True).start()

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"


SERVER: Server | None = None


def server() -> Server:
    global SERVER
    if SERVER is None:
        SERVER = Server()
    return SERVER


# -- each provider's responses, whole and as events ----------------------------------------------

USAGE = {"prompt_tokens": 41, "completion_tokens": 7, "total_tokens": 48}
CHAT_CALL = {"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": '{"query": "cats"}'}}


def chat_body(message: dict[str, Any], finish: str) -> dict[str, Any]:
    choice = {"index": 0, "message": {"role": "assistant", **message}, "logprobs": None, "finish_reason": finish}
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1764460800,
        "model": "gpt-4o-mini",
        "choices": [choice],
        "usage": USAGE,
    }


def chat_chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1764460800,
        "model": "gpt-4o-mini",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


ANTHROPIC_USAGE = {"input_tokens": 41, "output_tokens": 7}


def anthropic_body(content: list[dict[str, Any]], stop: str) -> dict[str, Any]:
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5-20250929",
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": ANTHROPIC_USAGE,
    }


def anthropic_events(block: dict[str, Any], delta: dict[str, Any], stop: str) -> list[dict[str, Any]]:
    start = anthropic_body([], stop)
    start["stop_reason"] = None
    return [
        {"type": "message_start", "message": start},
        {"type": "content_block_start", "index": 0, "content_block": block},
        {"type": "content_block_delta", "index": 0, "delta": delta},
        {"type": "content_block_stop", "index": 0},
        {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None}, "usage": {"output_tokens": 7}},
        {"type": "message_stop"},
    ]


GEMINI_USAGE = {"promptTokenCount": 41, "candidatesTokenCount": 7, "totalTokenCount": 48}


def gemini_body(parts: list[dict[str, Any]], finish: str | None = "STOP") -> dict[str, Any]:
    candidate: dict[str, Any] = {"content": {"parts": parts, "role": "model"}, "index": 0}
    if finish:
        candidate["finishReason"] = finish
    return {"candidates": [candidate], "usageMetadata": GEMINI_USAGE, "modelVersion": "gemini-2.5-flash"}


RESPONSES_USAGE = {"input_tokens": 41, "output_tokens": 7, "total_tokens": 48}
MESSAGE_ITEM = {
    "type": "message",
    "id": "msg_1",
    "role": "assistant",
    "status": "completed",
    "content": [{"type": "output_text", "text": "Paris.", "annotations": []}],
}
CALL_ITEM = {
    "type": "function_call",
    "id": "fc_1",
    "call_id": "call_1",
    "name": "lookup",
    "arguments": '{"query": "cats"}',
    "status": "completed",
}


def response_body(*output: dict[str, Any], status: str = "completed") -> dict[str, Any]:
    return {
        "id": "resp_1",
        "object": "response",
        "created_at": 1764460800,
        "status": status,
        "model": "gpt-5-mini",
        "output": list(output),
        "usage": RESPONSES_USAGE,
    }


def response_events(item: dict[str, Any]) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": response_body(status="in_progress")},
        {"type": "response.output_item.added", "output_index": 0, "item": {**item, "status": "in_progress"}},
    ]
    if item["type"] == "message":
        events.append(
            {
                "type": "response.output_text.delta",
                "item_id": "msg_1",
                "output_index": 0,
                "content_index": 0,
                "delta": "Paris.",
            }
        )
    else:
        events.append(
            {
                "type": "response.function_call_arguments.delta",
                "item_id": "fc_1",
                "output_index": 0,
                "delta": item["arguments"],
            }
        )
    events += [
        {"type": "response.output_item.done", "output_index": 0, "item": item},
        {"type": "response.completed", "response": response_body(item)},
    ]
    return events


WHOLE = {
    "chat": [
        chat_body({"content": "Paris."}, "stop"),
        chat_body({"content": None, "tool_calls": [CHAT_CALL]}, "tool_calls"),
    ],
    "anthropic": [
        anthropic_body([{"type": "text", "text": "Paris."}], "end_turn"),
        anthropic_body(
            [
                {"type": "thinking", "thinking": "Hm.", "signature": "sig"},
                {"type": "tool_use", "id": "t1", "name": "lookup", "input": {"query": "cats"}},
            ],
            "tool_use",
        ),
    ],
    "gemini": [
        gemini_body([{"text": "Paris."}]),
        gemini_body([{"functionCall": {"name": "lookup", "args": {"query": "cats"}}, "thoughtSignature": "c2ln"}]),
    ],
    "responses": [response_body(MESSAGE_ITEM), response_body(CALL_ITEM)],
}
EVENTS = {
    "chat": [
        [
            chat_chunk({"role": "assistant", "content": "Par"}),
            chat_chunk({"content": "is."}),
            chat_chunk({}, "stop"),
            {**chat_chunk({}), "choices": [], "usage": USAGE},
        ],
        [chat_chunk({"role": "assistant", "tool_calls": [{"index": 0, **CHAT_CALL}]}), chat_chunk({}, "tool_calls")],
    ],
    "anthropic": [
        anthropic_events({"type": "text", "text": ""}, {"type": "text_delta", "text": "Paris."}, "end_turn"),
        anthropic_events(
            {"type": "tool_use", "id": "t1", "name": "lookup", "input": {}},
            {"type": "input_json_delta", "partial_json": '{"query": "cats"}'},
            "tool_use",
        ),
    ],
    "gemini": [
        [gemini_body([{"text": "Par"}], None), gemini_body([{"text": "is."}])],
        [gemini_body([{"functionCall": {"name": "lookup", "args": {"query": "cats"}}}])],
    ],
    "responses": [response_events(MESSAGE_ITEM), response_events(CALL_ITEM)],
}


def sse(protocol: str, events: Any) -> bytes:
    """``events`` as the provider streams them (Anthropic and Responses name each event)."""
    if not isinstance(events, list):
        return b"data: " + encode(events) + b"\n\n"
    lines = []
    for event in events:
        typed = isinstance(event, dict) and isinstance(event.get("type"), str)
        named = protocol in ("anthropic", "responses") and typed
        lines.append((f"event: {event['type']}\n".encode() if named else b"") + b"data: " + encode(event) + b"\n\n")
    if protocol == "chat":
        lines.append(b"data: [DONE]\n\n")
    return b"".join(lines)


# -- the turn ---------------------------------------------------------------------------------------


def lookup(query: str) -> str:
    """Look a thing up."""
    return "found"


def lm_for(protocol: str, engine: str) -> dspy.LM:
    base = server().base
    common: dict[str, Any] = {"api_key": "sk-test", "cache": False, "num_retries": 0, "engine": engine}
    if protocol == "chat":
        return dspy.LM("openai/gpt-4o-mini", api_base=base + "/v1", **common)
    if protocol == "responses":
        return dspy.LM("openai/gpt-5-mini", api_base=base + "/v1", model_type="responses", **common)
    if protocol == "anthropic":
        suffix = "/v1" if engine == "auto" else ""
        return dspy.LM("anthropic/claude-sonnet-4-5-20250929", api_base=base + suffix, **common)
    return dspy.LM("gemini/gemini-2.5-flash", api_base=base + "/v1beta", **common)


def ours(error: BaseException) -> bool:
    """A raw exception raised by dspy_imp's own code (not the LM client's, not a tool's)."""
    frames = traceback.extract_tb(error.__traceback__)
    return isinstance(error, RAW) and bool(frames) and "/dspy_imp/" in frames[-1].filename


def turn(protocol: str, engine: str, streamed: bool, reply: Reply) -> None:
    server().reply = reply
    agent = dspy_imp.ReActV2("question -> answer", tools=[lookup], max_iters=2)
    with dspy.context(lm=lm_for(protocol, engine)):
        try:
            if streamed:
                items = stream_items(agent, "sync", [StreamListener("answer")], question="Capital of France?")
                assert isinstance(items[-1], dspy_imp.Prediction), items[-1:]
            else:
                assert isinstance(agent(question="Capital of France?"), dspy_imp.Prediction)
        except dspy_imp.StepError as failed:
            reason = failed.reason
            if isinstance(reason, BaseException) and ours(reason):
                raise AssertionError(f"dspy_imp's own code raised {reason!r}") from reason


ODD_USAGE = {**response_body(CALL_ITEM), "usage": {**RESPONSES_USAGE, "input_tokens": {"a": 41}}}
ODD_ID = chat_body({"content": None, "tool_calls": [{**CHAT_CALL, "id": {"a": "c1"}}]}, "tool_calls")
COMBOS = [(p, e, s) for p in ("chat", "responses", "anthropic", "gemini") for e in ("auto", "litellm") for s in (0, 1)]


@st.composite
def replies(draw: st.DrawFn, protocol: str) -> Reply:
    index = draw(st.integers(0, 1))  # the text answer, or the tool call
    events = sse(protocol, draw(mutated(EVENTS[protocol][index], JSONABLE)))
    body = encode(draw(mutated(WHOLE[protocol][index], JSONABLE)))
    cut = draw(st.none() | st.integers(0, max(len(body), len(events)) - 1))
    return Reply(body, events, cut)


CASES = st.sampled_from(COMBOS).flatmap(lambda c: st.tuples(*map(st.just, c), replies(c[0])))


@budget(48)
@given(CASES)
@example(("chat", "auto", 0, Reply(encode(chat_body({"content": Deep(5000, "list")}, "stop")), b"")))
@example(("responses", "litellm", 0, Reply(json.dumps(ODD_USAGE).encode(), b"")))  # TypeError: int(dict)
@example(("chat", "litellm", 0, Reply(json.dumps(ODD_ID).encode(), b"")))  # TypeError: unhashable (a dict id)
def test_a_provider_response_is_a_prediction_or_a_step_error(case: tuple[str, str, int, Reply]) -> None:
    protocol, engine, streamed, reply = case
    bounded(lambda: turn(protocol, engine, bool(streamed), reply))


def test_every_unmutated_response_answers_on_both_engines() -> None:
    """The fuzz's seeds are real responses: each one, whole and streamed, ends the turn with a
    prediction (a fuzz from a seed no engine reads would test nothing)."""
    for protocol, engine, streamed in COMBOS:
        for whole, events in zip(WHOLE[protocol], EVENTS[protocol], strict=True):
            server().reply = Reply(json.dumps(whole).encode(), sse(protocol, events))
            server().streamed.clear()
            agent = dspy_imp.ReActV2("question -> answer", tools=[lookup], max_iters=2)
            with dspy.context(lm=lm_for(protocol, engine)):
                if streamed:
                    items = stream_items(agent, "sync", [StreamListener("answer")], question="Capital?")
                    prediction = items[-1]
                else:
                    prediction = agent(question="Capital?")
            assert isinstance(prediction, dspy_imp.Prediction), (protocol, engine, streamed, whole)
            asks = bool(streamed) and (protocol, engine) != ("responses", "litellm")  # DSPy sends that one whole
            assert set(server().streamed) == {asks}, (protocol, engine, streamed, server().streamed)
