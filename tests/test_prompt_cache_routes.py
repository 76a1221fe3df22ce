"""Which routes get which prompt-cache fields (``_routes.caching``), decided before any request."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from litellm.litellm_core_utils.prompt_templates.factory import _bedrock_converse_messages_pt
from litellm.llms.bedrock.chat.converse_transformation import AmazonConverseConfig

from dspy_imp._routes.caching import NOTHING, Caching, cache_options, marked
from dspy_imp._routes.route import Route

MARK = {"type": "ephemeral"}


def lm(model: str, **kwargs):
    return SimpleNamespace(model=model, kwargs=kwargs, _engine_spec="auto")


@pytest.mark.parametrize(
    ("model", "route"),
    [
        ("deepseek/deepseek-chat", Route("native", "deepseek")),
        ("deepseek/deepseek-chat", Route("litellm", "deepseek")),
        ("groq/openai/gpt-oss-120b", Route("litellm", "groq")),
        ("gemini/gemini-3-pro-preview", Route("native", "gemini")),
        ("gemini/gemini-3-pro-preview", Route("litellm", "gemini")),
        ("openai/Qwen/Qwen3-8B", Route("native", "openai-chat")),  # a server of your own
        ("openai/gemini-3-pro-preview", Route("litellm", "openai")),  # Gemini's compatible endpoint
        ("openrouter/openai/gpt-5", Route("litellm", "openrouter")),  # cached by OpenAI itself
        ("anthropic/claude-sonnet-4-5", Route("custom")),
    ],
)
def test_routes_that_refuse_or_ignore_the_fields_get_nothing(model, route):
    options: dict = {}
    assert cache_options(lm(model), route, options, True, "k") == NOTHING
    assert options == {}


@pytest.mark.parametrize("route", [Route("native", "openai-chat"), Route("litellm", "openai")])
@pytest.mark.parametrize("base", ["http://localhost:8000/v1", "http://10.0.0.5:11434/v1"])
def test_a_server_of_your_own_serving_an_openai_name_gets_nothing(route, base):
    options: dict = {}
    assert cache_options(lm("openai/gpt-oss-120b", api_base=base), route, options, "24h", "k") == NOTHING
    assert options == {}


@pytest.mark.parametrize("base", ["https://api.openai.com/v1", "http://localhost:4000"])  # a LiteLLM proxy
def test_openai_models_at_openai_or_a_proxy_still_get_the_key(base):
    options: dict = {}
    cache_options(
        lm("openai/gpt-4.1", api_base="https://api.openai.com/v1"), Route("litellm", "openai"), options, True, "k"
    )
    assert options == {"prompt_cache_key": "k"}


@pytest.mark.parametrize("model", ["bedrock/anthropic.claude-sonnet-4-5-v1:0", "vertex_ai/claude-sonnet-4-5"])
def test_litellms_bedrock_and_vertex_claude_get_the_marks(model):
    options: dict = {}
    provider = model.split("/", 1)[0]
    assert cache_options(lm(model), Route("litellm", provider), options, "1h", "k") == Caching(
        mark={"type": "ephemeral", "ttl": "1h"}
    )
    assert options == {}


def test_on_bedrock_litellm_turns_the_marks_into_cache_points():
    messages = [
        {"role": "system", "content": "You are an Agent."},
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "t1", "type": "function",
                                                               "function": {"name": "w", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "t1", "content": "sunny"},
    ]  # fmt: skip
    rest, system = AmazonConverseConfig()._transform_system_message(marked(messages, MARK))
    assert system == [{"text": "You are an Agent."}, {"cachePoint": {"type": "default"}}]
    wire = _bedrock_converse_messages_pt(messages=rest, model="anthropic.claude-sonnet-4-5", llm_provider="bedrock")
    assert wire[-1]["content"] == [{"toolResult": {"content": [{"text": "sunny"}], "toolUseId": "t1"}},
                                   {"cachePoint": {"type": "default"}}]  # fmt: skip
    assert wire[0]["content"][-1] == {"cachePoint": {"type": "default"}}  # the end of the request before
    assert "cachePoint" not in str(wire[1])


def test_a_users_own_cache_settings_win():
    own_key: dict = {"prompt_cache_key": "mine"}
    assert cache_options(lm("openai/gpt-4.1"), Route("litellm", "openai"), own_key, "24h", "k") == NOTHING
    assert own_key == {"prompt_cache_key": "mine", "prompt_cache_retention": "24h"}
    on_the_lm = lm("anthropic/claude-sonnet-4-5", prompt_cache=object())
    assert cache_options(on_the_lm, Route("native", "anthropic"), {}, True, "k") == NOTHING


@pytest.mark.parametrize("model", ["gpt-4.1", "openai/gpt-4.1-2025-04-14", "gpt-5", "gpt-5.1-codex-max", "gpt-5.4"])
def test_24h_retention_goes_to_the_models_that_take_it(model):
    options: dict = {}
    cache_options(lm(model), Route("litellm", "openai"), options, "24h", "k")
    assert options == {"prompt_cache_key": "k", "prompt_cache_retention": "24h"}


@pytest.mark.parametrize("model", ["gpt-4o-mini", "openai/gpt-5-mini", "gpt-5.6", "gpt-4.1-nano"])
def test_24h_retention_is_dropped_with_one_warning_where_the_model_refuses_it(model, caplog):
    for _ in range(2):
        options: dict = {}
        cache_options(lm(model), Route("native", "openai-chat"), options, "24h", "k")
        assert options == {"prompt_cache_key": "k"}
    warned = [r.getMessage() for r in caplog.records if "prompt_cache_retention" in r.getMessage()]
    assert len(warned) == 1 and repr(model) in warned[0]


def test_marks_never_go_on_an_empty_text():
    messages = [{"role": "system", "content": "Rules."}, {"role": "user", "content": [{"type": "text", "text": " "}]}]
    assert marked(messages, MARK) == [{"role": "system", "content": "Rules.", "cache_control": MARK}, messages[1]]
    assert marked(messages, MARK, openrouter=True)[0] == {
        "role": "system",
        "content": [{"type": "text", "text": "Rules.", "cache_control": MARK}],
    }
