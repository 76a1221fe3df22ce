"""Claude 5.x: no forced tool choice, adaptive thinking only, thinking blocks bound to their prefix.

Every thinking block these scripts return is signed for the request it answers
(``anthropic(..., bound=True)``), so ``provider_rules.anthropic_thinking_binding`` refuses any
request that replays one behind an edited prefix, as Claude Fable 5.1 does.
"""

from __future__ import annotations

from typing import Any

from provider_rules import bound
from responses import anthropic, thinking
from turns import PARIS, Body, Outcome, Scenario, answered, assistant_turns
from turns_anthropic import ANTHROPIC_CONTEXT, ANTHROPIC_EARLIER

import dspy_imp

FABLE = "anthropic/claude-fable-5-1"
OPUS = "anthropic/claude-opus-5-5"
ADAPTIVE = {"thinking": {"type": "adaptive"}, "max_tokens": 4096}  # ``thinking=``: LiteLLM, also on "auto"
EFFORT = {"reasoning_effort": "low"}  # natively: lm15 sends adaptive thinking with output_config.effort
LYON = {"city": "Lyon"}


def _step(sig: str, call: tuple[str, str, dict[str, Any]], model: str) -> Any:
    return anthropic([thinking(f"Step {sig}.", f"EqQBCkYIBxgCKkD{sig}")], calls=[call], model=model, bound=True)


def _three_steps(model: str) -> list[Any]:
    return [
        _step("one", ("toolu_01A", "get_weather", PARIS), model),
        _step("two", ("toolu_01B", "get_time", PARIS), model),
        _step("three", ("toolu_01C", "get_weather", LYON), model),
        anthropic([thinking("Done.", "EqQBCkYIBxgCKkDdone")], text="Sunny and 14:05.", model=model, bound=True),
    ]


def _same_tools(bodies: list[Body]) -> None:
    """No request changes the tool list (it is part of every bound block's prefix)."""
    assert all(body["tools"] == bodies[0]["tools"] for body in bodies)


def _expect_three_steps(bodies: list[Body], outcome: Outcome) -> None:
    answered("Sunny and 14:05.")(outcome)
    assert len(bodies) == 4
    _same_tools(bodies)
    turns = assistant_turns(bodies, "anthropic")
    assert [[b["type"] for b in t["content"]] for t in turns] == [["thinking", "tool_use"]] * 3
    assert all("enabled" not in str(body.get("thinking")) for body in bodies)


def _expect_forced(bodies: list[Body], outcome: Outcome) -> None:
    """The forced submit is an ordinary request (``auto``, same tools); the model calls ``submit``."""
    assert outcome.error is None, outcome.error
    assert outcome.prediction.answer == "Sunny, 21°C."
    assert outcome.prediction.metadata.termination_reason == "forced_submit"
    assert len(bodies) == 2
    _same_tools(bodies)
    assert bodies[1].get("tool_choice", {"type": "auto"})["type"] == "auto"
    (turn,) = assistant_turns(bodies, "anthropic")
    assert turn["content"][0]["type"] == "thinking"  # replayed: thinking stays on for that request
    _same_thinking(bodies)


def _same_thinking(bodies: list[Body]) -> None:
    """Every request of the turn, the forced one too, asks for the same thinking (and effort): a change
    would break the prompt cache, and these models take adaptive thinking with any request."""
    settings = [(body.get("thinking"), body.get("output_config")) for body in bodies]
    assert settings == [settings[0]] * len(bodies)
    thinking, output = settings[0]
    assert thinking["type"] == "adaptive" and output == {"effort": "low"}  # LiteLLM adds "display"


def _expect_forced_with_note(bodies: list[Body], outcome: Outcome) -> None:
    _expect_forced(bodies, outcome)
    assert "Time is up" in str(bodies[1]["messages"][-1])  # after the last tool result: nothing before it moved


def _expect_forced_after_thought(bodies: list[Body], outcome: Outcome) -> None:
    """No block goes back behind an edited prefix: the moved thought's own block is not replayed."""
    assert outcome.error is None, outcome.error
    assert outcome.prediction.metadata.termination_reason == "forced_submit"
    assert len(bodies) == 2
    _same_tools(bodies)
    assert "I will look it up." in str(bodies[1]["messages"][-1])
    assert "EqQBCkYIBxgCKkDplan" not in str(bodies[1])
    _same_thinking(bodies)


