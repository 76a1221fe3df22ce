"""A tiny world for teaching a team: triage calls a researcher (``as_tool``), who looks.

The task: ``ticket -> reply`` ("what is on the desk?" -> "a pen"). Triage's only tool is the
researcher (``question -> findings``), whose only tool is ``look(where)``. The scripted model
answers right only when BOTH agents were taught:

- an untaught triage replies "I don't know" at once (it never asks the researcher);
- an untaught researcher answers "I don't know" at once (it never looks), and triage passes on
  what the researcher found.

An agent is taught as in ``teaching``: the instruction ``LESSON`` in its system message, or a demo
before the live turn showing its own tool's native call with its tool message (triage's
``researcher`` call, the researcher's ``look`` call), or a labeled demo answered with what is
really there. A ticket that says "(look first)" teaches both for that example (the question triage
passes on carries it), so bootstrapping has traces of both agents to keep.
"""

from __future__ import annotations

import re
from typing import Any

import dspy
import teaching
from teaching import LESSON, PLACES

import dspy_imp
from dspy_imp.testing import RecordedRequest, ScriptedLM, call, reply

_QUESTION = re.compile(r"what is on the (\w+)\?")
_FIELD = re.compile(r"\[\[ ## (ticket|question) ## \]\]\n(.*)", re.DOTALL)
TOOL_OF = {"ticket": "researcher", "question": "look"}


def look(where: str) -> str:
    """Tell what is at a place."""
    return PLACES.get(where, "nothing")


class Research(dspy.Signature):
    """Find out what the room holds."""

    question: str = dspy.InputField()
    findings: str = dspy.OutputField()


class Triage(dspy.Signature):
    """Reply to the ticket about the room."""

    ticket: str = dspy.InputField()
    reply: str = dspy.OutputField()


def researcher() -> dspy_imp.ReActV2:
    return dspy_imp.ReActV2(Research, tools=[look])


def team(**options: Any) -> dspy_imp.ReActV2:
    """Triage with its researcher: one program, two agents."""
    return dspy_imp.ReActV2(Triage, tools=[researcher().as_tool(name="researcher")], **options)


class Team(dspy.Module):
    """DSPy's own idiom: a wrapper module holding both agents as attributes."""

    def __init__(self) -> None:
        super().__init__()
        self.researcher = researcher()
        self.triage = dspy_imp.ReActV2(Triage, tools=[self.researcher.as_tool(name="researcher")])

    def forward(self, ticket: str) -> Any:
        return self.triage(ticket=ticket)

    async def aforward(self, ticket: str) -> Any:
        return await self.triage.acall(ticket=ticket)


def example(where: str, hint: bool = False) -> dspy.Example:
    return teaching.example(where, hint, asked="ticket", answered="reply")


TRAINSET = [example("shelf", hint=True), example("box", hint=True), example("bag"), example("sink")]
DEVSET = [example("desk"), example("drawer")]
metric, feedback_metric = teaching.scored("reply")


def _field(message: dict[str, Any]) -> tuple[str, str] | None:
    if message["role"] != "user" or not isinstance(message.get("content"), str):
        return None
    match = _FIELD.match(message["content"])
    return (match.group(1), match.group(2).strip()) if match else None


def _taught(messages: list[dict[str, Any]], live: int, tool: str) -> bool:
    if LESSON in (messages[0].get("content") or ""):
        return True
    examples = messages[1:live]
    for index, message in enumerate(examples):
        if message["role"] != "assistant":
            continue
        calls = message.get("tool_calls") or []
        made = [c["id"] for c in calls if c["function"]["name"] == tool]
        answered = [m.get("tool_call_id") for m in examples[index + 1 :] if m["role"] == "tool"]
        if made and set(made) <= set(answered):
            return True
        asked = _field(examples[index - 1]) if index else None
        where = _QUESTION.match(asked[1] if asked else "")
        if not calls and where and message.get("content") == PLACES.get(where.group(1)):
            return True
    return False


def _task_reply(request: RecordedRequest) -> Any:
    messages = request.messages
    live = max(i for i, m in enumerate(messages) if _field(m) is not None)
    kind, text = _field(messages[live]) or ("ticket", "")
    if messages[-1]["role"] == "tool":
        return reply(messages[-1]["content"])
    where = _QUESTION.match(text)
    tool = TOOL_OF[kind]
    if where and ("(look first)" in text or _taught(messages, live, tool)):
        args = {"question": text} if tool == "researcher" else {"where": where.group(1)}
        return reply(calls=[call(tool, args)])
    return reply("I don't know")


def task_lm() -> ScriptedLM:
    return ScriptedLM(_task_reply)


def score(program: dspy.Module, devset: list[dspy.Example] = DEVSET) -> float:
    evaluate = dspy.Evaluate(devset=devset, metric=metric, num_threads=1, display_progress=False)
    return float(evaluate(program).score)


async def ascore(program: dspy.Module, devset: list[dspy.Example] = DEVSET) -> float:
    scores = [metric(ex, await program.acall(**ex.inputs())) for ex in devset]
    return 100.0 * sum(scores) / len(scores)
