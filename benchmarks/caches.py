"""The providers' prompt caches, as the bench server reports them (I/O free, one turn's state each).

A request is read as the provider's cache reads it: a sequence of *blocks* in prefix order
(the tool definitions, then the system prompt, then every message's content blocks), each
counted with ``cl100k_base`` (an estimate of every provider's tokens). Block boundaries are the
only places a cached prefix can end, which is how the providers work too (a cache entry is a
prefix hash at a block boundary).

- **Anthropic** caches only behind ``cache_control`` breakpoints. A breakpoint whose prefix is at
  least the model's minimum (``ANTHROPIC_MINIMUM``) writes that prefix; a later request reads
  the longest prefix it has seen, found at one of its own breakpoints or at one of the 20 block
  boundaries before each breakpoint (Anthropic's lookback). The usage splits the prompt as
  Anthropic does: ``cache_read_input_tokens`` (the hit), ``cache_creation_input_tokens`` (from the
  hit to the last breakpoint that could be written) and ``input_tokens`` (the rest). More than four
  breakpoints is the provider's 400. A top-level ``cache_control`` (Anthropic's automatic caching)
  is a breakpoint on the request's last block. A request with ``tools`` also pays the tool-use
  system prompt Anthropic adds in front of them (``TOOL_USE_SYSTEM_PROMPT``: 346 tokens under
  ``tool_choice`` ``auto``/``none``, 313 under ``any``/``tool``, on the Claude 4 models): it counts
  toward the prefix, so it is read and written with the blocks behind it.
- **OpenAI** caches automatically: a prompt of 1,024 tokens or more reuses the longest prefix an
  earlier request sent, in 128-token steps past the first 1,024
  (``prompt_tokens_details.cached_tokens``).
- **DeepSeek** caches automatically too, in 64-token units (``prompt_cache_hit_tokens``).

Each cache lives for one turn (``Script`` makes new ones at every reset): every measured turn
starts cold, the worst case for a cache and the same for every loop.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

LOOKBACK = 20  # block boundaries Anthropic checks before each breakpoint
MAX_BREAKPOINTS = 4
# The smallest prefix a breakpoint caches, by model (Anthropic's prompt-caching page).
ANTHROPIC_MINIMUM = {"claude-haiku-4-5": 4096, "claude-opus-4-5": 4096, "claude-sonnet-4-5": 1024}
DEFAULT_MINIMUM = 1024
# The system prompt Anthropic adds to every request with ``tools``, by ``tool_choice`` type (its
# tool-use page, "Pricing": the same for Opus 4.x, Sonnet 4.x and Haiku 4.5). Billed as input tokens;
# not a block of its own (a new ``tool_choice`` re-reads only the messages, per the caching guide).
TOOL_USE_SYSTEM_PROMPT = {"auto": 346, "none": 346, "any": 313, "tool": 313}
# The later public table of the same prompt (496 under auto/none, 588 under any/tool): it reverses
# which ``tool_choice`` is cheaper. The bench bills every Claude turn under both, and shows both.
TOOL_USE_SYSTEM_PROMPT_LATER = {"auto": 496, "none": 496, "any": 588, "tool": 588}
TOOL_USE_TABLES = {"346/313": TOOL_USE_SYSTEM_PROMPT, "496/588": TOOL_USE_SYSTEM_PROMPT_LATER}


class TooManyBreakpoints(ValueError):
    """A request with more ``cache_control`` blocks than Anthropic allows."""


@dataclass
class Counter:
    """``cl100k_base`` counts, memoised per block text (a long turn resends the same blocks)."""

    encode: Any
    seen: dict[str, int] = field(default_factory=dict)

    def __call__(self, text: str) -> int:
        count = self.seen.get(text)
        if count is None:
            count = self.seen[text] = len(self.encode(text, disallowed_special=()))
        return count


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True)


def _unmarked(block: dict[str, Any]) -> tuple[str, bool]:
    marked = "cache_control" in block
    return _dumps({k: v for k, v in block.items() if k != "cache_control"}), marked


def anthropic_blocks(body: dict[str, Any]) -> Iterator[tuple[str, bool]]:
    """A Messages request's blocks in cache order (tools, system, messages), each with whether it is marked."""
    for tool in body.get("tools") or []:
        yield _unmarked(tool)
    system = body.get("system")
    if isinstance(system, str):
        yield _dumps({"system": system}), False
    elif system:
        for block in system:
            yield _unmarked(block)
    for message in body.get("messages", []):
        content = message.get("content")
        if isinstance(content, str):
            yield _dumps({"role": message["role"], "text": content}), False
            continue
        for index, block in enumerate(content or []):
            text, marked = _unmarked(block)
            yield (f"{message['role']}:{text}" if index == 0 else text), marked


def chat_blocks(body: dict[str, Any]) -> Iterator[str]:
    """A Chat Completions request's blocks in cache order: the tools and schema, then each message."""
    tools = body.get("tools")
    schema = body.get("response_format")
    if tools or schema:
        yield _dumps({"tools": tools, "schema": schema})
    for message in body.get("messages", []):
        yield _dumps(message)


