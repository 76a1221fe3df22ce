"""Issue 23, point 10: tools run at once (``parallel_tools=True``) send their status lines when
streamed, sync tools included (their threads can reach the stream's event loop)."""

from __future__ import annotations

import dspy
from helpers import TA, Look
from streaming_helpers import statuses, stream_items

import dspy_imp
from dspy_imp.testing import ScriptedLM, call, reply


def test_parallel_sync_tools_send_their_status_lines(how):
    calls = [call("look", {"where": "a"}, id="c1"), call("look", {"where": "b"}, id="c2")]
    lm = ScriptedLM([reply(calls=calls), reply("done")])
    with dspy.context(lm=lm):
        items = stream_items(dspy_imp.ReActV2(TA, tools=[Look()], parallel_tools=True), how, [], intent="k")
    lines = statuses(items)
    assert sorted(lines[:4]) == sorted(
        ['Calling look({"where": "a"})', 'Calling look({"where": "b"})', *['look returned: {"seen": true}'] * 2]
    )
    assert lines[4:] == ["Turn ended: answered"]
