"""Whole turns over HTTP, per provider: what the provider answers (the script) and what the turn expects.

One ``Scenario`` is run on both engines by ``test_providers.py``; ``tools/record_cassettes``
(``make record``) plays the same scripts from the emulator to write LiteLLM's cassettes.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import dspy
from emulator import Scripted
from responses import (
    anthropic,
    anthropic_error,
    chat,
    chat_context_window,
    chat_error,
    chat_server_error,
    gemini,
    redacted,
    thinking,
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
}
MODEL = {
    "openai": "openai/gpt-4o",
    "anthropic": "anthropic/claude-sonnet-4-5",
    "gemini": "gemini/gemini-3-pro-preview",
    "deepseek": "deepseek/deepseek-reasoner",
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


def _answered(text: str) -> Callable[[Outcome], None]:
    def check(outcome: Outcome) -> None:
        assert outcome.error is None, outcome.error
        assert outcome.prediction.answer == text
        assert outcome.prediction.metadata.termination_reason == "answered"

    return check


# -- the shared expectations --------------------------------------------------------------------


def _assistant_turns(bodies: list[Body], protocol: str) -> list[Any]:
    last = bodies[-1]
    if protocol == "gemini":
        return [c for c in last["contents"] if c["role"] == "model"]
    return [m for m in last["messages"] if m["role"] == "assistant"]


def tool_then_answer(protocol: str) -> Callable[[list[Body], Outcome], None]:
    def expect(bodies: list[Body], outcome: Outcome) -> None:
        _answered("Sunny, 21°C.")(outcome)
        assert len(bodies) == 2
        (turn,) = _assistant_turns(bodies, protocol)
        if protocol == "anthropic":  # issue 8 point 1: no empty text block beside the call
            assert [b["type"] for b in turn["content"]] == ["tool_use"]
        elif protocol == "gemini":  # no empty text part, and the call keeps its thought signature (point 3)
            (part,) = turn["parts"]
            assert set(part) in ({"functionCall", "thoughtSignature"}, {"function_call", "thoughtSignature"})
            assert part["thoughtSignature"] == "CiQBVKhc7sIg_weather1"
        else:  # None, or left out (LiteLLM drops a None content): never ""
            assert turn.get("content") is None

    return expect


def _script_tool_then_answer(protocol: str) -> list[Scripted]:
    if protocol == "anthropic":
        return [anthropic(calls=[("toolu_01A9x", "get_weather", PARIS)]), anthropic(text="Sunny, 21°C.")]
    if protocol == "gemini":
        return [
            gemini(calls=[("fc_w1", "get_weather", PARIS)], signatures=["CiQBVKhc7sIg_weather1"]),
            gemini(text="Sunny, 21°C.", text_signature="CiQBVKhc7sIg_final"),
        ]
    return [chat(calls=[("call_w1", "get_weather", PARIS)]), chat("Sunny, 21°C.")]


# -- Anthropic ----------------------------------------------------------------------------------


def _expect_thinking_carried(bodies: list[Body], outcome: Outcome) -> None:
    _answered("Sunny and 14:05.")(outcome)
    assert len(bodies) == 3
    assert all(b["thinking"]["type"] == "enabled" for b in bodies)
    turns = _assistant_turns(bodies, "anthropic")
    assert [[b["type"] for b in t["content"]] for t in turns] == [
        ["thinking", "tool_use"],
        ["redacted_thinking", "thinking", "tool_use", "tool_use"],
    ]
    assert turns[0]["content"][0] == thinking("I need the weather first.", "EqQBCkYIBxgCKkDweather")
    assert turns[1]["content"][0] == redacted("EmwKAhgBEgy3va3pzix/LafPsn4aDFIT")
    # never folded into visible text
    assert "I need the weather first." not in str([b for t in turns for b in t["content"] if b["type"] == "text"])
    history = outcome.prediction.metadata.history.messages
    assert history[0]["reasoning_details"] == [thinking("I need the weather first.", "EqQBCkYIBxgCKkDweather")]


def _expect_forced_without_thinking(bodies: list[Body], outcome: Outcome) -> None:
    assert outcome.error is None, outcome.error
    assert outcome.prediction.answer == "Sunny, 21°C."
    assert outcome.prediction.metadata.termination_reason == "forced_submit"
    assert len(bodies) == 2
    assert bodies[0]["thinking"]["type"] == "enabled"
    forced = bodies[1]
    assert forced["tool_choice"]["type"] == "tool" and forced["tool_choice"]["name"] == "submit"
    assert "thinking" not in forced or forced["thinking"]["type"] == "disabled"  # issue 8 point 4


def _expect_thought_then_submit(bodies: list[Body], outcome: Outcome) -> None:
    assert outcome.error is None, outcome.error
    assert outcome.prediction.answer == "Sunny, 21°C."
    assert outcome.prediction.metadata.termination_reason == "submit"
    assert len(bodies) == 3
    turns = _assistant_turns(bodies, "anthropic")
    assert [[b["type"] for b in t["content"]] for t in turns] == [["thinking", "text"], ["thinking", "tool_use"]]


def _expect_stop(cause: str) -> Callable[[list[Body], Outcome], None]:
    def expect(bodies: list[Body], outcome: Outcome) -> None:
        if cause == "content_filter":
            assert isinstance(outcome.error, dspy_imp.StepError), outcome
            assert len(bodies) == 1
            return
        assert outcome.error is None, outcome.error
        assert outcome.prediction.metadata.termination_cause == cause
        assert len(bodies) == 1

    return expect


ANTHROPIC_CONTEXT = anthropic_error(400, "invalid_request_error", "prompt is too long: 212044 tokens > 200000 maximum")


def _through_a_file(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``dump_history`` -> JSON text -> ``load_history``: what a saved conversation comes back as."""
    saved = json.dumps(dspy_imp.dump_history(entries))
    return list(dspy_imp.load_history(json.loads(saved)).messages)


