"""Whole turns over HTTP for OpenAI, Anthropic, Gemini and DeepSeek, on both ``dspy.LM`` engines.

- ``engine="litellm"``: replayed from ``cassettes/wire/<scenario>.yaml`` (pytest-recording; a
  missing cassette, an unmatched request or an unplayed interaction fails). ``make record``
  rewrites the cassettes from the emulator, deterministically.
- the default engine (``engine="auto"``, native lm15): its stdlib transport is invisible to
  VCR, so it talks to the same emulator on 127.0.0.1 (the transport level), which records
  the bodies. Where DSPy routes ``"auto"`` through LiteLLM (``thinking=`` in the options), the
  request goes over real HTTP to the emulator too.

Every request body goes through ``provider_rules.assert_accepted``; each scenario then asserts
what it is about (``turns_*.py``).
"""

from __future__ import annotations

import itertools
import json
import uuid
from contextlib import nullcontext
from types import SimpleNamespace
from typing import Any

import dspy
import pytest
from conftest import beta_of
from emulator import Emulator
from provider_rules import assert_accepted
from scenarios import BASE_SUFFIX, SCENARIOS, Outcome, Scenario

import dspy_imp

pytestmark = pytest.mark.block_network(allowed_hosts=[r"127\.0\.0\.1$"])

RECORD_PORT = 18089  # the emulator's port while recording (in the cassettes' URIs)


def _turn(scenario: Scenario, api_base: str, engine: str, run: Any) -> Outcome:
    options = {"num_retries": 0, **scenario.lm}
    lm = dspy.LM(scenario.model_name, api_base=api_base, api_key="sk-test", cache=False, engine=engine, **options)
    with dspy.context(lm=lm, **({"adapter": scenario.adapter} if scenario.adapter is not None else {})):
        try:
            return Outcome(prediction=run(scenario.build(), **scenario.arguments()))
        except (dspy_imp.StepError, Exception) as error:  # the scenario says whether an error is expected
            return Outcome(error=error)


def _native(scenario: Scenario, run: Any) -> tuple[Any, list[Any], list[str | None]]:
    with Emulator(scenario.script) as emulator:
        outcome = _turn(scenario, emulator.base_url + BASE_SUFFIX[(scenario.protocol, "native")], "auto", run)
    return outcome, [(r.path, r.body) for r in emulator.requests], [r.beta for r in emulator.requests]


def _fixed_call_ids(monkeypatch: pytest.MonkeyPatch) -> None:
    """LiteLLM names an id-less Gemini call ``call_<uuid4>``: counted instead, so replays match."""
    from litellm.llms.vertex_ai.gemini import vertex_and_google_ai_studio_gemini as gemini_module

    count = itertools.count(1)
    monkeypatch.setattr(gemini_module, "uuid", SimpleNamespace(uuid4=lambda: uuid.UUID(int=next(count))))


def _litellm(scenario: Scenario, run: Any, request: pytest.FixtureRequest) -> tuple[Any, list[Any], list[str | None]]:
    cassette = request.getfixturevalue("vcr")
    _fixed_call_ids(request.getfixturevalue("monkeypatch"))
    recording = request.config.getoption("--record-mode") not in ("none", None)
    base = f"http://127.0.0.1:{RECORD_PORT}" + BASE_SUFFIX[(scenario.protocol, "litellm")]
    with Emulator(scenario.script, port=RECORD_PORT) if recording else nullcontext():
        outcome = _turn(scenario, base, "litellm", run)
    if not recording:
        assert cassette.all_played, f"{scenario.name}: unplayed interactions in the cassette"
    sent = [(r.path, json.loads(r.body)) for r in cassette.requests]
    return outcome, sent, [beta_of(r) for r in cassette.requests]  # replayed: each matched the live one


# Each scenario on the engines it names (the Responses API's reasoning items go back natively only).
CASES = [
    pytest.param(
        scenario, engine, marks=[pytest.mark.vcr] if engine == "litellm" else [], id=f"{scenario.name}-{engine}"
    )
    for scenario in SCENARIOS
    for engine in ("native", "litellm")
    if engine in scenario.engines
]


@pytest.mark.parametrize(("scenario", "engine"), CASES)
def test_a_whole_turn_sends_only_requests_the_provider_accepts(
    scenario: Scenario, engine: str, run: Any, request: pytest.FixtureRequest
) -> None:
    outcome, sent, betas = _native(scenario, run) if engine == "native" else _litellm(scenario, run, request)
    for path, body in sent:
        assert_accepted(scenario.protocol, body, path)
    scenario.expect([body for _, body in sent], outcome)
    if scenario.betas is not None:
        assert betas == list(scenario.betas)
