"""Issue 23, point 16: a traced turn with tool results under another adapter says, once, that
``BootstrapFinetune`` needs ``ReActAdapter`` to write the loop's requests (never silently)."""

from __future__ import annotations

import logging

import dspy
import pytest

import dspy_imp
from dspy_imp._program import module
from dspy_imp.testing import ScriptedLM, call, reply


def look(where: str) -> str:
    """Look somewhere."""
    return f"nothing at {where}"


def _traced(adapter: dspy.Adapter | None) -> None:
    agent = dspy_imp.ReActV2("question -> answer", tools=[look])
    lm = ScriptedLM([reply(calls=[call("look", {"where": "a"}, id="c1")]), reply("done")])
    with dspy.context(lm=lm, adapter=adapter, trace=[]):
        agent(question="Where?")


@pytest.fixture(autouse=True)
def _fresh() -> None:
    module._FINETUNE_NOTED.clear()


def test_a_traced_turn_under_chat_adapter_says_so_once(caplog):
    with caplog.at_level(logging.WARNING, logger="dspy_imp"):
        _traced(dspy.ChatAdapter())
        _traced(dspy.ChatAdapter())
    notes = [r for r in caplog.records if "BootstrapFinetune" in r.getMessage()]
    assert len(notes) == 1 and "ChatAdapter" in notes[0].getMessage()


def test_under_react_adapter_nothing_is_said(caplog):
    with caplog.at_level(logging.WARNING, logger="dspy_imp"):
        _traced(dspy_imp.ReActAdapter())
    assert not [r for r in caplog.records if "BootstrapFinetune" in r.getMessage()]
