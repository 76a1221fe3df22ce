"""Saved state files, fuzzed: ``agent.load_state(state)`` and ``agent.load(path)`` on files of
ours (a plain agent with options and demos, and a team with parts: sub-agents, a guardrail module,
a context policy's summarizer), of stock ``dspy.ReActV2`` and of classic ``dspy.ReAct``.

Each example is a real saved state with a few nodes replaced, deleted, inserted or nested (or, for
``load``, the file's bytes cut short). The property: ``ConfigurationError`` with the program
unchanged (the same ``dump_state``), or a loaded program that dumps its state and answers a turn;
never another exception or a hang.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import dspy
from fuzz_helpers import HOSTILE, Deep, bounded, budget, encode, mutated, realize
from hypothesis import example, given
from hypothesis import strategies as st

import dspy_imp
from dspy_imp.testing import ScriptedLM, reply


def lookup(query: str) -> str:
    """Look a thing up."""
    return "found"


class Judge(dspy.Module):
    """An output guardrail that is a DSPy module."""

    def __init__(self) -> None:
        super().__init__()
        self.verdict = dspy.Predict("reply -> blocked: bool")

    def forward(self, **fields: Any) -> Any:
        return self.verdict(reply=fields["reply"])


def plain() -> dspy_imp.ReActV2:
    return dspy_imp.ReActV2("question -> answer", tools=[lookup], max_iters=7)


def team() -> dspy_imp.ReActV2:
    researcher = dspy_imp.ReActV2("question -> findings", tools=[lookup])
    return dspy_imp.ReActV2(
        "ticket -> reply",
        tools=[researcher.as_tool(name="researcher")],
        output_guardrails=[dspy_imp.Guardrail(Judge(), name="judge")],
        context=dspy_imp.Context(window=100_000),
    )


def _ours() -> dict[str, Any]:
    agent = plain()
    agent.react.demos = [dspy.Example(question="q?", answer="a")]
    return agent.dump_state()


def _stock() -> dict[str, Any]:
    stock = dspy.ReActV2(dspy.Signature("question -> answer", "Answer in one word."), tools=[lookup])
    stock.react.demos = [dspy.Example(question="q?", answer="a")]
    return stock.dump_state()


def _classic() -> dict[str, Any]:
    classic = dspy.ReAct(dspy.Signature("question -> answer", "Answer in one word."), tools=[lookup])
    step = {"question": "s?", "trajectory": "t", "next_thought": "n", "next_tool_name": "finish", "next_tool_args": {}}
    classic.react.demos = [dspy.Example(question="q?", answer="a"), dspy.Example(**step)]
    classic.extract.predict.demos = [dspy.Example(question="e?", trajectory="t", reasoning="r", answer="b")]
    return classic.dump_state()


Builder = Callable[[], dspy_imp.ReActV2]
FILES: list[tuple[str, Builder, dict[str, Any]]] = [
    ("ours", plain, json.loads(json.dumps(_ours()))),
    ("team", team, json.loads(json.dumps(team().dump_state()))),
    ("stock", plain, json.loads(json.dumps(_stock()))),
    ("classic", plain, json.loads(json.dumps(_classic()))),
]
INPUTS = {plain: {"question": "Where?"}, team: {"ticket": "Help."}}


def answers(agent: dspy_imp.ReActV2, builder: Builder) -> None:
    """A loaded program dumps its state and answers a turn (or refuses its inputs before a request)."""
    json.dumps(agent.dump_state())
    lm = ScriptedLM([reply("Fine.")] * 3)
    with dspy.context(lm=lm):
        agent(**INPUTS[builder])


def loads_state(builder: Builder, state: Any) -> None:
    agent = builder()
    before = agent.dump_state()
    try:
        agent.load_state(state)
    except dspy_imp.ConfigurationError as refused:
        assert str(refused)
        assert agent.dump_state() == before, "a refused file changed the program"
        return
    answers(agent, builder)


CASES = st.sampled_from(FILES).flatmap(lambda f: st.tuples(st.just(f[0]), st.just(f[1]), mutated(f[2])))


def edited(index: int, change: Callable[[dict[str, Any]], Any]) -> tuple[str, Builder, dict[str, Any]]:
    name, builder, state = FILES[index]
    state = json.loads(json.dumps(state))
    change(state)
    return name, builder, state


@budget(40)
@given(CASES)
@example(("ours", plain, {}))  # KeyError: 'react'
@example(("ours", plain, {"react": []}))  # AttributeError: 'list' object has no attribute 'get'
@example(edited(0, lambda s: s["react"]["dspy_imp"].update(max_iters=Deep(1200, "dict"))))  # RecursionError (repr)
@example(edited(0, lambda s: s["react"]["demos"][0].update(question=Deep(5000, "list"))))  # RecursionError
@example(edited(2, lambda s: s["react"]["signature"].update(instructions=Deep(5000, "dict"))))  # RecursionError
@example(edited(3, lambda s: s["react"]["signature"]["fields"][0].update(prefix={"a": 1})))  # unhashable (migration)
@example(edited(1, lambda s: s.update({"judge.verdict": [{"a": 1}]})))  # unhashable (DSPy's Predict)
@example(edited(1, lambda s: s["judge.verdict"].update(lm={"model": {"a": 1}})))  # unhashable (DSPy's Predict)
@example(edited(0, lambda s: s["react"]["demos"][0].update(question="caf\udce9")))  # every turn a StepError
@example(edited(3, lambda s: s["extract.predict"]["demos"][0].update(question=[None])))  # every turn a StepError
@example(edited(3, lambda s: s["extract.predict"].update(demos=True)))  # TypeError: 'bool' object is not iterable
@example(edited(3, lambda s: s["react"].update(demos=5)))  # TypeError (migration)
def test_a_saved_state_is_refused_unchanged_or_loads_and_answers(case: tuple[str, Builder, Any]) -> None:
    _, builder, state = case
    bounded(lambda: loads_state(builder, realize(state)))


def loads_file(builder: Builder, data: bytes) -> None:
    agent = builder()
    before = agent.dump_state()
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "agent.json"
        path.write_bytes(data)
        try:
            agent.load(str(path))
        except dspy_imp.ConfigurationError as refused:
            assert str(refused)
            assert agent.dump_state() == before, "a refused file changed the program"
            return
    answers(agent, builder)


def saved_file(state: dict[str, Any]) -> bytes:
    """The bytes ``save`` writes for ``state`` (with DSPy's ``metadata`` block)."""
    agent = plain()
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "agent.json"
        agent.save(str(path))
        metadata = json.loads(path.read_bytes())["metadata"]
    return json.dumps({**state, "metadata": metadata}).encode()


SAVED = saved_file(FILES[0][2])
FILE_BYTES = st.one_of(
    st.integers(0, len(SAVED)).map(lambda cut: SAVED[:cut]),
    mutated(json.loads(SAVED)).map(encode),
    HOSTILE.map(encode),
)


@budget(30)
@given(FILE_BYTES)
@example(SAVED[:100])  # orjson.JSONDecodeError
@example(b"null")  # TypeError: 'NoneType' object is not subscriptable
@example(b'{"react": {}}')  # KeyError: 'metadata'
@example(SAVED.replace(b'"dependency_versions": {', b'"dependency_versions": {"left-pad": "1", '))  # KeyError
@example(SAVED.replace(b'"dependency_versions": {', b'"dependency_versions": [["dspy", "1"]], "x": {'))  # no .items
def test_a_saved_file_is_refused_unchanged_or_loads_and_answers(data: bytes) -> None:
    bounded(lambda: loads_file(plain, data))
