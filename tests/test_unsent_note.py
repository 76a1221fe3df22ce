"""``unsent_note``: the host's words replace the unsent line wherever a line is rendered.

SPEC §1 (a non-blank str), §4 ("`unsent_note` replaces the line wherever a line is
rendered"; a submit-signature ``"auto"`` loop renders no line), §6 (saved), reference §7.3
and §12 G4. A line is rendered after every thought step under ``"tools"`` and ``"submit"``
(live and on replay) and on a text-answer ``"auto"`` replay of a submit-era thought; a
thought moved to the user side by thought_as_request gets none.
"""

from __future__ import annotations

import json
import re
from typing import Any

import dspy
import pytest
from helpers import LINE_PLAIN, NAMED_SUBMIT, TA, Look, SubmitSig, assistant, inputs, moved, submit_line, tool, user

import dspy_imp
from dspy_imp.testing import ScriptedLM, call, reply

NOTE = "Nobody read that. Use a tool."
T0 = "2026-01-01T00:00:00.000Z"
LINE_TOOLS = "Your message above was not sent. To end the turn, call `send`; to keep working, call a tool."


def send(text: str) -> str:
    """Send the answer to the person."""
    return f"delivered: {text}"


def on_send(args: dict[str, Any], result: Any, given: dict[str, Any]) -> dspy_imp.Finish:
    return dspy_imp.Finish(answer=args["text"])


def native(call_id: str, name: str, args: dict[str, Any]) -> tuple[str, str, str]:
    return (call_id, name, json.dumps(args, separators=(",", ":")))


def user_texts(messages: list[dict[str, Any]]) -> list[str]:
    return [m["content"] for m in messages if m["role"] == "user"]


def assert_no_default_line(messages: list[dict[str, Any]]) -> None:
    assert not any("was not sent" in text for text in user_texts(messages)), messages


# -- "tools" -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("note", [None, NOTE])
def test_tools_the_note_follows_every_thought_live_and_on_replay(run, note):
    line = note or LINE_TOOLS
    agent = dspy_imp.ReActV2(TA, tools=[Look(), send], finish="tools", finish_on={"send": on_send}, unsent_note=note)
    lm = ScriptedLM(
        [
            reply("t1"),
            reply("checking", calls=[call("look", {"where": "desk"}, id="c1")]),
            reply(calls=[call("send", {"text": "On the desk."}, id="s1")]),
            reply(calls=[call("send", {"text": "Still there."}, id="s2")]),
        ]
    )
    with dspy.context(lm=lm):
        first = run(agent, intent="where?")
        run(agent, intent="and now?", history=first.metadata.history)

    r1, r2, r3, r4 = (r.messages for r in lm.requests)
    assert r2 == [*r1, assistant("t1"), user(line)]
    assert r3 == [
        *r2,
        assistant("checking", [native("c1", "look", {"where": "desk"})]),
        tool("c1", '{"seen": true}'),
    ]  # the line stays in every later request of the turn
    assert r4[: len(r3)] == r3  # replayed in the next call, with the same line
    assert r4[len(r3) :] == [
        assistant("", [native("s1", "send", {"text": "On the desk."})]),
        tool("s1", "delivered: On the desk."),
        inputs(intent="and now?"),
    ]
    if note is not None:
        assert_no_default_line(r4)


def test_tools_the_note_is_kept_verbatim(run):
    note = "  Not sent.\nCall `send` to reply.  "
    agent = dspy_imp.ReActV2(TA, tools=[send], finish="tools", finish_on={"send": on_send}, unsent_note=note)
    lm = ScriptedLM([reply("t1"), reply("t2")])
    with dspy.context(lm=lm):
        pred = run(agent, intent="x")
    assert lm.requests[1].messages[-1] == user(note)
    assert pred.metadata.termination_reason == "incomplete"


# -- "submit" ------------------------------------------------------------------------------------------


def test_submit_the_note_replaces_the_line_of_the_continued_step(run):
    agent = dspy_imp.ReActV2(TA, tools=[Look()], finish="submit", unsent_note=NOTE)
    lm = ScriptedLM([reply("Let me look first."), reply(calls=[call("submit", {"answer": "A cat."}, id="s1")])])
    with dspy.context(lm=lm):
        pred = run(agent, intent="what is it?")

    request = lm.requests[1]
    assert request.tool_choice == "auto" and request.tool_names == ["look", "submit"]
    assert request.messages[1:] == [inputs(intent="what is it?"), assistant("Let me look first."), user(NOTE)]
    assert_no_default_line(request.messages)
    assert pred.answer == "A cat." and pred.metadata.termination_reason == "submit"


