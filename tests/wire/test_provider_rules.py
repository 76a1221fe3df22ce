"""The rules checker catches what each rule is about (so a wire test that passes means something)."""

from __future__ import annotations

from typing import Any

import pytest
from provider_rules import RULES, assert_accepted, bound, check

USER = {"role": "user", "content": "hi"}
CALL = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
TOOL_USE = {"type": "tool_use", "id": "t1", "name": "f", "input": {}}
RESULT = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}]}
THINKING_ON = {"thinking": {"type": "enabled", "budget_tokens": 1024}}
FC = {"functionCall": {"name": "f", "args": {}}}
FR = {"role": "user", "parts": [{"functionResponse": {"name": "f", "response": {}}}]}
# Media (the rules of media_rules.py, registered by conftest)
IMAGE_URL = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}
IMAGE = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}
INLINE = {"inlineData": {"mimeType": "image/png", "data": "iVBORw0KGgo="}}
FABLE = {"model": "claude-fable-5-1"}
ADAPTIVE = {"thinking": {"type": "adaptive"}}
# A block signed for the request [USER] (no system, no tools), replayed behind an edited prefix.
SIGNED = {"type": "thinking", "thinking": "x", "signature": bound("sig", {"messages": [USER]})}
EDITED_PREFIX = {
    **FABLE,
    **ADAPTIVE,
    "system": "edited",
    "messages": [USER, {"role": "assistant", "content": [SIGNED, TOOL_USE]}, RESULT],
}

EPHEMERAL = {"type": "ephemeral"}
HOUR = {"type": "ephemeral", "ttl": "1h"}


def _marked(text: str, mark: dict[str, Any] = EPHEMERAL) -> dict[str, Any]:
    return {"type": "text", "text": text, "cache_control": mark}


