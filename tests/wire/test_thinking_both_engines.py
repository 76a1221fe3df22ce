"""The same program sends the same thinking settings on both ``dspy.LM`` engines, per Claude class.

Manual-class Claude (Sonnet 4.5, Opus 4.5: ``thinking: {"type": "enabled", "budget_tokens"}``)
and the adaptive class (Opus 4.6, Sonnet 4.6, Opus 5.5, Fable 5.1: ``thinking: {"type":
"adaptive"}`` with ``output_config.effort``, as LiteLLM's model map marks them), for each
``thinking=`` mode. Each two-request turn runs against the loopback emulator on the native engine
and on LiteLLM, and every request's thinking settings are compared whole. The one difference
left is LiteLLM's own ``display: "summarized"`` on adaptive thinking (without it Anthropic omits
the thinking text; the thinking billed is the same), which the native engine cannot send.
"""

from __future__ import annotations

from typing import Any

import dspy
import pytest
from emulator import Emulator
from responses import anthropic
from turns import TOOLS

import dspy_imp

pytestmark = pytest.mark.block_network(allowed_hosts=[r"127\.0\.0\.1$"])

SETTINGS = ("thinking", "output_config", "max_tokens", "reasoning_effort", "temperature", "tool_choice")
MANUAL = ("claude-sonnet-4-5", "claude-opus-4-5")
ADAPTIVE = ("claude-opus-4-6", "claude-sonnet-4-6", "claude-opus-5-5", "claude-fable-5-1")


def _settings(model: str, engine: str, mode: str, **lm: Any) -> list[dict[str, Any]]:
    script = [
        anthropic(calls=[("toolu_01W", "get_weather", {"city": "Paris"})], model=model),
        anthropic(text="Sunny, 21°C.", model=model),
    ]
    with Emulator(script) as emulator:
        base = emulator.base_url + ("/v1" if engine == "auto" else "")
        client = dspy.LM(f"anthropic/{model}", api_base=base, api_key="sk-test", cache=False, engine=engine, **lm)
        with dspy.context(lm=client):
            prediction = dspy_imp.ReActV2("question -> answer", tools=TOOLS, thinking=mode)(question="Weather?")
    assert prediction.answer == "Sunny, 21°C."
    return [{k: r.body[k] for k in SETTINGS if k in r.body} for r in emulator.requests]


def _without_display(requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for request in requests:
        thinking = request.get("thinking")
        if isinstance(thinking, dict) and thinking.get("type") == "adaptive":
            assert thinking.get("display") == "summarized"  # LiteLLM's, on every adaptive request
            request = {**request, "thinking": {k: v for k, v in thinking.items() if k != "display"}}
        out.append(request)
    return out


@pytest.mark.parametrize("mode", ["every", "first", "off"])
@pytest.mark.parametrize("model", MANUAL)
def test_manual_class_claude_thinks_the_same_on_both_engines(model, mode):
    native, litellm = _settings(model, "auto", mode), _settings(model, "litellm", mode)
    assert native == litellm
    thinks = {"thinking": {"type": "enabled", "budget_tokens": 2048}, "max_tokens": 2048 + 16384}
    step = {**(thinks if mode != "off" else {"max_tokens": 16384}), "tool_choice": {"type": "auto"}}
    assert native == [step, step]


@pytest.mark.parametrize("mode", ["every", "first", "off"])
@pytest.mark.parametrize("model", ADAPTIVE)
def test_adaptive_class_claude_thinks_the_same_on_both_engines(model, mode):
    native, litellm = _settings(model, "auto", mode), _settings(model, "litellm", mode)
    assert native == _without_display(litellm)
    thinks = {"thinking": {"type": "adaptive"}, "output_config": {"effort": "low"}}
    step = {**(thinks if mode != "off" else {}), "max_tokens": 16384, "tool_choice": {"type": "auto"}}
    assert native == [step, step]  # the visible ceiling is the native engine's, not the model's 128,000


@pytest.mark.parametrize("model", ADAPTIVE)
def test_the_programs_own_max_tokens_is_kept_on_both_engines(model):
    native, litellm = (
        _settings(model, "auto", "every", max_tokens=4000),
        _settings(model, "litellm", "every", max_tokens=4000),
    )
    assert native == _without_display(litellm)
    assert [r["max_tokens"] for r in native] == [4000, 4000]
