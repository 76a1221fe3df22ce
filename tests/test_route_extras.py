"""The two writer patches change only requests that carry their state (everything else is left as it was)."""

from __future__ import annotations

from dspy.lm15 import ContinuationState, Message, TextPart, ToolCallPart

from dspy_imp._routes.chat_extras import with_extras
from dspy_imp._routes.responses_bridge import with_items

ITEMS = [{"role": "user", "content": "q"}, {"role": "assistant", "content": None, "tool_calls": [{"id": "c1"}]}]


def _call(continuation: tuple[ContinuationState, ...] = ()) -> Message:
    return Message(role="assistant", parts=(ToolCallPart(id="c1", name="f", input={}, continuation=continuation),))


def test_the_chat_writer_is_unchanged_without_state() -> None:
    messages = [Message(role="user", parts=(TextPart(text="q"),)), _call()]
    assert with_extras([dict(i) for i in ITEMS], messages) == ITEMS


def test_the_chat_writer_adds_what_the_messages_carry() -> None:
    signed = _call((ContinuationState(provider="gemini", kind="thought_signature", data={"value": "sig"}),))
    details = ContinuationState(
        provider="openrouter", kind="reasoning_details", data={"details": [{"type": "reasoning.text"}]}
    )
    message = Message(role="assistant", parts=signed.parts, continuation=(details,))
    items = with_extras([dict(ITEMS[0]), {**ITEMS[1], "tool_calls": [{"id": "c1"}]}], [message])
    assert items[1]["reasoning_details"] == [{"type": "reasoning.text"}]
    assert items[1]["tool_calls"][0]["extra_content"] == {"google": {"thought_signature": "sig"}}


def test_the_responses_conversion_is_unchanged_without_items() -> None:
    data = {"input": [{"role": "user", "content": []}, {"type": "function_call", "call_id": "c1"}]}
    assert with_items(data, {}) == data
    reasoning = {"type": "reasoning", "id": "rs_1", "summary": []}
    assert with_items(data, {"c1": [reasoning]})["input"] == [data["input"][0], reasoning, data["input"][1]]
