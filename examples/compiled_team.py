"""One compile teaches a team: triage and the researcher it calls through `as_tool`.

A sub-agent is a part of the program that calls it: `triage.named_predictors()` holds
`researcher.react`, a copy has its own researcher, and `save`/`load` carry both agents' demos.
So `dspy.BootstrapFewShot` on triage alone runs the team with a stronger *teacher* model, keeps
the steps of both agents from the turns that scored, and puts each agent's own steps on its own
predictor. The cheaper *student* then answers right, which it can only do when both were taught.

Offline, the student is a scripted model that uses an agent's tool only when that agent's prompt
shows a worked example of it (as a small model imitating a demo would); without one, it says it
does not know. Triage that does not ask, or a researcher that does not look, both fail the task.

    python examples/compiled_team.py          # offline, scripted teacher and student
    python examples/compiled_team.py --live   # DSPY_IMP_MODEL as both teacher and student
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

STOCK = {"A-1": "3 in Lyon", "B-2": "none left", "C-3": "12 in Oslo", "D-4": "1 in Rome", "E-5": "7 in Porto"}


def warehouse(sku: str) -> str:
    """How many of an item the warehouse holds, and where."""
    return STOCK.get(sku, "unknown item")


def make_team() -> dspy_imp.ReActV2:
    researcher = dspy_imp.ReActV2("question -> findings", tools=[warehouse], max_iters=3)
    tool = researcher.as_tool(name="researcher", description="Find out about an item.")
    return dspy_imp.ReActV2("ticket -> reply", tools=[tool], max_iters=3)


def _live(request: RecordedRequest) -> tuple[str, str]:
    """Which agent asks (its input field) and about which item."""
    asked = [m["content"] for m in request.messages if m["role"] == "user" and "[[ ## " in m["content"]][-1]
    return ("triage" if "## ticket ##" in asked else "researcher"), re.search(r"[A-Z]-\d", asked).group(0)


def _use_the_tool(request: RecordedRequest) -> object:
    if request.messages[-1]["role"] == "tool":
        return reply(request.messages[-1]["content"])
    agent, sku = _live(request)
    if agent == "triage":
        return reply(calls=[call("researcher", {"question": f"How many {sku} do we hold?"})])
    return reply(calls=[call("warehouse", {"sku": sku})])


def teacher(request: RecordedRequest) -> object:
    """A strong model: each agent uses its tool."""
    return _use_the_tool(request)


def student(request: RecordedRequest) -> object:
    """A small model: an agent uses its tool only after seeing it done in a worked example."""
    shown_an_example = len(request.messages) > 2  # anything between the system message and the question
    if shown_an_example or request.messages[-1]["role"] == "tool":
        return _use_the_tool(request)
    return reply("I don't know.")


def exact(example: dspy.Example, pred: dspy.Prediction, trace: object = None) -> bool:
    return pred.reply == example.reply


def ticket(sku: str) -> dspy.Example:
    return dspy.Example(ticket=f"Do we have {sku}?", reply=STOCK[sku]).with_inputs("ticket")


TRAIN = [ticket("A-1"), ticket("B-2")]
DEV = [ticket("C-3"), ticket("D-4"), ticket("E-5")]


def score(program: dspy.Module, lm: dspy.LM) -> float:
    evaluate = dspy.Evaluate(devset=DEV, metric=exact, num_threads=1, display_progress=False)
    with dspy.context(lm=lm):
        return evaluate(program).score


def main() -> None:
    logging.getLogger("dspy").setLevel(logging.WARNING)
    student_lm, live = choose_model(__doc__, student)
    teacher_lm = student_lm if live else ScriptedLM(teacher)

    team = make_team()
    print(f"the program's predictors: {[name for name, _ in team.named_predictors()]}")
    print(f"before compiling: dev score {score(team, student_lm):.0f}%")

    optimizer = dspy.BootstrapFewShot(
        metric=exact, max_bootstrapped_demos=2, max_labeled_demos=0, teacher_settings={"lm": teacher_lm}
    )
    with dspy.context(lm=student_lm):
        compiled = optimizer.compile(team, trainset=TRAIN)
    for name, predictor in compiled.named_predictors():
        print(f"the optimizer put {len(predictor.demos)} demo(s) on {name}")
    print(f"after compiling:  dev score {score(compiled, student_lm):.0f}%")

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "team.json"
        compiled.save(path)
        reloaded = make_team()
        reloaded.load(path)
    print(f"saved and reloaded: dev score {score(reloaded, student_lm):.0f}%")


if __name__ == "__main__":
    main()