BROKEN: list[tuple[str, str, dict[str, Any], str]] = [
    (  # five breakpoints: one more than Anthropic takes
        "anthropic",
        "anthropic_cache_breakpoints",
        {"system": [_marked("s")], "messages": [{"role": "user", "content": [_marked(f"u{n}") for n in range(4)]}]},
        "",
    ),
    (  # an hour-long breakpoint after a five-minute one
        "anthropic",
        "anthropic_cache_breakpoints",
        {"system": [_marked("s")], "messages": [{"role": "user", "content": [_marked("u", HOUR)]}]},
        "",
    ),
    (  # a thinking block marked
        "anthropic",
        "anthropic_cache_breakpoints",
        {
            "messages": [
                USER,
                {"role": "assistant", "content": [{**SIGNED, "cache_control": EPHEMERAL}, TOOL_USE]},
                RESULT,
            ]
        },
        "",
    ),
    ("anthropic", "no_openai_cache_fields", {"messages": [USER], "prompt_cache_key": "conversation-1"}, ""),
    ("deepseek", "no_openai_cache_fields", {"messages": [USER], "prompt_cache_retention": "24h"}, ""),
    ("openai", "no_cache_control", {"messages": [{**USER, "cache_control": EPHEMERAL}]}, ""),
    ("local", "no_cache_control", {"messages": [{"role": "user", "content": [_marked("hi")]}]}, ""),
    ("openai", "chat_roles", {"messages": [USER, {"role": "tool", "tool_call_id": "c1", "content": "x"}]}, ""),
    (
        "openai",
        "chat_call_pairing",
        {"messages": [USER, {"role": "assistant", "content": None, "tool_calls": [CALL]}]},
        "",
    ),
    ("openai", "chat_assistant_not_empty", {"messages": [USER, {"role": "assistant", "content": ""}]}, ""),
    ("openai", "chat_named_choice", {"messages": [USER], "tools": [], "tool_choice": {"function": {"name": "g"}}}, ""),
    ("openai", "chat_choice_needs_tools", {"messages": [USER], "tool_choice": "auto"}, ""),
    ("groq", "chat_choice_needs_tools", {"messages": [USER], "parallel_tool_calls": True}, ""),
    ("openrouter", "chat_choice_needs_tools", {"messages": [USER], "tools": []}, ""),
    ("local", "chat_choice_needs_tools", {"messages": [USER], "tool_choice": "none"}, ""),
    ("deepseek", "chat_choice_needs_tools", {"messages": [USER], "tools": [], "tool_choice": "auto"}, ""),
    ("gemini_compat", "chat_choice_needs_tools", {"messages": [USER], "tool_choice": "auto"}, ""),
    ("anthropic", "anthropic_choice_needs_tools", {"messages": [USER], "tool_choice": {"type": "auto"}}, ""),
    ("anthropic", "anthropic_choice_needs_tools", {"messages": [USER], "tools": []}, ""),
    (
        "gemini",
        "gemini_calling_config_needs_declarations",
        {"contents": [], "toolConfig": {"functionCallingConfig": {"mode": "AUTO"}}},
        "",
    ),
    (  # built-in tools only: the config governs function tools, and there are none
        "gemini",
        "gemini_calling_config_needs_declarations",
        {"contents": [], "tools": [{"googleSearch": {}}], "tool_config": {"function_calling_config": {"mode": "AUTO"}}},
        "",
    ),
    (
        "deepseek",
        "deepseek_reasoning_replayed",
        {"model": "deepseek-reasoner", "tools": [{}], "messages": [USER, {"role": "assistant", "content": "a"}]},
        "",
    ),
    (
        "gemini_compat",
        "gemini_compat_thought_signatures",
        {
            "model": "gemini-3-pro-preview",
            "messages": [USER, {"role": "assistant", "content": None, "tool_calls": [CALL]}],
        },
        "",
    ),
    (
        "responses",
        "responses_call_pairing",
        {
            "input": [
                {"role": "user", "content": "q"},
                {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
            ]
        },
        "",
    ),
    (
        "responses",
        "responses_reasoning_followed",
        {
            "input": [
                {"role": "user", "content": "q"},
                {"type": "reasoning", "id": "rs_1"},
                {"role": "user", "content": "x"},
            ]
        },
        "",
    ),
    (  # a served web search call sent back with a field its input type has not
        "responses",
        "responses_items_typed",
        {
            "input": [
                {"role": "user", "content": "q"},
                {"type": "web_search_call", "id": "ws_1", "status": "completed", "action": {}, "results": []},
            ]
        },
        "",
    ),
    (  # a code interpreter naming its container by a dict that is not the automatic one
        "responses",
        "responses_include_and_containers",
        {
            "input": [{"role": "user", "content": "q"}],
            "include": ["web_search_call.sources"],
            "tools": [{"type": "code_interpreter", "container": {"id": "cntr_1"}}],
        },
        "",
    ),
    (
        "responses",
        "responses_reasoning_replayed",
        {
            "model": "gpt-5-mini",
            "tools": [{}],
            "store": False,
            "input": [
                {"role": "user", "content": "q"},
                {"type": "reasoning", "id": "rs_1", "summary": []},
                {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "c1", "output": "ok"},
            ],
        },
        "",
    ),
    (
        "openrouter",
        "openrouter_reasoning_details_replayed",
        {
            "model": "anthropic/claude-fable-5.1",
            "reasoning": {"effort": "low"},
            "tools": [{}],
            "messages": [USER, {"role": "assistant", "content": None, "tool_calls": [CALL]}],
        },
        "",
    ),
    ("openrouter", "openrouter_web_plugin", {"messages": [USER], "plugins": [{"id": "web", "max_uses": 2}]}, ""),
    ("openrouter", "openrouter_web_plugin", {"messages": [USER], "plugins": [{"max_results": 2}]}, ""),
    (
        "openrouter",
        "openrouter_web_plugin",
        {"messages": [USER], "web_search_options": {"user_location": {"type": "approximate"}}},
        "",
    ),
    (
        "openrouter",
        "openrouter_web_plugin",
        {
            "messages": [
                USER,
                {"role": "assistant", "content": "a", "annotations": [{"type": "url_citation", "url_citation": {}}]},
                USER,
            ]
        },
        "",
    ),
    (
        "openrouter",
        "openrouter_server_tools",
        {"messages": [USER], "tools": [{"type": "openrouter:web_search", "parameters": {"blocked_domains": ["a.b"]}}]},
        "",
    ),
    (
        "openrouter",
        "openrouter_server_tools",
        {
            "messages": [USER],
            "tools": [{"type": "openrouter:web_search", "parameters": {"user_location": {"city": "Utrecht"}}}],
        },
        "",
    ),
    (
        "openrouter",
        "openrouter_server_tools",
        {"messages": [USER], "tools": [{"type": "openrouter:web_search"}], "plugins": [{"id": "web"}]},
        "",
    ),
    ("openrouter", "openrouter_server_tools", {"messages": [USER], "tools": [{"type": "openrouter:web_fetch"}]}, ""),
    ("anthropic", "anthropic_roles", {"messages": [{"role": "assistant", "content": "a"}]}, ""),
    (
        "anthropic",
        "anthropic_nonempty_blocks",
        {"messages": [USER, {"role": "assistant", "content": [{"type": "text", "text": ""}, TOOL_USE]}, RESULT]},
        "",
    ),
    (
        "anthropic",
        "anthropic_call_pairing",
        {"messages": [USER, {"role": "assistant", "content": [TOOL_USE]}, USER]},
        "",
    ),
    (
        "anthropic",
        "anthropic_thinking_signed",
        {
            "messages": [
                USER,
                {"role": "assistant", "content": [{"type": "thinking", "thinking": "x"}, TOOL_USE]},
                RESULT,
            ]
        },
        "",
    ),
    (
        "anthropic",
        "anthropic_thinking_first",
        {**THINKING_ON, "messages": [USER, {"role": "assistant", "content": [TOOL_USE]}, RESULT]},
        "",
    ),
    (
        "anthropic",
        "anthropic_forced_choice",
        {**THINKING_ON, "messages": [USER], "tool_choice": {"type": "tool", "name": "f"}},
        "",
    ),
    (
        "anthropic",
        "anthropic_ends_on_user",
        {**THINKING_ON, "messages": [USER, {"role": "assistant", "content": "a"}]},
        "",
    ),
    (
        "anthropic",
        "anthropic_forced_choice_refused",
        {**FABLE, **ADAPTIVE, "messages": [USER], "tool_choice": {"type": "any"}},
        "",
    ),
    ("anthropic", "anthropic_adaptive_only", {**FABLE, **THINKING_ON, "messages": [USER]}, ""),
    ("anthropic", "anthropic_thinking_binding", EDITED_PREFIX, ""),
    ("gemini", "gemini_roles", {"contents": [{"role": "model", "parts": [{"text": "a"}]}]}, ""),
    ("gemini", "gemini_nonempty_parts", {"contents": [{"role": "user", "parts": [{"text": ""}]}]}, ""),
    (
        "gemini",
        "gemini_call_pairing",
        {"contents": [{"role": "user", "parts": [{"text": "q"}]}, {"role": "model", "parts": [FC]}]},
        "",
    ),
    (
        "gemini",
        "gemini_thought_signatures",
        {"contents": [{"role": "user", "parts": [{"text": "q"}]}, {"role": "model", "parts": [FC]}, FR]},
        "/v1beta/models/gemini-3-pro-preview:generateContent",
    ),
    (
        "gemini",
        "gemini_signatures_genuine",
        {"contents": [{"role": "model", "parts": [{**FC, "thoughtSignature": "EqQBCkYIBxgCKkD_claude"}]}]},
        "",
    ),
    (
        "openai",
        "chat_media_in_user_messages",
        {"messages": [{"role": "tool", "tool_call_id": "c", "content": [IMAGE_URL]}]},
        "",
    ),
    (
        "openai",
        "chat_media_shapes",
        {"messages": [{"role": "user", "content": [{**IMAGE_URL, "image_url": {"url": "x"}}]}]},
        "",
    ),
    ("anthropic", "anthropic_media_placement", {"messages": [USER, {"role": "assistant", "content": [IMAGE]}]}, ""),
    (
        "anthropic",
        "anthropic_media_shapes",
        {
            "messages": [
                {"role": "user", "content": [{**IMAGE, "source": {**IMAGE["source"], "media_type": "image/bmp"}}]}
            ]
        },
        "",
    ),
    ("gemini", "gemini_media_placement", {"contents": [{"role": "model", "parts": [INLINE]}]}, ""),
    ("gemini", "gemini_media_shapes", {"contents": [{"role": "user", "parts": [{"inlineData": {"data": "x"}}]}]}, ""),
    (
        "gemini",
        "gemini_forced_choice",
        {
            "contents": [],
            "tools": [],
            "toolConfig": {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["g"]}},
        },
        "",
    ),
    (  # a built-in tool beside a function, without the tool-combination flag
        "gemini",
        "gemini_tool_combination",
        {"contents": [], "tools": [{"googleSearch": {}}, {"functionDeclarations": [{"name": "f"}]}]},
        "/v1beta/models/gemini-3-flash-preview:generateContent",
    ),
    (  # the same on a model before Gemini 3, flag or not
        "gemini",
        "gemini_tool_combination",
        {
            "contents": [],
            "tools": [{"googleSearch": {}}, {"functionDeclarations": [{"name": "f"}]}],
            "toolConfig": {"includeServerSideToolInvocations": True},
        },
        "/v1beta/models/gemini-2.5-pro:generateContent",
    ),
    (  # a served toolCall sent back without its toolResponse
        "gemini",
        "gemini_server_tool_parts",
        {
            "contents": [
                {"role": "user", "parts": [{"text": "q"}]},
                {
                    "role": "model",
                    "parts": [
                        {"toolCall": {"id": "t1", "toolType": "GOOGLE_SEARCH_WEB", "args": {}}, "thoughtSignature": "s"}
                    ],
                },
            ]
        },
        "",
    ),
    (  # LiteLLM writes the field in snake_case (Gemini's JSON accepts both spellings)
        "gemini",
        "gemini_forced_choice",
        {
            "contents": [],
            "tools": [],
            "toolConfig": {"functionCallingConfig": {"mode": "ANY", "allowed_function_names": ["g"]}},
        },
        "",
    ),
    (  # Claude on Vertex AI: the model named in the body, the version missing
        "vertex_anthropic",
        "vertex_claude_body",
        {"model": "claude-sonnet-4-5", "messages": [USER]},
        "/v1/projects/p/locations/global/publishers/anthropic/models/claude-sonnet-4-5:rawPredict",
    ),
    (  # a server tool Vertex AI does not offer for Claude
        "vertex_anthropic",
        "vertex_claude_server_tools",
        {
            "anthropic_version": "vertex-2023-10-16",
            "messages": [USER],
            "tools": [{"type": "code_execution_20250825", "name": "code_execution"}],
        },
        "/v1/projects/p/locations/global/publishers/anthropic/models/claude-sonnet-4-5:rawPredict",
    ),
    (  # the Gemini API's File Search on Vertex AI
        "vertex_gemini",
        "vertex_gemini_request",
        {"contents": [], "tools": [{"fileSearch": {"fileSearchStoreNames": ["fileSearchStores/x"]}}]},
        "/v1/projects/p/locations/global/publishers/google/models/gemini-2.5-pro:generateContent",
    ),
]


