"""A state file saved by another loop loads as a migration with one logged report (issue 47)."""

from __future__ import annotations

import asyncio
import json
import logging

import dspy
import pytest

import dspy_imp
from dspy_imp.testing import ScriptedLM, reply

OLD_PROTOCOL = ("submit", "next_tool_name", "next_tool_args", "finish", "You are an Agent")


def lookup(query: str) -> str:
    """Look a thing up."""
    return "found"


def _stock_v2(path):
    stock = dspy.ReActV2(dspy.Signature("question -> answer", "Answer in one word."), tools=[lookup])
    stock.react.demos = [dspy.Example(question="q?", answer="a")]
    stock.save(str(path))


def _classic(path):
    classic = dspy.ReAct(dspy.Signature("question -> answer", "Answer in one word."), tools=[lookup])
    step = {"question": "s?", "trajectory": "t", "next_thought": "n", "next_tool_name": "finish", "next_tool_args": {}}
    classic.react.demos = [dspy.Example(question="q?", answer="a"), dspy.Example(**step)]
    classic.extract.predict.demos = [dspy.Example(question="e?", trajectory="t", reasoning="r", answer="b")]
    classic.save(str(path))


def _request_text(agent, asynchronous):
    lm = ScriptedLM(lambda request: reply("done"))
    with dspy.context(lm=lm):
        if asynchronous:
            asyncio.run(agent.acall(question="hi"))
        else:
            agent(question="hi")
    return json.dumps([r.messages for r in lm.requests]) + json.dumps([r.tool_names for r in lm.requests])


@pytest.mark.parametrize("asynchronous", [False, True])
@pytest.mark.parametrize("save", [_stock_v2, _classic])
def test_a_file_of_another_loop_is_migrated_and_reported_once(tmp_path, caplog, save, asynchronous):
    path = tmp_path / "old.json"
    save(path)
    agent = dspy_imp.ReActV2("question -> answer", tools=[lookup])
    with caplog.at_level(logging.WARNING, logger="dspy_imp"):
        agent.load(str(path))
    reports = [r for r in caplog.records if "migrated" in r.getMessage()]
    assert len(reports) == 1 and "dropped" in reports[0].getMessage()
    assert agent.react.signature.instructions == "Answer in one word."
    assert dict(agent.react.demos[0]) == {"question": "q?", "answer": "a"}
    text = _request_text(agent, asynchronous)
    assert "Answer in one word." in text
    for words in OLD_PROTOCOL:
        assert words not in text


def test_the_classic_extractors_demos_become_labeled_demos(tmp_path):
    path = tmp_path / "old.json"
    _classic(path)
    agent = dspy_imp.ReActV2("question -> answer", tools=[lookup])
    agent.load(str(path))
    assert [dict(d) for d in agent.react.demos] == [
        {"question": "q?", "answer": "a"},
        {"question": "e?", "answer": "b"},
    ]


def test_instructions_still_naming_the_old_protocol_are_refused(tmp_path):
    path = tmp_path / "old.json"
    _stock_v2(path)
    state = json.loads(path.read_text())
    state["react"]["signature"]["instructions"] += "\nAlways call `submit` last."
    path.write_text(json.dumps(state))
    agent = dspy_imp.ReActV2("question -> answer", tools=[lookup])
    before = agent.dump_state()
    with pytest.raises(dspy_imp.ConfigurationError, match="Edit them in the file"):
        agent.load(str(path))
    assert agent.dump_state() == before


def test_our_own_file_is_no_migration(tmp_path, caplog):
    path = tmp_path / "ours.json"
    dspy_imp.ReActV2("question -> answer", tools=[lookup]).save(str(path))
    with caplog.at_level(logging.WARNING, logger="dspy_imp"):
        dspy_imp.ReActV2("question -> answer", tools=[lookup]).load(str(path))
    assert not caplog.records


def test_a_file_naming_a_part_the_program_lacks_is_refused(tmp_path):
    child = dspy_imp.ReActV2("question -> findings", tools=[lookup])
    path = tmp_path / "team.json"
    dspy_imp.ReActV2("ticket -> reply", tools=[child.as_tool(name="researcher")]).save(str(path))
    renamed = dspy_imp.ReActV2("ticket -> reply", tools=[child.deepcopy().as_tool(name="scout")])
    with pytest.raises(dspy_imp.ConfigurationError, match=r"'researcher.react'.*\['scout'\]"):
        renamed.load(str(path))
