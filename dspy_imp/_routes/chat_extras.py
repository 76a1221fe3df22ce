"""Replay fields lm15's Chat Completions writer has no slot for: a patch of that writer (DSPy private).

Three OpenAI-compatible routes ask for reasoning state back on the wire in their own fields:

- OpenRouter returns a reply's reasoning as ``message.reasoning_details`` (entries typed
  ``reasoning.text`` with a ``signature``, ``reasoning.encrypted``, ``reasoning.summary``) and wants
  the array back, unchanged, on that assistant message (behind it, Claude needs its signed
  thinking to continue a tool loop, Gemini 3 its thought signatures);
- Gemini's OpenAI-compatible endpoint puts a call's thought signature in
  ``tool_calls[].extra_content.google.thought_signature`` and refuses the call back without it;
- a server of your own (vLLM, Ollama, ...) reads ``reasoning_content`` back into the chat template
  (``_routes.local_servers``).

LiteLLM carries these keys on the message dicts as they are. lm15 reads the reply (the raw body
stays in ``Response.provider_data``, where ``_routes.reasoning`` finds them) but writes neither, so
the wire messages it builds get the fields added: *only* from continuation state that
``route.canonical_request`` attaches (``openrouter``/``reasoning_details`` on an assistant
``Message``, ``gemini``/``thought_signature`` on a call of a request to an OpenAI-compatible
server). Every other request lm15 writes is unchanged, but for one more field: a native request
to OpenRouter's Claude or Gemini models gets the prompt cache's ``cache_control`` marks
(``_routes.caching.marking``), which lm15's writer has no slot for either.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Sequence
from typing import Any

from dspy_imp._routes import caching, dspy_private
from dspy_imp._routes.local_servers import reasoning_of

OPENROUTER, DETAILS = "openrouter", "reasoning_details"


def install() -> None:
    """Wrap lm15's Chat Completions message writer once per process (idempotent)."""

    def wrap(original: Any) -> Any:
        def build(self: Any, request: Any, *args: Any, **kwargs: Any) -> list[dict[str, Any]]:
            items = original(self, request, *args, **kwargs)
            # Wire messages handed out again already hold their fields (written from the same messages).
            again, start = dspy_private.written_again(request.messages)
            with_extras(items[start:] if again else items, request.messages[again:])
            mark = caching.current_mark() if getattr(self, "provider", None) == OPENROUTER else None
            return caching.marked(items, mark, openrouter=True) if mark is not None else items

        return build

    dspy_private.wrap_once(dspy_private.lm15_openai_chat().OpenAIChatLM, "_build_messages", wrap)


def with_extras(items: list[dict[str, Any]], messages: Sequence[Any]) -> list[dict[str, Any]]:
    """``items`` (the wire messages) with each assistant's extra fields from its ``Message``."""
    if not _any_state(messages):
        return items
    assistants = [m for m in messages if getattr(m, "role", None) == "assistant"]
    if not any(_details_of(m) or _signatures_of(m) or reasoning_of(m) for m in assistants):
        return items
    rows = iter(assistants)
    for item in items:
        if item.get("role") != "assistant":
            continue
        message = next(rows, None)
        if message is None:
            break
        details = _details_of(message)
        if details:
            item["reasoning_details"] = details
        reasoning = reasoning_of(message)
        if reasoning:
            item["reasoning_content"] = reasoning
        signatures = _signatures_of(message)
        for call in item.get("tool_calls") or ():
            if call.get("id") in signatures:
                call["extra_content"] = {"google": {"thought_signature": signatures[call["id"]]}}
    return items


def _any_state(messages: Sequence[Any]) -> bool:
    """Whether any of ``messages`` or their parts carries continuation state at all: one pass in C, no
    Python call per message (lm15 writes every request's whole history twice, and almost none carries
    any); anything that is not an lm15 ``Message`` is read attribute by attribute."""
    try:
        return any(map(_STATE, messages)) or any(map(_STATE, itertools.chain.from_iterable(map(_PARTS, messages))))
    except AttributeError:
        return any(getattr(m, "continuation", None) for m in messages) or any(
            getattr(part, "continuation", None) for m in messages for part in getattr(m, "parts", None) or ()
        )


_STATE, _PARTS = operator.attrgetter("continuation"), operator.attrgetter("parts")


def _details_of(message: Any) -> list[Any] | None:
    for state in getattr(message, "continuation", ()) or ():
        if state.provider == OPENROUTER and state.kind == DETAILS:
            return list((state.data or {}).get("details") or ()) or None
    return None


def _signatures_of(message: Any) -> dict[str, str]:
    found: dict[str, str] = {}
    for part in getattr(message, "parts", ()) or ():
        for state in getattr(part, "continuation", ()) or ():
            if state.provider == "gemini" and state.kind == "thought_signature" and (state.data or {}).get("value"):
                found[str(getattr(part, "id", ""))] = str(state.data["value"])
    return found
