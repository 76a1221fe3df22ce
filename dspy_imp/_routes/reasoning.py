"""A provider's opaque reasoning state: read from a raw response, written back into a request.

DSPy's parsed outputs keep only the reasoning *text*; what a provider needs to continue is in
the raw response DSPy's history entry holds (an lm15 ``Response`` natively, a LiteLLM
``ModelResponse`` otherwise). It is recorded in the step's ``reasoning_details`` as a list of
JSON blocks, one vocabulary for both engines::

    {"type": "thinking", "thinking": str, "signature": str}      # Anthropic, signed
    {"type": "redacted_thinking", "data": str}                    # Anthropic, encrypted
    {"type": "thought_signature", "call_id": str | None, "signature": str}   # Gemini 3
    {"type": "reasoning.text" | "reasoning.encrypted" | "reasoning.summary", ...}  # OpenRouter, verbatim
    {"type": "reasoning_item", "id": str, "encrypted_content": str | None, "summary": str,  # OpenAI Responses
     "summary_parts": [str, ...], "content": [{"type": "reasoning_text", "text": str}]}  # (when served)

Pure: no I/O, no DSPy calls. ``_prompt.render`` writes the blocks back in LiteLLM's spelling
(``thinking_blocks`` and ``reasoning_details`` on the assistant message, ``provider_specific_fields``
on a tool call);
``_routes.route`` turns them into lm15 continuation state for the native engine.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Mapping, Sequence
from typing import Any

Block = dict[str, Any]
# OpenRouter's ``reasoning_details`` entry types, recorded verbatim (each keeps its ``type``).
OPENROUTER_KINDS = frozenset({"reasoning.text", "reasoning.encrypted", "reasoning.summary"})
# Thought signatures written as Gemini's OpenAI-compatible endpoint takes them (``extra_content``).
COMPAT_SIGNATURE_KINDS = frozenset({"thought_signature", "extra_content"})
# OpenAI Responses API reasoning items (lm15's ``openai``/``reasoning_item`` continuation state).
RESPONSES_KINDS = frozenset({"reasoning_item"})
# Not a recorded kind: a route with it signs each unsigned call (the first of its model turn) with
# Gemini's documented placeholder (``PLACEHOLDER_SIGNATURE``).
PLACEHOLDER_KIND = "thought_signature_placeholder"
# Gemini's thought-signatures FAQ: for a call it did not make (another model's, a host-written one),
# ``skip_thought_signature_validator`` in the signature field. The field is bytes (base64 in JSON),
# as LiteLLM and pydantic-ai send it.
PLACEHOLDER_SIGNATURE = base64.b64encode(b"skip_thought_signature_validator").decode()
_BEFORE_GEMINI_3 = re.compile(r"gemini-(?:[12](?:-\d+)?|exp|(?:pro|flash)(?!-(?:lite-)?latest$))(?:-|$)")


def validates_signatures(model: str) -> bool:
    """Gemini 3 and later: every call of the current turn goes back signed, or the request is refused
    (400). Gemini 1.x/2.x, ``gemini-exp`` and Gemma do not validate (the name is read as LiteLLM reads it)."""
    name = model.lower().rsplit("/", 1)[-1].replace(".", "-")
    _, colon, rest = name.partition(":")  # lm15's own spelling: ``vertex:gemini-3-pro-preview``
    name = rest if colon and rest.startswith("gemini-") else name
    return name.startswith("gemini-") and not _BEFORE_GEMINI_3.match(name)


def blocks_of(response: Any) -> list[Block] | None:
    """The reasoning blocks of one raw response (lm15 ``Response`` or LiteLLM ``ModelResponse``)."""
    if isinstance(response, list | tuple):
        response = response[0] if response else None
    message = getattr(response, "message", None)
    if message is not None and hasattr(message, "parts"):
        call_ids = [str(p.id) for p in message.parts if getattr(p, "type", None) == "tool_call"]
        data = getattr(response, "provider_data", None)
        blocks = _with_raw_items(_from_parts(message.parts), data) + _from_provider_data(data, call_ids)
    elif isinstance(getattr(response, "output", None), list):  # LiteLLM's Responses API response
        blocks = _from_responses_output(response.output)
    else:
        choices = getattr(response, "choices", None)
        blocks = _from_litellm(getattr(choices[0], "message", None)) if choices else []
    return blocks or None


def _from_responses_output(output: Any) -> list[Block]:
    raw = [_plain(i) for i in output if isinstance(output, list | tuple)] if output else []
    return [
        _reasoning_item(i) for i in raw if i.get("type") == "reasoning" and (i.get("id") or i.get("encrypted_content"))
    ]


def _reasoning_item(item: Mapping[str, Any]) -> Block:
    """A ``reasoning`` output item as recorded: its summary joined (what a reader shows) and, as served,
    its summary parts (when more than one) and its ``reasoning_text`` content (DeepSeek, gpt-oss servers)."""
    parts = [str(_plain(s).get("text") or "") for s in item.get("summary") or ()]
    block: Block = {
        "type": "reasoning_item",
        "id": item.get("id"),
        "encrypted_content": item.get("encrypted_content"),
        "summary": "\n".join(parts),
    }
    if len(parts) > 1:
        block["summary_parts"] = parts
    content = [_plain(c) for c in item.get("content") or ()]
    if content:
        block["content"] = [
            {"type": c.get("type") or "reasoning_text", "text": str(c.get("text") or "")} for c in content
        ]
    return block


def _with_raw_items(blocks: list[Block], data: Any) -> list[Block]:
    """Natively, each ``reasoning_item`` block read from lm15's replay state (id, encrypted content, the
    summary joined) as the raw body served it (``_reasoning_item``): lm15 keeps no parts, no content."""
    output = data.get("output") if isinstance(data, Mapping) else None
    raw = {
        (i.get("id"), i.get("encrypted_content")): i for i in map(_plain, output or ()) if i.get("type") == "reasoning"
    }
    if not raw:
        return blocks
    return [
        _reasoning_item(raw[(b.get("id"), b.get("encrypted_content"))])
        if b.get("type") == "reasoning_item" and (b.get("id"), b.get("encrypted_content")) in raw
        else b
        for b in blocks
    ]


def _from_parts(parts: Sequence[Any]) -> list[Block]:
    blocks: list[Block] = []
    for part in parts:
        for state in getattr(part, "continuation", ()) or ():
            block = _from_state(part, state)
            if block is not None:
                blocks.append(block)
    return blocks


def _from_state(part: Any, state: Any) -> Block | None:
    data = dict(state.data or {})
    if state.provider == "anthropic" and state.kind == "thinking_signature" and data.get("signature"):
        return {"type": "thinking", "thinking": part.text, "signature": str(data["signature"])}
    if state.provider == "anthropic" and state.kind == "redacted_thinking" and "data" in data:
        return {"type": "redacted_thinking", "data": data["data"]}
    if (
        state.provider == "openai"
        and state.kind == "reasoning_item"
        and (data.get("id") or data.get("encrypted_content"))
    ):
        item = {"type": "reasoning_item", "id": data.get("id"), "encrypted_content": data.get("encrypted_content")}
        return {**item, "summary": str(getattr(part, "text", "") or "")}
    if state.provider == "gemini" and state.kind == "thought_signature" and data.get("value"):
        call_id = part.id if getattr(part, "type", None) == "tool_call" else None
        return {"type": "thought_signature", "call_id": call_id, "signature": str(data["value"])}
    return None


def _from_provider_data(data: Any, call_ids: Sequence[str] = ()) -> list[Block]:
    """OpenRouter's ``reasoning_details`` from the raw body lm15 keeps (its reader does not map them),
    and compat signatures, each naming its call as lm15 read it (``call_ids``, in order: a call sent
    with ``"id": ""`` is ``call_<n>`` there)."""
    choices = data.get("choices") if isinstance(data, Mapping) else None
    message = (
        choices[0].get("message") if isinstance(choices, list) and choices and isinstance(choices[0], Mapping) else None
    )
    if not isinstance(message, Mapping):
        return []
    return _openrouter(message.get("reasoning_details")) + _compat_signatures(message.get("tool_calls"), call_ids)


def _compat_signatures(calls: Any, call_ids: Sequence[str] = ()) -> list[Block]:
    """Gemini's OpenAI-compatible endpoint: ``tool_calls[].extra_content.google.thought_signature``;
    a call without an id is named by ``call_ids`` (its position), as the engine named it."""
    blocks: list[Block] = []
    for index, call in enumerate(calls if isinstance(calls, list | tuple) else ()):
        google = (
            (_get(call, "extra_content") or {}).get("google")
            if isinstance(_get(call, "extra_content"), Mapping)
            else None
        )
        signature = google.get("thought_signature") if isinstance(google, Mapping) else None
        if signature:
            call_id = _get(call, "id") or (call_ids[index] if index < len(call_ids) else _get(call, "id"))
            blocks.append({"type": "thought_signature", "call_id": call_id, "signature": str(signature)})
    return blocks


def _openrouter(details: Any) -> list[Block]:
    """The entries kept verbatim (OpenRouter wants them back unchanged), in order."""
    if not isinstance(details, list | tuple):
        return []
    entries = [_plain(d) for d in details]
    return [e for e in entries if e.get("type") in OPENROUTER_KINDS]


def _from_litellm(message: Any) -> list[Block]:
    if message is None:
        return []
    fields = _get(message, "provider_specific_fields")
    blocks: list[Block] = _openrouter(fields.get("reasoning_details") if isinstance(fields, Mapping) else None)
    for raw in _get(message, "thinking_blocks") or ():
        block = _plain(raw)
        if block.get("type") == "thinking" and block.get("signature"):
            thinking = block.get("thinking") or ""
            blocks.append({"type": "thinking", "thinking": thinking, "signature": block["signature"]})
        elif block.get("type") == "redacted_thinking" and "data" in block:
            blocks.append({"type": "redacted_thinking", "data": block["data"]})
    blocks += _compat_signatures(list(_get(message, "tool_calls") or ()))
    for call in _get(message, "tool_calls") or ():
        fields = _get(call, "provider_specific_fields") or {}
        signature = fields.get("thought_signature") if isinstance(fields, Mapping) else None
        if signature:
            blocks.append({"type": "thought_signature", "call_id": _get(call, "id"), "signature": str(signature)})
    return blocks


def _get(obj: Any, key: str) -> Any:
    return obj.get(key) if isinstance(obj, Mapping) else getattr(obj, key, None)


def _plain(value: Any) -> dict[str, Any]:
    if isinstance(value, Mapping):
        return dict(value)
    dump = getattr(value, "model_dump", None)
    return dict(dump()) if callable(dump) else {}


def thinking_blocks(details: Any, kinds: frozenset[str]) -> list[Block]:
    """The Anthropic blocks to open the assistant message with, in recorded order."""
    return [dict(b) for b in _blocks(details) if b.get("type") in kinds & {"thinking", "redacted_thinking"}]


def call_signatures(details: Any, kinds: frozenset[str]) -> dict[str, str]:
    """Gemini thought signatures by call id."""
    if "thought_signature" not in kinds:
        return {}
    return {
        str(b["call_id"]): str(b["signature"])
        for b in _blocks(details)
        if b.get("type") == "thought_signature" and b.get("call_id")
    }


def reasoning_items(details: Any, kinds: frozenset[str]) -> list[Block]:
    """The Responses API reasoning items to send back before the assistant's output, in order."""
    return [dict(b) for b in _blocks(details) if b.get("type") in kinds & RESPONSES_KINDS]


def openrouter_details(details: Any, kinds: frozenset[str]) -> list[Block]:
    """OpenRouter's ``reasoning_details`` entries to send back on the assistant message, in order."""
    return [dict(b) for b in _blocks(details) if b.get("type") in kinds & OPENROUTER_KINDS]


def _blocks(details: Any) -> list[Mapping[str, Any]]:
    if not isinstance(details, list | tuple):
        return []
    return [b for b in details if isinstance(b, Mapping) and isinstance(b.get("type"), str | None)]


def with_call_ids(details: Any, renamed: Mapping[str, str]) -> Any:
    """``details`` with each block's ``call_id`` renamed as the loop renamed the call.

    Gemini 2.5 and some Gemini 3 previews send calls without ids; DSPy's native engine names them
    ``tool_call_0``, ``tool_call_1``... within each reply, so the loop makes a repeated id unique
    (``tool_call_0_2``). The call's thought signature must follow it, or it is never sent back.
    """
    if not isinstance(details, list | tuple):
        return details
    return [
        {**b, "call_id": renamed[b["call_id"]]}
        if isinstance(b, Mapping) and isinstance(b.get("call_id"), str) and b["call_id"] in renamed
        else b
        for b in details
    ]
