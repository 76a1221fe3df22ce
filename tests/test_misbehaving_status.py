"""Status messages name a timed-out tool, a fallback hop and a tripped guardrail (``dspy.streamify``)."""

from __future__ import annotations

import threading

import dspy
from helpers import TA
from streaming_helpers import statuses, stream_items

import dspy_imp
from dspy_imp.testing import ScriptedLM, call, fail, reply


def no_email(outputs: dict, inputs: dict) -> str | None:
    return "it shows an email address" if "@" in str(outputs["answer"]) else None


def test_the_status_lines_of_a_misbehaving_turn(how):
    gate = threading.Event()

    def search(query: str) -> str:
        """Search, slowly."""
        gate.wait(30)
        return "late"

    primary = ScriptedLM(
        [reply(calls=[call("search", {"query": "a"}, id="c1")]), fail.server_error()], model="openai/a"
    )
    backup = ScriptedLM([reply("Mail bob@example.com.")], model="openai/b")
    agent = dspy_imp.ReActV2(
        TA, tools=[search], tool_timeouts={"search": 0.05}, output_guardrails=[no_email], fallback=[backup]
    )

    class Releasing(dspy_imp.StatusMessageProvider):
        """Lets the abandoned tool return once its timeout is reported: it then ends while the turn's
        event loop still runs (a tool ending after ``asyncio.run`` closed its loop cannot send DSPy's
        end line, and AnyIO leaves an unawaited coroutine behind)."""

        def tool_timeout_status_message(self, *args):
            gate.set()
            return super().tool_timeout_status_message(*args)

    try:
        with dspy.context(lm=primary):
            items = stream_items(agent, how, [], intent="who?", provider=Releasing())
    finally:
        gate.set()
    lines = statuses(items)
    assert 'Calling search({"query": "a"})' in lines  # the worker the tool ran in sends DSPy's line too
    assert "search timed out after 0.05 s" in lines
    assert "Trying openai/b after LMServerError" in lines
    assert "Blocked by no_email (output guardrail): it shows an email address" in lines
    assert lines[-1] == "Turn ended: blocked"
    assert lines.index("search timed out after 0.05 s") < lines.index("Trying openai/b after LMServerError")
