"""A request that offers no function tool carries no tool fields, on every route, over HTTP.

A ``finish="auto"`` program without tools answers in text, and its requests have no function tool to
offer. DSPy 3.4 still sent what the loop asks of a step beside its tools: natively (lm15)
``tool_choice: "auto"`` with no ``tools`` (OpenAI's 400 "Invalid value for 'tool_choice':
'tool_choice' is only allowed when 'tools' are specified.", Anthropic's "tool_choice may only be
specified while providing tools."), on LiteLLM ``tools: []`` ("Invalid 'tools': empty array"), and
on Gemini, on both engines, ``toolConfig.functionCallingConfig`` with no function declared ("Function
calling config is set without function_declarations."). The same goes for a program whose only tools
are the provider's own (a Gemini search): the calling config governs function tools, and there are
none. Each request goes through ``provider_rules.assert_accepted`` (``chat_choice_needs_tools``,
``anthropic_choice_needs_tools``, ``gemini_calling_config_needs_declarations``), on both engines and
both drivers.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import dspy
import pytest
from emulator import Emulator, Scripted
from provider_rules import assert_accepted
from responses import anthropic, chat, gemini, gemini_compat, groq, openrouter
from turns import BASE_SUFFIX, MODEL

import dspy_imp
from dspy_imp.hosted import WebSearch

pytestmark = pytest.mark.block_network(allowed_hosts=[r"127\.0\.0\.1$"])

ENGINES = {"auto": "native", "litellm": "litellm"}
TOOL_FIELDS = {"tools", "tool_choice", "parallel_tool_calls", "toolConfig", "tool_config"}
REPLIES: dict[str, Callable[[], Scripted]] = {
    "openai": lambda: chat("Paris"),
    "groq": lambda: groq("Paris"),
    "openrouter": lambda: openrouter("Paris"),
    "gemini_compat": lambda: gemini_compat("Paris"),
    # a guard, not a bug: DSPy's presets for a local server and DeepSeek already sent no tool fields
    "local": lambda: chat("Paris", model="Qwen/Qwen3-8B"),
    "deepseek": lambda: chat("Paris", reasoning="The capital.", model="deepseek-reasoner"),
    "anthropic": lambda: anthropic(text="Paris"),
    "gemini": lambda: gemini("Paris"),
}


def _lm(emulator: Emulator, protocol: str, engine: str, model: str | None = None) -> dspy.LM:
    base = emulator.base_url + BASE_SUFFIX[(protocol, ENGINES[engine])]
    options = {"api_key": "sk-test", "cache": False, "engine": engine, "num_retries": 0}
    return dspy.LM(model or MODEL[protocol], api_base=base, **options)


@pytest.mark.parametrize("engine", list(ENGINES))
@pytest.mark.parametrize("protocol", list(REPLIES))
def test_a_program_without_tools_sends_no_tool_fields(run: Any, protocol: str, engine: str) -> None:
    agent = dspy_imp.ReActV2("question -> answer", tools=[], finish="auto")
    with Emulator([REPLIES[protocol]()]) as emulator, dspy.context(lm=_lm(emulator, protocol, engine)):
        pred = run(agent, question="What is the capital of France?")
    assert (pred.metadata.termination_reason, pred.answer) == ("answered", "Paris"), pred.metadata.termination_error
    (request,) = emulator.requests
    assert set(request.body) & TOOL_FIELDS == set()
    assert_accepted(protocol, request.body, request.path)


@pytest.mark.parametrize("engine", list(ENGINES))
def test_the_whole_openai_request_of_a_program_without_tools(run: Any, engine: str) -> None:
    agent = dspy_imp.ReActV2("question -> answer", tools=[], finish="auto")
    with Emulator([chat("Paris")]) as emulator, dspy.context(lm=_lm(emulator, "openai", engine)):
        run(agent, question="What is the capital of France?")
    (request,) = emulator.requests
    assert request.path == "/v1/chat/completions"
    assert request.body == {
        "model": "gpt-4o",
        "messages": [
            {
                "role": "system",
                "content": "Given the fields `question`, produce the fields `answer`.\n"
                "When the final answer is ready, reply without calling a tool: that message is `answer`.",
            },
            {"role": "user", "content": "[[ ## question ## ]]\nWhat is the capital of France?"},
        ],
        "prompt_cache_key": request.body["prompt_cache_key"],  # the conversation's key (docs/prompt-caching.md)
    }


def test_a_gemini_search_without_function_tools_sends_no_calling_config(run: Any) -> None:
    agent = dspy_imp.ReActV2("question -> answer", tools=[WebSearch()], finish="auto")
    with (
        Emulator([gemini("Paris", model="gemini-2.5-flash")]) as emulator,
        dspy.context(lm=_lm(emulator, "gemini", "auto", "gemini/gemini-2.5-flash")),
    ):
        pred = run(agent, question="What is the capital of France?")
    assert pred.answer == "Paris"
    (request,) = emulator.requests
    assert request.body["tools"] == [{"googleSearch": {}}]
    assert "toolConfig" not in request.body  # the recorded search requests (cassettes/hosted/gemini_*) have none
    assert_accepted("gemini", request.body, request.path)
