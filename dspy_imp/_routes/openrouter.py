"""OpenRouter's ``reasoning_details`` on DSPy's native engine: a patch of lm15's Chat Completions writer.

OpenRouter returns a reply's reasoning as ``message.reasoning_details`` (entries typed
``reasoning.text`` with a ``signature``, ``reasoning.encrypted`` with ``data``, ``reasoning.summary``)
and asks for the array back, unchanged, on that assistant message: behind it, Claude needs its
signed thinking to continue a tool loop and Gemini 3 its thought signatures. LiteLLM carries the
key on a message dict as it is. lm15 reads the reply (the raw body stays in
``Response.provider_data``, where ``_routes.reasoning`` finds it) but its writer has no slot for
it, so the one field is added: *only* for an assistant ``Message`` whose continuation holds
``openrouter``/``reasoning_details`` state, which only ``route.canonical_request`` attaches.
Every other request lm15 writes is unchanged.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from dspy_imp._routes import dspy_private

PROVIDER, KIND = "openrouter", "reasoning_details"
_installed = False


def install() -> None:
    """Wrap lm15's Chat Completions message writer once per process (idempotent)."""
    global _installed
    if _installed:
        return
    chat_lm: Any = dspy_private.lm15_openai_chat().OpenAIChatLM
    original = chat_lm._build_messages

    @functools.wraps(original)
    def build(self: Any, request: Any, *args: Any, **kwargs: Any) -> list[dict[str, Any]]:
        return with_details(original(self, request, *args, **kwargs), request.messages)

    chat_lm._build_messages = build
    _installed = True


def with_details(items: list[dict[str, Any]], messages: Sequence[Any]) -> list[dict[str, Any]]:
    """``items`` (the wire messages) with each assistant's ``reasoning_details`` from its ``Message``."""
    details = [_details_of(m) for m in messages if getattr(m, "role", None) == "assistant"]
    if not any(details):
        return items
    rows = iter(details)
    for item in items:
        if item.get("role") == "assistant":
            found = next(rows, None)
            if found:
                item["reasoning_details"] = found
    return items


def _details_of(message: Any) -> list[Any] | None:
    for state in getattr(message, "continuation", ()) or ():
        if state.provider == PROVIDER and state.kind == KIND:
            return list((state.data or {}).get("details") or ()) or None
    return None
