"""Response bodies in each provider's own format, for the emulator (and so for the cassettes).

Written from the providers' API references (OpenAI Chat Completions ``chat.completion``;
Anthropic Messages ``message`` with ``thinking``/``redacted_thinking``/``text``/``tool_use``
blocks and ``stop_reason``; Gemini ``GenerateContentResponse`` with ``candidates[].content.parts``,
``thoughtSignature`` beside a ``functionCall``, ``finishReason``; DeepSeek's Chat Completions with
``message.reasoning_content``) and their error envelopes. Ids, signatures and token counts are
made up but shaped like the real ones. Nothing here is copied from a recording.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from emulator import Scripted
from provider_rules import bound as bound_to

Call = tuple[str | None, str, dict[str, Any]]  # (id, name, arguments)


# -- OpenAI Chat Completions (also DeepSeek) ----------------------------------------------------


def chat(
    content: str | None = None,
    calls: Sequence[Call] = (),
    *,
    reasoning: str | None = None,
    finish: str | None = None,
    model: str = "gpt-4o-2024-08-06",
    reasoning_field: str = "reasoning_content",
) -> Scripted:
    """``reasoning_field``: DeepSeek and SGLang say ``reasoning_content``; vLLM 0.10+ and Ollama ``reasoning``."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if reasoning is not None:
        message[reasoning_field] = reasoning
    if calls:
        message["tool_calls"] = [
            {"id": i, "type": "function", "function": {"name": n, "arguments": json.dumps(a)}} for i, n, a in calls
        ]
    else:
        message["refusal"] = None
    body = {
        "id": "chatcmpl-AZ3fq9wD2kLx7Q0mN4bV1rT8yUe5",
        "object": "chat.completion",
        "created": 1764460800,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": finish or ("tool_calls" if calls else "stop"),
            }
        ],
        "usage": {
            "prompt_tokens": 412,
            "completion_tokens": 38,
            "total_tokens": 450,
            "prompt_tokens_details": {"cached_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 0},
        },
        "system_fingerprint": "fp_50cad350e4",
    }
    return Scripted(200, body)


def chat_error(status: int, message: str, *, type: str, code: str | None, param: str | None = None) -> Scripted:
    return Scripted(status, {"error": {"message": message, "type": type, "param": param, "code": code}})


def chat_context_window() -> Scripted:
    return chat_error(
        400,
        "This model's maximum context length is 128000 tokens. However, your messages resulted in 131072 tokens. "
        "Please reduce the length of the messages.",
        type="invalid_request_error",
        code="context_length_exceeded",
        param="messages",
    )


def chat_server_error() -> Scripted:
    return chat_error(
        500, "The server had an error while processing your request. Sorry about that!", type="server_error", code=None
    )


def deepseek_context_window() -> Scripted:
    """DeepSeek's context-length refusal: a 400 in the OpenAI-compatible envelope."""
    return chat_error(
        400,
        "This model's maximum context length is 131072 tokens. However, you requested 140352 tokens "
        "(136256 in the messages, 4096 in the completion). Please reduce the length of the messages or completion.",
        type="invalid_request_error",
        code="invalid_request_error",
    )


def deepseek_overloaded() -> Scripted:
    """DeepSeek's 503 "Server Overloaded" (its error-codes page: retry after a brief wait)."""
    return chat_error(503, "Server overloaded, please try again later.", type="server_error", code="server_overloaded")


# -- Anthropic Messages -------------------------------------------------------------------------


def thinking(text: str, signature: str) -> dict[str, Any]:
    return {"type": "thinking", "thinking": text, "signature": signature}


def redacted(data: str) -> dict[str, Any]:
    return {"type": "redacted_thinking", "data": data}


def anthropic(
    blocks: Sequence[dict[str, Any]] = (),
    text: str | None = None,
    calls: Sequence[Call] = (),
    *,
    stop: str | None = None,
    model: str = "claude-sonnet-4-5-20250929",
    bound: bool = False,
    usage: Mapping[str, Any] | None = None,
) -> Scripted:
    """``bound``: the thinking blocks are signed for the request they answer (Claude 5.1+ binds each
    block to the prefix before it; ``provider_rules.anthropic_thinking_binding`` checks the replay).
    ``usage``: fields replacing the default usage (the prompt cache's counters, say)."""
    content = list(blocks)
    if text is not None:
        content.append({"type": "text", "text": text})
    content += [{"type": "tool_use", "id": i, "name": n, "input": a} for i, n, a in calls]
    body = {
        "id": "msg_01XFDUDYJgAACzvnptvVoYEL",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop or ("tool_use" if calls else "end_turn"),
        "stop_sequence": None,
        "usage": {
            "input_tokens": 512,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
            "output_tokens": 64,
            "service_tier": "standard",
            **(usage or {}),
        },
    }
    if not bound:
        return Scripted(200, body)
    return Scripted(200, body, shaped=lambda request: _bound_body(body, request))


