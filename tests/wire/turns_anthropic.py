"""Anthropic Messages: empty blocks, signed and redacted thinking, forced submit, refusals."""

from __future__ import annotations

import json
from typing import Any

from responses import anthropic, anthropic_error, redacted, thinking
from turns import (
    PARIS,
    THINKING,
    Body,
    Outcome,
    Scenario,
    answered,
    assistant_turns,
    expect_stop,
    script_tool_then_answer,
    tool_then_answer,
)

import dspy_imp

# -- Anthropic ----------------------------------------------------------------------------------


def _expect_thinking_carried(bodies: list[Body], outcome: Outcome) -> None:
    answered("Sunny and 14:05.")(outcome)
    assert len(bodies) == 3
    assert all(b["thinking"]["type"] == "enabled" for b in bodies)
    turns = assistant_turns(bodies, "anthropic")
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
    turns = assistant_turns(bodies, "anthropic")
    assert [[b["type"] for b in t["content"]] for t in turns] == [["thinking", "text"], ["thinking", "tool_use"]]


def _expect_anthropic_parallel(bodies: list[Body], outcome: Outcome) -> None:
    answered("Sunny and 14:05.")(outcome)
    assert len(bodies) == 2
    assert "thinking" not in bodies[1] or bodies[1]["thinking"]["type"] == "disabled"
    (turn,) = assistant_turns(bodies, "anthropic")
    assert [(b["type"], b["id"]) for b in turn["content"]] == [("tool_use", "toolu_01P1"), ("tool_use", "toolu_01P2")]
    (results,) = [m for m in bodies[1]["messages"][1:] if m["role"] == "user"][:1]
    assert [b["tool_use_id"] for b in results["content"] if b["type"] == "tool_result"] == ["toolu_01P1", "toolu_01P2"]


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
    answered("Still sunny.")(outcome)
    turns = assistant_turns(bodies, "anthropic")
    assert turns[0]["content"][:2] == [thinking("Look it up.", "EqQBCkYIBxgCKkDold"), redacted("EmwKAhgBEgyOld")]
    assert turns[-1]["content"][0] == thinking("Again.", "EqQBCkYIBxgCKkDnew")


# The prompt cache's counters as Anthropic reports them (its prompt-caching guide's usage objects):
# the first request writes the prefix, the second reads it back and writes its own new part.
CACHE_WRITTEN = {"input_tokens": 21, "cache_creation_input_tokens": 1800, "cache_read_input_tokens": 0}
CACHE_READ = {"input_tokens": 21, "cache_creation_input_tokens": 120, "cache_read_input_tokens": 1800}


def _expect_cache_counted(bodies: list[Body], outcome: Outcome) -> None:
    """Each request's cache reads and writes reach ``metadata.usage``, per call and summed; the
    prompt tokens count every input token, cached or not (as LiteLLM and DSPy both count them)."""
    answered("Sunny, 21°C.")(outcome)
    usage = outcome.prediction.metadata.usage
    assert [(c.cached_tokens, c.cache_write_tokens, c.input_tokens) for c in usage.calls] == [
        (0, 1800, 1821),
        (1800, 120, 1941),
    ]
    assert (usage.cached_tokens, usage.cache_write_tokens, usage.input_tokens) == (1800, 1920, 3762)


# ``thinking=`` sends engine="auto" through LiteLLM (DSPy's choice); ``reasoning_effort`` stays native.
ANTHROPIC: list[Scenario] = [
    Scenario(
        "anthropic_cache_usage",
        "anthropic",
        [
            anthropic(calls=[("toolu_01A9x", "get_weather", PARIS)], usage=CACHE_WRITTEN),
            anthropic(text="Sunny, 21°C.", usage=CACHE_READ),
        ],
        _expect_cache_counted,
        lm={"reasoning_effort": None},
    ),
    Scenario(  # Claude without extended thinking (reasoning_effort=None turns DSPy's default "low" off)
        "anthropic_tool_then_answer",
        "anthropic",
        script_tool_then_answer("anthropic"),
        tool_then_answer("anthropic"),
        lm={"reasoning_effort": None},
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
    Scenario(
        "anthropic_parallel_calls",
        "anthropic",
        [
            anthropic(calls=[("toolu_01P1", "get_weather", PARIS), ("toolu_01P2", "get_time", PARIS)]),
            anthropic(text="Sunny and 14:05."),
        ],
        _expect_anthropic_parallel,
        lm={"reasoning_effort": None},
    ),
    Scenario(
        "anthropic_overloaded_then_recovery",
        "anthropic",
        [anthropic_error(529, "overloaded_error", "Overloaded"), *script_tool_then_answer("anthropic")],
        tool_then_answer("anthropic", requests=3),
        lm={"num_retries": 1, "reasoning_effort": None},
    ),
    Scenario("anthropic_context_window", "anthropic", [ANTHROPIC_CONTEXT], expect_stop("context_window_exceeded")),
    Scenario(
        "anthropic_refusal_stop", "anthropic", [anthropic(text="", stop="refusal")], expect_stop("content_filter")
    ),
]
