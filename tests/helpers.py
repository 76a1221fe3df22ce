"""Fixtures of the reference scenarios (behaviour.md §12) shared by the tests."""

from __future__ import annotations

import re
from typing import Any, Literal

import dspy

from dspy_imp import testing

LINE_PLAIN = "Your message above was not sent."


def submit_line(*outputs: str) -> str:
    names = [f"`{o}`" for o in outputs]
    joined = names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"
    return f"{LINE_PLAIN} To reply, call `submit` with {joined}; to keep working, call a tool."


def user(content: str) -> dict[str, Any]:
    return {"role": "user", "content": content}


def assistant(content: str = "", calls: list[tuple[str, str, str]] | None = None, **extra: Any) -> dict[str, Any]:
    """An assistant message; ``calls`` as ``(id, name, arguments_json)`` tuples.

    A calls-only message has ``content`` None, as the renderer sends it (issue 8).
    """
    message: dict[str, Any] = {"role": "assistant", "content": content if content or not calls else None}
    if calls:
        message["tool_calls"] = [
            {"id": i, "type": "function", "function": {"name": n, "arguments": a}} for i, n, a in calls
        ]
    message.update(extra)
    return message


def tool(call_id: str, content: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": content}


def inputs(**fields: Any) -> dict[str, Any]:
    return user("\n\n".join(f"[[ ## {k} ## ]]\n{v}" for k, v in fields.items()))


def moved(thought: str) -> dict[str, Any]:
    return user(f"[[ ## next_thought ## ]]\n{thought}")


class Look:
    """The reference ``look`` tool: "Look at a thing", returns {"seen": true}, counts its runs."""

    def __init__(self) -> None:
        self.runs: list[dict[str, Any]] = []
        self.__name__ = "look"
        self.__doc__ = "Look at a thing"

    def __call__(self, where: str = "here") -> dict[str, bool]:
        self.runs.append({"where": where})
        return {"seen": True}


class TA(dspy.Signature):
    """Answer the intent."""

    intent: str = dspy.InputField()
    answer: str = dspy.OutputField()


class SubmitSig(dspy.Signature):
    """Answer the intent with a confidence."""

    intent: str = dspy.InputField()
    answer: str = dspy.OutputField()
    confidence: float = dspy.OutputField()


class EnumSig(dspy.Signature):
    """Route the ticket."""

    ticket: str = dspy.InputField()
    team: Literal["atlas", "harbor"] = dspy.OutputField(desc="atlas owns money; harbor owns outages")


NAMED_SUBMIT = {"type": "function", "function": {"name": "submit"}}

ISO_UTC = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z$")


def settled(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The entries with every result's ``returned_at`` checked (ISO 8601 UTC) and dropped."""
    out = []
    for entry in entries:
        entry = dict(entry)
        if "tool_call_results" in entry:
            results = []
            for result in entry["tool_call_results"]:
                result = dict(result)
                assert ISO_UTC.match(result.pop("returned_at"))
                results.append(result)
            entry["tool_call_results"] = results
        out.append(entry)
    return out


def submit_system(*tools: str) -> str:
    """The native system message of ``SubmitSig`` (the tools are in the request's ``tools``, not in it)."""
    return "Answer the intent with a confidence.\nWhen the final answer is ready, call `submit`."


# The native system message of ``message -> reply`` under "auto" with the tools [look, send, decline].
MESSAGE_REPLY_TEXT_ANSWER_SYSTEM = {
    "role": "system",
    "content": (
        "Given the fields `message`, produce the fields `reply`.\n"
        "When the final answer is ready, reply without calling a tool: that message is `reply`."
    ),
}


class FakeClock(testing.FakeClock):
    """The time the deadline reads, moved by the test: no test depends on the machine's speed.

    The public ``dspy_imp.testing.FakeClock`` (``after``, ``advance``, retry pauses kept in
    ``slept``), installed for the whole test instead of inside ``running()``:
    ``install(monkeypatch)`` points ``dspy_imp._records.clock`` (the deadline, its time left, a
    tool's bound, the loop's retry pauses) and the durable driver's records at this clock. The one
    real wait left is a bound the driver stops waiting for (a tool that never returns), which can
    only end late, never early.
    """

    def monotonic(self) -> float:
        return self.now

    async def asleep(self, seconds: float) -> None:
        self.sleep(seconds)

    def install(self, monkeypatch: Any) -> FakeClock:
        import sys

        import dspy_imp._records.clock as clock

        monkeypatch.setattr(clock, "time", self)
        monkeypatch.setattr(clock, "asleep", self.asleep)
        if "dspy_imp._durable.driver" in sys.modules:  # only where a test imported the durable wing
            monkeypatch.setattr(sys.modules["dspy_imp._durable.driver"], "time", self)
        return self