def _chain(texts: Sequence[str]) -> list[int]:
    """A hash per block boundary: the prefix up to and including each block."""
    out, previous = [], 0
    for text in texts:
        previous = hash((previous, text))
        out.append(previous)
    return out


def _cumulative(counts: Sequence[int], start: int = 0) -> list[int]:
    out = [start]
    for count in counts:
        out.append(out[-1] + count)
    return out


def message_settings(body: dict[str, Any]) -> str:
    """What Anthropic keys the messages' cache on besides the blocks: the ``tool_choice`` and the
    thinking settings ("Changes to tool_choice parameter only affect message blocks"; so do
    changes to extended thinking settings: its prompt-caching guide, "What invalidates the cache")."""
    choice = body.get("tool_choice") or {"type": "auto"}
    thinking = body.get("thinking") or {"type": "disabled"}
    return _dumps({"tool_choice": choice, "thinking": thinking})


def tool_use_prompt(body: dict[str, Any], table: dict[str, int] | None = None) -> int:
    """The tokens of the tool-use system prompt Anthropic adds to a request (0 without ``tools``),
    from ``table`` (``TOOL_USE_SYSTEM_PROMPT`` unless given)."""
    if not body.get("tools"):
        return 0
    table = table or TOOL_USE_SYSTEM_PROMPT
    choice = (body.get("tool_choice") or {"type": "auto"}).get("type", "auto")
    return table.get(choice, table["auto"])


def _system_blocks(body: dict[str, Any]) -> int:
    system = body.get("system")
    return 1 if isinstance(system, str) else len(system or [])


@dataclass
class AnthropicCache:
    """One turn of Anthropic's breakpoint cache for one model."""

    count: Counter
    minimum: int = DEFAULT_MINIMUM
    entries: set[int] = field(default_factory=set)
    tool_prompt: dict[str, int] = field(default_factory=lambda: TOOL_USE_SYSTEM_PROMPT)

    @classmethod
    def for_model(cls, count: Counter, model: str, tool_prompt: dict[str, int] | None = None) -> AnthropicCache:
        minimum = next((m for name, m in ANTHROPIC_MINIMUM.items() if model.startswith(name)), DEFAULT_MINIMUM)
        return cls(count, minimum, tool_prompt=tool_prompt or TOOL_USE_SYSTEM_PROMPT)

    def usage(self, body: dict[str, Any]) -> dict[str, int]:
        """The request's prompt split as Anthropic reports it; its breakpoints' prefixes are written."""
        blocks = list(anthropic_blocks(body))
        marks = [i for i, (_, marked) in enumerate(blocks) if marked]
        if "cache_control" in body and blocks and (not marks or marks[-1] != len(blocks) - 1):
            marks.append(len(blocks) - 1)  # automatic caching: a breakpoint on the last block, one of the four
        if len(marks) > MAX_BREAKPOINTS:
            raise TooManyBreakpoints(f"A maximum of {MAX_BREAKPOINTS} blocks with cache_control may be provided.")
        head = len(body.get("tools") or []) + _system_blocks(body)
        settings = message_settings(body)  # a change re-reads the messages, not the tools and system
        chain = _chain([text if i < head else settings + text for i, (text, _) in enumerate(blocks)])
        upto = _cumulative([self.count(text) for text, _ in blocks], tool_use_prompt(body, self.tool_prompt))
        hit = 0  # blocks read from the cache
        for mark in marks:
            for end in range(mark, max(-1, mark - LOOKBACK - 1), -1):
                if chain[end] in self.entries:
                    hit = max(hit, end + 1)
                    break
        written = hit
        for mark in marks:
            if upto[mark + 1] >= self.minimum:
                self.entries.add(chain[mark])
                written = max(written, mark + 1)
        read = upto[hit] if hit else 0  # upto[0] is the tool-use prompt: cached only with a block
        creation = (upto[written] if written else 0) - read
        return {
            "input_tokens": upto[-1] - read - creation,
            "cache_creation_input_tokens": creation,
            "cache_read_input_tokens": read,
        }


@dataclass
class AutomaticCache:
    """One turn of an automatic prefix cache (OpenAI's, DeepSeek's): every earlier prefix is kept."""

    count: Counter
    minimum: int
    step: int
    seen: set[int] = field(default_factory=set)

    def usage(self, body: dict[str, Any]) -> tuple[int, int]:
        """(prompt tokens, cached tokens) of a Chat Completions request; its prefixes are kept."""
        texts = list(chat_blocks(body))
        chain = _chain(texts)
        upto = _cumulative([self.count(text) for text in texts])
        hit = next((end + 1 for end in range(len(chain) - 1, -1, -1) if chain[end] in self.seen), 0)
        self.seen.update(chain)
        return upto[-1], self.cached(upto[hit])

    def cached(self, prefix: int) -> int:
        if prefix < self.minimum:
            return 0
        return prefix - (prefix - self.minimum) % self.step


def openai_cache(count: Counter) -> AutomaticCache:
    return AutomaticCache(count, 1024, 128)


def deepseek_cache(count: Counter) -> AutomaticCache:
    return AutomaticCache(count, 64, 64)