def _expect_forced_then_extracted(bodies: list[Body], outcome: Outcome) -> None:
    """The model answers the forced request in words, so the extractor reads the answer."""
    assert outcome.error is None, outcome.error
    assert outcome.prediction.answer == "Sunny, 21°C."
    assert outcome.prediction.metadata.termination_reason == "extracted"
    assert len(bodies) == 3
    _same_tools(bodies[:2])
    assert bodies[1].get("tool_choice", {"type": "auto"})["type"] == "auto"


def _expect_recovered(bodies: list[Body], outcome: Outcome) -> None:
    """The retry leaves out the earlier turn: the bound block behind it may be dropped, never refused."""
    answered("Sunny.")(outcome)
    assert len(bodies) == 3
    assert outcome.prediction.metadata.context_projection["omitted_prior_entries"] == 2
    for body in bodies[2:]:
        assert body["thinking"]["block_binding"] == {"prefix_mismatch_behavior": "drop_block"}
    assert "block_binding" not in str(bodies[0])  # nothing edited yet: the prefix holds


def _expect_actions(bodies: list[Body], outcome: Outcome) -> None:
    """``history_replay="actions"``: the earlier turn's signed blocks (bound to its narration) stay home."""
    answered("Still sunny.")(outcome)
    earlier = [m for m in bodies[0]["messages"] if m["role"] == "assistant"]
    assert earlier and all(b["type"] not in ("thinking", "redacted_thinking") for m in earlier for b in m["content"])


def _submit(model: str) -> Any:
    return anthropic(
        [thinking("Submit.", "EqQBCkYIBxgCKkDsubmit")],
        calls=[("toolu_01S", "submit", {"answer": "Sunny, 21°C."})],
        model=model,
        bound=True,
    )


EXTRACTED = "[[ ## reasoning ## ]]\nThe tool said so.\n\n[[ ## answer ## ]]\nSunny, 21°C.\n\n[[ ## completed ## ]]"
# An earlier turn whose answer's block was signed behind the whole narration (which "actions" strips).
_NARRATED = {
    "messages": [{"role": "user", "content": "Weather in Paris?"}, {"role": "assistant", "content": "Let me see."}]
}
ACTIONS_EARLIER = [
    ANTHROPIC_EARLIER[0],
    {**ANTHROPIC_EARLIER[1], "reasoning_details": [thinking("Answer.", bound("EqQBCkYIBxgCKkDoldanswer", _NARRATED))]},
]


def _expect_refused_before_sending(bodies: list[Body], outcome: Outcome) -> None:
    """Manual thinking on Fable 5.1 is refused by the loop, before any request (the provider's answer is a 400)."""
    assert bodies == []
    assert isinstance(outcome.error, dspy_imp.ConfigurationError), outcome  # a bad option, named
    assert "takes only adaptive thinking" in str(outcome.error)