ANTHROPIC_EARLIER = _through_a_file(
    [
        {
            "question": "Weather in Paris?",
            "tool_calls": [{"id": "toolu_01Old", "name": "get_weather", "args": PARIS}],
            "tool_call_results": [
                {
                    "id": "toolu_01Old",
                    "name": "get_weather",
                    "result": "sunny",
                    "error": False,
                    "returned_at": "2026-11-29T10:00:00.000Z",
                }
            ],
            "reasoning_content": "Look it up.",
            "reasoning_details": [thinking("Look it up.", "EqQBCkYIBxgCKkDold"), redacted("EmwKAhgBEgyOld")],
        },
        {
            "next_thought": "Sunny.",
            "tool_calls": [],
            "tool_call_results": [],
            "answer": "Sunny.",
            "reasoning_details": [thinking("Answer.", "EqQBCkYIBxgCKkDoldanswer")],
        },
    ]
)


def _expect_resumed_thinking(bodies: list[Body], outcome: Outcome) -> None:
    _answered("Still sunny.")(outcome)
    turns = _assistant_turns(bodies, "anthropic")
    assert turns[0]["content"][:2] == [thinking("Look it up.", "EqQBCkYIBxgCKkDold"), redacted("EmwKAhgBEgyOld")]
    assert turns[-1]["content"][0] == thinking("Again.", "EqQBCkYIBxgCKkDnew")


