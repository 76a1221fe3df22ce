"""Issue 23, point 8: a last-text request answered with calls only is an empty answer, ``""``.

The turn is complete, so its text output is a string; the metadata says why it is empty (the
provider's finish reason is the tool call) and lists the calls that were not run.
"""

from __future__ import annotations

import dspy

import dspy_imp
from dspy_imp.testing import ScriptedLM, call, reply


def look(where: str) -> str:
    """Look somewhere."""
    return f"nothing at {where}"


def test_a_last_text_reply_with_calls_only_is_an_empty_answer(run):
    agent = dspy_imp.ReActV2("question -> answer", tools=[look], max_iters=1)
    lm = ScriptedLM(
        [reply(calls=[call("look", {"where": "a"}, id="c1")]), reply(calls=[call("look", {"where": "b"}, id="c2")])]
    )
    with dspy.context(lm=lm):
        pred = run(agent, question="Where is it?")
    meta = pred.metadata
    assert (meta.termination_reason, meta.termination_cause) == ("last_text", "max_iters")
    assert dspy_imp.is_complete(pred) and pred.answer == ""
    assert meta.finish_reason == "tool_call"
    assert meta.unexecuted_tool_calls == ({"id": "c2", "name": "look", "args": {"where": "b"}},)
    assert [m["tool_calls"][0]["id"] for m in meta.history.messages] == ["c1"]  # the unrun call is not recorded
