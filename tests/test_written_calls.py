"""Reference §2.3, §12 M5, E11, B2/B4/B5: models that cannot call tools natively write their calls."""

from __future__ import annotations

import json

import dspy
from helpers import TA, Look, SubmitSig, inputs, submit_line, user

import dspy_imp
from dspy_imp.testing import ScriptedLM, reply


def written(thought: str | None = None, calls: list | None = None, field: str = "next_thought") -> str:
    parts = [f"[[ ## {field} ## ]]\n{thought}"] if thought is not None else []
    parts.append(f"[[ ## tool_calls ## ]]\n{json.dumps(calls or [])}")
    return "\n\n".join([*parts, "[[ ## completed ## ]]"])


def search(sku: str, region: str, limit: int = 5) -> str:
    """Search the catalog"""
    return f"{sku} in {region}"


SEARCH_SCHEMA = {
    "sku": {"type": "string", "description": "exact SKU"},
    "region": {"type": "string", "enum": ["eu", "us"]},
    "limit": {"type": "integer", "default": 5},
}
SEARCH_LINE = (
    "search, whose description is <desc>Search the catalog</desc>. It takes arguments "
    '{"properties":{"sku":{"description":"exact SKU","type":"string"},"region":{"enum":["eu","us"],"type":"string"},'
    '"limit":{"default":5,"type":"integer"}},"required":["sku","region"]}.'
)
SUBMIT_LINE = (
    "submit, whose description is <desc>Submit the final outputs for the task.</desc>. It takes arguments "
    '{"properties":{"answer":{"type":"string"},"confidence":{"type":"number"}},"required":["answer","confidence"]}.'
)
REQUIREMENT_TA = (
    "Respond with the corresponding output fields, starting with the field `[[ ## answer ## ]]`, then "
    "`[[ ## tool_calls ## ]]` (must be formatted as a valid Python list), and then ending with the marker for "
    "`[[ ## completed ## ]]`."
)
REQUIREMENT = REQUIREMENT_TA.replace("## answer ##", "## next_thought ##")


def listing(*lines: str, requirement: str = REQUIREMENT) -> dict:
    return user(f"[[ ## tools ## ]]\n{json.dumps(list(lines), ensure_ascii=False)}\n\n{requirement}")


def search_tool() -> dspy.Tool:
    return dspy.Tool(search, args=SEARCH_SCHEMA)


def test_m5_no_native_tools_the_step_describes_its_calls_and_ends_on_the_listing(run):
    lm = ScriptedLM(
        [
            reply(written("looking", [{"name": "search", "arguments": {"sku": "A1", "region": "eu"}}], field="answer")),
            reply(written("A1 is in eu.", [], field="answer")),
        ],
        native=False,
    )
    with dspy.context(lm=lm):
        pred = run(dspy_imp.ReActV2(TA, tools=[search_tool()]), intent="where is A1?")

    first, second = lm.requests
    assert (first.tools, first.tool_choice, second.tools, second.tool_choice) == (None, None, None, None)
    system = first.messages[0]["content"]
    assert (
        "2. `tool_calls` (list): The tools to call, as a JSON list in which each call has `name` and `arguments`."
        in system
    )
    assert "When the final answer is ready, write it in `answer`, and leave `tool_calls` empty." in system
    assert "You are an Agent. Use the supplied tools to produce `answer` from `intent`." in system
    assert first.messages[1:] == [inputs(intent="where is A1?"), listing(SEARCH_LINE, requirement=REQUIREMENT_TA)]
    assert second.messages[1:] == [
        inputs(intent="where is A1?"),
        {
            "role": "assistant",
            "content": written("looking", [{"name": "search", "arguments": {"sku": "A1", "region": "eu"}}], "answer")
            + "\n",
        },
        user("[[ ## tool_call_results ## ]]\nsearch (call_0_0): A1 in eu"),
        listing(SEARCH_LINE, requirement=REQUIREMENT_TA),
    ]
    assert not any(m["role"] == "tool" or "tool_calls" in m for m in second.messages)
    assert (pred.answer, pred.metadata.termination_reason) == ("A1 is in eu.", "answered")