# ``thinking=`` sends engine="auto" through LiteLLM (DSPy's choice); ``reasoning_effort`` stays native.
ANTHROPIC: list[Scenario] = [
    Scenario(
        "anthropic_tool_then_answer", "anthropic", _script_tool_then_answer("anthropic"), tool_then_answer("anthropic")
    ),
    Scenario(
        "anthropic_thinking_across_tool_steps",
        "anthropic",
        [
            anthropic(
                [thinking("I need the weather first.", "EqQBCkYIBxgCKkDweather")],
                calls=[("toolu_01W", "get_weather", PARIS)],
            ),
            anthropic(
                [redacted("EmwKAhgBEgy3va3pzix/LafPsn4aDFIT"), thinking("Now the time.", "EqQBCkYIBxgCKkDtime")],
                calls=[("toolu_01T", "get_time", PARIS), ("toolu_01W2", "get_weather", {"city": "Lyon"})],
            ),
            anthropic([thinking("Both known.", "EqQBCkYIBxgCKkDdone")], text="Sunny and 14:05."),
        ],
        _expect_thinking_carried,
        lm={"thinking": THINKING, "max_tokens": 4096},
    ),
    Scenario(
        "anthropic_reasoning_effort_across_tool_steps",
        "anthropic",
        [
            anthropic(
                [thinking("I need the weather first.", "EqQBCkYIBxgCKkDweather")],
                calls=[("toolu_01W", "get_weather", PARIS)],
            ),
            anthropic(
                [redacted("EmwKAhgBEgy3va3pzix/LafPsn4aDFIT"), thinking("Now the time.", "EqQBCkYIBxgCKkDtime")],
                calls=[("toolu_01T", "get_time", PARIS), ("toolu_01W2", "get_weather", {"city": "Lyon"})],
            ),
            anthropic([thinking("Both known.", "EqQBCkYIBxgCKkDdone")], text="Sunny and 14:05."),
        ],
        _expect_thinking_carried,
        lm={"reasoning_effort": "low"},  # natively: lm15 turns it into thinking
    ),
    Scenario(
        "anthropic_forced_submit_with_thinking",
        "anthropic",
        [
            anthropic(
                [thinking("Weather first.", "EqQBCkYIBxgCKkDforced")], calls=[("toolu_01F", "get_weather", PARIS)]
            ),
            anthropic(calls=[("toolu_01S", "submit", {"answer": "Sunny, 21°C."})]),
        ],
        _expect_forced_without_thinking,
        lm={"thinking": THINKING, "max_tokens": 4096},
        agent={"finish": "submit", "max_iters": 1},
    ),
    Scenario(
        "anthropic_thought_then_submit",
        "anthropic",
        [
            anthropic([thinking("Plan.", "EqQBCkYIBxgCKkDplan")], text="I will look it up."),
            anthropic([thinking("Look.", "EqQBCkYIBxgCKkDlook")], calls=[("toolu_01L", "get_weather", PARIS)]),
            anthropic(
                [thinking("Submit.", "EqQBCkYIBxgCKkDsub")], calls=[("toolu_01X", "submit", {"answer": "Sunny, 21°C."})]
            ),
        ],
        _expect_thought_then_submit,
        lm={"thinking": THINKING, "max_tokens": 4096},
        agent={"finish": "submit"},
    ),
    Scenario(
        "anthropic_resumed_after_dump_and_load",
        "anthropic",
        [
            anthropic([thinking("Again.", "EqQBCkYIBxgCKkDnew")], calls=[("toolu_01New", "get_weather", PARIS)]),
            anthropic([thinking("Done.", "EqQBCkYIBxgCKkDnewdone")], text="Still sunny."),
        ],
        _expect_resumed_thinking,
        lm={"thinking": THINKING, "max_tokens": 4096},
        inputs={"question": "And now?"},
        history=ANTHROPIC_EARLIER,
    ),
    Scenario("anthropic_context_window", "anthropic", [ANTHROPIC_CONTEXT], _expect_stop("context_window_exceeded")),
    Scenario(
        "anthropic_refusal_stop", "anthropic", [anthropic(text="", stop="refusal")], _expect_stop("content_filter")
    ),
]


# -- Gemini ---------------------------------------------------------------------------------------


def _expect_gemini_parallel(bodies: list[Body], outcome: Outcome) -> None:
    _answered("Sunny and 14:05.")(outcome)
    assert len(bodies) == 2
    (turn,) = _assistant_turns(bodies, "gemini")
    assert [p.get("thoughtSignature") for p in turn["parts"]] == ["CiQBVKhc7sIg_par1", None]
    (answers,) = [c for c in bodies[1]["contents"][2:] if c["role"] == "user"][:1]
    assert len(answers["parts"]) == 2


def _expect_resumed(protocol: str) -> Callable[[list[Body], Outcome], None]:
    def expect(bodies: list[Body], outcome: Outcome) -> None:
        _answered("Still sunny.")(outcome)
        turns = _assistant_turns(bodies, protocol)
        assert len(turns) == 3  # the earlier turn's call and answer, this turn's call

    return expect


