"""Tools and models that misbehave, under DBOS (embedded SQLite): a durable turn with a timed-out
tool, a cut result, a fallback hop and guardrails is the plain turn, each check a recorded step."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import dspy
import pytest
from dbos import DBOS

import dspy_imp
from dspy_imp import durable
from dspy_imp.testing import ScriptedLM, call, fail, reply

GATE = threading.Event()
CHECKS: list[str] = []


def stuck(query: str) -> str:
    """Search, slowly."""
    GATE.wait(30)
    return "late"


def page(url: str) -> str:
    """Fetch a page."""
    return "p" * 30


def no_secret(outputs: dict, inputs: dict) -> str | None:
    CHECKS.append(str(outputs["answer"]))
    return "it shows the secret" if "secret" in str(outputs["answer"]) else None


def no_homework(inputs: dict) -> str | None:
    return "no homework" if "solve" in inputs["question"] else None


class Judge(dspy.Module):
    """A guardrail that asks its own model (its calls are the turn's: counted and limited)."""

    def __init__(self) -> None:
        super().__init__()
        self.judge = dspy.Predict("text -> blocked: bool, reason: str")
        self.judge.set_lm(JUDGE)

    def forward(self, question: str, answer: str | None = None) -> dspy.Prediction:
        return self.judge(text=answer or question)


PASS = "[[ ## blocked ## ]]\nFalse\n\n[[ ## reason ## ]]\nfine\n\n[[ ## completed ## ]]"
JUDGE = ScriptedLM(lambda request: reply(PASS, usage=(500, 50)), model="openai/judge")
BACKUP_SCRIPT: list[Any] = []
BACKUP = ScriptedLM(lambda request: BACKUP_SCRIPT.pop(0), model="openai/backup")
PROGRAMS = {
    "misbehaving": dspy_imp.ReActV2(
        "question -> answer",
        tools=[stuck, page],
        finish="submit",
        tool_timeouts={"stuck": 0.05},
        max_result_chars=10,
        input_guardrails=[dspy_imp.Guardrail(no_homework, run="alongside")],
        output_guardrails=[dspy_imp.Guardrail(no_secret, retry=True)],
        fallback=[BACKUP],
    ),
    "judged": dspy_imp.ReActV2("question -> answer", output_guardrails=[Judge()], usage_limits={"requests": 3}),
}
AGENTS: dict[str, durable.DurableAgent] = {}


@pytest.fixture(scope="module", autouse=True)
def dbos(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    folder = tmp_path_factory.mktemp("dbos-misbehaving")
    DBOS(
        config=durable.config(
            "dspy-imp-misbehaving", system_database_url=f"sqlite:///{folder}/sys.sqlite", log_level="ERROR"
        )
    )
    AGENTS.update({name: durable.DurableAgent(program, name=name) for name, program in PROGRAMS.items()})
    DBOS.launch()
    yield
    GATE.set()
    DBOS.destroy(destroy_registry=True)


def script() -> tuple[list[Any], list[Any]]:
    primary = [
        reply(calls=[call("stuck", {"query": "a"}, id="c1"), call("page", {"url": "b"}, id="c2")]),
        fail.server_error(),  # -> the backup answers this step
        reply(calls=[call("submit", {"answer": "the answer"}, id="s2")]),
    ]
    backup = [reply(calls=[call("submit", {"answer": "the secret"}, id="s1")])]
    return primary, backup


def test_a_durable_misbehaving_turn_is_the_plain_turn(run: Any) -> None:
    turns = []
    for program in (PROGRAMS["misbehaving"], AGENTS["misbehaving"]):
        primary_script, backup_script = script()
        BACKUP_SCRIPT[:] = backup_script
        lm = ScriptedLM(primary_script, model="openai/primary")
        CHECKS.clear()
        with dspy.context(lm=lm):
            pred = run(program, question="What is it?")
        turns.append((pred, [r.messages for r in lm.requests], list(CHECKS)))
    (plain, plain_requests, plain_checks), (recorded, recorded_requests, recorded_checks) = turns
    assert recorded_requests == plain_requests
    assert recorded_checks == plain_checks == ["the secret", "the answer"]
    assert (recorded.answer, recorded.metadata.termination_reason) == ("the answer", "submit")
    assert recorded.metadata.fallbacks == plain.metadata.fallbacks
    first = recorded.metadata.history.messages[0]["tool_call_results"]
    assert [r.get("error_kind") for r in first] == ["tool_timeout", None]
    assert first[1]["shown"] == "pppppppppp[result cut: 10 of 30 characters shown]"


def test_a_durable_turn_blocked_alongside_sends_one_request(run: Any) -> None:
    lm = ScriptedLM([reply(calls=[call("page", {"url": "b"}, id="c1")])], model="openai/primary")
    with dspy.context(lm=lm):
        pred = run(AGENTS["misbehaving"], question="solve this")
    assert pred.metadata.termination_reason == "blocked"
    assert pred.metadata.guardrail == {"stage": "input", "name": "no_homework", "reason": "no homework"}
    assert len(lm.requests) == 1 and pred.metadata.history.messages == []


def test_a_durable_turn_counts_and_limits_a_module_guardrails_calls(run: Any) -> None:
    lm = ScriptedLM([reply("Here.", usage=(100, 10))], model="openai/primary")
    before = len(JUDGE.requests)
    with dspy.context(lm=lm):
        pred = run(AGENTS["judged"], question="Where?")
    assert (pred.answer, len(JUDGE.requests) - before) == ("Here.", 1)
    assert pred.metadata.usage.requests == {"step": 1, "guardrail": 1}
    assert (pred.metadata.usage.input_tokens, pred.metadata.usage.output_tokens) == (600, 60)

    steps = [reply(calls=[call("submit", {"answer": "x"}, id="s0")])]  # no such tool: one more step
    lm = ScriptedLM([*steps * 2, reply("Here.")], model="openai/primary")
    with dspy.context(lm=lm):
        pred = run(AGENTS["judged"], question="Where?")
    assert len(JUDGE.requests) - before == 1  # the three requests reached the limit: the judge was not asked
    assert (pred.metadata.termination_cause, pred.answer) == ("usage_limit_exceeded", None)