def _bound_body(body: dict[str, Any], request: Any) -> dict[str, Any]:
    def sign(block: dict[str, Any]) -> dict[str, Any]:
        if block.get("type") == "thinking":
            return {**block, "signature": bound_to(block["signature"], request)}
        if block.get("type") == "redacted_thinking":
            return {**block, "data": bound_to(block["data"], request)}
        return block

    return {**body, "content": [sign(b) for b in body["content"]]}


def anthropic_error(status: int, type: str, message: str) -> Scripted:
    return Scripted(
        status,
        {"type": "error", "error": {"type": type, "message": message}, "request_id": "req_011CSHoEeqs5C35K2UUqR7Fy"},
    )


# -- Gemini generateContent ---------------------------------------------------------------------


def gemini(
    text: str | None = None,
    calls: Sequence[Call] = (),
    *,
    signatures: Sequence[str | None] = (),
    text_signature: str | None = None,
    finish: str = "STOP",
    model: str = "gemini-3-pro-preview",
) -> Scripted:
    """``signatures[i]`` goes beside call ``i`` (Gemini signs the first of parallel calls only)."""
    parts: list[dict[str, Any]] = []
    if text is not None:
        part: dict[str, Any] = {"text": text}
        if text_signature:
            part["thoughtSignature"] = text_signature
        parts.append(part)
    for index, (call_id, name, args) in enumerate(calls):  # a None id: sent without one (Gemini 2.5, 3 previews)
        call: dict[str, Any] = (
            {"name": name, "args": args} if call_id is None else {"id": call_id, "name": name, "args": args}
        )
        part = {"functionCall": call}
        signature = signatures[index] if index < len(signatures) else None
        if signature:
            part["thoughtSignature"] = signature
        parts.append(part)
    candidate: dict[str, Any] = {"content": {"parts": parts, "role": "model"}, "finishReason": finish, "index": 0}
    if finish == "SAFETY":
        candidate["safetyRatings"] = [
            {"category": "HARM_CATEGORY_DANGEROUS_CONTENT", "probability": "HIGH", "blocked": True}
        ]
        if not parts:
            del candidate["content"]
    body = {
        "candidates": [candidate],
        "usageMetadata": {
            "promptTokenCount": 380,
            "candidatesTokenCount": 24,
            "totalTokenCount": 532,
            "thoughtsTokenCount": 128,
            "promptTokensDetails": [{"modality": "TEXT", "tokenCount": 380}],
        },
        "modelVersion": model,
        "responseId": "mJ0raPzYD5GqnvgPq8PHuQk",
    }
    return Scripted(200, body)


def gemini_error(status: int, state: str, message: str) -> Scripted:
    return Scripted(status, {"error": {"code": status, "message": message, "status": state}})


# -- Groq (Chat Completions) ----------------------------------------------------------------------


def groq_tool_use_failed(failed_generation: str) -> Scripted:
    """Groq's 400 when the model wrote a call it cannot parse (groq-typescript issues #28 and #103)."""
    return Scripted(
        400,
        {
            "error": {
                "message": "Failed to call a function. Please adjust your prompt. "
                "See 'failed_generation' for more details.",
                "type": "invalid_request_error",
                "code": "tool_use_failed",
                "failed_generation": failed_generation,
            }
        },
    )


def groq(content: str | None = None, calls: Sequence[Call] = (), *, model: str = "openai/gpt-oss-120b") -> Scripted:
    """A Groq ``chat.completion``: OpenAI's shape plus ``service_tier``, ``x_groq`` and Groq's timing usage."""
    body = dict(chat(content, calls, model=model).body)
    body["id"] = "chatcmpl-7f1c0d2e-9b3a-4c8e-a1f5-2d6b8e0c4a19"
    body["service_tier"] = "on_demand"
    body["usage"] = {
        **body["usage"],
        "queue_time": 0.05,
        "prompt_time": 0.01,
        "completion_time": 0.03,
        "total_time": 0.04,
    }
    body["x_groq"] = {"id": "req_01kgpzetg3egxr9y54ttb37bm3"}
    return Scripted(200, body)


# -- OpenRouter (Chat Completions) -----------------------------------------------------------------


