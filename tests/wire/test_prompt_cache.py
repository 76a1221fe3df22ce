"""The emulator's prompt caches answer as the providers do (``prompt_cache.py``)."""

from __future__ import annotations

from prompt_cache import PromptCaches
from provider_rules import check

MARK = {"type": "ephemeral"}


def _request(blocks: int, marks: int, model: str = "claude-sonnet-4-5", size: int = 2000) -> dict:
    content = [{"type": "text", "text": f"part {i} " + "x" * size} for i in range(blocks)]
    for block in content[-marks:] if marks else []:
        block["cache_control"] = MARK
    return {"model": model, "max_tokens": 64, "messages": [{"role": "user", "content": content}]}


def _usage(body: dict) -> dict:
    return {"id": "msg_1", "content": [{"type": "text", "text": "ok"}], "usage": {"input_tokens": 9, **body}}


def test_more_than_four_breakpoints_is_anthropics_400():
    request = _request(6, 5)
    status, body = PromptCaches().answer("/v1/messages", request, 200, _usage({}))
    message = "A maximum of 4 blocks with cache_control may be provided. Found 5."
    assert (status, body) == (400, {"type": "error", "error": {"type": "invalid_request_error", "message": message}})
    assert check("anthropic", request)["anthropic_cache_breakpoints"] == [message]


def test_a_request_extending_a_marked_prefix_reads_it_back():
    caches = PromptCaches()
    first = _request(3, 1)
    _, wrote = caches.answer("/v1/messages", first, 200, _usage({}))
    longer = _request(4, 1)
    _, read = caches.answer("/v1/messages", longer, 200, _usage({}))
    written = wrote["usage"]["cache_creation_input_tokens"]
    assert wrote["usage"]["cache_read_input_tokens"] == 0 and written > 1024
    assert wrote["usage"]["cache_creation"] == {"ephemeral_5m_input_tokens": written, "ephemeral_1h_input_tokens": 0}
    assert read["usage"]["cache_read_input_tokens"] == written
    assert 0 < read["usage"]["cache_creation_input_tokens"] < written


def test_a_new_tool_choice_or_thinking_setting_rereads_the_messages_but_not_the_system():
    system = [{"type": "text", "text": "rules " + "y" * 6000, "cache_control": MARK}]  # about 1,500 tokens
    step = {"tool_choice": {"type": "auto"}, "thinking": {"type": "enabled", "budget_tokens": 1024}}
    for forced in ({"tool_choice": {"type": "tool", "name": "submit"}}, {"tool_choice": {"type": "auto"}}):
        caches = PromptCaches()
        _, wrote = caches.answer("/v1/messages", {**_request(3, 1), "system": system, **step}, 200, _usage({}))
        _, read = caches.answer("/v1/messages", {**_request(4, 1), "system": system, **forced}, 200, _usage({}))
        head = PromptCaches().answer("/v1/messages", _request(0, 0) | {"system": system}, 200, _usage({}))[1]
        assert read["usage"]["cache_read_input_tokens"] == head["usage"]["cache_creation_input_tokens"]
        assert read["usage"]["cache_read_input_tokens"] < wrote["usage"]["cache_creation_input_tokens"]
    caches = PromptCaches()
    _, wrote = caches.answer("/v1/messages", {**_request(3, 1), "system": system, **step}, 200, _usage({}))
    _, read = caches.answer("/v1/messages", {**_request(4, 1), "system": system, **step}, 200, _usage({}))
    assert read["usage"]["cache_read_input_tokens"] == wrote["usage"]["cache_creation_input_tokens"]


def test_a_prefix_under_the_models_minimum_is_not_cached_and_no_error():
    caches = PromptCaches()
    small = _usage({"cache_read_input_tokens": 0})
    for _ in range(2):  # 2,000 tokens: above Sonnet's 1,024, under Haiku 4.5's 4,096
        status, body = caches.answer("/v1/messages", _request(4, 1, "claude-haiku-4-5"), 200, small)
        assert (status, body) == (200, small)
    _, sonnet = caches.answer("/v1/messages", _request(4, 1), 200, small)
    assert sonnet["usage"]["cache_creation_input_tokens"] > 1024


def test_openai_caches_by_itself_per_key_in_steps_of_128():
    caches = PromptCaches()
    usage = {
        "prompt_tokens": 10,
        "completion_tokens": 2,
        "total_tokens": 12,
        "prompt_tokens_details": {"cached_tokens": 0},
    }
    messages = [{"role": "user", "content": "y" * 8000}]
    for key, expected in (("a", 0), ("a", "cached"), ("b", 0)):
        request = {
            "model": "gpt-4o",
            "messages": [*messages, {"role": "user", "content": "next"}],
            "prompt_cache_key": key,
        }
        _, body = caches.answer("/v1/chat/completions", request, 200, {"usage": usage})
        cached = body["usage"]["prompt_tokens_details"]["cached_tokens"]
        if expected == 0:
            assert cached == 0
        else:
            assert cached >= 1024 and cached % 128 == 0 and body["usage"]["prompt_tokens"] >= cached
