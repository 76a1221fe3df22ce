"""An MCP tool's result (``CallToolResult``) as the value a function tool would have returned.

- Text blocks are text; images, audio and binary resources are media values (``dspy.Image``,
  ``dspy.Audio``, ``dspy.File``), placed for the provider as any tool's media are
  (``docs/media.md``); an embedded text resource is its text under its URI; a resource link is a
  line naming it (never fetched).
- One block is that value; several are a list of them (text joined when all are text).
- ``structuredContent`` is the value when every block is text (the text is then its rendering, as
  the specification asks of servers): the model reads it as JSON, a ``finish_on`` hook gets the data.
  A value the server wrapped as ``{"result": value}`` because its output schema says exactly that
  (what the ``mcp`` SDK does for a tool returning a number or a string) is the value itself.
- ``isError: true`` raises ``ServerToolError`` with the server's text: an error observation the
  model reads, like a function tool's exception.
- A medium larger than ``MAX_MEDIA_CHARS`` (base64) is left out, a line saying so in its place; a
  text block longer than ``MAX_TEXT_CHARS`` is cut (a line saying how much was left out), and
  structured content longer than that as JSON gives way to the (cut) text; at most ``MAX_BLOCKS``
  blocks are read. So a server's flood never reaches the record whole; the program's
  ``max_result_chars`` then cuts what the model reads, as for any tool.
"""

from __future__ import annotations

import json
from typing import Any

import dspy
import mcp_types as types

MAX_MEDIA_CHARS = 20_000_000
"""The largest image, audio or binary resource kept from a result, in base64 characters."""
MAX_TEXT_CHARS = 1_000_000
"""The longest text block kept from a result (and structured content, as JSON)."""
MAX_BLOCKS = 256
"""The most content blocks read from one result."""

_AUDIO_FORMATS = {"mpeg": "mp3", "x-wav": "wav", "wave": "wav"}


class ServerToolError(Exception):
    """An MCP server answered a call with ``isError: true``; the message is its text."""


def result_value(result: types.CallToolResult, output_schema: Any = None) -> Any:
    """What the call returned, as a function tool's value (or ``ServerToolError``); ``output_schema``
    is the tool's, as listed."""
    blocks = list(result.content or ())
    parts = [_part(block) for block in blocks[:MAX_BLOCKS]]
    if len(blocks) > MAX_BLOCKS:
        parts.append(f"[{len(blocks) - MAX_BLOCKS} more content blocks left out]")
    texts = all(isinstance(part, str) for part in parts)
    if result.is_error:
        text = "\n".join(p if isinstance(p, str) else f"[{type(p).__name__}]" for p in parts)
        raise ServerToolError(text.strip() or "the server reported an error and gave no text")
    if result.structured_content is not None and texts and _fits(result.structured_content):
        return _unwrapped(result.structured_content, output_schema)
    if not parts:
        return ""
    if texts:
        return "\n".join(parts) if len(parts) > 1 else parts[0]
    return parts if len(parts) > 1 else parts[0]


def _cut(text: str) -> str:
    if len(text) <= MAX_TEXT_CHARS:
        return text
    return f"{text[:MAX_TEXT_CHARS]}\n[{len(text) - MAX_TEXT_CHARS} more characters left out]"


def _fits(structured: Any) -> bool:
    try:
        return len(json.dumps(structured, default=str)) <= MAX_TEXT_CHARS
    except (TypeError, ValueError):
        return False


def _unwrapped(structured: Any, schema: Any) -> Any:
    wrapped = (
        isinstance(schema, dict)
        and set(schema.get("properties") or ()) == {"result"}
        and schema.get("required") == ["result"]
        and isinstance(structured, dict)
        and set(structured) == {"result"}
    )
    return structured["result"] if wrapped else structured


def _part(block: Any) -> Any:
    if isinstance(block, types.TextContent):
        return _cut(block.text)
    if isinstance(block, types.ImageContent):
        return _medium(block.data, block.mime_type, "image", None)
    if isinstance(block, types.AudioContent):
        return _medium(block.data, block.mime_type, "audio", None)
    if isinstance(block, types.EmbeddedResource):
        contents = block.resource
        if isinstance(contents, types.TextResourceContents):
            return f"[resource {contents.uri}]\n{_cut(contents.text)}"
        return _medium(contents.blob, contents.mime_type or "application/octet-stream", "resource", contents.uri)
    if isinstance(block, types.ResourceLink):
        details = ", ".join(x for x in (block.mime_type, block.description) if x)
        return f"[resource link: {block.name} {block.uri}{f' ({details})' if details else ''}]"
    return f"[a {getattr(block, 'type', type(block).__name__)} block this client does not read]"


def _medium(data: str, mime: str, what: str, uri: str | None) -> Any:
    named = f" {uri}" if uri else ""
    if len(data) > MAX_MEDIA_CHARS:
        return f"[{what}{named} ({mime}) left out: {len(data)} base64 characters, over {MAX_MEDIA_CHARS}]"
    major, _, minor = mime.partition("/")
    try:
        if major == "image":
            return dspy.Image(f"data:{mime};base64,{data}")
        if major == "audio":
            return dspy.Audio(data=data, audio_format=_AUDIO_FORMATS.get(minor, minor or "wav"))
        return dspy.File(file_data=f"data:{mime};base64,{data}")  # no filename: chat routes cannot carry one
    except (ValueError, TypeError) as error:  # a medium DSPy refuses: its description stands in its place
        return f"[{what}{named} ({mime}) unreadable: {' '.join(str(error).split())[:200]}]"