def test_m5_the_submit_signature_lists_submit_and_each_request_extends_the_previous_one(run):
    lm = ScriptedLM(
        [
            reply(written("checking", [{"name": "search", "arguments": {"sku": "A1", "region": "us"}}])),
            reply(written("done", [{"name": "submit", "arguments": {"answer": "us", "confidence": 0.9}}])),
        ],
        native=False,
    )
    with dspy.context(lm=lm):
        pred = run(dspy_imp.ReActV2(SubmitSig, tools=[search_tool()]), intent="where?")
    r1, r2 = (r.messages for r in lm.requests)
    assert r1[-1] == r2[-1] == listing(SEARCH_LINE, SUBMIT_LINE)
    assert r2[: len(r1) - 1] == r1[:-1] and len(r2) == len(r1) + 2  # the prefix before the listing is kept
    assert (pred.answer, pred.confidence, pred.metadata.termination_reason) == ("us", 0.9, "submit")


def test_e11_written_calls_under_finish_submit_line_then_listing(run):
    lm = ScriptedLM(
        [
            reply(written("t1", [])),
            reply(written("sending", [{"name": "submit", "arguments": {"answer": "It is a cat."}}])),
        ],
        native=False,
    )
    with dspy.context(lm=lm):
        pred = run(dspy_imp.ReActV2(TA, tools=[Look()], finish="submit"), intent="what?")
    second = lm.requests[1]
    assert (second.tools, second.tool_choice) == (None, None)
    assert second.messages[1:3] == [inputs(intent="what?"), {"role": "assistant", "content": written("t1", []) + "\n"}]
    assert second.messages[3] == user(submit_line("answer"))
    assert second.messages[4]["content"].startswith("[[ ## tools ## ]]\n")
    assert len(second.messages) == 5
    assert (pred.answer, pred.metadata.termination_reason) == ("It is a cat.", "submit")


def test_a_marker_free_reply_is_the_text_answer(run):
    lm = ScriptedLM([reply("It is a cat.")], native=False)
    with dspy.context(lm=lm):
        pred = run(dspy_imp.ReActV2(TA, tools=[Look()]), intent="what?")
    assert (pred.answer, pred.metadata.termination_reason) == ("It is a cat.", "answered")


def test_b4_b5_call_spellings_and_wrappers_are_read(run):
    def reply_tool(text: str) -> str:
        """Reply to the person."""
        return f"replied: {text}"

    reply_tool.__name__ = "reply"
    spelled = [
        {"tool": "reply", "args": {"text": "hello"}},
        {"recipient_name": "functions.reply", "parameters": {"text": "again"}},
    ]
    lm = ScriptedLM(
        [
            reply(
                "[[ ## next_thought ## ]]\nreplying\n\n[[ ## tool_calls ## ]]\n"
                + json.dumps({"tool_calls": spelled})
                + "\n\n[[ ## completed ## ]]"
            ),
            reply(written("done", [{"name": "submit", "arguments": {"answer": "ok", "confidence": 1}}])),
        ],
        native=False,
    )
    with dspy.context(lm=lm):
        pred = run(dspy_imp.ReActV2(SubmitSig, tools=[reply_tool]), intent="say hello")
    first = pred.metadata.history.messages[0]
    assert first["tool_calls"] == [
        {"id": "call_0_0", "name": "reply", "args": {"text": "hello"}},
        {"id": "call_0_1", "name": "reply", "args": {"text": "again"}},
    ]
    assert [r["result"] for r in first["tool_call_results"]] == ["replied: hello", "replied: again"]


