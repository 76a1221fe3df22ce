"""Issue 23, point 17: a tool returning ``None`` (or a bool) is shown as JSON, as stock DSPy shows it."""

from __future__ import annotations

import dspy
import pytest

import dspy_imp
from dspy_imp.testing import ScriptedLM, call, reply


@pytest.mark.parametrize(("value", "shown"), [(None, "null"), (True, "true"), (False, "false"), (3, "3")])
def test_a_scalar_result_is_shown_as_json(run, value, shown):
    def act() -> object:
        """Act."""
        return value

    agent = dspy_imp.ReActV2("question -> answer", tools=[act])
    lm = ScriptedLM([reply(calls=[call("act", {}, id="c1")]), reply("done")])
    with dspy.context(lm=lm):
        run(agent, question="q")
    assert lm.requests[1].messages[-1] == {"role": "tool", "tool_call_id": "c1", "content": shown}
