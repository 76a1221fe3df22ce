"""A scripted OpenAI-compatible Chat Completions server for the benchmarks (stdlib only).

It runs in its own process (``BenchServer`` starts and stops it), so its work never counts
against the loop being measured, and answers every request at once from a *scenario*: a
small script of what "the model" does, read off the request itself (how many tool results
it holds, which tools and ``tool_choice`` it offers). The model gives its final answer the
way the loop asks for one: a named ``tool_choice`` is obeyed, a ``submit`` tool (DSPy's and
ours) or pydantic-ai's ``final_result`` tool is called, a JSON schema ``response_format``
(the OpenAI Agents SDK with a typed output) gets JSON text, and otherwise it answers in
plain text.

Every request body is kept as received; ``stats`` hands them back between turns, so sizes,
prefix shares and token counts are computed outside the timed region.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from . import caches, messages_api

ANSWER = "found"
SCENARIOS = (
    "steps",  # N tool steps, then the answer
    "thought_then_answer",
    "thought_then_tool",
    "step_limit",  # always another tool call
    "provider_error",  # one HTTP 500 on the second request
    "named_choice_refused",  # HTTP 400 for a named tool_choice
    "enum_output",  # an invalid enum value first
    "never_submits",  # text only, whatever is asked
)


class Script:
    """One turn's scenario and what the server has received in it."""

    def __init__(self, scenario: str = "steps", steps: int = 1, answer: dict[str, Any] | None = None):
        self.scenario = scenario
        self.steps = steps
        self.answer = answer or {"answer": ANSWER}
        self.bodies: list[bytes] = []
        self.statuses: list[int] = []
        self.times: list[list[float]] = []  # per request: [read, replied], time.monotonic()
        self.replies: list[dict[str, Any] | None] = []  # the reply's message (None for an error)
        self.usage: list[dict[str, Any] | None] = []  # as the provider reports it, per request
        self.deepseek: list[dict[str, int] | None] = []  # what DeepSeek's cache would report (Chat Completions)
        self.connections: set[int] = set()  # the connections that carried this turn's requests
        self.opened = 0  # of which opened after the reset
        self.count = count = _counter()
        self.openai, self.deepseek_cache = caches.openai_cache(count), caches.deepseek_cache(count)
        self.anthropic: dict[str, caches.AnthropicCache] = {}
        self.anthropic_later: dict[str, caches.AnthropicCache] = {}  # the later tool-use prompt table
        self.usage_later: list[dict[str, Any] | None] = []  # the same requests billed under it
        self.betas: list[str | None] = []  # each request's ``anthropic-beta`` header

    def respond(self, raw: bytes, wire: str = "chat", beta: str | None = None) -> tuple[int, dict[str, Any]]:
        """The reply to one request: ``wire`` is ``"chat"`` (Chat Completions) or ``"messages"`` (Anthropic)."""
        index = len(self.bodies)
        self.bodies.append(raw)
        self.betas.append(beta)
        if wire != "messages":
            self.usage_later.append(None)
        received = json.loads(raw)
        body = messages_api.chat_view(received) if wire == "messages" else received
        status, reply = self._decide(index, body)
        if self.scenario != "never_submits":  # that model writes plain text, whatever it is asked
            reply = _shaped(reply, body, self.answer)
        if status == 200 and wire == "messages":
            status, reply = self._anthropic_usage(received, reply)
        elif status == 200:
            self._chat_usage(received, reply)
        else:
            self.usage.append(None)
            self.deepseek.append(None)
            if wire == "messages":
                self.usage_later.append(None)
        self.statuses.append(status)
        self.replies.append(reply["choices"][0]["message"] if status == 200 else None)
        if wire == "messages":
            model = received.get("model", "")
            return status, messages_api.reply(status, reply, model, self.usage[-1] or {})
        return status, reply

    def _output(self, reply: dict[str, Any]) -> int:
        """The output tokens as the provider bills them: what the model wrote (its text, and each call's
        name and arguments), not the Chat Completions JSON around it (roles, ids, field names)."""
        message = reply["choices"][0]["message"]
        written = [message.get("content") or ""]
        for call in message.get("tool_calls") or ():
            written += [call["function"]["name"], call["function"].get("arguments") or ""]
        return sum(self.count(text) for text in written if text)

    def _chat_usage(self, body: dict[str, Any], reply: dict[str, Any]) -> None:
        prompt, cached = self.openai.usage(body)
        _, hit = self.deepseek_cache.usage(body)
        output = self._output(reply)
        usage = {
            "prompt_tokens": prompt,
            "completion_tokens": output,
            "total_tokens": prompt + output,
            "prompt_tokens_details": {"cached_tokens": cached, "audio_tokens": 0},
        }
        reply["usage"] = usage
        self.usage.append(usage)
        self.deepseek.append({"prompt_cache_hit_tokens": hit, "prompt_cache_miss_tokens": prompt - hit})

    def _anthropic_usage(self, body: dict[str, Any], reply: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        model = body.get("model", "")
        cache = self.anthropic.setdefault(model, caches.AnthropicCache.for_model(self.count, model))
        later = self.anthropic_later.setdefault(
            model, caches.AnthropicCache.for_model(self.count, model, caches.TOOL_USE_SYSTEM_PROMPT_LATER)
        )
        try:
            usage: dict[str, Any] = {**cache.usage(body), "output_tokens": self._output(reply)}
            self.usage_later.append({**later.usage(body), "output_tokens": usage["output_tokens"]})
        except caches.TooManyBreakpoints as error:
            self.usage.append(None)
            self.usage_later.append(None)
            self.deepseek.append(None)
            return 400, _error(str(error), "invalid_request_error")
        self.usage.append(usage)
        self.deepseek.append(None)
        return 200, reply

    def _decide(self, index: int, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        scenario, tools = self.scenario, _tool_names(body)
        named = _named_choice(body)
        if scenario == "named_choice_refused" and named:
            return 400, _error(
                "Invalid value for 'tool_choice': unsupported; supported string values are 'none', "
                "'auto' and 'required'",
                "invalid_request_error",
            )
        if scenario == "provider_error" and index == 1:
            return 500, _error("The server had an error while processing your request.", "server_error")
        if scenario == "never_submits":
            return 200, _text("It is probably in the kitchen.")
        # Some call, whichever, or JSON under a structured output: no bare thought.
        required = body.get("tool_choice") == "required" or _structured(body)
        done = sum(1 for m in body.get("messages", []) if m.get("role") == "tool")
        if named is None and scenario in ("thought_then_answer", "thought_then_tool", "named_choice_refused"):
            if index == 0 and not required:
                return 200, _text("Let me think about where to look.")
            if scenario == "thought_then_tool" and done == 0 and "look" in tools:
                return 200, _call("look", {"where": "shelf"}, "call_0")
        wants_step = scenario == "step_limit" or (scenario in ("steps", "provider_error") and done < self.steps)
        if wants_step and named is None and "look" in tools:
            return 200, _call("look", {"where": f"place {done}"}, f"call_{done}")
        return 200, self._answer(body, named, tools)

    def _answer(self, body: dict[str, Any], named: str | None, tools: list[str]) -> dict[str, Any]:
        answer = self.answer
        if self.scenario == "enum_output" and not _answered_before(body):
            answer = {**answer, "answer": "maybe"}
        for name in (named, "submit", "final_result", "json_tool_call"):
            if name and name in tools:
                return _call(name, answer, f"call_{name}_{len(self.bodies)}")
        if _structured(body):
            return _text(json.dumps(answer))
        return _text(str(answer["answer"]))


_ASKED = re.compile(r"\[\[ ## (\w+) ## \]\]")
_THOUGHT = "I will look in the next place."


def _asked_fields(body: dict[str, Any]) -> list[str]:
    """The fields a ChatAdapter request asks the model to write, in order (its last user message)."""
    users = [m for m in body.get("messages", []) if m.get("role") == "user" and isinstance(m.get("content"), str)]
    if not users or "Respond with the corresponding output fields" not in users[-1]["content"]:
        return []
    asked = users[-1]["content"].split("Respond with the corresponding output fields", 1)[1]
    return [name for name in _ASKED.findall(asked) if name != "completed"]


def _shaped(reply: dict[str, Any], body: dict[str, Any], answer: dict[str, Any]) -> dict[str, Any]:
    """The reply as a real model writes it for a ChatAdapter request: every asked field in its markers."""
    fields = _asked_fields(body)
    message = reply.get("choices", [{}])[0].get("message")
    if not fields or message is None:
        return reply
    text = message.get("content")
    values = {"next_thought": text or _THOUGHT, "reasoning": _THOUGHT, **{k: str(v) for k, v in answer.items()}}
    parts = [f"[[ ## {name} ## ]]\n{values.get(name, text or '')}" for name in fields]
    message["content"] = "\n\n".join([*parts, "[[ ## completed ## ]]"])
    return reply


def _answered_before(body: dict[str, Any]) -> bool:
    """Whether an earlier answer attempt is in the conversation (the enum scenario's second try)."""
    for message in body.get("messages", []):
        for call in message.get("tool_calls") or []:
            if call.get("function", {}).get("name") in ("submit", "final_result", "json_tool_call"):
                return True
        if message.get("role") == "assistant" and "maybe" in str(message.get("content") or ""):
            return True
    return False


def _structured(body: dict[str, Any]) -> bool:
    return (body.get("response_format") or {}).get("type") == "json_schema"


def _tool_names(body: dict[str, Any]) -> list[str]:
    return [t.get("function", {}).get("name") for t in body.get("tools") or []]


def _named_choice(body: dict[str, Any]) -> str | None:
    choice = body.get("tool_choice")
    return choice.get("function", {}).get("name") if isinstance(choice, dict) else None


def _completion(message: dict[str, Any], finish_reason: str) -> dict[str, Any]:
    return {
        "id": "chatcmpl-bench",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": "gpt-4o-mini",
        "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish_reason}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }


def _text(content: str) -> dict[str, Any]:
    return _completion({"role": "assistant", "content": content}, "stop")


def _call(name: str, args: dict[str, Any], call_id: str) -> dict[str, Any]:
    call = {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
    return _completion({"role": "assistant", "content": None, "tool_calls": [call]}, "tool_calls")


def _error(message: str, kind: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": None, "code": None}}


_COUNTERS: list[caches.Counter] = []


def _counter() -> caches.Counter:
    """One memoised token counter per process (turns resend the same blocks)."""
    if not _COUNTERS:
        _COUNTERS.append(caches.Counter(_encoding()))
    return _COUNTERS[0]


def _encoding() -> Any:
    """``cl100k_base`` from the copy LiteLLM bundles (no download, and no LiteLLM import in the server)."""
    import importlib.util
    import os
    from pathlib import Path

    spec = importlib.util.find_spec("litellm")
    assert spec is not None and spec.submodule_search_locations
    bundled = Path(next(iter(spec.submodule_search_locations))) / "litellm_core_utils" / "tokenizers"
    os.environ.setdefault("TIKTOKEN_CACHE_DIR", str(bundled))
    import tiktoken

    return tiktoken.get_encoding("cl100k_base").encode


# -- the server process ----------------------------------------------------------------------


def serve() -> None:
    state: dict[str, Any] = {"script": Script(), "connections": 0, "at_reset": 0}
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True  # one reply is two writes: no 40 ms delayed-ACK stall

        def setup(self) -> None:  # one handler per accepted connection
            super().setup()
            with lock:
                state["connections"] += 1
                self.connection_id = state["connections"]

        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("content-length") or 0))
            received = time.monotonic()
            with lock:
                if self.path == "/_bench/reset":
                    config = json.loads(raw)
                    state["script"] = Script(config["scenario"], config["steps"], config.get("answer"))
                    state["at_reset"] = state["connections"]
                    status, reply, stream = 200, {"ok": True}, False
                else:
                    script = state["script"]
                    wire = "messages" if self.path.rstrip("/").endswith("/messages") else "chat"
                    status, reply = script.respond(raw, wire, self.headers.get("anthropic-beta"))
                    stream = wire == "messages" and status == 200 and json.loads(raw).get("stream") is True
                    script.times.append([received, 0.0])
                    timing = script.times[-1]
                    if self.connection_id not in script.connections:
                        script.connections.add(self.connection_id)
                        script.opened += self.connection_id > state["at_reset"]
            self._send(status, reply, stream)
            if self.path != "/_bench/reset":
                timing[1] = time.monotonic()

        def do_GET(self) -> None:
            with lock:
                script = state["script"]
                reply = {
                    "bodies": [b.decode() for b in script.bodies],
                    "statuses": script.statuses,
                    "times": script.times,
                    "replies": script.replies,
                    "usage": script.usage,
                    "usage_later": script.usage_later,
                    "betas": script.betas,
                    "deepseek": script.deepseek,
                    "connections": len(script.connections),
                    "opened": script.opened,
                }
            self._send(200, reply)

        def _send(self, status: int, reply: dict[str, Any], stream: bool = False) -> None:
            data = messages_api.events(reply) if stream else json.dumps(reply).encode()
            self.send_response(status)
            self.send_header("content-type", "text/event-stream" if stream else "application/json")
            self.send_header("content-length", str(len(data)))
            if status >= 500:
                self.send_header("retry-after", "0")
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    print(httpd.server_address[1], flush=True)
    httpd.serve_forever()


class BenchServer:
    """The server in a child process: ``base_url``, ``reset(...)`` before a turn, ``stats()`` after."""

    def __enter__(self) -> BenchServer:
        self.process = subprocess.Popen([sys.executable, "-m", "benchmarks.server"], stdout=subprocess.PIPE, text=True)
        assert self.process.stdout is not None
        port = int(self.process.stdout.readline())
        self.root = f"http://127.0.0.1:{port}"
        self.base_url = f"{self.root}/v1"
        return self

    def __exit__(self, *exc: Any) -> None:
        self.process.terminate()
        self.process.wait(timeout=10)

    def reset(self, scenario: str = "steps", steps: int = 1, answer: dict[str, Any] | None = None) -> None:
        data = json.dumps({"scenario": scenario, "steps": steps, "answer": answer}).encode()
        urllib.request.urlopen(urllib.request.Request(f"{self.root}/_bench/reset", data=data), timeout=10).read()

    def stats(self) -> dict[str, Any]:
        with urllib.request.urlopen(f"{self.root}/_bench/stats", timeout=30) as response:
            return json.loads(response.read())


if __name__ == "__main__":
    serve()
