"""Issue 22, point 7: a turn whose provider refused the model's own malformed call still ends
with an answer, also when the refused request is the last-text one.

Groq answers a malformed tool call with a 400 ``tool_use_failed``. After the last-text request
is refused that way, the refused call is recorded as an observation asking for the text answer,
and the last-text request goes once more, the same request with those two messages appended.
"""

from __future__ import annotations

from typing import Any

import dspy
from helpers import SubmitSig

import dspy_imp
from dspy_imp.testing import ScriptedLM, call, fail, reply

WROTE = '<function=look>{"where": "b"</function>'
ANSWER_NOW = "the provider refused this tool call as malformed; answer in text now, without calling a tool."
EXTRACTED = (
    "[[ ## reasoning ## ]]\nIt looked.\n\n[[ ## answer ## ]]\nshelf\n\n"
    "[[ ## confidence ## ]]\n0.5\n\n[[ ## completed ## ]]"
)


def look(where: str) -> str:
    """Look somewhere."""
    return f"nothing at {where}"


LOOKED = reply(calls=[call("look", {"where": "a"}, id="c1")])


def agent(**options: Any) -> dspy_imp.ReActV2:
    return dspy_imp.ReActV2("question -> answer", tools=[look], max_iters=1, **options)


def test_a_refused_last_text_request_is_sent_once_more_and_answers(run):
    lm = ScriptedLM([LOOKED, fail.tool_use_failed(WROTE), reply("It is nowhere.")])
    with dspy.context(lm=lm):
        pred = run(agent(), question="Where is it?")
    meta = pred.metadata
    assert (meta.termination_reason, meta.termination_cause) == ("last_text", "max_iters")
    assert dspy_imp.is_complete(pred) and pred.answer == "It is nowhere."
    assert meta.unexecuted_tool_calls == ()
    first, again = lm.requests[1], lm.requests[2]
    assert again.messages[: len(first.messages)] == first.messages  # the prefix holds
    assert again.messages[len(first.messages) :] == [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "call_1_0", "type": "function", "function": {"name": "unreadable_call", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "call_1_0", "content": f"Error: {ANSWER_NOW}"},
    ]
    assert [r.tool_choice for r in lm.requests] == ["auto", "auto", "auto"]
    assert all(r.tools == first.tools for r in lm.requests)  # the same tools: nothing breaks the cache
    refused = meta.history.messages[1]
    assert refused["tool_calls"] == [
        {
            "id": "call_1_0",
            "name": None,
            "args": {},
            # DSPy's native engine keeps only Groq's code, not what the model wrote (LiteLLM keeps both)
            "received": {"provider_refused": "tool_use_failed", "failed_generation": None, "answer_in_text": True},
        }
    ]
    assert refused["tool_call_results"][0]["error_kind"] == "malformed_tool_call"
    assert meta.history.messages[2]["answer"] == "It is nowhere."
    assert dict(meta.usage.requests) == {"step": 1, "last_text": 2}
    lm.assert_complete()


def test_a_second_refusal_ends_as_a_reply_with_calls_only(run):
    lm = ScriptedLM([LOOKED, fail.tool_use_failed(WROTE), fail.tool_use_failed(WROTE)])
    with dspy.context(lm=lm):
        pred = run(agent(), question="Where is it?")
    meta = pred.metadata
    assert (meta.termination_reason, meta.termination_cause) == ("last_text", "max_iters")
    assert pred.answer == ""  # issue 23: a last-text reply with calls only is an empty answer
    assert meta.unexecuted_tool_calls == ({"id": "call_1_0_2", "name": None, "args": {}},)
    assert len(lm.requests) == 3  # asked once more, not again
    assert [m["tool_call_results"][0]["result"] for m in meta.history.messages[1:]] == [ANSWER_NOW]
    lm.assert_complete()


def test_no_second_last_text_request_past_a_usage_limit(run):
    lm = ScriptedLM([LOOKED, fail.tool_use_failed(WROTE)])
    with dspy.context(lm=lm):
        pred = run(agent(usage_limits={"requests": 2}), question="Where is it?")
    meta = pred.metadata
    assert (meta.termination_reason, meta.termination_cause) == ("incomplete", "usage_limit_exceeded")
    assert pred.answer is None and len(lm.requests) == 2
    assert meta.history.messages[1]["tool_call_results"][0]["result"] == ANSWER_NOW  # recorded, not lost
    lm.assert_complete()


def test_a_refused_forced_submit_ends_through_the_extractor(run):
    """The forced request has no such hole: its refused call is not submit, so the extractor answers."""
    lm = ScriptedLM([LOOKED, fail.tool_use_failed(WROTE), reply(EXTRACTED)])
    with dspy.context(lm=lm):
        pred = run(dspy_imp.ReActV2(SubmitSig, tools=[look], max_iters=1), intent="Where is it?")
    meta = pred.metadata
    assert (meta.termination_reason, meta.termination_cause) == ("extracted", "max_iters")
    assert pred.answer == "shelf" and pred.confidence == 0.5
    assert len(lm.requests) == 3 and lm.requests[2].tools is None  # the extractor offers no tools to refuse
    lm.assert_complete()
