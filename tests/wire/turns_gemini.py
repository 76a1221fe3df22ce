"""Gemini generateContent: thought signatures, parallel calls, safety stops, resumed turns."""

from __future__ import annotations

from typing import Any

from emulator import Scripted
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
    expect_thought_then_submit,
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


def _expect_gemini_steps(bodies: list[Body], outcome: Outcome) -> None:
    """Every model turn of the current turn keeps its call's thought signature (Gemini 3)."""
    answered("Sunny and 14:05.")(outcome)
    assert len(bodies) == 3
    turns = assistant_turns(bodies, "gemini")
    assert [[p.get("thoughtSignature") for p in t["parts"]] for t in turns] == [
        ["CiQBVKhc7sIg_step1"],
        ["CiQBVKhc7sIg_step2"],
    ]


def _expect_gemini_forced(bodies: list[Body], outcome: Outcome) -> None:
    assert outcome.error is None, outcome.error
    assert outcome.prediction.answer == "Sunny, 21°C."
    assert outcome.prediction.metadata.termination_reason == "forced_submit"
    assert len(bodies) == 2
    config = (bodies[1].get("toolConfig") or bodies[1].get("tool_config"))["functionCallingConfig"]
    allowed = config.get("allowedFunctionNames") or config.get("allowed_function_names")  # LiteLLM: snake_case
    assert config["mode"] == "ANY" and allowed == ["submit"]
    (turn,) = assistant_turns(bodies, "gemini")
    assert turn["parts"][0]["thoughtSignature"] == "CiQBVKhc7sIg_forced"


def _expect_signed_steps(signatures: list[str], answer: str = "Sunny and 14:05.") -> Any:
    """Gemini 3: every model turn of the turn sends its call's own thought signature back."""

    def expect(bodies: list[Body], outcome: Outcome) -> None:
        answered(answer)(outcome)
        assert len(bodies) == len(signatures) + 1
        turns = assistant_turns(bodies, "gemini")
        assert [t["parts"][0].get("thoughtSignature") for t in turns] == signatures

    return expect


def _expect_idless_forced(bodies: list[Body], outcome: Outcome) -> None:
    assert outcome.error is None, outcome.error
    assert outcome.prediction.metadata.termination_reason == "forced_submit"
    assert len(bodies) == 3
    turns = assistant_turns(bodies, "gemini")
    assert [t["parts"][0].get("thoughtSignature") for t in turns] == ["CiQBVKhc7sIg_idl1", "CiQBVKhc7sIg_idl2"]


def _idless(*steps: tuple[str, dict[str, Any], str]) -> list[Scripted]:
    """Replies whose calls carry no id (the native engine names each ``tool_call_0`` in its reply)."""
    return [gemini(calls=[(None, name, args)], signatures=[signature]) for name, args, signature in steps]


THREE = [("get_weather", PARIS, "CiQBVKhc7sIg_three1"), ("get_time", PARIS, "CiQBVKhc7sIg_three2")]
THREE.append(("get_weather", {"city": "Lyon"}, "CiQBVKhc7sIg_three3"))
ANSWER = gemini(text="Sunny and 14:05.", text_signature="CiQBVKhc7sIg_answer")

GEMINI: list[Scenario] = [
    Scenario(
        "gemini_idless_three_steps",
        "gemini",
        [*_idless(*THREE), ANSWER],
        _expect_signed_steps([s for _, _, s in THREE]),
    ),
    Scenario(
        "gemini_three_steps_with_ids",
        "gemini",
        [
            *[gemini(calls=[(f"fc_t{i}", name, args)], signatures=[sig]) for i, (name, args, sig) in enumerate(THREE)],
            ANSWER,
        ],
        _expect_signed_steps([s for _, _, s in THREE]),
    ),
    Scenario(
        "gemini_idless_forced_submit",
        "gemini",
        [
            *_idless(("get_weather", PARIS, "CiQBVKhc7sIg_idl1"), ("get_time", PARIS, "CiQBVKhc7sIg_idl2")),
            gemini(calls=[(None, "submit", {"answer": "Sunny, 21°C."})], signatures=["CiQBVKhc7sIg_idl3"]),
        ],
        _expect_idless_forced,
        agent={"finish": "submit", "max_iters": 2},
    ),
    Scenario("gemini_tool_then_answer", "gemini", script_tool_then_answer("gemini"), tool_then_answer("gemini")),
    Scenario(
        "gemini_thinking_across_tool_steps",
        "gemini",
        [
            gemini(calls=[("fc_s1", "get_weather", PARIS)], signatures=["CiQBVKhc7sIg_step1"]),
            gemini(calls=[("fc_s2", "get_time", PARIS)], signatures=["CiQBVKhc7sIg_step2"]),
            gemini(text="Sunny and 14:05.", text_signature="CiQBVKhc7sIg_step3"),
        ],
        _expect_gemini_steps,
    ),
    Scenario(
        "gemini_thought_then_submit",
        "gemini",
        [
            gemini(text="I will look it up.", text_signature="CiQBVKhc7sIg_plan"),
            gemini(calls=[("fc_l1", "get_weather", PARIS)], signatures=["CiQBVKhc7sIg_look"]),
            gemini(calls=[("fc_x1", "submit", {"answer": "Sunny, 21°C."})], signatures=["CiQBVKhc7sIg_sub"]),
        ],
        expect_thought_then_submit("gemini"),
        agent={"finish": "submit"},
    ),
    Scenario(
        "gemini_forced_submit",
        "gemini",
        [
            gemini(calls=[("fc_f1", "get_weather", PARIS)], signatures=["CiQBVKhc7sIg_forced"]),
            gemini(calls=[("fc_s1", "submit", {"answer": "Sunny, 21°C."})], signatures=["CiQBVKhc7sIg_submit"]),
        ],
        _expect_gemini_forced,
        agent={"finish": "submit", "max_iters": 1},
    ),
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
        "gemini_server_error_then_recovery",
        "gemini",
        [
            gemini_error(503, "UNAVAILABLE", "The model is overloaded. Please try again later."),
            *script_tool_then_answer("gemini"),
        ],
        tool_then_answer("gemini", requests=3),
        lm={"num_retries": 1},
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
