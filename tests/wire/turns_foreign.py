"""Calls another model made, continued on Gemini 3: each goes back with the documented placeholder.

Gemini 3 refuses a call of the current turn without a ``thoughtSignature`` (400). A call it did not
make has none: a turn recorded on gpt-5 and resumed here, a host-written history, a paused turn
approved on another model. Gemini's thought-signatures FAQ names a placeholder for exactly these;
LiteLLM and pydantic-ai send ``skip_thought_signature_validator`` (as bytes: base64 in JSON) on the
first call of each model turn, and so does the loop, on both engines, for earlier turns too.
"""

from __future__ import annotations

from typing import Any

from provider_rules import PLACEHOLDER
from responses import gemini, gemini_compat
from turns import PARIS, Body, Outcome, Scenario, answered, assistant_turns

from dspy_imp import ReActAdapter

# What a gpt-5 step records: a call with its id and no reasoning blocks.
GPT5_CALL = {"id": "call_gpt5_w", "name": "get_weather", "args": PARIS}
GPT5_RESULT = {
    "id": "call_gpt5_w",
    "name": "get_weather",
    "result": "sunny, 21°C in Paris",
    "error": False,
    "returned_at": "2026-11-29T10:00:00.000Z",
}
EARLIER_ON_GPT5 = [
    {"question": "Weather in Paris?", "tool_calls": [GPT5_CALL], "tool_call_results": [GPT5_RESULT]},
    {"next_thought": "Sunny.", "tool_calls": [], "tool_call_results": [], "answer": "Sunny."},
]
MID_TURN_ON_GPT5 = [
    {"question": "Weather and time in Paris?", "tool_calls": [GPT5_CALL], "tool_call_results": [GPT5_RESULT]}
]
PAUSED_ON_GPT5 = [
    {
        "question": "Weather and time in Paris?",
        "tool_calls": [GPT5_CALL],
        "tool_call_results": [],
        "pending_calls": [{**GPT5_CALL, "kind": "approval"}],
    }
]


def _signatures(turn: Any) -> list[Any]:
    return [p.get("thoughtSignature") for p in turn["parts"] if "functionCall" in p or "function_call" in p]


def _expect_earlier_foreign(bodies: list[Body], outcome: Outcome) -> None:
    """The earlier turn's gpt-5 call carries the placeholder; this turn's call its own signature."""
    answered("Still sunny.")(outcome)
    assert len(bodies) == 2
    earlier_call, earlier_answer, new_call = assistant_turns(bodies, "gemini")
    assert _signatures(earlier_call) == [PLACEHOLDER]
    assert _signatures(new_call) == ["CiQBVKhc7sIg_fresh"]
    assert "thoughtSignature" not in str(earlier_answer)


def _expect_current_foreign(requests: int) -> Any:
    """A current-turn call Gemini did not make goes back with the placeholder (else: 400)."""

    def expect(bodies: list[Body], outcome: Outcome) -> None:
        answered("Sunny, 21°C.")(outcome)
        assert len(bodies) == requests
        assert all(_signatures(assistant_turns([b], "gemini")[0]) == [PLACEHOLDER] for b in bodies)
        recorded = outcome.prediction.metadata.history.messages[0]
        assert "reasoning_details" not in recorded or not recorded["reasoning_details"]  # the record is unchanged

    return expect


ANSWER = gemini(text="Sunny, 21°C.", text_signature="CiQBVKhc7sIg_answer")

FOREIGN: list[Scenario] = [
    Scenario(
        "gemini3_resumed_after_another_providers_turn",
        "gemini",
        [
            gemini(calls=[("fc_fresh", "get_weather", PARIS)], signatures=["CiQBVKhc7sIg_fresh"]),
            gemini(text="Still sunny."),
        ],
        _expect_earlier_foreign,
        inputs={"question": "And now?"},
        history=EARLIER_ON_GPT5,
    ),
    Scenario(  # a host-written (or another model's) history resumed mid-turn: no new inputs
        "gemini3_resumes_another_providers_turn_mid_turn",
        "gemini",
        [ANSWER],
        _expect_current_foreign(1),
        inputs={},
        history=MID_TURN_ON_GPT5,
    ),
    Scenario(  # paused on gpt-5, dumped, loaded and approved on Gemini 3
        "gemini3_resumes_a_turn_paused_on_another_provider",
        "gemini",
        [ANSWER],
        _expect_current_foreign(1),
        inputs={"approvals": {"call_gpt5_w": True}},
        history=PAUSED_ON_GPT5,
        agent={"needs_approval": ["get_weather"]},
    ),
]


# -- Gemini's OpenAI-compatible endpoint, calls with ``"id": ""`` -----------------------------------

EMPTY_ID_SIGS = ["CiQBVKhc7sIg_empty1", "CiQBVKhc7sIg_empty2"]


def _expect_empty_ids_signed(bodies: list[Body], outcome: Outcome) -> None:
    """Each ``""``-id call gets an id of its own, and its signature follows it (else: 400 on Gemini 3)."""
    answered("Sunny and 14:05.")(outcome)
    assert len(bodies) == 3
    turns = [m for m in bodies[-1]["messages"] if m["role"] == "assistant"]
    calls = [t["tool_calls"][0] for t in turns]
    assert [c["extra_content"]["google"]["thought_signature"] for c in calls] == EMPTY_ID_SIGS
    assert all(c["id"] for c in calls) and len({c["id"] for c in calls}) == 2
    answers = [m["tool_call_id"] for m in bodies[-1]["messages"] if m["role"] == "tool"]
    assert answers == [c["id"] for c in calls]


FOREIGN.append(
    Scenario(
        "gemini_openai_compat_calls_with_empty_ids",
        "gemini_compat",
        [
            gemini_compat(calls=[("", "get_weather", PARIS)], signatures=[EMPTY_ID_SIGS[0]]),
            gemini_compat(calls=[("", "get_time", PARIS)], signatures=[EMPTY_ID_SIGS[1]]),
            gemini_compat("Sunny and 14:05."),
        ],
        _expect_empty_ids_signed,
        adapter=ReActAdapter(native_calls=True),
    )
)
