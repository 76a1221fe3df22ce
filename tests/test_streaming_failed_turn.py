"""Issue 23, point 10: a streamed turn that fails hands the consumer every line before its error.

``dspy.streamify`` cancels the loop that feeds the consumer when the program raises, so lines
still in the stream's buffer were lost (the last tool lines and "Turn ended: error", in most runs
of an async program). The watch waits, bounded, until the consumer took them. Twenty runs each: a
lost line is a race, and the race was lost in most runs before.
"""

from __future__ import annotations

import asyncio
from typing import Any

import dspy
import pytest
from dspy.streaming import StatusMessage
from dspy.utils.exceptions import LMAuthError

import dspy_imp
from dspy_imp.testing import ScriptedLM, call, fail, reply


def look(where: str = "here") -> str:
    """Look somewhere."""
    return "nothing"


def _statuses(asynchronous_program: bool) -> list[str]:
    lm = ScriptedLM(
        [
            reply(calls=[call("look", {}, id="c1"), call("look", {}, id="c2")]),
            fail.raises(LMAuthError("Incorrect API key provided.", status=401)),
        ]
    )
    program = dspy_imp.ReActV2("question -> answer", tools=[look])
    stream = dspy.streamify(
        program,
        status_message_provider=dspy_imp.StatusMessageProvider(),
        is_async_program=asynchronous_program,
        async_streaming=True,
    )
    seen: list[Any] = []

    async def consume() -> None:
        with pytest.raises(dspy_imp.StepError):
            async for item in stream(question="Where?"):
                seen.append(item)

    with dspy.context(lm=lm):
        asyncio.run(consume())
    return [item.message for item in seen if isinstance(item, StatusMessage)]


@pytest.mark.parametrize("asynchronous_program", [True, False])
def test_every_line_of_a_failed_turn_reaches_the_consumer(asynchronous_program):
    for _ in range(20):
        statuses = _statuses(asynchronous_program)
        assert statuses[-3:] == ["Calling look({})", "look returned: nothing", "Turn ended: error (LMAuthError)"]
