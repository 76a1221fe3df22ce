"""Reference §12 N, B8, C14 and the dspy.ReActV2 interop: histories as data."""

from __future__ import annotations

import json
from datetime import datetime

import dspy
import pydantic
from helpers import TA, Look, SubmitSig

import dspy_imp
from dspy_imp.testing import ScriptedLM, call, reply


class Box(pydantic.BaseModel):
    label: str
    items: list[str]


def open_box(label: str) -> Box:
    """Open a box."""
    return Box(label=label, items=["cat", "ball"])


def recorded_turn(run):
    """A turn with parallel calls, reasoning, an error result, a structured result and a note."""
    lm = ScriptedLM(
        [
            reply("opening", calls=[call("open_box", {"label": "A"}, id="b1"), call("nope", {}, id="b2")],
                  reasoning="I should open box A."),
            reply("one more", calls=[call("look", {"where": "shelf"}, id="l1")]),
            reply("It is a cat."),
        ]
    )  # fmt: skip
    agent = dspy_imp.ReActV2(TA, tools=[open_box, Look()], max_iters=2, last_request_note="Answer now.")
    with dspy.context(lm=lm):
        pred = run(agent, intent="what is in box A?")
    return agent, pred


def test_n1_dump_and_load_round_trip_sends_byte_identical_requests(run):
    agent, pred = recorded_turn(run)
    dumped = dspy_imp.dump_history(pred.metadata.history)
    text = json.dumps(dumped)  # JSON-safe
    loaded = dspy_imp.load_history(json.loads(text))
    assert dumped["type"] == "history"
    assert loaded.messages[0]["tool_calls"][0]["id"] == "b1"
    assert loaded.messages[0]["reasoning_content"] == "I should open box A."
    assert loaded.messages[0]["tool_call_results"][0]["result"] == {"label": "A", "items": ["cat", "ball"]}

    requests = []
    for history in (pred.metadata.history, loaded):
        lm = ScriptedLM([reply("Still a cat.")])
        with dspy.context(lm=lm):
            run(agent, intent="and now?", history=history)
        requests.append(json.dumps(lm.requests[0].messages, sort_keys=True))
    assert requests[0] == requests[1]
    note = json.loads(requests[0])
    assert {"role": "user", "content": "[[ ## intent ## ]]\nAnswer now."} in note


def test_n2_reasoning_is_replayed_on_its_assistant_message(run):
    agent, pred = recorded_turn(run)
    lm = ScriptedLM([reply("ok")])
    with dspy.context(lm=lm):
        run(agent, intent="again?", history=pred.metadata.history)
    first_assistant = next(m for m in lm.requests[0].messages if m["role"] == "assistant")
    assert first_assistant["reasoning_content"] == "I should open box A."
    assert first_assistant["content"] == "opening"


def test_n3_a_redacted_copy_hides_credentials_and_leaves_the_original(run):
    history = dspy.History(
        messages=[
            {
                "intent": "use my key sk-abcdefghijklmnop1234",
                "tool_calls": [
                    {"id": "c1", "name": "login", "args": {"api_key": "plain-secret-value", "max_tokens": 5}}
                ],
                "tool_call_results": [
                    {"id": "c1", "name": "login", "result": "Bearer abcdefghijklmnopqrstuvwxyz", "error": False,
                     "returned_at": "2026-01-01T00:00:00.000Z"}
                ],
            }
        ]
    )  # fmt: skip
    redacted = dspy_imp.redact_history(history)
    entry = redacted.messages[0]
    assert "sk-abcdefghijklmnop1234" not in json.dumps(redacted.messages)
    assert entry["tool_calls"][0]["args"] == {"api_key": "[REDACTED]", "max_tokens": 5}
    assert entry["tool_call_results"][0]["result"] == "[REDACTED]"
    assert history.messages[0]["tool_calls"][0]["args"]["api_key"] == "plain-secret-value"


def test_b8_every_result_carries_returned_at_shown_only_by_a_renderer(run):
    seen = []

    def renderer(call, result):
        seen.append((call.name, result.returned_at))
        return f"{result.value} (at {result.returned_at})"

    lm = ScriptedLM([reply(calls=[call("look", {}, id="c1")]), reply("done")])
    plain = ScriptedLM([reply(calls=[call("look", {}, id="c1")]), reply("done")])
    with dspy.context(lm=lm):
        pred = run(dspy_imp.ReActV2(TA, tools=[Look()], tool_result_renderer=renderer), intent="look")
    with dspy.context(lm=plain):
        run(dspy_imp.ReActV2(TA, tools=[Look()]), intent="look")
    returned_at = pred.metadata.history.messages[0]["tool_call_results"][0]["returned_at"]
    parsed = datetime.fromisoformat(returned_at.replace("Z", "+00:00"))
    assert parsed.utcoffset().total_seconds() == 0
    assert seen == [("look", returned_at)]
    assert lm.requests[1].messages[-1]["content"] == f"{{'seen': True}} (at {returned_at})"
    assert plain.requests[1].messages[-1]["content"] == '{"seen": true}'


def test_c14_finish_reason(run):
    lm = ScriptedLM([reply("cut sho", finish_reason="length"), reply("done", finish_reason="stop")])
    agent = dspy_imp.ReActV2(TA, tools=[])
    with dspy.context(lm=lm):
        cut = run(agent, intent="long")
        resumed = run(agent, history=cut.metadata.history, max_iters=0, last_request_note="Again.")
    assert (cut.answer, cut.metadata.finish_reason) == ("cut sho", "length")
    assert (resumed.metadata.termination_reason, resumed.metadata.finish_reason) == ("last_text", "stop")


def test_a_dspy_react_v2_history_replays_natively_live_and_after_json(run):
    def look(where: str) -> str:
        """Look"""
        return f"seen {where}"

    stock = ScriptedLM(
        [reply("checking", calls=[call("look", {"where": "box"}, id="p1")]),
         reply(calls=[call("submit", {"answer": "cat", "confidence": 0.5}, id="s1")])]
    )  # fmt: skip
    with dspy.context(lm=stock, adapter=dspy.ChatAdapter(use_native_function_calling=True)):
        theirs = dspy.ReActV2(SubmitSig, tools=[look])(intent="what?")
    dumped = json.loads(json.dumps(theirs.history.model_dump(mode="json")))
    assert "id" not in dumped["messages"][0]["tool_calls"]["tool_calls"][0]  # DSPy's dump drops call ids

    rendered = []
    for history in (theirs.history, dumped):
        lm = ScriptedLM([reply(calls=[call("submit", {"answer": "dog", "confidence": 0.9}, id="s2")])])
        with dspy.context(lm=lm):
            run(dspy_imp.ReActV2(SubmitSig, tools=[look]), intent="and now?", history=history)
        rendered.append(lm.requests[0].messages)
    for messages in rendered:
        assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool", "assistant", "tool", "user"]
        assert messages[2]["tool_calls"][0]["id"] == messages[3]["tool_call_id"] == "p1"
        assert messages[3]["content"] == "seen box"
        assert messages[4]["tool_calls"][0]["function"]["name"] == "submit"
    assert rendered[0] == rendered[1]
