"""A team is one DSPy program: sub-agents (``as_tool``) and guardrail modules are parts of it.

DSPy walks a program's attributes to find what it compiles, saves, copies and points at an LM;
the programs behind sub-agent tools and guardrail modules are found the same way, under their
names (``researcher.react``), at any depth, each once; a copy has its own children, its tools
bound to them; files saved without a part load, the part keeping its defaults.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import dspy
import pytest

import dspy_imp
from dspy_imp.testing import ScriptedLM, call, reply


def lookup(query: str) -> str:
    """Look something up."""
    return f"found {query}"


class Judge(dspy.Module):
    """An LM judge: an output guardrail that is a DSPy module."""

    def __init__(self) -> None:
        super().__init__()
        self.verdict = dspy.Predict("reply -> blocked: bool")

    def forward(self, **fields: Any) -> Any:
        return self.verdict(reply=fields["reply"])


def team(judge: bool = True, **options: Any) -> dspy_imp.ReActV2:
    """triage -> researcher -> coder, the coder also triage's own tool (one agent, two callers)."""
    coder = dspy_imp.ReActV2("task -> code", tools=[lookup])
    researcher = dspy_imp.ReActV2("question -> findings", tools=[lookup, coder.as_tool(name="coder")])
    tools = [researcher.as_tool(name="researcher"), coder.as_tool(name="code-writer")]
    guardrails = [dspy_imp.Guardrail(Judge(), name="judge")] if judge else []
    return dspy_imp.ReActV2("ticket -> reply", tools=tools, output_guardrails=guardrails, **options)


NAMES = ["react", "researcher.react", "researcher.coder.react", "judge.verdict"]


def test_every_part_is_named_once_under_a_stable_name():
    agent = team(context=dspy_imp.Context())
    assert [n for n, _ in agent.named_predictors()] == ["react", "summarizer", *NAMES[1:]]
    assert agent.researcher is agent.tools["researcher"].func.program
    assert agent.code_writer is agent.researcher.coder  # one agent, two tools: one part
    assert [n for n, _ in agent.named_sub_modules(dspy.Predict)] == [
        "self.react",
        "self.summarizer",
        "self.researcher.react",
        "self.code_writer.react",
        "self.judge.verdict",
    ]
    assert sorted(agent.dump_state()) == sorted(["react", "summarizer", *NAMES[1:]])


def test_a_wrapper_module_holding_both_agents_names_each_predictor_once():
    class Team(dspy.Module):
        def __init__(self) -> None:
            super().__init__()
            self.researcher = dspy_imp.ReActV2("question -> findings", tools=[lookup])
            self.triage = dspy_imp.ReActV2("ticket -> reply", tools=[self.researcher.as_tool(name="researcher")])

        def forward(self, **kwargs: Any) -> Any:
            return self.triage(**kwargs)

    wrapper = Team()
    assert [n for n, _ in wrapper.named_predictors()] == ["researcher.react", "triage.react"]
    copied = wrapper.deepcopy()
    assert copied.triage.researcher is copied.researcher is not wrapper.researcher


def test_set_lm_get_lm_and_map_named_predictors_reach_every_part():
    agent = team()
    lm = ScriptedLM([reply("x")])
    agent.set_lm(lm)
    assert all(p.lm is lm for _, p in agent.named_predictors())
    assert agent.get_lm() is lm
    agent.researcher.coder.react.lm = ScriptedLM([reply("y")])
    with pytest.raises(ValueError):
        agent.get_lm()  # DSPy's own check: the parts' LMs count

    def taught(predictor: dspy.Predict) -> dspy.Predict:
        twin = copy.deepcopy(predictor)
        twin.demos = [dspy.Example(reply="r", blocked=False)] if "blocked" in twin.signature.output_fields else []
        return twin

    before = dict(agent.named_predictors())
    agent.map_named_predictors(taught)
    after = dict(agent.named_predictors())
    assert list(after) == NAMES
    assert all(after[n] is not before[n] for n in NAMES)
    assert agent.judge.verdict.demos == [dspy.Example(reply="r", blocked=False)]
    assert agent.options.output_guardrails[0].check.verdict is after["judge.verdict"]


def _modules(program: dspy.Module) -> dict[int, str]:
    """Every module a copy must not share: sub-modules, predictors, tools' programs, guardrail modules."""
    found = {id(m): n for n, m in program.named_sub_modules()}
    found.update({id(p): n for n, p in program.named_predictors()})
    for name, sub in program.named_sub_modules(dspy_imp.ReActV2):
        for tool in sub.tools.values():
            if getattr(tool, "runs_agent", False):
                found[id(tool.func.program)] = f"{name}.tools[{tool.name}]"
                found[id(tool)] = f"{name}.tools[{tool.name}] (the tool)"
        for guardrail in sub.options.output_guardrails:
            found[id(guardrail.check)] = f"{name}.guardrail[{guardrail.name}]"
    return found


