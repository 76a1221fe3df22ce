"""Message content for GenAI spans, when the user opted in (``instrument(capture_content=True)``).

What a request sent and what came back, in the conventions' message shape (``role`` and
``parts``: ``text``, ``tool_call``, ``tool_call_response``), and a tool call's arguments and
result. Every text goes through the project's redaction (``_records.redact``) after it is
serialized, so a credential inside a JSON value is hidden too. Media never travel: an image,
audio or file part is written as ``{"type": "blob", "modality": ..., "content": "[media omitted]"}``
and a media value inside a tool's arguments or result as its kind only.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as ga

from dspy_imp._records.media import is_media, kind_of, media_parts
from dspy_imp._records.outcomes import Extracted, Reply
from dspy_imp._records.redact import redact_text

OMITTED = "[media omitted]"


def redacted(text: str) -> str:
    return redact_text(text)


def as_json(value: Any) -> str:
    """A value as redacted JSON text, media replaced by their kind."""
    return redact_text(json.dumps(_without_media(value), ensure_ascii=False, default=str))


def _without_media(value: Any, depth: int = 0) -> Any:
    if depth > 50:
        return "..."
    if is_media(value):
        kinds = sorted({kind_of(part) for part in media_parts(value) or ()})
        return {"type": "blob", "modality": "+".join(kinds) or "media", "content": OMITTED}
    if isinstance(value, Mapping):
        return {str(k): _without_media(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_without_media(v, depth + 1) for v in value]
    return value


def request_content(messages: Any, outcome: Any) -> dict[str, str]:
    """``gen_ai.input.messages`` and ``gen_ai.output.messages`` of one request."""
    attributes: dict[str, str] = {}
    if isinstance(messages, Sequence) and not isinstance(messages, str):
        attributes[ga.GEN_AI_INPUT_MESSAGES] = _dump([_message(m) for m in messages if isinstance(m, Mapping)])
    output = _output(outcome)
    if output is not None:
        attributes[ga.GEN_AI_OUTPUT_MESSAGES] = _dump([output])
    return attributes


def _dump(value: Any) -> str:
    return redact_text(json.dumps(value, ensure_ascii=False, default=str))


def _message(message: Mapping[str, Any]) -> dict[str, Any]:
    role = str(message.get("role", "user"))
    parts: list[dict[str, Any]] = []
    body = message.get("content")
    if role == "tool":
        parts.append({"type": "tool_call_response", "id": message.get("tool_call_id"), "response": _text(body)})
    else:
        parts.extend(_parts(body))
    for call in message.get("tool_calls") or ():
        function = call.get("function") or {} if isinstance(call, Mapping) else {}
        parts.append(
            {
                "type": "tool_call",
                "id": call.get("id"),
                "name": function.get("name"),
                "arguments": function.get("arguments"),
            }
        )
    return {"role": role, "parts": parts}


def _parts(body: Any) -> list[dict[str, Any]]:
    if body is None:
        return []
    if isinstance(body, str):
        return [{"type": "text", "content": body}]
    parts = []
    for part in body if isinstance(body, list) else [body]:
        if isinstance(part, Mapping) and part.get("type") == "text":
            parts.append({"type": "text", "content": str(part.get("text", ""))})
        elif isinstance(part, Mapping):
            parts.append({"type": "blob", "modality": kind_of(dict(part)), "content": OMITTED})
        else:
            parts.append({"type": "text", "content": str(part)})
    return parts


def _text(body: Any) -> str:
    if isinstance(body, str):
        return body
    return " ".join(p["content"] for p in _parts(body) if p["type"] == "text")


def _output(outcome: Any) -> dict[str, Any] | None:
    if isinstance(outcome, Reply):
        parts: list[dict[str, Any]] = []
        if outcome.text:
            parts.append({"type": "text", "content": outcome.text})
        for call in outcome.calls:
            parts.append(
                {"type": "tool_call", "id": call.id, "name": call.name, "arguments": _without_media(call.args)}
            )
        message: dict[str, Any] = {"role": "assistant", "parts": parts}
        if outcome.finish_reason:
            message["finish_reason"] = outcome.finish_reason
        return message
    if isinstance(outcome, Extracted):
        return {"role": "assistant", "parts": [{"type": "text", "content": as_json(dict(outcome.outputs))}]}
    return None
