"""Per-model facts: one table matched by model name, overridable; what the route does with each fact."""

from __future__ import annotations

from typing import Any

import dspy
import pytest

import dspy_imp
from dspy_imp._routes import model_facts as facts_module
from dspy_imp._routes.route import settle_options

FABLE_51 = dspy_imp.ModelFacts(refuses_forced_tool_choice=True, adaptive_only_thinking=True, binds_thinking=True)


@pytest.fixture(autouse=True)
def no_registrations(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(facts_module, "_registered", [])


@pytest.mark.parametrize(
    ("model", "expected"),
    [
        ("anthropic/claude-fable-5-1", FABLE_51),
        ("openrouter/anthropic/claude-fable-5.1", FABLE_51),  # dots and the router's prefix
        ("anthropic/claude-mythos-5-1-20260901", FABLE_51),  # a dated snapshot of 5.1
        ("bedrock/global.anthropic.claude-opus-5-5-v1:0", FABLE_51),
        ("anthropic/claude-sonnet-5-5", FABLE_51),
        ("anthropic/claude-haiku-5-5", dspy_imp.ModelFacts(binds_thinking=True)),
        ("anthropic/claude-fable-5-20260601", dspy_imp.ModelFacts()),  # Fable 5: a date, not a minor version
        ("anthropic/claude-sonnet-4-5", dspy_imp.ModelFacts()),
        ("openai/gpt-4o", dspy_imp.ModelFacts()),
    ],
)
def test_the_table_matches_the_model_name(model: str, expected: dspy_imp.ModelFacts) -> None:
    assert dspy_imp.model_facts(model) == expected
    assert dspy_imp.model_facts(dspy.LM(model, api_key="x")) == expected  # an LM: its .model


def test_a_registration_wins_over_the_table_latest_first() -> None:
    dspy_imp.register_model_facts(r"my-claude-proxy", dspy_imp.ModelFacts(refuses_forced_tool_choice=True))
    dspy_imp.register_model_facts(r"claude-fable-5-1", dspy_imp.ModelFacts())  # undo a built-in fact
    assert dspy_imp.model_facts("openai/my-claude-proxy").refuses_forced_tool_choice
    assert dspy_imp.model_facts("anthropic/claude-fable-5-1") == dspy_imp.ModelFacts()
    dspy_imp.register_model_facts(r"my-claude", dspy_imp.ModelFacts(binds_thinking=True))
    assert dspy_imp.model_facts("openai/my-claude-proxy") == dspy_imp.ModelFacts(binds_thinking=True)


@pytest.mark.parametrize(
    ("pattern", "facts", "message"),
    [
        ("", dspy_imp.ModelFacts(), "`pattern` must be a non-empty string, got ''"),
        ("x", {"binds_thinking": True}, "`facts` must be a dspy_imp.ModelFacts, got {'binds_thinking': True}"),
        ("claude-(5", dspy_imp.ModelFacts(), r"`pattern` is not a regular expression \(missing \), .*got 'claude-\(5'"),
    ],
)
def test_a_bad_registration_is_refused_naming_the_field(pattern: Any, facts: Any, message: str) -> None:
    with pytest.raises(dspy_imp.ConfigurationError, match=message):
        dspy_imp.register_model_facts(pattern, facts)
    assert facts_module._registered == []


@pytest.mark.parametrize("field", ["refuses_forced_tool_choice", "adaptive_only_thinking", "binds_thinking"])
@pytest.mark.parametrize("value", ["no", 1, None])
def test_a_fact_that_is_not_a_bool_is_refused_naming_the_field(field: str, value: Any) -> None:
    with pytest.raises(
        dspy_imp.ConfigurationError, match=rf"`ModelFacts\.{field}` must be True or False, got {value!r}"
    ):
        dspy_imp.ModelFacts(**{field: value})


def _settled(model: str, **kwargs: Any) -> tuple[dict[str, Any], Any]:
    lm_kwargs = dict(kwargs.pop("lm_kwargs", {}))
    edits = kwargs.pop("edits_prefix", False)
    lm = dspy.LM(model, api_key="x", **kwargs)
    return lm_kwargs, settle_options(lm, lm_kwargs, edits)


@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "submit"}}])
def test_a_forced_choice_becomes_auto_where_the_model_refuses_it(choice: Any) -> None:
    options, _ = _settled("anthropic/claude-fable-5-1", lm_kwargs={"tool_choice": choice})
    assert options["tool_choice"] == "auto"
    options, _ = _settled("anthropic/claude-sonnet-4-5", lm_kwargs={"tool_choice": choice})
    assert options["tool_choice"] == choice


def test_an_edited_prefix_asks_to_drop_bound_blocks_only_where_thinking_binds() -> None:
    adaptive = {"type": "adaptive"}
    options, route = _settled("anthropic/claude-fable-5-1", thinking=adaptive, edits_prefix=True)
    assert options["thinking"] == {"type": "adaptive", "block_binding": {"prefix_mismatch_behavior": "drop_block"}}
    assert route.engine == "litellm"  # lm15 cannot carry the option; LiteLLM adds the beta header
    options, _ = _settled("anthropic/claude-fable-5-1", thinking=adaptive)
    assert "thinking" not in options  # the prefix holds: nothing to ask
    options, _ = _settled("anthropic/claude-opus-5-5", edits_prefix=True)  # reasoning_effort: no thinking given
    assert options["thinking"] == {"type": "adaptive", "block_binding": {"prefix_mismatch_behavior": "drop_block"}}
    options, _ = _settled(
        "anthropic/claude-sonnet-4-5", thinking={"type": "enabled", "budget_tokens": 1024}, edits_prefix=True
    )
    assert "thinking" not in options


@pytest.mark.parametrize("kind", ["enabled", "disabled"])
def test_manual_thinking_on_an_adaptive_only_model_is_a_configuration_error(kind: str) -> None:
    with pytest.raises(dspy_imp.ConfigurationError, match=r"thinking=.*takes only adaptive thinking"):
        _settled("anthropic/claude-fable-5-1", thinking={"type": kind, "budget_tokens": 1024})