def test_submit_the_note_names_no_outputs_for_a_submit_signature(run):
    agent = dspy_imp.ReActV2(SubmitSig, tools=[], finish="submit", unsent_note=NOTE)
    lm = ScriptedLM([reply("t"), reply(calls=[call("submit", {"answer": "Paris", "confidence": 0.9}, id="s1")])])
    with dspy.context(lm=lm):
        run(agent, intent="capital?")

    assert lm.requests[1].messages[-1] == user(NOTE)
    assert submit_line("answer", "confidence") not in user_texts(lm.requests[1].messages)


def test_submit_a_moved_thought_gets_no_note_and_earlier_ones_keep_it(run):
    agent = dspy_imp.ReActV2(TA, tools=[Look()], finish="submit", unsent_note=NOTE)
    lm = ScriptedLM([reply("t1"), reply("t2"), reply(calls=[call("submit", {"answer": "A cat."}, id="s1")])])
    with dspy.context(lm=lm):
        pred = run(agent, intent="what is it?")

    forced = lm.requests[2]
    assert forced.tool_choice == NAMED_SUBMIT
    assert forced.messages[1:] == [inputs(intent="what is it?"), assistant("t1"), user(NOTE), moved("t2")]
    assert pred.metadata.termination_reason == "forced_submit"


SUBMIT_ERA = [
    {"intent": "t1", "next_thought": "Let me check.", "tool_calls": [], "tool_call_results": []},
    {
        "tool_calls": [{"id": "s1", "name": "submit", "args": {"answer": "Done."}}],
        "tool_call_results": [
            {"id": "s1", "name": "submit", "result": {"answer": "Done."}, "error": False, "returned_at": T0}
        ],
        "answer": "Done.",
    },
]


def test_submit_replay_puts_the_note_after_a_recorded_thought(run):
    agent = dspy_imp.ReActV2(TA, tools=[Look()], finish="submit", unsent_note=NOTE)
    lm = ScriptedLM([reply(calls=[call("submit", {"answer": "Again."}, id="s2")])])
    with dspy.context(lm=lm):
        run(agent, intent="t2", history=dspy.History(messages=SUBMIT_ERA))

    assert lm.requests[0].messages[1:] == [
        inputs(intent="t1"),
        assistant("Let me check."),
        user(NOTE),
        assistant("", [native("s1", "submit", {"answer": "Done."})]),
        tool("s1", '{"answer": "Done."}'),  # an answer: never followed by a line
        inputs(intent="t2"),
    ]


# -- text-answer "auto": replay of a submit-era thought -------------------------------------------------


@pytest.mark.parametrize("note", [None, NOTE])
def test_text_answer_auto_replay_of_a_submit_era_thought(run, note):
    agent = dspy_imp.ReActV2(TA, tools=[Look()], unsent_note=note)
    lm = ScriptedLM([reply("All done again.")])
    with dspy.context(lm=lm):
        pred = run(agent, intent="t2", history=dspy.History(messages=SUBMIT_ERA))

    assert lm.requests[0].messages[1:] == [
        inputs(intent="t1"),
        assistant("Let me check."),
        user(note or LINE_PLAIN),
        assistant("Done."),
        inputs(intent="t2"),
    ]
    assert pred.answer == "All done again."
    assert pred.metadata.history.messages[:2] == SUBMIT_ERA


def test_text_answer_auto_live_answers_never_get_the_note(run):
    agent = dspy_imp.ReActV2(TA, tools=[Look()], unsent_note=NOTE)
    lm = ScriptedLM([reply("It is a cat."), reply("Still a cat.")])
    with dspy.context(lm=lm):
        first = run(agent, intent="what is it?")
        run(agent, intent="and now?", history=first.metadata.history)

    assert lm.requests[1].messages[1:] == [
        inputs(intent="what is it?"),
        assistant("It is a cat."),
        inputs(intent="and now?"),
    ]
    assert all(NOTE not in json.dumps(r.messages) for r in lm.requests)


# -- submit-signature "auto": no line at all -------------------------------------------------------------


def test_submit_signature_auto_renders_no_line_live(run):
    agent = dspy_imp.ReActV2(SubmitSig, tools=[Look()], unsent_note=NOTE)
    lm = ScriptedLM(
        [reply("I know this."), reply(calls=[call("submit", {"answer": "Paris", "confidence": 0.9}, id="s1")])]
    )
    with dspy.context(lm=lm):
        pred = run(agent, intent="capital?")

    forced = lm.requests[1]
    assert forced.tool_choice == NAMED_SUBMIT
    assert forced.messages[1:] == [inputs(intent="capital?"), moved("I know this.")]
    assert all(NOTE not in json.dumps(r.messages) for r in lm.requests)
    assert pred.metadata.termination_reason == "forced_submit"


