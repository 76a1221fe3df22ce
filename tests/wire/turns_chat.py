"""Chat Completions: DeepSeek reasoning replay; OpenAI calls, retries, refusals, endings."""

from __future__ import annotations

from responses import (
    chat,
    chat_context_window,
    chat_error,
    chat_server_error,
    deepseek_context_window,
    deepseek_overloaded,
)
from turns import (
    EARLIER,
    PARIS,
    Body,
    Outcome,
    Scenario,
    answered,
    assistant_turns,
    expect_resumed,
    expect_stop,
    expect_thought_then_submit,
    script_tool_then_answer,
    tool_then_answer,
)

# -- DeepSeek ------------------------------------------------------------------------------------


def _expect_reasoning_replayed(bodies: list[Body], outcome: Outcome) -> None:
    answered("Sunny, 21°C.")(outcome)
    (turn,) = assistant_turns(bodies, "deepseek")
    assert turn["reasoning_content"] == "The user wants the weather; call get_weather."  # issue 8 point 5
    assert "The user wants" not in str(turn.get("content"))


def _expect_deepseek_parallel(bodies: list[Body], outcome: Outcome) -> None:
    answered("Sunny and 14:05.")(outcome)
    assert len(bodies) == 2
    (turn,) = assistant_turns(bodies, "deepseek")
    assert [c["id"] for c in turn["tool_calls"]] == ["call_00_p1", "call_01_p2"]
    assert turn["reasoning_content"] == "Weather and time: both tools at once."
    assert [m["tool_call_id"] for m in bodies[1]["messages"] if m["role"] == "tool"] == ["call_00_p1", "call_01_p2"]


def _expect_deepseek_steps(bodies: list[Body], outcome: Outcome) -> None:
    answered("Sunny and 14:05.")(outcome)
    assert len(bodies) == 3
    turns = assistant_turns(bodies, "deepseek")
    assert [t["reasoning_content"] for t in turns] == ["Weather first.", "Now the time."]
    assert [[c["id"] for c in t["tool_calls"]] for t in turns] == [["call_00_w"], ["call_00_t"]]


def _expect_forced_submit(bodies: list[Body], outcome: Outcome) -> None:
    assert outcome.error is None, outcome.error
    assert outcome.prediction.answer == "Sunny, 21°C."
    assert outcome.prediction.metadata.termination_reason == "forced_submit"
    assert [b.get("tool_choice") for b in bodies] == ["auto", {"type": "function", "function": {"name": "submit"}}]


def _expect_deepseek_resumed(bodies: list[Body], outcome: Outcome) -> None:
    """DeepSeek thinking mode: an earlier turn that called tools keeps its reasoning_content in every later request."""
    answered("Still sunny.")(outcome)
    assert len(bodies) == 2
    turns = assistant_turns(bodies, "deepseek")
    assert [t.get("reasoning_content") for t in turns] == ["Look it up.", "Answer.", "Again."]
    assert all("Look it up." not in str(t.get("content")) for t in turns)


