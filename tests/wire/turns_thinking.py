"""Claude Sonnet 4.5's thinking settings: the same request on both engines, per ``thinking=`` mode.

DSPy's native engine and LiteLLM read ``reasoning_effort="low"`` into different Anthropic requests
(``budget_tokens`` 2048 / ``max_tokens`` 18432 natively, 1024 / 5120 through LiteLLM); the loop
sends the native engine's on both (``dspy_imp._routes.thinking``). Each scenario runs on both
engines and asserts the exact thinking settings of every request, so the two agree.
"""

from __future__ import annotations

from responses import anthropic, thinking
from turns import PARIS, Body, Outcome, Scenario

INTERLEAVED = "interleaved-thinking-2025-05-14"
DEFAULT_THINKING = {"type": "enabled", "budget_tokens": 2048}
_SETTINGS = ("thinking", "max_tokens", "reasoning_effort", "output_config", "temperature")


def _settings(body: Body) -> dict[str, object]:
    return {k: body[k] for k in _SETTINGS if k in body}


def _script() -> list:
    return [
        anthropic([thinking("Weather first.", "EqQBCkYIBxgCKkDdefault")], calls=[("toolu_01D", "get_weather", PARIS)]),
        anthropic(calls=[("toolu_01T", "get_time", PARIS)]),  # no thinking: Claude thinks once per turn
        anthropic(calls=[("toolu_01E", "submit", {"answer": "Sunny, 21°C."})]),
    ]


def _expect(step: dict[str, object], forced: dict[str, object]):
    def expect(bodies: list[Body], outcome: Outcome) -> None:
        assert outcome.error is None, outcome.error
        assert outcome.prediction.answer == "Sunny, 21°C."
        assert outcome.prediction.metadata.termination_reason == "forced_submit"
        assert len(bodies) == 3
        assert [_settings(b) for b in bodies] == [step, step, forced]
        assert [b["tool_choice"]["type"] for b in bodies] == ["auto", "auto", "tool"]  # max_iters=2, then submit

    return expect


_AGENT = {"max_iters": 2, "finish": "submit"}  # two steps, then the forced submit
_NO_BETA = (None, None, None)
_FORCED = {"max_tokens": 16384}  # the forced submit: no thinking (Anthropic refuses it with a forced choice)

THINKING_SCENARIOS: list[Scenario] = [
    Scenario(  # the default (``thinking="every"``, DSPy's ``reasoning_effort="low"``)
        "anthropic_default_thinking_both_engines",
        "anthropic",
        _script(),
        _expect({"thinking": DEFAULT_THINKING, "max_tokens": 18432}, _FORCED),
        agent=_AGENT,
        betas=_NO_BETA,
    ),
    Scenario(  # the program's max_tokens is the visible cap on both engines, the budget on top
        "anthropic_default_thinking_with_max_tokens",
        "anthropic",
        _script(),
        _expect({"thinking": DEFAULT_THINKING, "max_tokens": 2048 + 4000}, {"max_tokens": 4000}),
        lm={"max_tokens": 4000},
        agent=_AGENT,
        betas=_NO_BETA,
    ),
    Scenario(  # "first" on Claude: one thinking configuration per assistant turn, so the same as "every"
        "anthropic_thinking_first",
        "anthropic",
        _script(),
        _expect({"thinking": DEFAULT_THINKING, "max_tokens": 18432}, _FORCED),
        agent={**_AGENT, "thinking": "first"},
        betas=_NO_BETA,
    ),
    Scenario(
        "anthropic_thinking_off",
        "anthropic",
        [
            anthropic(calls=[("toolu_01O", "get_weather", PARIS)]),
            anthropic(calls=[("toolu_01Q", "get_time", PARIS)]),
            anthropic(calls=[("toolu_01P", "submit", {"answer": "Sunny, 21°C."})]),
        ],
        _expect({"max_tokens": 16384}, _FORCED),
        agent={**_AGENT, "thinking": "off"},
        betas=_NO_BETA,
    ),
    Scenario(  # the interleaved beta is a header: on engine="auto" the requests go through LiteLLM
        "anthropic_thinking_interleaved",
        "anthropic",
        [
            anthropic(
                [thinking("Weather first.", "EqQBCkYIBxgCKkDinter")], calls=[("toolu_01I", "get_weather", PARIS)]
            ),
            anthropic([thinking("Now the time.", "EqQBCkYIBxgCKkDinter2")], calls=[("toolu_01K", "get_time", PARIS)]),
            anthropic(calls=[("toolu_01J", "submit", {"answer": "Sunny, 21°C."})]),
        ],
        _expect({"thinking": DEFAULT_THINKING, "max_tokens": 18432}, _FORCED),
        agent={**_AGENT, "thinking": "interleaved"},
        betas=[INTERLEAVED, INTERLEAVED, None],  # the forced submit asks for no thinking: no beta
    ),
]
