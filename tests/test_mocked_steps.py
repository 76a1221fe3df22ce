"""Issue 23, point 15: a test that mocks the steps mocks the extraction too, with no LM at all."""

from __future__ import annotations

import asyncio
from unittest import mock

import dspy
from helpers import SubmitSig

import dspy_imp


def test_mocking_react_and_the_extractor_sends_no_request():
    agent = dspy_imp.ReActV2(SubmitSig, tools=[])
    thinking = dspy.Prediction(next_thought="thinking", tool_calls=dspy.ToolCalls(tool_calls=[]))
    extracted = dspy.Prediction(reasoning="r", answer="a cat", confidence=0.5)
    with (
        mock.patch.object(agent.react, "forward", return_value=thinking),
        mock.patch.object(dspy_imp.ReActV2.Extractor, "forward", return_value=extracted),
    ):
        pred = agent(intent="what?")  # no LM is configured: any real request would fail
    assert (pred.answer, pred.metadata.termination_reason) == ("a cat", "extracted")


def test_mocking_aforward_works_the_same_for_acall():
    agent = dspy_imp.ReActV2(SubmitSig, tools=[])
    thinking = dspy.Prediction(next_thought="thinking", tool_calls=dspy.ToolCalls(tool_calls=[]))
    extracted = dspy.Prediction(reasoning="r", answer="a cat", confidence=0.5)
    with (
        mock.patch.object(agent.react, "aforward", return_value=thinking),
        mock.patch.object(dspy_imp.ReActV2.Extractor, "aforward", return_value=extracted),
    ):
        pred = asyncio.run(agent.acall(intent="what?"))
    assert (pred.answer, pred.metadata.termination_reason) == ("a cat", "extracted")


def test_the_extractor_class_is_not_a_predictor():
    assert [name for name, _ in dspy_imp.ReActV2("q -> a").named_predictors()] == ["react"]