def test_every_rule_has_a_broken_example() -> None:
    covered = {(protocol, rule) for protocol, rule, _, _ in BROKEN}
    assert {rule.__name__ for rules in RULES.values() for rule in rules} == {rule for _, rule in covered}


@pytest.mark.parametrize(("protocol", "rule", "body", "path"), BROKEN, ids=[f"{p}-{r}" for p, r, _, _ in BROKEN])
def test_a_broken_rule_is_reported_and_can_be_labelled(
    protocol: str, rule: str, body: dict[str, Any], path: str
) -> None:
    assert rule in check(protocol, body, path)
    with pytest.raises(AssertionError, match=rule):
        assert_accepted(protocol, body, path)
    others = {name: "" for name in check(protocol, body, path)}
    assert_accepted(protocol, body, path, known_broken=others)  # labelled, it passes


def test_a_bound_block_behind_its_own_prefix_is_accepted() -> None:
    """The binding rule refuses only an edited prefix, or a prefix without drop_block."""
    intact = {**EDITED_PREFIX, "system": None}
    assert "anthropic_thinking_binding" not in check("anthropic", intact)
    dropping = {
        **EDITED_PREFIX,
        "thinking": {"type": "adaptive", "block_binding": {"prefix_mismatch_behavior": "drop_block"}},
    }
    assert "anthropic_thinking_binding" not in check("anthropic", dropping)


def test_breakpoints_within_anthropics_rules_are_accepted() -> None:
    """Four marks, the hour-long ones first, on text and tool results: what a cached turn sends."""
    result = {"type": "tool_result", "tool_use_id": "t1", "content": "ok", "cache_control": EPHEMERAL}
    body = {
        "system": [_marked("s", HOUR)],
        "tools": [{"name": "f", "input_schema": {"type": "object"}, "cache_control": HOUR}],
        "messages": [
            {"role": "user", "content": [_marked("hi")]},
            {"role": "assistant", "content": [TOOL_USE]},
            {"role": "user", "content": [result]},
        ],
    }
    assert "anthropic_cache_breakpoints" not in check("anthropic", body)
