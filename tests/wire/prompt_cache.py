"""The emulator's prompt caches: Anthropic's (breakpoints) and OpenAI's (automatic, routed by key).

What the providers document and return (Anthropic's prompt-caching guide and its usage objects;
OpenAI's prompt-caching guide; public recordings of both):

- **Anthropic** caches only at ``cache_control`` breakpoints, in the order tools, system, messages.
  A request reads the longest prefix written before that ends at one of its block boundaries, at or
  up to 20 blocks before a breakpoint, and writes the prefix up to each of its breakpoints; a prefix
  under the model's minimum (1,024 tokens; 4,096 on Haiku 4.5 and Opus 4.5; 2,048 on Haiku 3.x) is
  not cached, and nothing is an error. ``usage`` then says ``cache_read_input_tokens`` and
  ``cache_creation_input_tokens`` (with ``cache_creation.ephemeral_5m/1h_input_tokens``), and
  ``input_tokens`` counts only the tokens after the last breakpoint (or the read). More than four
  breakpoints is a 400 with Anthropic's body ("A maximum of 4 blocks with cache_control may be
  provided. Found 5.").
- **OpenAI** (Chat Completions) caches every prompt of 1,024 tokens or more by itself, in steps of
  128 tokens; a ``prompt_cache_key`` routes requests sharing a prefix to the same cache (here: the
  cache is per key). ``usage.prompt_tokens_details.cached_tokens`` says what was read;
  ``prompt_tokens`` counts all the prompt, cached or not.

Tokens are estimated from the JSON (a token per 4 characters). A request that reads and writes
nothing keeps its scripted usage, so scenarios with short prompts answer exactly as scripted.
Anthropic's tool-use system prompt (billed on every request with ``tools``) is not added here:
these tests check what is sent and reported; the bench's emulator (``benchmarks/caches.py``)
bills it.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

LOOKBACK = 20
MAX_BREAKPOINTS = 4


def tokens(value: Any) -> int:
    return max(1, len(json.dumps(value, ensure_ascii=False)) // 4)


def _digest(blocks: list[Any]) -> str:
    return hashlib.sha256(json.dumps(blocks, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


def anthropic_minimum(model: str) -> int:
    model = model.lower().replace(".", "-")
    if re.search(r"haiku-4-5|opus-4-5", model):
        return 4096
    if re.search(r"haiku-3|3-haiku|3-5-haiku", model):
        return 2048
    return 1024


def message_settings(body: dict[str, Any]) -> dict[str, Any]:
    """What the messages' cache is keyed on besides their blocks: a change of ``tool_choice`` or of
    the thinking settings re-reads the messages but not the tools and system (Anthropic's guide,
    "What invalidates the cache": "Changes to tool_choice parameter only affect message blocks")."""
    return {
        "tool_choice": body.get("tool_choice") or {"type": "auto"},
        "thinking": body.get("thinking") or {"type": "disabled"},
    }


def anthropic_blocks(body: dict[str, Any]) -> tuple[list[Any], list[tuple[int, str]]]:
    """The request as the cache sees it: its blocks in order (marks taken off; a message block
    carries the request's ``message_settings``) and its breakpoints (block index, ttl)."""
    blocks: list[Any] = []
    marks: list[tuple[int, str]] = []
    settings = message_settings(body)

    def add(block: Any, owner: str) -> None:
        mark = block.get("cache_control") if isinstance(block, dict) else None
        plain = {k: v for k, v in block.items() if k != "cache_control"} if isinstance(block, dict) else block
        blocks.append([owner, plain] if owner in ("tool", "system") else [owner, plain, settings])
        if mark is not None:
            marks.append((len(blocks) - 1, str(mark.get("ttl") or "5m")))

    for tool in body.get("tools") or []:
        add(tool, "tool")
    system = body.get("system")
    for block in [{"type": "text", "text": system}] if isinstance(system, str) else system or []:
        add(block, "system")
    for message in body.get("messages") or []:
        content = message.get("content")
        for block in [{"type": "text", "text": content}] if isinstance(content, str) else content or []:
            add(block, message.get("role"))
    return blocks, marks


class PromptCaches:
    """What each provider has cached, across the requests one emulator receives."""

    def __init__(self) -> None:
        self.anthropic: dict[str, int] = {}  # digest of a written prefix -> its tokens
        self.openai: dict[tuple[Any, str], int] = {}  # (prompt_cache_key, digest of a prefix) -> tokens

    def answer(self, path: str, request: Any, status: int, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        if not isinstance(request, dict) or status != 200:
            return status, body
        if path.endswith("/messages"):
            return self._anthropic(request, body)
        if path.endswith("/chat/completions") and isinstance(body.get("usage"), dict):
            return 200, self._openai(request, body)
        if path.endswith("/responses") and isinstance(body.get("usage"), dict):
            return 200, self._responses(request, body)
        return status, body

    def _anthropic(self, request: dict[str, Any], body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        blocks, marks = anthropic_blocks(request)
        if len(marks) > MAX_BREAKPOINTS:
            message = f"A maximum of {MAX_BREAKPOINTS} blocks with cache_control may be provided. Found {len(marks)}."
            return 400, {"type": "error", "error": {"type": "invalid_request_error", "message": message}}
        sizes = [tokens(b[:2]) for b in blocks]
        total = sum(sizes)
        read = 0
        for index, _ in marks:
            for end in range(index, max(-1, index - LOOKBACK - 1), -1):
                if _digest(blocks[: end + 1]) in self.anthropic:
                    read = max(read, sum(sizes[: end + 1]))
                    break
        minimum = anthropic_minimum(str(request.get("model") or ""))
        written, by_ttl = read, {"5m": 0, "1h": 0}
        for index, ttl in marks:
            upto = sum(sizes[: index + 1])
            if upto < minimum:
                continue
            self.anthropic.setdefault(_digest(blocks[: index + 1]), upto)
            if upto > written:
                by_ttl[ttl] += upto - written
                written = upto
        write = written - read
        if not (read or write):
            return 200, body
        usage = {
            **body.get("usage", {}),
            "input_tokens": max(total - written, 1),
            "cache_read_input_tokens": read,
            "cache_creation_input_tokens": write,
            "cache_creation": {"ephemeral_5m_input_tokens": by_ttl["5m"], "ephemeral_1h_input_tokens": by_ttl["1h"]},
        }
        return 200, {**body, "usage": usage}

    def _openai(self, request: dict[str, Any], body: dict[str, Any]) -> dict[str, Any]:
        items = [request.get("tools") or [], *(request.get("messages") or [])]
        return _reported(body, *self._prefix(request.get("prompt_cache_key"), items), CHAT_USAGE)

    def _responses(self, request: dict[str, Any], body: dict[str, Any]) -> dict[str, Any]:
        """The Responses API: the same cache over ``tools``, ``instructions`` and ``input``."""
        given = request.get("input")
        turns = given if isinstance(given, list) else [given or ""]
        items = [[request.get("tools") or [], request.get("instructions") or ""], *turns]
        return _reported(body, *self._prefix(request.get("prompt_cache_key"), items), RESPONSES_USAGE)

    def _prefix(self, key: Any, items: list[Any]) -> tuple[int, int]:
        """``(prompt tokens, cached tokens)``: every prefix of 1,024 tokens or more is kept (per key),
        and the longest kept one is read back in steps of 128."""
        sizes = [tokens(item) for item in items]
        total = sum(sizes)
        read = 0
        for end in range(len(items), 0, -1):
            if (key, _digest(items[:end])) in self.openai:
                read = sum(sizes[:end])
                break
        for end in range(1, len(items) + 1):
            upto = sum(sizes[:end])
            if upto >= 1024:
                self.openai.setdefault((key, _digest(items[:end])), upto)
        return total, read // 128 * 128 if read >= 1024 else 0


# How each API spells its usage: the prompt's tokens, the reply's, and the prompt's details.
CHAT_USAGE = ("prompt_tokens", "completion_tokens", "prompt_tokens_details")
RESPONSES_USAGE = ("input_tokens", "output_tokens", "input_tokens_details")


def _reported(body: dict[str, Any], total: int, cached: int, spelling: tuple[str, str, str]) -> dict[str, Any]:
    """The reply with its usage saying what the cache read (``cached_tokens`` in the prompt's
    details); a reply whose prompt read nothing keeps its scripted usage."""
    if not cached:
        return body
    prompt, reply, details = spelling
    usage = dict(body["usage"])
    usage.update(
        {
            prompt: total,
            "total_tokens": total + int(usage.get(reply) or 0),
            details: {**(usage.get(details) or {}), "cached_tokens": cached},
        }
    )
    return {**body, "usage": usage}
