"""Anthropic's Messages API on the bench server: a request read as the scripted model reads it, a reply written back.

The scenarios (``benchmarks.server.Script``) decide on a Chat Completions view of the request;
``chat_view`` makes that view of a Messages request (tool names, ``tool_choice``, the tool results
as ``tool`` messages, the text of each message) and ``reply`` turns the decided Chat Completions
message into a Messages reply (``text`` and ``tool_use`` blocks, ``stop_reason``, and the usage the
cache emulator computed, in Anthropic's field names). A structured-output request
(``output_format`` with a JSON schema) is the view's ``response_format``.
"""

from __future__ import annotations

import json
from typing import Any


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "\n".join(b.get("text", "") for b in content or [] if b.get("type") == "text")


def _choice(choice: Any) -> Any:
    kind = (choice or {}).get("type")
    if kind == "tool":
        return {"type": "function", "function": {"name": choice["name"]}}
    return "required" if kind == "any" else None


def _messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    system = _text(body.get("system"))
    if system:
        out.append({"role": "system", "content": system})
    for message in body.get("messages", []):
        content = message.get("content")
        blocks = [] if isinstance(content, str) else content or []
        for block in blocks:
            if block.get("type") == "tool_result":
                out.append(
                    {"role": "tool", "tool_call_id": block.get("tool_use_id"), "content": _text(block["content"])}
                )
        calls = [
            {"id": b["id"], "type": "function", "function": {"name": b["name"], "arguments": json.dumps(b["input"])}}
            for b in blocks
            if b.get("type") == "tool_use"
        ]
        text = _text(content)
        if text or calls:
            out.append({"role": message["role"], "content": text or None, **({"tool_calls": calls} if calls else {})})
    return out


def chat_view(body: dict[str, Any]) -> dict[str, Any]:
    """The Chat Completions view of a Messages request that the scenarios decide on."""
    view: dict[str, Any] = {
        "messages": _messages(body),
        "tools": [{"type": "function", "function": {"name": t["name"]}} for t in body.get("tools") or []],
    }
    output = body.get("output_format") or (body.get("output_config") or {}).get("format")
    if (output or {}).get("type") == "json_schema":  # Anthropic's structured outputs
        view["response_format"] = {"type": "json_schema", "json_schema": {"schema": output.get("schema")}}
    choice = _choice(body.get("tool_choice"))
    if choice is not None:
        view["tool_choice"] = choice
    return view


def reply(status: int, chat: dict[str, Any], model: str, usage: dict[str, int]) -> dict[str, Any]:
    """The Messages reply (or error) for a decided Chat Completions reply."""
    if status != 200:
        kind = "api_error" if status >= 500 else "invalid_request_error"
        return {"type": "error", "error": {"type": kind, "message": chat["error"]["message"]}}
    message = chat["choices"][0]["message"]
    content: list[dict[str, Any]] = []
    if message.get("content"):
        content.append({"type": "text", "text": message["content"]})
    for call in message.get("tool_calls") or []:
        function = call["function"]
        content.append(
            {"type": "tool_use", "id": call["id"], "name": function["name"], "input": json.loads(function["arguments"])}
        )
    return {
        "id": "msg_bench",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": "tool_use" if message.get("tool_calls") else "end_turn",
        "stop_sequence": None,
        "usage": {
            **usage,
            "cache_creation": {
                "ephemeral_5m_input_tokens": usage["cache_creation_input_tokens"],
                "ephemeral_1h_input_tokens": 0,
            },
            "service_tier": "standard",
        },
    }


def events(message: dict[str, Any]) -> bytes:
    """A Messages reply as the server-sent events of ``"stream": true`` (what pydantic-ai asks for)."""
    usage = message["usage"]
    start = {**message, "content": [], "stop_reason": None, "usage": {**usage, "output_tokens": 1}}
    out = [("message_start", {"type": "message_start", "message": start})]
    for index, block in enumerate(message["content"]):
        if block["type"] == "text":
            opened, delta = {"type": "text", "text": ""}, {"type": "text_delta", "text": block["text"]}
        else:
            opened = {**block, "input": {}}
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
        out += [
            ("content_block_start", {"type": "content_block_start", "index": index, "content_block": opened}),
            ("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}),
            ("content_block_stop", {"type": "content_block_stop", "index": index}),
        ]
    stop = {"stop_reason": message["stop_reason"], "stop_sequence": None}
    out.append(
        ("message_delta", {"type": "message_delta", "delta": stop, "usage": {"output_tokens": usage["output_tokens"]}})
    )
    out.append(("message_stop", {"type": "message_stop"}))
    return "".join(f"event: {name}\ndata: {json.dumps(data)}\n\n" for name, data in out).encode()