CLAUDE5: list[Scenario] = [
    Scenario(
        "claude_fable_manual_thinking_refused",
        "anthropic",
        [],
        _expect_refused_before_sending,
        model=FABLE,
        lm={"thinking": {"type": "enabled", "budget_tokens": 1024}, "max_tokens": 4096},
        engines=("native",),
    ),
    Scenario(
        "claude_fable_three_steps", "anthropic", _three_steps(FABLE), _expect_three_steps, model=FABLE, lm=ADAPTIVE
    ),
    Scenario("claude_opus55_three_steps", "anthropic", _three_steps(OPUS), _expect_three_steps, model=OPUS, lm=EFFORT),
    Scenario(
        "claude_fable_forced_submit",
        "anthropic",
        [_step("forced", ("toolu_01F", "get_weather", PARIS), FABLE), _submit(FABLE)],
        _expect_forced,
        model=FABLE,
        lm=ADAPTIVE,
        agent={"finish": "submit", "max_iters": 1},
    ),
    Scenario(
        "claude_opus55_forced_submit",
        "anthropic",
        [_step("forced", ("toolu_01F", "get_weather", PARIS), OPUS), _submit(OPUS)],
        _expect_forced,
        model=OPUS,
        lm=EFFORT,
        agent={"finish": "submit", "max_iters": 1},
    ),
    Scenario(  # the last step was a thought: the forced request moves it to a user message (thought_as_request)
        "claude_fable_forced_submit_after_a_thought",
        "anthropic",
        [
            anthropic([thinking("Plan.", "EqQBCkYIBxgCKkDplan")], text="I will look it up.", model=FABLE, bound=True),
            _submit(FABLE),
        ],
        _expect_forced_after_thought,
        model=FABLE,
        lm=ADAPTIVE,
        agent={"finish": "submit", "max_iters": 1},
    ),
    Scenario(  # the note is appended (a new user message): every bound block keeps its prefix
        "claude_fable_forced_submit_with_a_note",
        "anthropic",
        [_step("forced", ("toolu_01F", "get_weather", PARIS), FABLE), _submit(FABLE)],
        _expect_forced_with_note,
        model=FABLE,
        lm=ADAPTIVE,
        agent={"finish": "submit", "max_iters": 1, "last_request_note": "Time is up: submit your answer now."},
    ),
    Scenario(
        "claude_fable_forced_submit_then_extractor",
        "anthropic",
        [
            _step("forced", ("toolu_01F", "get_weather", PARIS), FABLE),
            anthropic([thinking("Say it.", "EqQBCkYIBxgCKkDsay")], text="It is sunny, 21°C.", model=FABLE, bound=True),
            anthropic(text=EXTRACTED, model=FABLE),
        ],
        _expect_forced_then_extracted,
        model=FABLE,
        lm=ADAPTIVE,
        agent={"finish": "submit", "max_iters": 1},
    ),
    Scenario(
        "claude_fable_context_window_recovery",
        "anthropic",
        [
            _step("first", ("toolu_01R", "get_weather", PARIS), FABLE),
            ANTHROPIC_CONTEXT,
            anthropic([thinking("Ok.", "EqQBCkYIBxgCKkDok")], text="Sunny.", model=FABLE, bound=True),
        ],
        _expect_recovered,
        model=FABLE,
        lm=ADAPTIVE,
        inputs={"question": "And now?"},
        history=ANTHROPIC_EARLIER,
    ),
    Scenario(  # natively, reasoning_effort: the recovery request goes through LiteLLM (``thinking=``)
        "claude_opus55_context_window_recovery",
        "anthropic",
        [
            _step("first", ("toolu_01R", "get_weather", PARIS), OPUS),
            ANTHROPIC_CONTEXT,
            anthropic([thinking("Ok.", "EqQBCkYIBxgCKkDok")], text="Sunny.", model=OPUS, bound=True),
        ],
        _expect_recovered,
        model=OPUS,
        lm=EFFORT,
        inputs={"question": "And now?"},
        history=ANTHROPIC_EARLIER,
    ),
    Scenario(
        "claude_fable_actions_replay",
        "anthropic",
        [
            _step("new", ("toolu_01N", "get_weather", PARIS), FABLE),
            anthropic([thinking("Done.", "EqQBCkYIBxgCKkDdone")], text="Still sunny.", model=FABLE, bound=True),
        ],
        _expect_actions,
        model=FABLE,
        lm=ADAPTIVE,
        agent={"history_replay": "actions"},
        inputs={"question": "And now?"},
        history=ACTIONS_EARLIER,
    ),
]


def _expect_forced_taken(bodies: list[Body], outcome: Outcome) -> None:
    """Fable 5 (no minor version) takes a forced choice: the submit is named (docs/providers.md, facts)."""
    assert outcome.error is None, outcome.error
    assert outcome.prediction.metadata.termination_reason == "forced_submit"
    assert len(bodies) == 2
    assert bodies[1]["tool_choice"] == {"type": "tool", "name": "submit"}


FABLE_5 = "anthropic/claude-fable-5"
CLAUDE5.append(
    Scenario(
        "claude_fable5_forced_submit_is_named",
        "anthropic",
        [
            anthropic(calls=[("toolu_01F", "get_weather", PARIS)], model="claude-fable-5"),
            anthropic(calls=[("toolu_01S", "submit", {"answer": "Sunny, 21°C."})], model="claude-fable-5"),
        ],
        _expect_forced_taken,
        model=FABLE_5,
        agent={"finish": "submit", "max_iters": 1},
    )
)