GEMINI_EARLIER = [
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

GEMINI: list[Scenario] = [
    Scenario("gemini_tool_then_answer", "gemini", _script_tool_then_answer("gemini"), tool_then_answer("gemini")),
    Scenario(
        "gemini_parallel_calls",
        "gemini",
        [
            gemini(
                calls=[("fc_p1", "get_weather", PARIS), ("fc_p2", "get_time", PARIS)], signatures=["CiQBVKhc7sIg_par1"]
            ),
            gemini(text="Sunny and 14:05.", text_signature="CiQBVKhc7sIg_par_final"),
        ],
        _expect_gemini_parallel,
    ),
    Scenario("gemini_safety_stop", "gemini", [gemini(finish="SAFETY")], _expect_stop("content_filter")),
    Scenario(
        "gemini_resumed_conversation",
        "gemini",
        [
            gemini(calls=[("fc_new", "get_weather", PARIS)], signatures=["CiQBVKhc7sIg_new"]),
            gemini(text="Still sunny."),
        ],
        _expect_resumed("gemini"),
        inputs={"question": "And now?"},
        history=GEMINI_EARLIER,
    ),
]


# -- DeepSeek ------------------------------------------------------------------------------------


def _expect_reasoning_replayed(bodies: list[Body], outcome: Outcome) -> None:
    _answered("Sunny, 21°C.")(outcome)
    (turn,) = _assistant_turns(bodies, "deepseek")
    assert turn["reasoning_content"] == "The user wants the weather; call get_weather."  # issue 8 point 5
    assert "The user wants" not in str(turn.get("content"))


DEEPSEEK_REASONING = "The user wants the weather; call get_weather."
DEEPSEEK: list[Scenario] = [
    Scenario(
        "deepseek_reasoner_written_calls",
        "deepseek",
        [
            chat(
                "[[ ## answer ## ]]\n\n[[ ## tool_calls ## ]]\n"
                '[{"name": "get_weather", "arguments": {"city": "Paris"}}]\n\n[[ ## completed ## ]]',
                reasoning=DEEPSEEK_REASONING,
                model="deepseek-reasoner",
            ),
            chat(
                "[[ ## answer ## ]]\nSunny, 21°C.\n\n[[ ## tool_calls ## ]]\n[]\n\n[[ ## completed ## ]]",
                reasoning="Done.",
                model="deepseek-reasoner",
            ),
        ],
        _expect_reasoning_replayed,
    ),
    Scenario(
        "deepseek_thinking_tool_calls",
        "deepseek",
        [
            chat(calls=[("call_00_w", "get_weather", PARIS)], reasoning=DEEPSEEK_REASONING, model="deepseek-chat"),
            chat("Sunny, 21°C.", reasoning="Done.", model="deepseek-chat"),
        ],
        _expect_reasoning_replayed,
        model="deepseek/deepseek-chat",
        lm={"thinking": {"type": "enabled"}},
    ),
]


# -- OpenAI --------------------------------------------------------------------------------------


def _expect_parallel(bodies: list[Body], outcome: Outcome) -> None:
    _answered("Sunny and 14:05.")(outcome)
    messages = bodies[1]["messages"]
    (turn,) = _assistant_turns(bodies, "openai")
    assert [c["id"] for c in turn["tool_calls"]] == ["call_p1", "call_p2"]
    assert [m["tool_call_id"] for m in messages if m["role"] == "tool"] == ["call_p1", "call_p2"]


def _expect_recovered(bodies: list[Body], outcome: Outcome) -> None:
    _answered("Sunny, 21°C.")(outcome)
    assert len(bodies) == 3
    assert bodies[0] == bodies[1]  # the retry sends the same request


def _expect_required_retry(bodies: list[Body], outcome: Outcome) -> None:
    assert outcome.error is None, outcome.error
    assert outcome.prediction.answer == "Sunny, 21°C."
    assert [b.get("tool_choice") for b in bodies] == [
        "auto",
        {"type": "function", "function": {"name": "submit"}},
        "required",
    ]
    assert [t["function"]["name"] for t in bodies[2]["tools"]] == ["submit"]


NAMED_REFUSED = chat_error(
    400,
    "Invalid value for 'tool_choice': only 'none', 'auto' and 'required' are supported string values.",
    type="invalid_request_error",
    code="invalid_value",
    param="tool_choice",
)

OPENAI: list[Scenario] = [
    Scenario("openai_tool_then_answer", "openai", _script_tool_then_answer("openai"), tool_then_answer("openai")),
    Scenario(
        "openai_parallel_calls",
        "openai",
        [chat(calls=[("call_p1", "get_weather", PARIS), ("call_p2", "get_time", PARIS)]), chat("Sunny and 14:05.")],
        _expect_parallel,
    ),
    Scenario(
        "openai_server_error_then_recovery",
        "openai",
        [chat_server_error(), *_script_tool_then_answer("openai")],
        _expect_recovered,
        lm={"num_retries": 1},
    ),
    Scenario("openai_context_window", "openai", [chat_context_window()], _expect_stop("context_window_exceeded")),
    Scenario("openai_content_filter", "openai", [chat(None, finish="content_filter")], _expect_stop("content_filter")),
    Scenario(
        "openai_forced_submit_required_retry",
        "openai",
        [
            chat(calls=[("call_f1", "get_weather", PARIS)]),
            NAMED_REFUSED,
            chat(calls=[("call_s1", "submit", {"answer": "Sunny, 21°C."})]),
        ],
        _expect_required_retry,
        agent={"finish": "submit", "max_iters": 1},
    ),
    Scenario(
        "openai_resumed_conversation",
        "openai",
        [chat(calls=[("call_new", "get_weather", PARIS)]), chat("Still sunny.")],
        _expect_resumed("openai"),
        inputs={"question": "And now?"},
        history=[{**GEMINI_EARLIER[0], "reasoning_details": None}, GEMINI_EARLIER[1]],
    ),
]

SCENARIOS: list[Scenario] = [*ANTHROPIC, *GEMINI, *DEEPSEEK, *OPENAI]
