"""Issue 23, point 14: a call with nothing to answer is refused before any request, and the
notebook view never raises on a value whose ``str`` or ``repr`` raises."""

from __future__ import annotations

import dspy
import pytest

import dspy_imp
from dspy_imp._watch.html import value_html
from dspy_imp.testing import ScriptedLM, reply


@pytest.mark.parametrize(
    ("signature", "inputs"),
    [("question -> answer", {"question": None}), ("question -> answer", {}), ("-> answer", {})],
)
def test_a_call_with_no_input_and_no_history_is_refused_before_any_request(run, signature, inputs):
    lm = ScriptedLM([reply("Hi.")])
    with dspy.context(lm=lm), pytest.raises(dspy_imp.ConfigurationError, match="no input and no history"):
        run(dspy_imp.ReActV2(signature), **inputs)
    assert lm.requests == []


def test_a_call_with_no_new_input_continues_a_history(run):
    agent = dspy_imp.ReActV2("question -> answer")
    lm = ScriptedLM([reply("Paris."), reply("Still Paris.")])
    with dspy.context(lm=lm):
        first = run(agent, question="Capital of France?")
        again = run(agent, history=first.metadata.history)
    assert again.answer == "Still Paris."


class Unshowable:
    def __str__(self) -> str:
        raise RuntimeError("no str")

    def __repr__(self) -> str:
        raise RuntimeError("no repr")


def test_the_view_shows_a_value_whose_str_and_repr_raise():
    assert "Unshowable that cannot be shown" in value_html(Unshowable())
    assert "Unshowable that cannot be shown" in value_html({"x": Unshowable()})


def test_a_prediction_holding_such_a_value_renders(run):
    def fetch() -> Unshowable:
        """Fetch."""
        return Unshowable()

    from dspy_imp.testing import call

    agent = dspy_imp.ReActV2("question -> answer", tools=[fetch])
    lm = ScriptedLM([reply(calls=[call("fetch", {}, id="c1")]), reply("ok")])
    with dspy.context(lm=lm):
        pred = run(agent, question="q")
    assert "<table" in pred._repr_html_()
