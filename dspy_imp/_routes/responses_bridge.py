"""Responses API reasoning items on the LiteLLM engine: a patch of DSPy's chat-to-Responses conversion.

With ``model_type="responses"`` on LiteLLM, DSPy turns the chat messages into Responses ``input``
items (``dspy.clients.lm._convert_chat_request_to_responses_request``) and drops every key it does
not know, so the ``reasoning`` items the loop replays (``reasoning_items`` on an assistant message,
rendered only for routes that take them) never reach LiteLLM. The wrapper converts as DSPy does,
then puts each message's items back, right before the ``function_call`` items of that message
(matched by call id), as the native engine writes them. A request without ``reasoning_items`` is
converted exactly as before.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dspy_imp._routes import dspy_private

REASONING_ITEMS = "reasoning_items"


def install() -> None:
    """Wrap DSPy's conversion once per process (idempotent)."""

    def wrap(original: Any) -> Any:
        def convert(request: dict[str, Any]) -> Any:
            items = _items_by_call(request.get("messages") or ())
            if not items:
                return original(request)
            plain = {**request, "messages": [_plain(m) for m in request["messages"]]}
            return with_items(original(plain), items)

        return convert

    dspy_private.wrap_once(dspy_private.dspy_lm_module(), "_convert_chat_request_to_responses_request", wrap)


def with_items(data: Any, items: Mapping[str, list[dict[str, Any]]]) -> Any:
    """``data["input"]`` with the reasoning items before the first call each of them preceded."""
    if not isinstance(data, dict) or not isinstance(data.get("input"), list):
        return data
    out: list[Any] = []
    for item in data["input"]:
        if isinstance(item, Mapping) and item.get("type") == "function_call" and item.get("call_id") in items:
            out.extend(items[item["call_id"]])
        out.append(item)
    return {**data, "input": out}


def _items_by_call(messages: Any) -> dict[str, list[dict[str, Any]]]:
    found: dict[str, list[dict[str, Any]]] = {}
    for message in messages:
        replayed = message.get(REASONING_ITEMS) if isinstance(message, Mapping) else None
        calls = message.get("tool_calls") if isinstance(message, Mapping) else None
        if replayed and calls:
            found[str(calls[0].get("id"))] = [_wire(i) for i in replayed]
    return found


def _wire(item: Mapping[str, Any]) -> dict[str, Any]:
    summary = item.get("summary")
    out: dict[str, Any] = {"type": "reasoning", "id": item.get("id")}
    out["summary"] = [{"type": "summary_text", "text": summary}] if summary else []
    if item.get("encrypted_content"):
        out["encrypted_content"] = item["encrypted_content"]
    return out


def _plain(message: Any) -> Any:
    return {k: v for k, v in message.items() if k != REASONING_ITEMS} if isinstance(message, Mapping) else message
