"""The providers' documented rules for media, checked on the HTTP body as it leaves the client.

Same shape as ``provider_rules``: a rule is ``rule(body, path) -> Iterator[str]`` yielding one
sentence per violation, with a docstring naming the provider's rule. ``MEDIA_RULES`` holds
them per protocol; ``register(RULES)`` appends them to the provider-rules checker's lists.

Sources: OpenAI Chat Completions API reference (user content parts ``image_url`` with an
``http(s)`` URL or a ``data:image/...;base64,`` URL, ``input_audio`` with raw base64 ``data`` and
``format`` ``wav``/``mp3``, ``file`` with ``file_data`` as a data URL or a ``file_id``; system,
assistant and tool messages take text parts only); Anthropic Messages API (``image`` blocks with a
``base64`` source of ``image/jpeg|png|gif|webp`` and bare base64 data, or a ``url`` source;
``document`` blocks for PDF and plain text; both in user turns, and inside ``tool_result``
content, which takes ``text``/``image``/``document`` blocks only; no audio input); Gemini API
(``inlineData`` with ``mimeType`` and bare base64 ``data``, ``fileData`` with a ``fileUri``, in user
turns; multimodal function responses carry ``inlineData``/``fileData`` in
``functionResponse.parts``).
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Iterator, Mapping, MutableMapping, Sequence
from typing import Any

from provider_rules import Body, Rule, check

_DATA_URL = re.compile(r"^data:(?P<mime>[\w.+-]+/[\w.+-]+);base64,(?P<data>.*)$", re.S)
_OPENAI_MEDIA = {"image_url", "input_audio", "file"}
_ANTHROPIC_IMAGE_TYPES = {"image/jpeg", "image/png", "image/gif", "image/webp"}
_ANTHROPIC_DOCUMENT_TYPES = {"application/pdf", "text/plain"}


def bare_base64(data: Any) -> bool:
    """Standard base64 (no data-URL prefix, no whitespace) that decodes."""
    if not isinstance(data, str) or not data or data.startswith("data:"):
        return False
    try:
        base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        return False
    return True


def data_url_problem(url: Any, prefix: str = "") -> str | None:
    """``None`` for a well-formed ``data:<mime>;base64,<data>`` URL (of a ``prefix`` type), else why not."""
    match = _DATA_URL.match(url) if isinstance(url, str) else None
    if match is None:
        return f"not a base64 data URL: {str(url)[:60]!r}"
    if not match["mime"].startswith(prefix):
        return f"data URL of type {match['mime']!r}, expected {prefix}*"
    if not bare_base64(match["data"]):
        return "data URL whose payload is not valid base64"
    return None


# -- OpenAI Chat Completions -------------------------------------------------------------------


def _content_parts(message: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    content = message.get("content")
    return [p for p in content if isinstance(p, Mapping)] if isinstance(content, list) else []


def chat_media_in_user_messages(body: Body, path: str) -> Iterator[str]:
    """Media parts (``image_url``, ``input_audio``, ``file``) only in user messages; tool, assistant and
    system messages carry text (tool messages: "text content only")."""
    for index, message in enumerate(body.get("messages") or []):
        kinds = [p.get("type") for p in _content_parts(message) if p.get("type") != "text"]
        if kinds and message.get("role") != "user":
            yield f"messages[{index}]: {kinds} in a {message.get('role')} message"


def chat_media_shapes(body: Body, path: str) -> Iterator[str]:
    """``image_url.url`` is http(s) or an image data URL; ``input_audio`` is bare base64 in wav/mp3;
    ``file`` has a ``file_data`` data URL or a ``file_id``."""
    for index, message in enumerate(body.get("messages") or []):
        for part in _content_parts(message):
            kind = part.get("type")
            where = f"messages[{index}] {kind}"
            if kind == "image_url":
                url = (part.get("image_url") or {}).get("url")
                if not str(url).startswith(("http://", "https://")) and (bad := data_url_problem(url, "image/")):
                    yield f"{where}: {bad}"
            elif kind == "input_audio":
                audio = part.get("input_audio") or {}
                if audio.get("format") not in ("wav", "mp3") or not bare_base64(audio.get("data")):
                    yield f"{where}: needs bare base64 data and format wav/mp3, got format {audio.get('format')!r}"
            elif kind == "file":
                file = part.get("file") or {}
                if not file.get("file_id") and (bad := data_url_problem(file.get("file_data"))):
                    yield f"{where}: {bad}"
            elif kind not in ("text", None) and kind not in _OPENAI_MEDIA:
                yield f"{where}: unknown content part type"


# -- Anthropic Messages --------------------------------------------------------------------------


def _blocks(message: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    content = message.get("content")
    return [b for b in content if isinstance(b, Mapping)] if isinstance(content, list) else []


def _anthropic_source_problem(block: Mapping[str, Any]) -> str | None:
    source = block.get("source") or {}
    allowed = _ANTHROPIC_IMAGE_TYPES if block.get("type") == "image" else _ANTHROPIC_DOCUMENT_TYPES
    if source.get("type") == "url":
        return None if str(source.get("url")).startswith(("http://", "https://")) else "a url source without http(s)"
    if source.get("type") == "base64":
        if source.get("media_type") not in allowed:
            return f"media_type {source.get('media_type')!r} not in {sorted(allowed)}"
        return None if bare_base64(source.get("data")) else "base64 source whose data is not bare base64"
    if block.get("type") == "document" and source.get("type") in ("text", "content", "file"):
        return None
    return f"source type {source.get('type')!r}"


def anthropic_media_placement(body: Body, path: str) -> Iterator[str]:
    """``image``/``document`` blocks only in user turns (directly, or in ``tool_result`` content, which takes
    ``text``/``image``/``document`` only); there is no audio block."""
    for index, message in enumerate(body.get("messages") or []):
        for block in _blocks(message):
            kind = block.get("type")
            if kind in ("image", "document") and message.get("role") != "user":
                yield f"messages[{index}]: a {kind} block in an {message.get('role')} turn"
            if kind in ("input_audio", "audio", "image_url", "file"):
                yield f"messages[{index}]: a {kind!r} block (not an Anthropic content type)"
            if kind == "tool_result":
                inner = block.get("content")
                for part in inner if isinstance(inner, list) else []:
                    if part.get("type") not in ("text", "image", "document", "search_result"):
                        yield f"messages[{index}]: a {part.get('type')!r} block inside a tool_result"


def anthropic_media_shapes(body: Body, path: str) -> Iterator[str]:
    """Image sources: base64 of image/jpeg|png|gif|webp with bare data, or an http(s) url; documents:
    application/pdf or text/plain."""
    for index, message in enumerate(body.get("messages") or []):
        blocks = list(_blocks(message))
        for block in list(blocks):
            if block.get("type") == "tool_result" and isinstance(block.get("content"), list):
                blocks += [b for b in block["content"] if isinstance(b, Mapping)]
        for block in blocks:
            if block.get("type") in ("image", "document") and (bad := _anthropic_source_problem(block)):
                yield f"messages[{index}] {block.get('type')}: {bad}"


# -- Gemini generateContent ----------------------------------------------------------------------


def _gemini_media(part: Mapping[str, Any]) -> Mapping[str, Any] | None:
    for key in ("inlineData", "inline_data", "fileData", "file_data"):
        if isinstance(part.get(key), Mapping):
            return {"key": key, **part[key]}
    return None


def _gemini_media_problem(media: Mapping[str, Any]) -> str | None:
    if media["key"] in ("inlineData", "inline_data"):
        mime = media.get("mimeType") or media.get("mime_type")
        if not mime or "/" not in str(mime):
            return f"inline data without a mime type ({mime!r})"
        return None if bare_base64(media.get("data")) else "inline data that is not bare base64"
    uri = media.get("fileUri") or media.get("file_uri")
    return None if uri else "file data without a fileUri"


def gemini_media_placement(body: Body, path: str) -> Iterator[str]:
    """Media parts only in user turns, directly or in ``functionResponse.parts`` (which take media only)."""
    for index, content in enumerate(body.get("contents") or []):
        for part in content.get("parts") or []:
            if _gemini_media(part) is not None and content.get("role") != "user":
                yield f"contents[{index}]: media in a {content.get('role')!r} turn"
            response = part.get("functionResponse") or part.get("function_response") or {}
            for inner in response.get("parts") or []:
                if _gemini_media(inner) is None:
                    yield f"contents[{index}]: a functionResponse part that is not media: {sorted(inner)}"


def gemini_media_shapes(body: Body, path: str) -> Iterator[str]:
    """``inlineData`` has a ``mimeType`` and bare base64 ``data``; ``fileData`` has a ``fileUri``."""
    for index, content in enumerate(body.get("contents") or []):
        parts = list(content.get("parts") or [])
        for part in list(parts):
            response = part.get("functionResponse") or part.get("function_response") or {}
            parts += list(response.get("parts") or [])
        for part in parts:
            media = _gemini_media(part)
            if media is not None and (bad := _gemini_media_problem(media)):
                yield f"contents[{index}]: {bad}"


MEDIA_RULES: dict[str, list[Rule]] = {
    "openai": [chat_media_in_user_messages, chat_media_shapes],
    "anthropic": [anthropic_media_placement, anthropic_media_shapes],
    "gemini": [gemini_media_placement, gemini_media_shapes],
}


def check_media(protocol: str, body: Body, path: str = "") -> dict[str, list[str]]:
    """Every violated media rule of ``protocol``: ``{rule name: [sentences]}``."""
    return check(protocol, body, path, MEDIA_RULES)


def register(rules: MutableMapping[str, Sequence[Rule]]) -> None:
    """Append the media rules to a checker's ``RULES`` (once; ``deepseek`` takes the Chat rules, the Vertex AI
    protocols their family's)."""
    family = {"deepseek": "openai", "vertex_anthropic": "anthropic", "vertex_gemini": "gemini"}
    for protocol in (*MEDIA_RULES, *family):
        if protocol not in rules:
            continue
        current = list(rules[protocol])
        extra = MEDIA_RULES[family.get(protocol, protocol)]
        rules[protocol] = current + [rule for rule in extra if rule not in current]
