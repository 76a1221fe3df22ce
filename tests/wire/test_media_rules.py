"""The media rules catch what providers refuse (each rule shown failing on a body that breaks it)."""

from __future__ import annotations

import base64
from typing import Any

from media_rules import MEDIA_RULES, check_media, register

B64 = base64.b64encode(b"\x89PNG-bytes").decode()


def chat(*messages: dict[str, Any]) -> dict[str, Any]:
    return {"messages": list(messages)}


def test_openai_media_only_in_user_messages() -> None:
    image = {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{B64}"}}
    assert check_media("openai", chat({"role": "user", "content": [image]})) == {}
    found = check_media("openai", chat({"role": "tool", "tool_call_id": "c1", "content": [image]}))
    assert list(found) == ["chat_media_in_user_messages"]


def test_openai_data_url_and_audio_shapes() -> None:
    bad = chat(
        {
            "role": "user",
            "content": [
                {"type": "image_url", "image_url": {"url": f"data:application/pdf;base64,{B64}"}},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,not base64!"}},
                {"type": "image_url", "image_url": {"url": "/local/file.png"}},
                {"type": "input_audio", "input_audio": {"data": f"data:audio/wav;base64,{B64}", "format": "wav"}},
                {"type": "file", "file": {"file_data": B64}},
            ],
        }
    )
    assert len(check_media("openai", bad)["chat_media_shapes"]) == 5
    good = chat(
        {
            "role": "user",
            "content": [
                {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}},
                {"type": "input_audio", "input_audio": {"data": B64, "format": "mp3"}},
                {"type": "file", "file": {"file_data": f"data:application/pdf;base64,{B64}", "filename": "a.pdf"}},
            ],
        }
    )
    assert check_media("openai", good) == {}


def test_anthropic_media_placement_and_sources() -> None:
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": B64}}
    tool_result = {"type": "tool_result", "tool_use_id": "t1", "content": [{"type": "text", "text": "x"}, image]}
    assert check_media("anthropic", chat({"role": "user", "content": [tool_result]})) == {}
    wrong = [
        {"role": "assistant", "content": [image]},
        {"role": "user", "content": [{"type": "input_audio", "input_audio": {}}]},
        {"role": "user", "content": [{**tool_result, "content": [{"type": "tool_use", "id": "x"}]}]},
    ]
    assert len(check_media("anthropic", chat(*wrong))["anthropic_media_placement"]) == 3
    prefixed = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": f"data:,{B64}"}}
    bmp = {"type": "image", "source": {"type": "base64", "media_type": "image/bmp", "data": B64}}
    inner = {"type": "tool_result", "tool_use_id": "t1", "content": [prefixed]}
    found = check_media("anthropic", chat({"role": "user", "content": [bmp, inner]}))
    assert len(found["anthropic_media_shapes"]) == 2


def test_gemini_media_placement_and_shapes() -> None:
    inline = {"inlineData": {"mimeType": "image/png", "data": B64}}
    response = {"functionResponse": {"name": "zoom", "response": {}, "parts": [inline]}}
    assert check_media("gemini", {"contents": [{"role": "user", "parts": [response, inline]}]}) == {}
    body = {
        "contents": [
            {"role": "model", "parts": [inline]},
            {"role": "user", "parts": [{"functionResponse": {"name": "zoom", "parts": [{"text": "x"}]}}]},
        ]
    }
    assert len(check_media("gemini", body)["gemini_media_placement"]) == 2
    shapes = {"contents": [{"role": "user", "parts": [{"inline_data": {"data": B64}}, {"fileData": {}}]}]}
    assert len(check_media("gemini", shapes)["gemini_media_shapes"]) == 2


def test_register_appends_once_and_gives_deepseek_the_chat_rules() -> None:
    def existing(body: Any, path: str) -> Any:
        return iter(())

    rules: dict[str, Any] = {"openai": [existing], "deepseek": [existing], "anthropic": (existing,)}
    register(rules)
    register(rules)
    assert rules["openai"] == [existing, *MEDIA_RULES["openai"]]
    assert rules["deepseek"] == [existing, *MEDIA_RULES["openai"]]
    assert rules["anthropic"] == [existing, *MEDIA_RULES["anthropic"]]
    assert "gemini" not in rules