@pytest.mark.parametrize("how", ["copy.deepcopy", "deepcopy", "reset_copy"])
def test_a_copy_shares_no_module_at_any_depth(how):
    agent = team()
    copied = copy.deepcopy(agent) if how == "copy.deepcopy" else getattr(agent, how)()
    original, twin = _modules(agent), _modules(copied)
    # 8 modules (3 agents, the judge, 3 step predictors, the judge's predictor) and 3 tools
    assert len(original) == len(twin) == 11
    assert set(original) & set(twin) == set()
    assert copied.researcher.coder is copied.code_writer  # shared inside the copy, as in the original
    assert copied.tools["researcher"].func.program is copied.researcher


ASK = reply(calls=[call("researcher", {"question": "where is order 7?"}, id="p1")])
CHILD = [reply(calls=[call("lookup", {"query": "order 7"}, id="k1")]), reply("Order 7 is in Lyon.")]


def test_the_copys_tool_runs_the_copys_child(run):
    agent = team(judge=False)
    copied = agent.deepcopy()
    parent_lm = ScriptedLM([ASK, reply("It is in Lyon.")])
    child_lm = ScriptedLM(CHILD)
    copied.react.lm = parent_lm
    copied.researcher.set_lm(child_lm)  # the original's child has no LM: calling it would fail
    pred = run(copied, ticket="Where is my order?")
    assert pred.reply == "It is in Lyon."
    assert pred.metadata.termination_reason == "answered"
    assert len(child_lm.requests) == 2
    assert child_lm.requests[0].messages[-1] == {"role": "user", "content": "[[ ## question ## ]]\nwhere is order 7?"}
    assert child_lm.requests[1].messages[-1]["content"] == "found order 7"
    assert agent.researcher.react.lm is None


def _taught(agent: dspy_imp.ReActV2) -> None:
    for name, predictor in agent.named_predictors():
        predictor.signature = predictor.signature.with_instructions(f"Taught {name}.")
    agent.researcher.react.demos = [dspy.Example(question="q?", findings="f.")]
    agent.judge.verdict.demos = [dspy.Example(reply="r", blocked=False)]


def _lessons(agent: dspy_imp.ReActV2) -> dict[str, Any]:
    return {n: (p.signature.instructions, [dict(d.items()) for d in p.demos]) for n, p in agent.named_predictors()}


def test_save_and_load_round_trip_every_part(tmp_path):
    agent = team(context=dspy_imp.Context())
    _taught(agent)
    path = tmp_path / "team.json"
    agent.save(str(path))
    assert sorted(json.loads(path.read_text())) == sorted(["react", "summarizer", *NAMES[1:], "metadata"])
    fresh = team(context=dspy_imp.Context())
    fresh.load(str(path))
    assert _lessons(fresh) == _lessons(agent)
    assert fresh.researcher.react.demos[0]["question"] == "q?"


def test_save_program_keeps_the_team_whole(tmp_path):
    agent = team()
    _taught(agent)
    agent.save(str(tmp_path / "team"), save_program=True)
    loaded = dspy.load(str(tmp_path / "team"), allow_pickle=True)
    assert _lessons(loaded) == _lessons(agent)
    assert loaded.tools["researcher"].func.program is loaded.researcher
    assert loaded.researcher.coder is loaded.code_writer


def _stock_file(tmp_path: Any) -> Any:
    stock = dspy.ReActV2("ticket -> reply", tools=[lookup])
    stock.react.demos = [dspy.Example(ticket="t", reply="r")]
    path = tmp_path / "stock.json"
    stock.save(str(path))
    return path


def _lone_file(tmp_path: Any) -> Any:
    """A file of the program alone: what a release before parts (0.x) saved for it."""
    lone = dspy_imp.ReActV2("ticket -> reply", tools=[lookup])
    lone.react.demos = [dspy.Example(ticket="t", reply="r")]
    path = tmp_path / "lone.json"
    lone.save(str(path))
    return path


