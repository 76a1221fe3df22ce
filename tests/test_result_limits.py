"""``max_result_chars``: a longer result is cut once, when it arrives; the record keeps the full value
and the shown text, so every later request (and a reloaded history) shows it the same way."""

from __future__ import annotations

import json

import dspy
import pytest
from helpers import TA

import dspy_imp
from dspy_imp.testing import ScriptedLM, call, reply

PAGE = "0123456789" * 5  # 50 characters
SHOWN = "0123456789[result cut: 10 of 50 characters shown]"


def fetch(url: str) -> str:
    """Fetch a page."""
    return PAGE


def small(url: str) -> str:
    """Fetch a small page."""
    return "tiny page that is long enough"


def tool_content(request, call_id: str) -> str:
    return next(m["content"] for m in request.messages if m.get("tool_call_id") == call_id)


def test_a_long_result_is_cut_for_the_model_and_kept_whole_in_the_record(run):
    lm = ScriptedLM(
        [
            reply(calls=[call("fetch", {"url": "a"}, id="c1")]),
            reply(calls=[call("fetch", {"url": "b"}, id="c2")]),
            reply("Two pages."),
        ]
    )
    agent = dspy_imp.ReActV2(TA, tools=[fetch], max_result_chars=10)
    with dspy.context(lm=lm):
        pred = run(agent, intent="read")
    assert tool_content(lm.requests[1], "c1") == SHOWN
    assert lm.requests[2].messages[: len(lm.requests[1].messages)] == lm.requests[1].messages  # shown the same way
    first = pred.metadata.history.messages[0]["tool_call_results"][0]
    assert (first["result"], first["shown"]) == (PAGE, SHOWN)


def test_a_reloaded_history_shows_the_cut_result_the_same_way(run):
    lm = ScriptedLM([reply(calls=[call("fetch", {"url": "a"}, id="c1")]), reply("One page."), reply("Still one.")])
    agent = dspy_imp.ReActV2(TA, tools=[fetch], max_result_chars=10)
    unlimited = dspy_imp.ReActV2(TA, tools=[fetch])  # the cut belongs to the record, not the program
    with dspy.context(lm=lm):
        pred = run(agent, intent="read")
        saved = dspy_imp.load_history(json.loads(json.dumps(dspy_imp.dump_history(pred.metadata.history))))
        run(unlimited, intent="again", history=saved)
    assert tool_content(lm.requests[2], "c1") == SHOWN


def test_limits_per_tool_and_for_every_other(run):
    lm = ScriptedLM(
        [reply(calls=[call("fetch", {"url": "a"}, id="c1"), call("small", {"url": "b"}, id="c2")]), reply("Done.")]
    )
    agent = dspy_imp.ReActV2(TA, tools=[fetch, small], max_result_chars={"fetch": 10, "*": 1000})
    with dspy.context(lm=lm):
        pred = run(agent, intent="read")
    assert tool_content(lm.requests[1], "c1") == SHOWN
    assert tool_content(lm.requests[1], "c2") == "tiny page that is long enough"
    assert "shown" not in pred.metadata.history.messages[0]["tool_call_results"][1]


def test_a_result_within_the_limit_is_recorded_as_before(run):
    lm = ScriptedLM([reply(calls=[call("fetch", {"url": "a"}, id="c1")]), reply("Done.")])
    agent = dspy_imp.ReActV2(TA, tools=[fetch], max_result_chars=50)
    with dspy.context(lm=lm):
        pred = run(agent, intent="read")
    assert tool_content(lm.requests[1], "c1") == PAGE
    assert "shown" not in pred.metadata.history.messages[0]["tool_call_results"][0]


@pytest.mark.parametrize("value", [0, -5, 2.5, {"fetch": 0}, {"nope": 10}, "10"])
def test_bad_limits_are_refused(value):
    with pytest.raises(dspy_imp.ConfigurationError, match="max_result_chars"):
        dspy_imp.ReActV2(TA, tools=[fetch], max_result_chars=value)
