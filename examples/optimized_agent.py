"""An agent compiled with an optimizer, saved, and reloaded.

`dspy.BootstrapFewShot` runs the agent with a stronger *teacher* model on a few training
examples, keeps the steps of the turns that scored, and puts them on the step predictor
(`agent.react.demos`). The cheaper *student* model then sees those worked examples in every
request. `save`/`load` carry the demos and the agent's options to a fresh program.

Offline, the student is a scripted model that uses the conversion tool correctly only when its
prompt shows a worked example (as a small model imitating a demo would); without one, it guesses.

    python examples/optimized_agent.py          # offline, scripted teacher and student
    python examples/optimized_agent.py --live   # DSPY_IMP_MODEL as both teacher and student
"""

from __future__ import annotations

import logging
import re
import tempfile
from pathlib import Path

import dspy
from _shared import choose_model

import dspy_imp
from dspy_imp.testing import RecordedRequest, ScriptedLM, call, reply

FACTORS = {("km", "m"): 1000, ("m", "cm"): 100, ("kg", "g"): 1000, ("h", "min"): 60}


def convert(value: float, from_unit: str, to_unit: str) -> str:
    """Convert a value between units (km, m, cm, kg, g, h, min)."""
    factor = FACTORS.get((from_unit, to_unit))
    return f"{value * factor:g} {to_unit}" if factor else f"cannot convert {from_unit} to {to_unit}"


def make_agent() -> dspy_imp.ReActV2:
    return dspy_imp.ReActV2("question -> answer", tools=[convert], max_iters=3)


def _question(request: RecordedRequest) -> str:
    return [m["content"] for m in request.messages if m["role"] == "user"][-1]


def _convert_or_answer(request: RecordedRequest) -> object:
    if request.messages[-1]["role"] == "tool":
        return reply(request.messages[-1]["content"])
    value, source, target = re.search(r"(\d+(?:\.\d+)?) (\w+) (?:to|in) (\w+)", _question(request)).groups()
    return reply(calls=[call("convert", {"value": float(value), "from_unit": source, "to_unit": target})])


def teacher(request: RecordedRequest) -> object:
    """A strong model: always converts with the tool."""
    return _convert_or_answer(request)


def student(request: RecordedRequest) -> object:
    """A small model: uses the tool the right way only after seeing it done in a worked example."""
    shown_an_example = len(request.messages) > 2  # anything between the system message and the question
    if shown_an_example or request.messages[-1]["role"] == "tool":
        return _convert_or_answer(request)
    return reply("About a thousand.")


def exact(example: dspy.Example, pred: dspy.Prediction, trace: object = None) -> bool:
    return pred.answer == example.answer


TRAIN = [
    dspy.Example(question="What is 3 km in m?", answer="3000 m"),
    dspy.Example(question="Convert 2 kg to g", answer="2000 g"),
]
DEV = [
    dspy.Example(question="What is 5 m in cm?", answer="500 cm"),
    dspy.Example(question="Convert 2 h to min", answer="120 min"),
    dspy.Example(question="What is 1.5 km in m?", answer="1500 m"),
]


def score(program: dspy.Module, lm: dspy.LM) -> float:
    evaluate = dspy.Evaluate(
        devset=[x.with_inputs("question") for x in DEV], metric=exact, num_threads=1, display_progress=False
    )
    with dspy.context(lm=lm):
        return evaluate(program).score


def main() -> None:
    logging.getLogger("dspy").setLevel(logging.WARNING)
    student_lm, live = choose_model(__doc__, student)
    teacher_lm = student_lm if live else ScriptedLM(teacher)

    agent = make_agent()
    print(f"before compiling: dev score {score(agent, student_lm):.0f}%")

    optimizer = dspy.BootstrapFewShot(
        metric=exact, max_bootstrapped_demos=4, max_labeled_demos=0, teacher_settings={"lm": teacher_lm}
    )
    with dspy.context(lm=student_lm):
        compiled = optimizer.compile(agent, trainset=[x.with_inputs("question") for x in TRAIN])
    print(f"the optimizer put {len(compiled.react.demos)} demo(s) on agent.react")
    print(f"after compiling:  dev score {score(compiled, student_lm):.0f}%")

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "agent.json"
        compiled.save(path)
        reloaded = make_agent()
        reloaded.load(path)
    print(f"saved and reloaded: dev score {score(reloaded, student_lm):.0f}%")


if __name__ == "__main__":
    main()
