"""What a call pays once, whatever its length: counted in calls, not timed (the machine's speed never matters).

A 10-step turn against pydantic-ai's spent part of its fixed cost on things only ours did: a new
signature class (a pydantic model) for the default summary predictor on every call, to read one
constant instruction; the output validators (a pydantic ``TypeAdapter`` per output) built again on
every call; and, at the end of the call, a copy of the whole history for every step's trace
entry, so that a turn of N steps copied about N²/2 entries.
"""

from __future__ import annotations

import dspy
import pytest

import dspy_imp
from dspy_imp._program import predictor
from dspy_imp._prompt import demos, signature
from dspy_imp.testing import ScriptedLM, call, reply

STEPS = 8


def look(where: str) -> str:
    """Look somewhere."""
    return f"nothing at {where}"


def _script(steps: int = STEPS) -> list:
    looks = [reply(calls=[call("look", {"where": f"place {i}"})]) for i in range(steps)]
    return [*looks, reply(calls=[call("submit", {"answer": "found", "confidence": 0.9})])]


def _counted(monkeypatch: pytest.MonkeyPatch, owner: object, name: str) -> list[int]:
    seen = [0]
    original = getattr(owner, name)

    def counting(*args: object, **kwargs: object) -> object:
        seen[0] += 1
        return original(*args, **kwargs)

    monkeypatch.setattr(owner, name, counting)
    return seen


def _run(program: dspy_imp.ReActV2, steps: int = STEPS) -> dspy.Prediction:
    with dspy.context(lm=ScriptedLM(_script(steps))):
        return program(question="Where is the thing?")


def test_a_call_builds_no_signature_class_and_its_validators_once(monkeypatch):
    class Task(dspy.Signature):
        """Find the thing."""

        question: str = dspy.InputField()
        answer: str = dspy.OutputField()
        confidence: float = dspy.OutputField()

    program = dspy_imp.ReActV2(Task, tools=[look], max_iters=STEPS + 2)
    _run(program)  # the first call may build what every later one reuses
    summaries = _counted(monkeypatch, predictor.SummaryPredictor, "__init__")
    specs = _counted(monkeypatch, signature.OutputSpec, "__init__")
    made = _counted(monkeypatch, dspy.Signature, "with_instructions")
    for _ in range(3):
        prediction = _run(program)
        assert (prediction.answer, prediction.confidence) == ("found", 0.9)
    assert (summaries[0], specs[0], made[0]) == (0, 0, 0)


def test_the_trace_copies_each_history_entry_once(monkeypatch):
    """Each traced step's ``history`` loses its results' times in a copy (demos must not depend on
    when they were made); the steps share their entries, so each is copied once, not once a step."""
    program = dspy_imp.ReActV2("question -> answer, confidence: float", tools=[look], max_iters=STEPS + 2)
    copies = _counted(monkeypatch, demos, "_timeless")
    with dspy.context(trace=[]):
        prediction = _run(program)
        trace = list(dspy.settings.trace)
    assert prediction.metadata.termination_reason == "submit"
    histories = [
        inputs["history"].messages for _, inputs, _ in trace if isinstance(inputs.get("history"), dspy.History)
    ]
    assert len(histories) == STEPS + 1
    assert copies[0] == len(histories[-1]) == STEPS  # the last step's history holds every entry before it
    for messages in histories:
        for entry in messages:
            for result in entry.get("tool_call_results") or ():
                assert "returned_at" not in result