def test_submit_signature_auto_renders_no_line_before_a_last_request_note(run):
    agent = dspy_imp.ReActV2(SubmitSig, tools=[Look()], unsent_note=NOTE, last_request_note="Submit now.")
    lm = ScriptedLM(
        [reply("I know this."), reply(calls=[call("submit", {"answer": "Paris", "confidence": 0.9}, id="s1")])]
    )
    with dspy.context(lm=lm):
        run(agent, intent="capital?")

    assert lm.requests[1].messages[1:] == [
        inputs(intent="capital?"),
        assistant("I know this."),  # shown bare: DSPy's ending, unchanged
        inputs(intent="Submit now."),
    ]


def test_submit_signature_auto_renders_no_line_on_replay(run):
    history = [
        {"intent": "t1", "next_thought": "Let me check.", "tool_calls": [], "tool_call_results": []},
        {
            "tool_calls": [{"id": "s1", "name": "submit", "args": {"answer": "Done.", "confidence": 0.5}}],
            "tool_call_results": [
                {
                    "id": "s1",
                    "name": "submit",
                    "result": {"answer": "Done.", "confidence": 0.5},
                    "error": False,
                    "returned_at": T0,
                }
            ],
            "answer": "Done.",
            "confidence": 0.5,
        },
    ]
    agent = dspy_imp.ReActV2(SubmitSig, tools=[Look()], unsent_note=NOTE)
    lm = ScriptedLM([reply(calls=[call("submit", {"answer": "Again.", "confidence": 1.0}, id="s2")])])
    with dspy.context(lm=lm):
        pred = run(agent, intent="t2", history=dspy.History(messages=history))

    assert lm.requests[0].messages[1:] == [
        inputs(intent="t1"),
        assistant("Let me check."),
        assistant("", [native("s1", "submit", {"answer": "Done.", "confidence": 0.5})]),
        tool("s1", '{"answer": "Done.", "confidence": 0.5}'),
        inputs(intent="t2"),
    ]
    assert (pred.answer, pred.confidence) == ("Again.", 1.0)


# -- refusals -------------------------------------------------------------------------------------------

BAD_NOTES = [
    pytest.param("", id="empty"),
    pytest.param("   ", id="spaces"),
    pytest.param("\n\t ", id="whitespace"),
    pytest.param(5, id="int"),
    pytest.param(b"bytes", id="bytes"),
    pytest.param(["Not sent."], id="list"),
    pytest.param(True, id="bool"),
]


def _program(finish: str, **options: Any) -> dspy_imp.ReActV2:
    finish_on = {"send": on_send} if finish == "tools" else None
    return dspy_imp.ReActV2(TA, tools=[Look(), send], finish=finish, finish_on=finish_on, **options)


@pytest.mark.parametrize("finish", ["auto", "submit", "tools"])
@pytest.mark.parametrize("value", BAD_NOTES)
def test_a_blank_or_non_string_note_is_refused_at_construction(finish, value):
    with pytest.raises(dspy_imp.ConfigurationError, match="unsent_note") as error:
        _program(finish, unsent_note=value)
    assert repr(value) in str(error.value)  # the message shows the value


@pytest.mark.parametrize("finish", ["auto", "submit", "tools"])
def test_a_non_blank_note_is_accepted_in_every_finish_mode(finish):
    assert _program(finish, unsent_note=NOTE).options.unsent_note == NOTE
    assert _program(finish).options.unsent_note is None


BAD_SAVED_NOTES = [
    pytest.param("", id="empty"),
    pytest.param("   ", id="spaces"),
    pytest.param("\n\t ", id="whitespace"),
    pytest.param(5, id="int"),
    pytest.param(["Not sent."], id="list"),
    pytest.param({"text": "Not sent."}, id="dict"),
    pytest.param(True, id="bool"),
]


@pytest.mark.parametrize("value", BAD_SAVED_NOTES)
def test_a_bad_saved_note_is_refused_at_load_naming_unsent_note(tmp_path, value):
    path = tmp_path / "agent.json"
    _program("submit", unsent_note=NOTE).save(path)
    state = json.loads(path.read_text())
    assert state["react"]["dspy_imp"]["unsent_note"] == NOTE
    state["react"]["dspy_imp"]["unsent_note"] = value
    path.write_text(json.dumps(state))

    fresh = _program("submit")
    before = fresh.dump_state()
    with pytest.raises(dspy_imp.ConfigurationError, match=re.escape("unsent_note")):
        fresh.load(path)
    assert fresh.dump_state() == before
    assert fresh.options.unsent_note is None


def test_a_saved_note_loads_and_is_rendered(tmp_path, run):
    path = tmp_path / "agent.json"
    _program("submit", unsent_note=NOTE).save(path)
    loaded = _program("submit")
    loaded.load(path)
    assert loaded.options.unsent_note == NOTE

    lm = ScriptedLM([reply("t1"), reply(calls=[call("submit", {"answer": "x"}, id="s1")])])
    with dspy.context(lm=lm):
        run(loaded, intent="q")
    assert lm.requests[1].messages[-1] == user(NOTE)
