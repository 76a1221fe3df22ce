"""Issue 23, point 18: DSPy 3.5's names and defaults, tested today.

DSPy 3.5 renames ``dspy.ReActV2`` to ``dspy.ReAct`` and makes ``XMLAdapter(use_native_function_calling=True)``
the default adapter. ``dspy_imp.ReAct`` is our class under that name, and a turn under that adapter
sends native tool calls and reads the reply as it does under today's default.
"""

from __future__ import annotations

import dspy
from helpers import SubmitSig

import dspy_imp
from dspy_imp.testing import ScriptedLM, call, reply


def look(where: str) -> str:
    """Look somewhere."""
    return f"a cat at {where}"


def test_react_is_our_class_under_dspy_3_5s_name():
    assert dspy_imp.ReAct is dspy_imp.ReActV2


def test_a_turn_under_xml_adapter_with_native_calls(run):
    script = [
        reply("<next_thought>look first</next_thought>", calls=[call("look", {"where": "sofa"}, id="c1")]),
        reply(calls=[call("submit", {"answer": "a cat", "confidence": 0.9}, id="s1")]),
    ]
    default_lm, xml_lm = ScriptedLM(list(script)), ScriptedLM(list(script))
    with dspy.context(lm=default_lm):
        default = run(dspy_imp.ReAct(SubmitSig, tools=[look]), intent="what is there?")
    with dspy.context(lm=xml_lm, adapter=dspy.XMLAdapter(use_native_function_calling=True)):
        xml = run(dspy_imp.ReAct(SubmitSig, tools=[look]), intent="what is there?")
    assert (xml.answer, xml.confidence, xml.metadata.termination_reason) == ("a cat", 0.9, "submit")
    assert (default.answer, default.metadata.termination_reason) == (xml.answer, "submit")
    assert [r.tool_names for r in xml_lm.requests] == [["look", "submit"], ["look", "submit"]]
    tool_message = {"role": "tool", "tool_call_id": "c1", "content": "a cat at sofa"}
    assert xml_lm.requests[1].messages[-2:] == [  # the result, then XMLAdapter's own format line
        tool_message,
        {
            "role": "user",
            "content": "Respond with the corresponding output fields wrapped in XML tags `<next_thought>`.",
        },
    ]
    assert default_lm.requests[1].messages[-1] == tool_message
    assert [r.tool_choice for r in xml_lm.requests] == [r.tool_choice for r in default_lm.requests]
