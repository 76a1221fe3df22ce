"""Gemini generateContent: thought signatures, parallel calls, safety stops, resumed turns."""

from __future__ import annotations

from responses import gemini, gemini_error
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
    script_tool_then_answer,
    tool_then_answer,
)

# -- Gemini ---------------------------------------------------------------------------------------


def _expect_gemini_parallel(bodies: list[Body], outcome: Outcome) -> None:
    answered("Sunny and 14:05.")(outcome)
    assert len(bodies) == 2
    (turn,) = assistant_turns(bodies, "gemini")
    assert [p.get("thoughtSignature") for p in turn["parts"]] == ["CiQBVKhc7sIg_par1", None]
    (answers,) = [c for c in bodies[1]["contents"][2:] if c["role"] == "user"][:1]
    assert len(answers["parts"]) == 2


GEMINI: list[Scenario] = [
    Scenario("gemini_tool_then_answer", "gemini", script_tool_then_answer("gemini"), tool_then_answer("gemini")),
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
    Scenario(
        "gemini_context_window",
        "gemini",
        [
            gemini_error(
                400,
                "INVALID_ARGUMENT",
                "The input token count (1200000) exceeds the maximum number of tokens allowed (1048576).",
            )
        ],
        expect_stop("context_window_exceeded"),
    ),
    Scenario("gemini_safety_stop", "gemini", [gemini(finish="SAFETY")], expect_stop("content_filter")),
    Scenario(
        "gemini_resumed_conversation",
        "gemini",
        [
            gemini(calls=[("fc_new", "get_weather", PARIS)], signatures=["CiQBVKhc7sIg_new"]),
            gemini(text="Still sunny."),
        ],
        expect_resumed("gemini"),
        inputs={"question": "And now?"},
        history=EARLIER,
    ),
]
