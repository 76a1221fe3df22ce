"""A tiny world for optimizer tests: a scripted model that does the task right only when taught.

The task: ``intent -> answer`` ("what is on the desk?" -> "a pen"), with a ``look(where)`` tool
that tells what is somewhere. The scripted model answers "I don't know" at once unless its
prompt teaches it to look first, which it does when

- the system message carries the instruction ``LESSON`` (what an instruction optimizer should
  propose; the scripted prompt/reflection model proposes it), or
- an example before the live turn shows a native ``look`` call with its tool message (a
  bootstrapped demo, in the live tool-call format), or a question answered with what is really
  there (a labeled demo), or
- the question itself says "(look first)" (the training examples that let the teacher succeed,
  so bootstrapping has traces to keep).

Shown a demo in any other shape (calls written as text, a step without its context), it
stays untaught: the demo did not reach the prompt in a form it can learn from.
"""

from __future__ import annotations

import json
import re
from typing import Any

import dspy

import dspy_imp
from dspy_imp.testing import RecordedRequest, ScriptedLM, call, reply

LESSON = "Look before you answer."
PLACES = {"shelf": "a cat", "desk": "a pen", "box": "a key", "bag": "a map", "drawer": "a cup", "sink": "a mug"}
_QUESTION = re.compile(r"what is on the (\w+)\?")


def look(where: str) -> str:
    """Tell what is at a place."""
    return PLACES.get(where, "nothing")


class Ask(dspy.Signature):
    """Answer the question about the room."""

    intent: str = dspy.InputField()
    answer: str = dspy.OutputField()


def agent() -> dspy_imp.ReActV2:
    return dspy_imp.ReActV2(Ask, tools=[look])


def example(where: str, hint: bool = False, asked: str = "intent", answered: str = "answer") -> dspy.Example:
    """The question about ``where`` (with a hint to look first) under input ``asked``, its answer
    under output ``answered`` (the team's program names them ``ticket`` and ``reply``)."""
    text = f"what is on the {where}?" + (" (look first)" if hint else "")
    return dspy.Example(**{asked: text, answered: PLACES[where]}).with_inputs(asked)


def scored(answered: str = "answer") -> tuple[Any, Any]:
    """The exact-match metric on output ``answered``, and GEPA's: the score with words on what went wrong."""

    def metric(gold: dspy.Example, pred: dspy.Prediction, trace: Any = None, *args: Any) -> float:
        return float(getattr(pred, answered) == getattr(gold, answered))

    def feedback_metric(gold: dspy.Example, pred: dspy.Prediction, trace: Any = None, *args: Any) -> dspy.Prediction:
        score = metric(gold, pred)
        expected = getattr(gold, answered)
        return dspy.Prediction(score=score, feedback="Right." if score else f"Wrong: expected {expected!r}.")

    return metric, feedback_metric


TRAINSET = [example("shelf", hint=True), example("box", hint=True), example("bag"), example("sink")]
DEVSET = [example("desk"), example("drawer")]
metric, feedback_metric = scored()


# -- the task model ---------------------------------------------------------------------------------


def _intent(message: dict[str, Any]) -> str | None:
    if message["role"] != "user" or not isinstance(message.get("content"), str):
        return None
    match = re.match(r"\[\[ ## intent ## \]\]\n(.*)", message["content"], re.DOTALL)
    return match.group(1).strip() if match else None


def _taught(messages: list[dict[str, Any]], live: int) -> bool:
    if LESSON in (messages[0].get("content") or ""):
        return True
    examples = messages[1:live]
    for index, message in enumerate(examples):
        if message["role"] != "assistant":
            continue
        calls = message.get("tool_calls") or []
        looked = [c["id"] for c in calls if c["function"]["name"] == "look"]
        answered = [m.get("tool_call_id") for m in examples[index + 1 :] if m["role"] == "tool"]
        if looked and set(looked) <= set(answered):
            return True
        asked = _intent(examples[index - 1]) if index else None
        where = _QUESTION.match(asked or "")
        if not calls and where and message.get("content") == PLACES.get(where.group(1)):
            return True
    return False


def _task_reply(request: RecordedRequest) -> Any:
    messages = request.messages
    live = max(i for i, m in enumerate(messages) if _intent(m) is not None)
    intent = _intent(messages[live]) or ""
    if messages[-1]["role"] == "tool":
        return reply(messages[-1]["content"])
    where = _QUESTION.match(intent)
    if where and ("(look first)" in intent or _taught(messages, live)):
        return reply(calls=[call("look", {"where": where.group(1)})])
    return reply("I don't know")


# -- the prompt / reflection model ----------------------------------------------------------------


def _output_fields(system: str) -> list[str]:
    section = system.split("Your output fields are:", 1)[-1].split("All interactions", 1)[0]
    return re.findall(r"^\d+\. `(\w+)`", section, re.MULTILINE)


def _proposal(name: str) -> Any:
    if "advice" in name:
        return {"react": LESSON}
    if "prefix" in name:
        return "Answer:"
    if "instruction" in name:
        return LESSON
    return "A question about what is somewhere in a room."


def _prompt_reply(request: RecordedRequest) -> Any:
    """Answers any DSPy program's request (Chat or JSON format) with the lesson in every field."""
    system = request.messages[0]["content"] if request.messages[0]["role"] == "system" else ""
    names = _output_fields(system)
    if not names:  # GEPA's reflection prompt: a plain text request for the new instruction
        return reply(f"```\n{LESSON}\n```")
    if "JSON" in request.messages[-1]["content"]:
        return reply(json.dumps({name: _proposal(name) for name in names}))
    body = "\n\n".join(
        f"[[ ## {n} ## ]]\n{json.dumps(v) if isinstance(v, dict) else v}"
        for n, v in ((name, _proposal(name)) for name in names)
    )
    return reply(f"{body}\n\n[[ ## completed ## ]]")


def task_lm() -> ScriptedLM:
    return ScriptedLM(_task_reply)


def prompt_lm() -> ScriptedLM:
    return ScriptedLM(_prompt_reply, model="openai/prompt")


def mipro_light(metric: Any, program: dspy.Module, trainset: list[dspy.Example], valset: list[dspy.Example]) -> Any:
    """MIPROv2 at its lightest (one bootstrapped demo, no proposer extras), compiled on ``program``."""
    optimizer = dspy.MIPROv2(
        metric=metric,
        prompt_model=prompt_lm(),
        auto="light",
        num_threads=1,
        max_bootstrapped_demos=1,
        max_labeled_demos=0,
        verbose=False,
    )
    return optimizer.compile(
        program,
        trainset=trainset,
        valset=valset,
        program_aware_proposer=False,
        data_aware_proposer=False,
        tip_aware_proposer=False,
        fewshot_aware_proposer=False,
    )


def score(program: dspy.Module, devset: list[dspy.Example] = DEVSET) -> float:
    evaluate = dspy.Evaluate(devset=devset, metric=metric, num_threads=1, display_progress=False)
    return float(evaluate(program).score)
