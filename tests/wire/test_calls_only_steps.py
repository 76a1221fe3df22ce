"""``thinking="off"`` under ``finish="auto"`` with ``submit``: each step asks for a call (``tool_choice``
``required``, Anthropic's ``any``), so the model answers by ``submit`` in the step itself.

There a reply without a call is never the answer (the forced submit follows it at once), and no
thinking is asked that a forced choice would refuse: the pair "bare thought, then the forced
submit" becomes one request, and on Claude the step carries the smaller tool-use system prompt of
Anthropic's first public table (313 tokens under ``any``, against 346 under ``auto``). Where text
may end or continue the turn (``finish="submit"``, a text answer) or thinking is asked (the
default), the step stays ``auto``. Each request is asserted whole, on both ``dspy.LM`` engines
against the loopback emulator.
"""

from __future__ import annotations

from typing import Any

import dspy
import pytest
from emulator import Emulator
from provider_rules import assert_accepted
from responses import anthropic, chat
from turns import TOOLS

import dspy_imp
from benchmarks import caches

pytestmark = pytest.mark.block_network(allowed_hosts=[r"127\.0\.0\.1$"])

SIGNATURE = "question -> answer, confidence: float"
QUESTION = "Weather in Paris?"
ANSWER = {"answer": "Sunny, 21°C.", "confidence": 0.9}
WEATHER = {
    "name": "get_weather",
    "description": "Get the current weather for a city.",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
TIME = {
    "name": "get_time",
    "description": "Get the local time in a city.",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
SUBMIT = {
    "name": "submit",
    "description": "Submit the final outputs for the task.",
    "input_schema": {
        "type": "object",
        "properties": {"answer": {"type": "string"}, "confidence": {"type": "number"}},
        "required": ["answer", "confidence"],
    },
}
SYSTEM = (
    "Given the fields `question`, produce the fields `answer`, `confidence`.\n"
    "When the final answer is ready, call `submit`."
)


def _turn(model: str, base: str, engine: str, script: list, **agent: Any) -> tuple[dspy.Prediction, list[Any]]:
    with Emulator(script) as emulator:
        lm = dspy.LM(
            model,
            api_base=emulator.base_url + base,
            api_key="sk-test",
            cache=False,
            engine="auto" if engine == "native" else engine,
        )
        program = dspy_imp.ReActV2(SIGNATURE, tools=TOOLS, **agent)
        with dspy.context(lm=lm):
            prediction = program(question=QUESTION)
    return prediction, [r.body for r in emulator.requests]


def _claude_step(choice: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "model": "claude-sonnet-4-5",
        "messages": [
            {
                "role": "user",
                "content": [
                    {
                        "type": "text",
                        "text": f"[[ ## question ## ]]\n{QUESTION}",
                        "cache_control": {"type": "ephemeral"},
                    }
                ],
            }
        ],
        "max_tokens": 16384,
        "system": [{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}],
        "tools": [WEATHER, TIME, SUBMIT],
        "tool_choice": choice,
        **extra,
    }


def _comparable(body: dict[str, Any]) -> dict[str, Any]:
    """The body without what the two engines frame differently and the loop does not choose: the
    native engine's ``stream: false``, LiteLLM's ``type: custom`` on each Anthropic tool; OpenAI's
    ``prompt_cache_key`` (the loop's, a hash of the conversation) checked for its prefix only."""
    out = {k: v for k, v in body.items() if k != "stream"}
    if "tools" in out:
        out["tools"] = [{k: v for k, v in t.items() if (k, v) != ("type", "custom")} for t in out["tools"]]
    key = out.pop("prompt_cache_key", None)
    assert key is None or key.startswith("dspy-imp-")
    return out


@pytest.mark.parametrize("engine", ["native", "litellm"])
def test_claude_with_thinking_off_asks_for_a_call_on_each_step_and_only_then(engine):
    base = "/v1" if engine == "native" else ""
    submitted = [anthropic(calls=[("toolu_01S", "submit", ANSWER)])]
    prediction, bodies = _turn("anthropic/claude-sonnet-4-5", base, engine, submitted, thinking="off")
    assert prediction.metadata.termination_reason == "submit"
    assert (prediction.answer, prediction.confidence) == ("Sunny, 21°C.", 0.9)
    assert [_comparable(b) for b in bodies] == [_claude_step({"type": "any"})]
    assert_accepted("anthropic", bodies[0])
    assert caches.tool_use_prompt(bodies[0]) == 313
    # Only there: with thinking asked (the default) or text a thought (``finish="submit"``), ``auto``.
    _, thinking = _turn("anthropic/claude-sonnet-4-5", base, engine, submitted)
    assert [_comparable(b) for b in thinking] == [
        _claude_step({"type": "auto"}, thinking={"type": "enabled", "budget_tokens": 2048}, max_tokens=18432)
    ]
    _, thought = _turn("anthropic/claude-sonnet-4-5", base, engine, submitted, thinking="off", finish="submit")
    assert [_comparable(b) for b in thought] == [_claude_step({"type": "auto"})]


def test_a_bare_thought_with_thinking_off_no_longer_costs_a_second_request():
    """Before, a text-only step was followed by the forced submit; now the step itself is asked for a
    call, so a model that obeys answers in one request (a model that still writes text gets the
    forced submit, as before)."""
    script = [
        anthropic(text="Let me think."),
        anthropic(calls=[("toolu_01F", "submit", ANSWER)]),
    ]
    prediction, bodies = _turn("anthropic/claude-sonnet-4-5", "/v1", "native", script, thinking="off")
    assert prediction.metadata.termination_reason == "forced_submit"
    assert [b["tool_choice"] for b in bodies] == [{"type": "any"}, {"type": "tool", "name": "submit"}]


@pytest.mark.parametrize("engine", ["native", "litellm"])
def test_openai_with_thinking_off_asks_for_a_call_on_each_step(engine):
    submitted = [chat(calls=[("call_1", "submit", ANSWER)])]
    prediction, bodies = _turn("openai/gpt-4o", "/v1", engine, submitted, thinking="off")
    assert prediction.metadata.termination_reason == "submit"
    function = [
        {
            "type": "function",
            "function": {"name": t["name"], "description": t["description"], "parameters": t["input_schema"]},
        }
        for t in (WEATHER, TIME, SUBMIT)
    ]
    assert [_comparable(b) for b in bodies] == [
        {
            "model": "gpt-4o",
            "messages": [
                {"role": "system", "content": SYSTEM},
                {"role": "user", "content": f"[[ ## question ## ]]\n{QUESTION}"},
            ],
            "tools": function,
            "tool_choice": "required",
        }
    ]
    assert_accepted("openai", bodies[0])
