"""Watching a team under ``dspy.streamify``: a sub-agent's fields stream, its lines name it.

A listener on a sub-agent's field (or a grandchild's) streams its chunks in the caller's stream,
whether it names the agent or follows every program; a sub-agent call's status line says what
the caller's model read, and each sub-agent's "Turn ended" line carries its path.
"""

from __future__ import annotations

import pytest
from streaming_helpers import chunks, statuses, stream_items

import dspy_imp
from dspy_imp.testing import ScriptedLM, call, reply


def lookup(query: str) -> str:
    """Look something up."""
    return f"found {query}"


def three_deep() -> tuple[dspy_imp.ReActV2, dspy_imp.ReActV2]:
    coder = dspy_imp.ReActV2("task -> code", tools=[lookup])
    researcher = dspy_imp.ReActV2("question -> findings", tools=[coder.as_tool(name="coder")])
    triage = dspy_imp.ReActV2("ticket -> reply", tools=[researcher.as_tool(name="researcher")])
    triage.react.lm = ScriptedLM(
        [reply(calls=[call("researcher", {"question": "where?"}, id="p1")]), reply("It is in Lyon.")]
    )
    researcher.react.lm = ScriptedLM([reply(calls=[call("coder", {"task": "o7"}, id="r1")]), reply("In Lyon.")])
    coder.react.lm = ScriptedLM([reply(calls=[call("lookup", {"query": "o7"}, id="c1")]), reply("print(7)")])
    return triage, coder


STATUSES = [
    'Calling researcher({"question": "where?"})',
    'Calling coder({"task": "o7"})',
    'Calling lookup({"query": "o7"})',
    "lookup returned: found o7",
    "researcher/coder: Turn ended: answered",
    "coder returned: print(7)",
    "researcher: Turn ended: answered",
    "researcher returned: In Lyon.",
    "Turn ended: answered",
]


@pytest.mark.parametrize("named", [True, False], ids=["listener names the grandchild", "listener follows all"])
def test_a_grandchilds_field_streams_in_the_grandparents_stream(how, named):
    triage, coder = three_deep()
    listener = dspy_imp.StreamListener("code", predict=coder if named else None)
    items = stream_items(triage, how, [listener], ticket="Where is order 7?")
    assert [(c.chunk, c.is_last_chunk) for c in chunks(items, "code")] == [("print(7)", False), ("", True)]
    assert statuses(items) == STATUSES
    assert items[-1].reply == "It is in Lyon."


def test_a_sub_agent_that_ends_without_an_answer_says_so(how):
    child = dspy_imp.ReActV2("question -> findings", tools=[lookup], usage_limits=dspy_imp.UsageLimits(requests=1))
    child.react.lm = ScriptedLM([reply(calls=[call("lookup", {"query": "a"}, id="c1")])])
    parent = dspy_imp.ReActV2("ticket -> reply", tools=[child.as_tool(name="researcher")])
    parent.react.lm = ScriptedLM([reply(calls=[call("researcher", {"question": "q"}, id="p1")]), reply("Sorry.")])
    items = stream_items(parent, how, [], ticket="t")
    assert statuses(items) == [
        'Calling researcher({"question": "q"})',
        'Calling lookup({"query": "a"})',
        "lookup returned: found a",
        "researcher: Turn ended: incomplete (usage_limit_exceeded)",
        "researcher ended incomplete without an answer",
        "Turn ended: answered",
    ]
