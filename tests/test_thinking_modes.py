"""``thinking=``: which requests ask for thinking (``reasoning_effort``), per program.

Through the real ``dspy.LM`` path with a scripted engine that records each request's options.
The Anthropic wire requests themselves (both engines, the same settings) are in
``tests/wire/turns_thinking.py``.
"""

from __future__ import annotations

import json

import dspy
import pytest
from helpers import TA, Look

import dspy_imp
from dspy_imp.testing import ScriptedLM, call, reply


def _submit(answer: str = "found") -> object:
    return reply(calls=[call("submit", {"answer": answer})])


def _look() -> object:
    return reply(calls=[call("look", {"where": "shelf"})])


def _efforts(lm: ScriptedLM) -> list[object]:
    return [r.options.get("reasoning_effort") for r in lm.requests]


def _run(lm: ScriptedLM, **agent: object) -> dspy.Prediction:
    program = dspy_imp.ReActV2(TA, tools=[Look()], **{"finish": "submit", **agent})
    with dspy.context(lm=lm):
        return program(intent="find it")


def test_every_step_thinks_by_default_and_the_forced_submit_does_not():
    lm = ScriptedLM([_look(), _look(), _submit()], reasoning=True)
    prediction = _run(lm, max_iters=2)
    assert prediction.metadata.termination_reason == "forced_submit"
    assert _efforts(lm) == ["low", "low", None]


def test_first_thinks_on_the_turns_first_step_only_off_claude():
    lm = ScriptedLM([_look(), _look(), _submit()], reasoning=True, model="openai/o4-mini")
    _run(lm, thinking="first")
    assert _efforts(lm) == ["low", None, None]


def test_first_keeps_the_turns_settings_on_claude():
    """Anthropic: one thinking configuration per assistant turn (a tool-use loop is one)."""
    lm = ScriptedLM([_look(), _look(), _submit()], reasoning=True, model="anthropic/claude-sonnet-4-5")
    _run(lm, thinking="first")
    assert _efforts(lm) == ["low", "low", "low"]


def test_first_names_the_level_the_lm_sets():
    lm = ScriptedLM([_look(), _submit()], reasoning=True, model="openai/o4-mini", reasoning_effort="high")
    _run(lm, thinking="first")
    assert _efforts(lm) == ["high", None]


def test_off_sends_none_even_where_the_lm_sets_a_level():
    lm = ScriptedLM([_look(), _submit()], reasoning=True, reasoning_effort="high")
    _run(lm, thinking="off")
    assert _efforts(lm) == [None, None]


def test_the_extraction_request_asks_for_no_thinking():
    """It only extracts the answer: the LM's own level is not sent on it."""
    lm = ScriptedLM(
        [_look(), reply("no call"), reply("[[ ## answer ## ]]\nfound\n\n[[ ## completed ## ]]")],
        reasoning=True,
        reasoning_effort="high",
    )
    _run(lm, max_iters=1)
    assert [r.tool_choice for r in lm.requests][1:] == [{"type": "function", "function": {"name": "submit"}}, None]
    assert _efforts(lm) == ["high", None, None]  # the step, the forced submit, the extraction


def test_a_bad_mode_is_refused_naming_the_option():
    with pytest.raises(dspy_imp.ConfigurationError, match="`thinking` must be one of 'off', 'first', 'every'"):
        dspy_imp.ReActV2(TA, tools=[Look()], thinking="sometimes")


def test_the_mode_is_saved_and_loaded(tmp_path):
    path = tmp_path / "agent.json"
    dspy_imp.ReActV2(TA, tools=[Look()], thinking="off").save(path)
    assert json.loads(path.read_text())["react"]["dspy_imp"] == {"thinking": "off"}
    fresh = dspy_imp.ReActV2(TA, tools=[Look()])
    fresh.load(path)
    assert fresh.options.thinking == "off"