def reasoning_text(text: str, signature: str, index: int = 0) -> dict[str, Any]:
    """A ``reasoning.text`` entry as OpenRouter returns Claude's signed thinking."""
    return {
        "type": "reasoning.text",
        "text": text,
        "signature": signature,
        "format": "anthropic-claude-v1",
        "index": index,
    }


def reasoning_encrypted(data: str, call_id: str | None = None, index: int = 0) -> dict[str, Any]:
    """A ``reasoning.encrypted`` entry (Gemini's thought signature behind OpenRouter carries the call's id)."""
    entry = {"type": "reasoning.encrypted", "data": data, "format": "google-gemini-v1", "index": index}
    return {**entry, "id": call_id} if call_id else entry


def openrouter(
    content: str | None = None,
    calls: Sequence[Call] = (),
    *,
    details: Sequence[dict[str, Any]] = (),
    model: str = "anthropic/claude-fable-5.1",
    provider: str = "Anthropic",
) -> Scripted:
    """OpenRouter's ``chat.completion``: ``reasoning`` (text) and ``reasoning_details`` on the message."""
    body = dict(chat(content, calls, model=model).body)
    message = dict(body["choices"][0]["message"])
    texts = [d.get("text") or d.get("summary") for d in details if d.get("type") != "reasoning.encrypted"]
    message["reasoning"] = "\n".join(t for t in texts if t) or None
    message["reasoning_details"] = list(details)
    body["choices"] = [
        {**body["choices"][0], "message": message, "native_finish_reason": "tool_use" if calls else "end_turn"}
    ]
    body["id"] = "gen-1764460800-QbGmPxZ3kLwTnV8sRcYd"
    body["provider"] = provider
    return Scripted(200, body)


# -- OpenAI Responses API -----------------------------------------------------------------------


def reasoning_item(
    item_id: str,
    encrypted: str | None = None,
    summary: str | None = None,
    *,
    summaries: Sequence[str] = (),
    text: str | None = None,
) -> dict[str, Any]:
    """A ``reasoning`` output item: ``encrypted_content`` when the request asked for it (``include``);
    ``summaries``: several ``summary_text`` parts (as ``reasoning.summary: "detailed"`` serves them);
    ``text``: a ``reasoning_text`` content part (openai-python's ``ResponseReasoningItem.content``, as
    DeepSeek's and gpt-oss servers' Responses endpoints serve the raw reasoning)."""
    item: dict[str, Any] = {"type": "reasoning", "id": item_id, "summary": []}
    if summary or summaries:
        item["summary"] = [{"type": "summary_text", "text": t} for t in ([summary] if summary else summaries)]
    if text is not None:
        item["content"] = [{"type": "reasoning_text", "text": text}]
    if encrypted is not None:
        item["encrypted_content"] = encrypted
    return item


def function_call(call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    item_id = "fc_" + call_id.removeprefix("call_")
    return {
        "type": "function_call",
        "id": item_id,
        "call_id": call_id,
        "name": name,
        "arguments": json.dumps(arguments),
        "status": "completed",
    }


def output_message(text: str) -> dict[str, Any]:
    content = [{"type": "output_text", "text": text, "annotations": []}]
    return {"type": "message", "id": "msg_68c1f0a2b4d8", "role": "assistant", "status": "completed", "content": content}


def openai_response(*output: dict[str, Any], model: str = "gpt-5-mini-2025-08-07") -> Scripted:
    """A Responses API ``response`` object (``output`` items in order)."""
    body = {
        "id": "resp_68c1f0a2b4d8e3f1",
        "object": "response",
        "created_at": 1764460800,
        "status": "completed",
        "model": model,
        "output": list(output),
        "usage": {
            "input_tokens": 412,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": 64,
            "output_tokens_details": {"reasoning_tokens": 40},
            "total_tokens": 476,
        },
    }
    return Scripted(200, body)


# -- Gemini's OpenAI-compatible endpoint ---------------------------------------------------------


def gemini_compat(
    content: str | None = None, calls: Sequence[Call] = (), *, signatures: Sequence[str | None] = ()
) -> Scripted:
    """A ``chat.completion`` from ``generativelanguage.googleapis.com/v1beta/openai``: each call's thought
    signature in ``extra_content.google.thought_signature`` (Gemini signs the first of parallel calls)."""
    body = dict(chat(content, calls, model="gemini-3-pro-preview").body)
    message = dict(body["choices"][0]["message"])
    for index, call in enumerate(message.get("tool_calls") or []):
        signature = signatures[index] if index < len(signatures) else None
        if signature:
            call["extra_content"] = {"google": {"thought_signature": signature}}
    message.pop("refusal", None)
    body["choices"] = [{**body["choices"][0], "message": message}]
    del body["system_fingerprint"]
    return Scripted(200, body)