@pytest.mark.parametrize("saved", [_stock_file, _lone_file])
def test_a_file_without_the_parts_loads_and_the_parts_keep_their_defaults(tmp_path, saved):
    path = saved(tmp_path)
    assert sorted(json.loads(path.read_text())) == ["metadata", "react"]
    agent = team(context=dspy_imp.Context())
    _taught(agent)
    before = _lessons(agent)
    agent.load(str(path))
    after = _lessons(agent)
    assert after["react"][1] == [{"ticket": "t", "reply": "r"}]
    assert {n: v for n, v in after.items() if n != "react"} == {n: v for n, v in before.items() if n != "react"}


def test_a_part_name_that_hides_an_attribute_or_another_part_is_refused():
    child = dspy_imp.ReActV2("question -> findings", tools=[lookup])
    other = dspy_imp.ReActV2("question -> findings", tools=[lookup])
    with pytest.raises(dspy_imp.ConfigurationError, match="'react'"):
        dspy_imp.ReActV2("ticket -> reply", tools=[child.as_tool(name="react")])
    with pytest.raises(dspy_imp.ConfigurationError, match="'web_search'"):
        dspy_imp.ReActV2("ticket -> reply", tools=[child.as_tool(name="web-search"), other.as_tool(name="web_search")])


def test_an_input_and_an_output_guardrail_of_one_name_are_named_by_stage():
    agent = dspy_imp.ReActV2(
        "ticket -> reply",
        tools=[lookup],
        input_guardrails=[dspy_imp.Guardrail(Judge(), name="judge")],
        output_guardrails=[dspy_imp.Guardrail(Judge(), name="judge")],
    )
    assert [n for n, _ in agent.named_predictors()] == ["react", "input_judge.verdict", "output_judge.verdict"]
    same = Judge()
    shared = dspy_imp.ReActV2("ticket -> reply", input_guardrails=[same], output_guardrails=[same])
    assert [n for n, _ in shared.named_predictors()] == ["react", "Judge.verdict"]


def test_the_summarizer_keeps_no_demos_an_optimizer_gives_it_nor_a_files(tmp_path):
    trainset = [dspy.Example(ticket="t", reply="r").with_inputs("ticket")]
    agent = dspy_imp.ReActV2("ticket -> reply", tools=[lookup], context=dspy_imp.Context())
    compiled = dspy.LabeledFewShot(k=1).compile(agent, trainset=trainset)
    assert [dict(d) for d in compiled.react.demos] == [{"ticket": "t", "reply": "r"}]
    assert compiled.summarizer.demos == []
    path = tmp_path / "team.json"
    compiled.save(str(path))
    state = json.loads(path.read_text())
    assert state["summarizer"]["demos"] == [] and state["react"]["demos"] == [{"ticket": "t", "reply": "r"}]
    state["summarizer"]["demos"] = [{"ticket": "t", "next_thought": "a summary", "tool_calls": []}]
    path.write_text(json.dumps(state))
    loaded = dspy_imp.ReActV2("ticket -> reply", tools=[lookup], context=dspy_imp.Context())
    loaded.load(str(path))
    assert loaded.summarizer.demos == [] and loaded.react.demos[0]["reply"] == "r"


class Desk(dspy.Module):
    """DSPy's wrapper idiom; ``parts=False`` is the desk as an older release saved it (one agent, no policy)."""

    def __init__(self, parts: bool = True) -> None:
        super().__init__()
        if parts:
            self.triage = team(context=dspy_imp.Context())
        else:
            self.triage = dspy_imp.ReActV2("ticket -> reply", tools=[lookup])
        self.notes = dspy.Predict("ticket -> note")

    def forward(self, **kwargs: Any) -> Any:
        return self.triage(**kwargs)


def test_a_wrapper_modules_file_saved_without_the_parts_loads(tmp_path):
    old = Desk(parts=False)
    old.triage.react.demos = [dspy.Example(ticket="t", reply="r")]
    old.save(str(tmp_path / "desk.json"))
    assert sorted(json.loads((tmp_path / "desk.json").read_text())) == ["metadata", "notes", "triage.react"]
    desk = Desk()
    _taught(desk.triage)
    before = _lessons(desk.triage)
    desk.load(str(tmp_path / "desk.json"))
    after = _lessons(desk.triage)
    assert after["react"][1] == [{"ticket": "t", "reply": "r"}]
    assert {n: v for n, v in after.items() if n != "react"} == {n: v for n, v in before.items() if n != "react"}
    state = json.loads((tmp_path / "desk.json").read_text())
    del state["notes"]  # a predictor of the wrapper's own is still required
    (tmp_path / "broken.json").write_text(json.dumps(state))
    with pytest.raises(KeyError, match="notes"):
        Desk().load(str(tmp_path / "broken.json"))
