"""A whole turn over HTTP: what the provider answers (the script) and what the turn expects.

One ``Scenario`` is run on both engines by ``test_providers.py``; ``make record`` plays the same
scripts from the emulator to write LiteLLM's cassettes. The scenarios themselves are in
``turns_anthropic.py``, ``turns_gemini.py`` and ``turns_chat.py`` (OpenAI, DeepSeek).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import dspy
from emulator import Scripted
from responses import (
    anthropic,
    chat,
    gemini,
)

import dspy_imp

Body = Mapping[str, Any]


def get_weather(city: str) -> str:
    """Get the current weather for a city."""
    return f"sunny, 21°C in {city}"


def get_time(city: str) -> str:
    """Get the local time in a city."""
    return f"14:05 in {city}"


TOOLS = [get_weather, get_time]
# Where each protocol lives under the emulator, per engine (the native engine appends the
# endpoint to api_base; LiteLLM adds its own version segment for Anthropic).
BASE_SUFFIX = {
    ("openai", "native"): "/v1",
    ("openai", "litellm"): "/v1",
    ("anthropic", "native"): "/v1",
    ("anthropic", "litellm"): "",
    ("gemini", "native"): "/v1beta",
    ("gemini", "litellm"): "/v1beta",
    ("deepseek", "native"): "",
    ("deepseek", "litellm"): "",
    ("groq", "native"): "/openai/v1",
    ("groq", "litellm"): "/openai/v1",
    ("openrouter", "native"): "/api/v1",
    ("openrouter", "litellm"): "/api/v1",
    ("gemini_compat", "native"): "/v1beta/openai",
    ("gemini_compat", "litellm"): "/v1beta/openai",
    ("responses", "native"): "/v1",
    ("responses", "litellm"): "/v1",
    ("local", "native"): "/v1",
    ("local", "litellm"): "/v1",
}
MODEL = {
    "openai": "openai/gpt-4o",
    "anthropic": "anthropic/claude-sonnet-4-5",
    "gemini": "gemini/gemini-3-pro-preview",
    "deepseek": "deepseek/deepseek-reasoner",
    "groq": "groq/openai/gpt-oss-120b",
    "local": "openai/Qwen/Qwen3-8B",
    "responses": "openai/gpt-5-mini",
    "gemini_compat": "openai/gemini-3-pro-preview",
    "openrouter": "openrouter/anthropic/claude-fable-5.1",
}
THINKING = {"type": "enabled", "budget_tokens": 1024}


@dataclass(frozen=True)
class Outcome:
    """How the turn ended: a prediction, or the exception it raised."""

    prediction: Any = None
    error: BaseException | None = None


@dataclass(frozen=True)
class Scenario:
    """``expect(bodies, outcome)`` asserts what only this scenario shows (the rules run on every body)."""

    name: str
    protocol: str
    script: Sequence[Scripted]
    expect: Callable[[list[Body], Outcome], None]
    model: str = ""
    lm: Mapping[str, Any] = field(default_factory=dict)
    agent: Mapping[str, Any] = field(default_factory=dict)
    inputs: Mapping[str, Any] = field(default_factory=lambda: {"question": "Weather and time in Paris?"})
    history: Sequence[Mapping[str, Any]] | None = None
    adapter: Any = None  # configured with the LM (``dspy.configure(adapter=...)``) when given
    engines: tuple[str, ...] = ("native", "litellm")
    betas: Sequence[str | None] | None = None  # each request's ``anthropic-beta`` header, when it matters

    @property
    def model_name(self) -> str:
        return self.model or MODEL[self.protocol]

    def build(self) -> dspy.Module:
        options = {"tools": TOOLS, **self.agent}
        return dspy_imp.ReActV2("question -> answer", **options)

    def arguments(self) -> dict[str, Any]:
        if self.history is None:
            return dict(self.inputs)
        return {**self.inputs, "history": dspy.History(messages=list(self.history))}


PARIS = {"city": "Paris"}


def answered(text: str) -> Callable[[Outcome], None]:
    def check(outcome: Outcome) -> None:
        assert outcome.error is None, outcome.error
        assert outcome.prediction.answer == text
        assert outcome.prediction.metadata.termination_reason == "answered"

    return check


# -- the shared expectations --------------------------------------------------------------------


def assistant_turns(bodies: list[Body], protocol: str) -> list[Any]:
    last = bodies[-1]
    if protocol == "gemini":
        return [c for c in last["contents"] if c["role"] == "model"]
    return [m for m in last["messages"] if m["role"] == "assistant"]


def tool_then_answer(protocol: str, requests: int = 2) -> Callable[[list[Body], Outcome], None]:
    """The answer after one tool step (``requests`` > 2: a failed request was retried first, unchanged)."""

    def expect(bodies: list[Body], outcome: Outcome) -> None:
        answered("Sunny, 21°C.")(outcome)
        assert len(bodies) == requests
        assert all(body == bodies[0] for body in bodies[: requests - 1])
        (turn,) = assistant_turns(bodies, protocol)
        if protocol == "anthropic":  # issue 8 point 1: no empty text block beside the call
            assert [b["type"] for b in turn["content"]] == ["tool_use"]
        elif protocol == "gemini":  # no empty text part, and the call keeps its thought signature (point 3)
            (part,) = turn["parts"]
            assert set(part) in ({"functionCall", "thoughtSignature"}, {"function_call", "thoughtSignature"})
            assert part["thoughtSignature"] == "CiQBVKhc7sIg_weather1"
        else:  # None, or left out (LiteLLM drops a None content): never ""
            assert turn.get("content") is None

    return expect


def script_tool_then_answer(protocol: str) -> list[Scripted]:
    if protocol == "anthropic":
        return [anthropic(calls=[("toolu_01A9x", "get_weather", PARIS)]), anthropic(text="Sunny, 21°C.")]
    if protocol == "gemini":
        return [
            gemini(calls=[("fc_w1", "get_weather", PARIS)], signatures=["CiQBVKhc7sIg_weather1"]),
            gemini(text="Sunny, 21°C.", text_signature="CiQBVKhc7sIg_final"),
        ]
    return [chat(calls=[("call_w1", "get_weather", PARIS)]), chat("Sunny, 21°C.")]


def expect_thought_then_submit(protocol: str) -> Callable[[list[Body], Outcome], None]:
    """A text-only reply (a thought) continues the turn; the next step calls a tool; then ``submit``."""

    def expect(bodies: list[Body], outcome: Outcome) -> None:
        assert outcome.error is None, outcome.error
        assert outcome.prediction.answer == "Sunny, 21°C."
        assert outcome.prediction.metadata.termination_reason == "submit"
        assert len(bodies) == 3
        turns = assistant_turns(bodies, protocol)
        assert len(turns) == 2
        assert "I will look it up." in str(turns[0])

    return expect


def expect_stop(cause: str) -> Callable[[list[Body], Outcome], None]:
    def expect(bodies: list[Body], outcome: Outcome) -> None:
        if cause == "content_filter":
            assert isinstance(outcome.error, dspy_imp.StepError), outcome
            assert len(bodies) == 1
            return
        assert outcome.error is None, outcome.error
        assert outcome.prediction.metadata.termination_cause == cause
        assert len(bodies) == 1

    return expect


def expect_resumed(protocol: str) -> Callable[[list[Body], Outcome], None]:
    def expect(bodies: list[Body], outcome: Outcome) -> None:
        answered("Still sunny.")(outcome)
        turns = assistant_turns(bodies, protocol)
        assert len(turns) == 3  # the earlier turn's call and answer, this turn's call

    return expect


# A finished turn, as a history entry list (Gemini's adds a thought signature).
EARLIER = [
    {
        "question": "Weather in Paris?",
        "tool_calls": [{"id": "fc_old", "name": "get_weather", "args": PARIS}],
        "tool_call_results": [
            {
                "id": "fc_old",
                "name": "get_weather",
                "result": "sunny",
                "error": False,
                "returned_at": "2026-11-29T10:00:00.000Z",
            }
        ],
        "reasoning_details": [{"type": "thought_signature", "call_id": "fc_old", "signature": "CiQBVKhc7sIg_old"}],
    },
    {"next_thought": "Sunny.", "tool_calls": [], "tool_call_results": [], "answer": "Sunny."},
]
