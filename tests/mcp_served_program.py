"""Programs served as MCP servers by tests/test_mcp_serving.py (``python -m dspy_imp.mcp serve
tests.mcp_served_program:program``), each on a scripted model set here, as a served module must.

The script reads the question: ``"refund ..."`` calls ``refund`` (it needs approval), ``"wait ..."``
calls ``wait`` (it blocks until the test releases it, or is cancelled), anything else submits
``answer`` (the question repeated ``times`` times) and ``length``.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import dspy

import dspy_imp
from dspy_imp.testing import ScriptedLM, call, reply

events: list[str] = []
"""What the tools saw, in order (an in-process test reads it)."""
release = threading.Event()
"""Set by a test to let a blocked sync ``wait`` return."""


class Repeat(dspy.Signature):
    """Repeat the question."""

    question: str = dspy.InputField(desc="what to repeat")
    times: int = dspy.InputField(desc="how many times")
    answer: str = dspy.OutputField()
    length: int = dspy.OutputField()


def respond(request: Any) -> Any:
    user = next(m["content"] for m in request.messages if m["role"] == "user")
    question = user.split("[[ ## question ## ]]")[-1].split("[[ ##")[0].strip()
    times = int(user.split("[[ ## times ## ]]")[-1].split("[[ ##")[0].strip())
    tools = [m for m in request.messages if m["role"] == "tool"]
    if question.startswith(("refund", "wait")) and not tools:
        name = "refund" if question.startswith("refund") else "wait"
        return reply(calls=[call(name, {"amount": 5} if name == "refund" else {}, id="c1")])
    said = " ".join([question] * times) if not tools else f"{question}: {tools[-1]['content']}"
    return reply(calls=[call("submit", {"answer": said, "length": len(said)}, id="s1")])


def refund(amount: int) -> str:
    """Refund an amount."""
    events.append(f"refund {amount}")
    return f"refunded {amount}"


async def wait() -> str:
    """Wait until cancelled."""
    events.append("wait started")
    try:
        await asyncio.Event().wait()
    except asyncio.CancelledError:
        events.append("wait cancelled")
        raise
    return "never"


def wait_sync() -> str:
    """Wait until the test releases it."""
    events.append("wait started")
    release.wait()
    events.append("wait released")
    return "released"


def make(sync: bool = False) -> dspy_imp.ReActV2:
    waiter = dspy.Tool(wait_sync if sync else wait, name="wait")
    agent = dspy_imp.ReActV2(Repeat, tools=[refund, waiter], needs_approval=["refund"])
    agent.set_lm(ScriptedLM(respond))
    return agent


program = make()
sync_program = make(sync=True)
not_a_program = "a string"
no_lm = dspy_imp.ReActV2("question -> answer")
