"""Each metric of dspy_imp.evals as a ``dspy.Evaluate`` metric and as GEPA's feedback metric in a real run.

On ``teaching``'s tiny world (the scripted model looks before it answers only when taught), every
metric scores the untaught agent under ``dspy.Evaluate``; then a real ``dspy.GEPA`` compile asks it
for feedback, and that feedback is in the reflection model's prompt, word for word. The metrics
the lesson satisfies score the compiled agent higher.
"""

from __future__ import annotations

import re
from typing import Any

import dspy
import pytest
import teaching
from teaching import TRAINSET, agent, prompt_lm, task_lm

from dspy_imp import evals
from dspy_imp.testing import RecordedRequest, ScriptedLM, reply


def _looked(example: dspy.Example) -> list[evals.Call]:
    where = re.match(r"what is on the (\w+)\?", example.intent)
    assert where
    return [evals.Call("look", {"where": where.group(1)})]


TRAJECTORY = evals.ToolTrajectory("exact", expected=_looked)
ANSWER = evals.Answer("answer")

# name: (metric, untaught dev score, a line of its feedback on an untaught turn, taught by GEPA)
METRICS: dict[str, tuple[evals.Metric, float, str, bool]] = {
    "trajectory": (TRAJECTORY, 0.0, "The tool calls did not match the expected ones (exact).", True),
    "answer": (ANSWER, 0.0, "`answer` was \"I don't know\", expected '", True),
    "ended": (
        evals.Ended("submit"),
        0.0,
        "The turn ended `answered` after 1 request; expected it to end with `submit`.",
        False,
    ),
    "budget": (evals.Budget(requests=0), 0.0, "Over budget: the turn used 1 request (budget 0, over).", False),
    "weighted": (
        evals.Weighted({TRAJECTORY: 1, ANSWER: 1}),
        0.0,
        '[answer.answer 0.00] `answer` was "I don\'t know"',
        True,
    ),
    "all_of": (
        evals.AllOf(TRAJECTORY, evals.Ended()),
        0.0,
        "[tool_trajectory 0.00] The tool calls did not match",
        True,
    ),
    "check": (
        evals.Check(lambda ex, record: (float(bool(record.calls)), f"{len(record.calls)} tool calls"), name="looked"),
        0.0,
        "0 tool calls",
        True,
    ),
}
DEVSET = [teaching.example("desk"), teaching.example("drawer")]


def _gepa(metric: Any, program: dspy.Module, trainset: list[dspy.Example], calls: int = 12) -> tuple[Any, str]:
    """A real GEPA compile (under the context's LM, ``prompt_lm`` reflecting): the compiled program, and
    every message the reflection model read (JSON's escaped quotes undone)."""
    reflection = prompt_lm()
    optimizer = dspy.GEPA(
        metric=metric,
        reflection_lm=reflection,
        max_metric_calls=calls,
        num_threads=1,
        reflection_minibatch_size=2,
        use_merge=False,
        track_stats=False,
    )
    compiled = optimizer.compile(program, trainset=trainset, valset=trainset)
    shown = "\n".join(str(m.get("content")) for r in reflection.requests for m in r.messages)
    return compiled, shown.replace('\\"', '"')


def _score(program: dspy.Module, metric: Any) -> float:
    with dspy.context(lm=task_lm()):
        return float(dspy.Evaluate(devset=DEVSET, metric=metric, num_threads=1, display_progress=False)(program).score)


@pytest.mark.parametrize("name", list(METRICS))
def test_the_metric_in_dspy_evaluate_and_in_a_real_gepa_run(name: str) -> None:
    metric, untaught, line, taught = METRICS[name]
    assert _score(agent(), metric) == untaught
    with dspy.context(lm=task_lm()):
        compiled, shown = _gepa(metric, agent(), TRAINSET)
    assert line in shown
    if taught:
        assert teaching.LESSON in compiled.react.signature.instructions
        assert _score(compiled, metric) == 100.0


# -- a conversation program under GEPA: the conversation metrics' feedback reaches the reflection ----


def _user_reply(request: RecordedRequest) -> Any:
    seen = request.messages[-1]["content"]
    where = re.search(r"the thing on the (\w+)", seen)
    assert where
    message, done = (f"what is on the {where.group(1)}?", False) if "agent:" not in seen else ("Thanks.", True)
    return reply(f"[[ ## message ## ]]\n{message}\n\n[[ ## done ## ]]\n{done}\n\n[[ ## completed ## ]]")


def _task(where: str) -> dspy.Example:
    goal, facts = f"Find out what is on the {where}.", f"You want the thing on the {where}."
    return dspy.Example(goal=goal, facts=facts, answer=teaching.PLACES[where]).with_inputs("goal", "facts")


def _answered(example: dspy.Example, conversation: evals.Conversation) -> tuple[float, str]:
    said = conversation.last.answer if conversation.last is not None else None
    return float(said == example.answer), f"The agent said {said!r}; the user wanted {example.answer!r}."


def test_a_conversation_program_under_gepa_with_conversation_metrics() -> None:
    user = evals.SimulatedUser()
    user.set_lm(ScriptedLM(_user_reply, model="openai/user"))
    metric = evals.AllOf(evals.GoalReached(_answered), evals.TurnsTaken(1))
    trainset = [_task(w) for w in ("shelf", "box", "bag", "sink")]
    devset = [_task(w) for w in ("desk", "drawer")]

    def score(program: dspy.Module) -> float:
        with dspy.context(lm=task_lm()):
            return float(
                dspy.Evaluate(devset=devset, metric=metric, num_threads=1, display_progress=False)(program).score
            )

    assert score(evals.Conversing(agent(), user, max_turns=2)) == 0.0
    with dspy.context(lm=task_lm()):
        compiled, shown = _gepa(metric, evals.Conversing(agent(), user, max_turns=2), trainset, calls=16)
    assert "[goal_reached 0.00] The user's goal was not reached after 1 agent turn (ended `user_done`)." in shown
    assert [name for name, _ in compiled.named_predictors()] == ["agent.react"]  # the user stayed as it was
    assert teaching.LESSON in compiled.agent.react.signature.instructions
    assert score(compiled) == 100.0


# -- wall time: each request takes 1 s on the test's clock ------------------------------------------


def test_a_wall_time_budget_in_dspy_evaluate_and_in_a_real_gepa_run(fake_clock):
    def slow(request: RecordedRequest) -> Any:
        fake_clock.advance(1.0)
        return teaching._task_reply(request)

    metric = evals.Budget(seconds=1.5)
    with dspy.context(lm=ScriptedLM(slow)):
        result = dspy.Evaluate(devset=DEVSET, metric=metric, num_threads=1, display_progress=False)(agent())
        assert result.score == 100.0  # the untaught agent answers at once: one request, 1 s
        looked = dspy.Evaluate(devset=TRAINSET[:2], metric=metric, num_threads=1, display_progress=False)(agent())
        assert looked.score == 0.0  # "(look first)": a look and an answer, 2 s
        _compiled, shown = _gepa(metric, agent(), TRAINSET[:2])
    assert "Over budget: the turn took 2 s (budget 1.5 s, over)." in shown
