"""Reference §12 M7: a configured JSONAdapter or XMLAdapter writes the step in its own format."""

from __future__ import annotations

import dspy
import pytest
from helpers import TA, Look, SubmitSig, inputs, tool

import dspy_imp
from dspy_imp.testing import ScriptedLM, call, reply

JSON_REQUIREMENT = "Respond with a JSON object in the following order of fields: `next_thought`."
XML_REQUIREMENT = "Respond with the corresponding output fields wrapped in XML tags `<next_thought>`."


@pytest.mark.parametrize(
    ("adapter", "requirement", "thought"),
    [
        (dspy.JSONAdapter, JSON_REQUIREMENT, '{"next_thought": "look first"}'),
        (dspy.XMLAdapter, XML_REQUIREMENT, "<next_thought>look first</next_thought>"),
    ],
)
def test_m7_a_step_ends_on_the_adapters_own_requirement(run, adapter, requirement, thought):
    lm = ScriptedLM(
        [
            reply(thought, calls=[call("look", {}, id="c1")]),
            reply(calls=[call("submit", {"answer": "cat", "confidence": 0.8}, id="s1")]),
        ]
    )
    with dspy.context(lm=lm, adapter=adapter()):
        pred = run(dspy_imp.ReActV2(SubmitSig, tools=[Look()]), intent="what?")

    first, second = (r.messages for r in lm.requests)
    user_inputs = (
        inputs(intent="what?")
        if adapter is dspy.JSONAdapter
        else {"role": "user", "content": "<intent>\nwhat?\n</intent>"}
    )
    field_marker = '"next_thought"' if adapter is dspy.JSONAdapter else "<next_thought>"
    assert field_marker in first[0]["content"]  # the system message lays out the adapter's format
    assert first[1:] == [user_inputs, {"role": "user", "content": requirement}]
    assert second[1:] == [
        user_inputs,
        {
            "role": "assistant",
            # the recorded field, re-rendered in the adapter's canonical form (the same on every request)
            "content": "<next_thought>\nlook first\n</next_thought>"
            if adapter is dspy.XMLAdapter
            else '{\n  "next_thought": "look first"\n}',
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "look", "arguments": "{}"}}],
        },
        tool("c1", '{"seen": true}'),
        {"role": "user", "content": requirement},
    ]
    assert pred.metadata.history.messages[0]["next_thought"] == "look first"
    assert (pred.answer, pred.metadata.termination_reason) == ("cat", "submit")
    assert all(r.tool_names == ["look", "submit"] and r.tool_choice == "auto" for r in lm.requests)


def test_m7_a_json_text_answer_is_read_from_its_field(run):
    lm = ScriptedLM([reply('{"answer": "It is a cat."}')])
    with dspy.context(lm=lm, adapter=dspy.JSONAdapter()):
        pred = run(dspy_imp.ReActV2(TA, tools=[Look()]), intent="what?")
    assert pred.answer == "It is a cat."
    assert lm.requests[0].messages[-1] == {
        "role": "user",
        "content": "Respond with a JSON object in the following order of fields: `answer`.",
    }


def test_m7_plain_text_under_json_is_still_the_text(run):
    lm = ScriptedLM([reply("It is a cat.")])
    with dspy.context(lm=lm, adapter=dspy.JSONAdapter()):
        pred = run(dspy_imp.ReActV2(TA, tools=[Look()]), intent="what?")
    assert (pred.answer, pred.metadata.termination_reason) == ("It is a cat.", "answered")


def test_m7_each_request_extends_the_previous_one_but_its_requirement(run):
    lm = ScriptedLM(
        [
            reply("", calls=[call("look", {}, id="c1")]),
            reply("", calls=[call("look", {}, id="c2")]),
            reply('{"answer": "two looks"}'),
        ]
    )
    with dspy.context(lm=lm, adapter=dspy.JSONAdapter()):
        run(dspy_imp.ReActV2(TA, tools=[Look()]), intent="look twice")
    r1, r2, r3 = (r.messages for r in lm.requests)
    assert r2[: len(r1) - 1] == r1[:-1] and r3[: len(r2) - 1] == r2[:-1]
    assert r1[-1] == r2[-1] == r3[-1]
    assert len(r3) == len(r2) + 2


def test_m7_unreadable_text_beside_native_calls_is_kept_as_written(run):
    lm = ScriptedLM(
        [
            reply("<next_thought>unterminated <b>", calls=[call("look", {}, id="c1")]),
            reply(calls=[call("submit", {"answer": "cat", "confidence": 0.8}, id="s1")]),
        ]
    )
    with dspy.context(lm=lm, adapter=dspy.XMLAdapter()):
        pred = run(dspy_imp.ReActV2(SubmitSig, tools=[Look()]), intent="what?")
    assert pred.metadata.termination_reason == "submit"
    assert pred.metadata.history.messages[0]["next_thought"] == "<next_thought>unterminated <b>"
