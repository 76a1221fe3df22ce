"""Responses API reasoning items as served: a patch of DSPy's chat-to-Responses conversion (LiteLLM),
and of lm15's Responses input writer (native: it keeps one joined summary part and no ``content``).

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
    """Wrap DSPy's conversion and lm15's Responses input writer once per process (idempotent)."""

    def wrap(original: Any) -> Any:
        def convert(request: dict[str, Any]) -> Any:
            items = _items_by_call(request.get("messages") or ())
            if not items:
                return original(request)
            plain = {**request, "messages": [_plain(m) for m in request["messages"]]}
            return with_items(original(plain), items)

        return convert

    dspy_private.wrap_once(dspy_private.dspy_lm_module(), "_convert_chat_request_to_responses_request", wrap)
    _install_native()


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
    out: dict[str, Any] = {"type": "reasoning", "id": item.get("id")}
    out["summary"] = summary_of(item)
    if item.get("encrypted_content"):
        out["encrypted_content"] = item["encrypted_content"]
    if item.get("content"):
        out["content"] = [dict(c) for c in item["content"]]
    return out


def summary_of(item: Mapping[str, Any]) -> list[dict[str, str]]:
    """A recorded item's ``summary`` as served: one ``summary_text`` part per recorded part."""
    parts = item.get("summary_parts") or ([item["summary"]] if item.get("summary") else [])
    return [{"type": "summary_text", "text": str(text)} for text in parts]


def _plain(message: Any) -> Any:
    return {k: v for k, v in message.items() if k != REASONING_ITEMS} if isinstance(message, Mapping) else message


def _install_native() -> None:
    """lm15 writes a replayed item's id, encrypted content and *one* summary part (the parts joined)
    and drops its ``content``; the wrapper writes the recorded parts and content back (from the replay
    state ``route.canonical_request`` attaches). A request whose items carry neither is unchanged."""

    def wrap(original: Any) -> Any:
        def build(self: Any, messages: Any, *args: Any, **kwargs: Any) -> list[dict[str, Any]]:
            return with_served_parts(original(self, messages, *args, **kwargs), messages)

        return build

    dspy_private.wrap_once(dspy_private.lm15_openai_responses().OpenAILM, "_build_input", wrap)


def with_served_parts(items: list[dict[str, Any]], messages: Any) -> list[dict[str, Any]]:
    """``items`` with each replayed reasoning item's summary parts and content as recorded."""
    served = {_key(state): state for state in _item_states(messages) if "summary_parts" in state or "content" in state}
    for item in items if served else ():
        state = served.get(_key(item)) if item.get("type") == "reasoning" else None
        if state is not None:
            if state.get("summary_parts"):
                item["summary"] = summary_of(state)
            if state.get("content"):
                item["content"] = [dict(c) for c in state["content"]]
    return items


def _item_states(messages: Any) -> list[Mapping[str, Any]]:
    return [
        state.data or {}
        for message in messages or ()
        if getattr(message, "role", None) == "assistant"
        for part in getattr(message, "parts", ()) or ()
        for state in getattr(part, "continuation", ()) or ()
        if state.provider == "openai" and state.kind == "reasoning_item"
    ]


def _key(data: Mapping[str, Any]) -> tuple[Any, Any]:
    return (data.get("id"), data.get("encrypted_content"))