def test_b2_a_written_call_that_names_no_tool_is_an_observation(run):
    look = Look()
    lm = ScriptedLM(
        [
            reply(written("trying", [{"command": "cat", "args": ["notes.txt"]}])),
            reply(written("again", [{"name": "look", "arguments": {"where": "desk"}}])),
            reply(written("done", [{"name": "submit", "arguments": {"answer": "ok", "confidence": 1}}])),
        ],
        native=False,
    )
    with dspy.context(lm=lm):
        pred = run(dspy_imp.ReActV2(SubmitSig, tools=[look]), intent="read")
    entry = pred.metadata.history.messages[0]
    assert entry["tool_calls"] == [
        {"id": "call_0_0", "name": None, "args": {}, "received": {"command": "cat", "args": ["notes.txt"]}}
    ]
    [result] = entry["tool_call_results"]
    assert (result["error"], result["error_kind"], result["result"]) == (
        True,
        "malformed_tool_call",
        "the tool call could not be read.",
    )
    assert look.runs == [{"where": "desk"}]
    assert pred.metadata.termination_reason == "submit"


UNREADABLE = "[[ ## answer ## ]]\nhm\n\n[[ ## tool_calls ## ]]\n42\n\n[[ ## completed ## ]]"


def test_an_unreadable_reply_gets_dspys_json_fallback_with_the_same_guidance(run):
    lm = ScriptedLM(
        [reply(UNREADABLE), reply('{"answer": "From memory: a cat.", "tool_calls": []}')],
        native=False,
    )
    with dspy.context(lm=lm):
        pred = run(dspy_imp.ReActV2(TA, tools=[Look()]), intent="what?")

    first, fallback = lm.requests
    assert (pred.answer, pred.metadata.termination_reason) == ("From memory: a cat.", "answered")
    assert "Outputs will be a JSON object with the following fields." in fallback.messages[0]["content"]
    guidance = first.messages[0]["content"].split("your objective is:")[1]
    assert fallback.messages[0]["content"].endswith(guidance)  # the same instructions and guidance lines
    assert fallback.messages[1] == inputs(intent="what?")
    assert fallback.messages[-1]["content"].endswith(
        "Respond with a JSON object in the following order of fields: `answer`, then `tool_calls` "
        "(must be formatted as a valid Python list)."
    )


def test_a_fallback_that_cannot_be_read_either_is_a_parse_error(run):
    lm = ScriptedLM(
        [reply(UNREADABLE), reply("{not json"), reply(written("From memory: a cat.", [], field="answer"))],
        native=False,
    )
    with dspy.context(lm=lm):
        pred = run(dspy_imp.ReActV2(TA, tools=[Look()]), intent="what?")
    meta = pred.metadata
    assert (meta.termination_reason, meta.termination_cause) == ("last_text", "parse_error")
    assert pred.answer == "From memory: a cat."
    assert len(lm.requests) == 3  # the step, its JSON fallback, the last-text request


def test_a_history_recorded_natively_replays_as_text(run):
    history = dspy.History(
        messages=[
            {
                "intent": "what?",
                "next_thought": "looking",
                "tool_calls": [{"id": "c1", "name": "look", "args": {"where": "box"}}],
                "tool_call_results": [
                    {"id": "c1", "name": "look", "result": {"seen": True}, "error": False, "returned_at": "x"}
                ],
            },
            {"next_thought": "It is a cat.", "answer": "It is a cat.", "tool_calls": [], "tool_call_results": []},
        ]
    )
    lm = ScriptedLM([reply(written("Still a cat.", [], field="answer"))], native=False)
    with dspy.context(lm=lm):
        run(dspy_imp.ReActV2(TA, tools=[Look()]), intent="and now?", history=history)
    messages = lm.requests[0].messages
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user", "assistant", "user", "user"]
    assert (
        messages[2]["content"] == written("looking", [{"name": "look", "arguments": {"where": "box"}}], "answer") + "\n"
    )
    assert messages[3] == user('[[ ## tool_call_results ## ]]\nlook (c1): {"seen": true}')
    assert messages[4]["content"] == written("It is a cat.", [], "answer") + "\n"
    assert messages[5] == inputs(intent="and now?")
