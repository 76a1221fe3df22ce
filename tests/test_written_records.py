"""Records and recovery in written mode (issue 5: N1, K1 and the dspy.ReActV2 interop, written)."""

from __future__ import annotations

import json

import dspy
from helpers import TA, Look, SubmitSig
from test_written_calls import written

import dspy_imp
from dspy_imp.testing import ScriptedLM, call, fail, reply


def test_n1_written_dump_and_load_send_byte_identical_requests(run):
    lm = ScriptedLM(
        [
            reply(written("looking", [{"name": "look", "arguments": {"where": "box"}}, {"name": "nope"}], "answer")),
            reply(written("A cat.", [], "answer")),
        ],
        native=False,
    )
    agent = dspy_imp.ReActV2(TA, tools=[Look()])
    with dspy.context(lm=lm):
        pred = run(agent, intent="what is in the box?")
    loaded = dspy_imp.load_history(json.loads(json.dumps(dspy_imp.dump_history(pred.metadata.history))))

    sent = []
    for history in (pred.metadata.history, loaded):
        again = ScriptedLM([reply(written("Still a cat.", [], "answer"))], native=False)
        with dspy.context(lm=again):
            run(agent, intent="and now?", history=history)
        sent.append(json.dumps(again.requests[0].messages, sort_keys=True))
    assert sent[0] == sent[1]
    assert "nope (call_0_1): Error: there is no tool named nope." in sent[0]


def test_k1_written_the_oldest_episodes_are_left_out(run):
    history = dspy.History(
        messages=[
            {"intent": f"q{i}", "next_thought": f"a{i}", "answer": f"a{i}", "tool_calls": [], "tool_call_results": []}
            for i in range(4)
        ]
    )
    lm = ScriptedLM([fail.context_window(), reply(written("fits", [], "answer"))], native=False)
    with dspy.context(lm=lm):
        pred = run(dspy_imp.ReActV2(TA, tools=[Look()]), intent="q4", history=history)
    first, second = (r.messages for r in lm.requests)
    assert len(first) - len(second) == 4  # two episodes: a user and an assistant message each
    assert "q0" not in json.dumps(second) and "q1" not in json.dumps(second[:-1])
    assert second[-1]["content"].startswith("[[ ## tools ## ]]")  # still ends on the listing
    assert pred.metadata.context_projection["omitted_prior_entries"] == 2


def test_a_dspy_react_v2_history_replays_as_text_in_written_mode(run):
    def look(where: str) -> str:
        """Look"""
        return f"seen {where}"

    stock = ScriptedLM(
        [
            reply("checking", calls=[call("look", {"where": "box"}, id="p1")]),
            reply(calls=[call("submit", {"answer": "cat", "confidence": 0.5}, id="s1")]),
        ]
    )
    with dspy.context(lm=stock, adapter=dspy.ChatAdapter(use_native_function_calling=True)):
        theirs = dspy.ReActV2(SubmitSig, tools=[look])(intent="what?")
    dumped = json.loads(json.dumps(theirs.history.model_dump(mode="json")))

    lm = ScriptedLM(
        [reply(written("done", [{"name": "submit", "arguments": {"answer": "dog", "confidence": 1}}]))],
        native=False,
    )
    with dspy.context(lm=lm):
        run(dspy_imp.ReActV2(SubmitSig, tools=[look]), intent="and now?", history=dumped)
    messages = lm.requests[0].messages
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user", "assistant", "user", "user", "user"]
    assert messages[3]["content"] == "[[ ## tool_call_results ## ]]\nlook (p1): seen box"
    assert '"name": "submit"' in messages[4]["content"]
    assert not any(m["role"] == "tool" or "tool_calls" in m for m in messages)