DEEPSEEK_EARLIER = [
    {**EARLIER[0], "reasoning_details": None, "reasoning_content": "Look it up."},
    {**EARLIER[1], "reasoning_content": "Answer."},
]
DEEPSEEK_CHAT = "deepseek/deepseek-chat"  # native function calling; the native engine stays on lm15
DEEPSEEK_THINKING = {"thinking": {"type": "enabled"}}  # DSPy routes engine="auto" through LiteLLM
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
        lm=DEEPSEEK_THINKING,
    ),
    Scenario(
        "deepseek_thinking_across_tool_steps",
        "deepseek",
        [
            chat(calls=[("call_00_w", "get_weather", PARIS)], reasoning="Weather first.", model="deepseek-chat"),
            chat(calls=[("call_00_t", "get_time", PARIS)], reasoning="Now the time.", model="deepseek-chat"),
            chat("Sunny and 14:05.", reasoning="Both known.", model="deepseek-chat"),
        ],
        _expect_deepseek_steps,
        model=DEEPSEEK_CHAT,
        lm=DEEPSEEK_THINKING,
    ),
    Scenario(
        "deepseek_thought_then_submit",
        "deepseek",
        [
            chat("I will look it up.", reasoning="Plan.", model="deepseek-chat"),
            chat(calls=[("call_00_l", "get_weather", PARIS)], reasoning="Look.", model="deepseek-chat"),
            chat(
                calls=[("call_00_s", "submit", {"answer": "Sunny, 21°C."})], reasoning="Submit.", model="deepseek-chat"
            ),
        ],
        expect_thought_then_submit("deepseek"),
        model=DEEPSEEK_CHAT,
        lm=DEEPSEEK_THINKING,
        agent={"finish": "submit"},
    ),
    Scenario(
        "deepseek_forced_submit",
        "deepseek",
        [
            chat(calls=[("call_00_f", "get_weather", PARIS)], model="deepseek-chat"),
            chat(calls=[("call_00_s", "submit", {"answer": "Sunny, 21°C."})], model="deepseek-chat"),
        ],
        _expect_forced_submit,
        model=DEEPSEEK_CHAT,
        agent={"finish": "submit", "max_iters": 1},
    ),
    Scenario(
        "deepseek_parallel_calls",
        "deepseek",
        [
            chat(
                calls=[("call_00_p1", "get_weather", PARIS), ("call_01_p2", "get_time", PARIS)],
                reasoning="Weather and time: both tools at once.",
                model="deepseek-chat",
            ),
            chat("Sunny and 14:05.", reasoning="Both known.", model="deepseek-chat"),
        ],
        _expect_deepseek_parallel,
        model=DEEPSEEK_CHAT,
    ),
    Scenario(
        "deepseek_server_error_then_recovery",
        "deepseek",
        [
            deepseek_overloaded(),
            chat(calls=[("call_w1", "get_weather", PARIS)], model="deepseek-chat"),
            chat("Sunny, 21°C.", model="deepseek-chat"),
        ],
        tool_then_answer("deepseek", requests=3),
        model=DEEPSEEK_CHAT,
        lm={"num_retries": 1},
    ),
    Scenario(
        "deepseek_context_window",
        "deepseek",
        [deepseek_context_window()],
        expect_stop("context_window_exceeded"),
        model=DEEPSEEK_CHAT,
    ),
    Scenario(
        "deepseek_content_filter",
        "deepseek",
        [chat("", finish="content_filter", model="deepseek-chat")],
        expect_stop("content_filter"),
        model=DEEPSEEK_CHAT,
    ),
    Scenario(
        "deepseek_resumed_conversation",
        "deepseek",
        [
            chat(calls=[("call_00_new", "get_weather", PARIS)], reasoning="Again.", model="deepseek-chat"),
            chat("Still sunny.", reasoning="Done.", model="deepseek-chat"),
        ],
        _expect_deepseek_resumed,
        model=DEEPSEEK_CHAT,
        lm=DEEPSEEK_THINKING,
        inputs={"question": "And now?"},
        history=DEEPSEEK_EARLIER,
    ),
]


# -- OpenAI --------------------------------------------------------------------------------------


def _expect_parallel(bodies: list[Body], outcome: Outcome) -> None:
    answered("Sunny and 14:05.")(outcome)
    messages = bodies[1]["messages"]
    (turn,) = assistant_turns(bodies, "openai")
    assert [c["id"] for c in turn["tool_calls"]] == ["call_p1", "call_p2"]
    assert [m["tool_call_id"] for m in messages if m["role"] == "tool"] == ["call_p1", "call_p2"]


def _expect_recovered(bodies: list[Body], outcome: Outcome) -> None:
    answered("Sunny, 21°C.")(outcome)
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
    Scenario("openai_tool_then_answer", "openai", script_tool_then_answer("openai"), tool_then_answer("openai")),
    Scenario(
        "openai_parallel_calls",
        "openai",
        [chat(calls=[("call_p1", "get_weather", PARIS), ("call_p2", "get_time", PARIS)]), chat("Sunny and 14:05.")],
        _expect_parallel,
    ),
    Scenario(
        "openai_server_error_then_recovery",
        "openai",
        [chat_server_error(), *script_tool_then_answer("openai")],
        _expect_recovered,
        lm={"num_retries": 1},
    ),
    Scenario("openai_context_window", "openai", [chat_context_window()], expect_stop("context_window_exceeded")),
    Scenario("openai_content_filter", "openai", [chat(None, finish="content_filter")], expect_stop("content_filter")),
    Scenario(
        "openai_thought_then_submit",
        "openai",
        [
            chat("I will look it up."),
            chat(calls=[("call_l1", "get_weather", PARIS)]),
            chat(calls=[("call_s1", "submit", {"answer": "Sunny, 21°C."})]),
        ],
        expect_thought_then_submit("openai"),
        agent={"finish": "submit"},
    ),
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
        expect_resumed("openai"),
        inputs={"question": "And now?"},
        history=[{**EARLIER[0], "reasoning_details": None}, EARLIER[1]],
    ),
]
