"""Gemini's served parts without HTTP: the replay writer, the combination flag, the readers' edges."""

from __future__ import annotations

from types import SimpleNamespace

from dspy.lm15 import ContinuationState, Message, TextPart, ToolCallPart

from dspy_imp._routes import hosted_gemini


def _served_turn(parts: list[dict[str, object]], *calls: ToolCallPart) -> Message:
    state = ContinuationState(provider="gemini", kind="served_content", data={"content": parts})
    return Message(role="assistant", parts=(TextPart(text="x"), *calls), continuation=(state,))


def test_a_call_served_without_an_id_goes_back_with_the_id_the_loop_answers_it_by() -> None:
    served = [
        {"executableCode": {"code": "print(1)", "language": "PYTHON"}, "thoughtSignature": "sig-a"},
        {"codeExecutionResult": {"outcome": "OUTCOME_OK", "output": "1\n"}},
        {"functionCall": {"name": "f", "args": {}}, "thoughtSignature": "sig-b"},
        {"functionCall": {"id": "kept", "name": "g", "args": {}}},
    ]
    message = _served_turn(
        served, ToolCallPart(id="tool_call_2", name="f", input={}), ToolCallPart(id="kept", name="g", input={})
    )
    sent = hosted_gemini.served_parts(message)
    assert sent == [
        served[0],
        served[1],
        {"functionCall": {"id": "tool_call_2", "name": "f", "args": {}}, "thoughtSignature": "sig-b"},
        served[3],
    ]


def test_a_turn_without_served_state_or_of_another_provider_is_written_by_lm15() -> None:
    assert hosted_gemini.served_parts(Message(role="assistant", parts=(TextPart(text="x"),))) is None
    other = ContinuationState(provider="anthropic", kind="served_content", data={"content": [{"type": "text"}]})
    assert (
        hosted_gemini.served_parts(Message(role="assistant", parts=(TextPart(text="x"),), continuation=(other,)))
        is None
    )


def test_the_combination_flag_goes_only_to_gemini_3_beside_functions() -> None:
    both = {"tools": [{"googleSearch": {}}, {"functionDeclarations": [{"name": "f"}]}]}
    flagged = hosted_gemini.with_tool_circulation(dict(both), SimpleNamespace(model="gemini-3-flash-preview"))
    assert flagged["toolConfig"] == {"includeServerSideToolInvocations": True}
    alone = {"tools": [{"codeExecution": {}}]}
    assert "toolConfig" not in hosted_gemini.with_tool_circulation(dict(alone), SimpleNamespace(model="gemini-3-pro"))
    kept = {**both, "toolConfig": {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["submit"]}}}
    merged = hosted_gemini.with_tool_circulation(dict(kept), SimpleNamespace(model="gemini-3-pro-preview"))
    assert merged["toolConfig"]["functionCallingConfig"]["allowedFunctionNames"] == ["submit"]
    assert merged["toolConfig"]["includeServerSideToolInvocations"] is True


def test_the_readers_take_untrusted_bodies_and_other_providers_responses() -> None:
    assert hosted_gemini.served(SimpleNamespace(provider_data={"content": [{"type": "text"}]})) is None
    assert hosted_gemini.usage(SimpleNamespace(provider_data={"usage": {"server_tool_use": {}}})) is None
    odd = {"candidates": [{"content": {"parts": [{"text": "a"}]}, "groundingMetadata": {"groundingChunks": "x"}}]}
    block = hosted_gemini.served(SimpleNamespace(provider_data=odd))
    assert block is not None and hosted_gemini.citations(block) == []
    supports = {"groundingChunks": [{"web": {"uri": "u"}}], "groundingSupports": [{"groundingChunkIndices": [3, True]}]}
    assert hosted_gemini.citations({"groundingMetadata": supports}) == []


def test_a_streamed_replys_last_chunk_is_not_taken_for_the_whole_reply() -> None:
    grounding = {"webSearchQueries": ["q"], "groundingChunks": [], "groundingSupports": []}
    last_chunk = {"candidates": [{"content": {"parts": [{"text": " world."}]}, "groundingMetadata": grounding}]}
    streamed = SimpleNamespace(
        message=SimpleNamespace(parts=(TextPart(text="Hello world."),)), provider_data=last_chunk
    )
    assert hosted_gemini.served(streamed) is None
    whole = {"candidates": [{"content": {"parts": [{"text": "Hello world."}]}, "groundingMetadata": grounding}]}
    read = SimpleNamespace(message=SimpleNamespace(parts=(TextPart(text="Hello world."),)), provider_data=whole)
    block = hosted_gemini.served(read)
    assert block is not None and block["content"] == [{"text": "Hello world."}]
