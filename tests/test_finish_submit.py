"""Reference §12 E (E1–E17, E11 aside), SPEC §2 and §4: ``finish="submit"``.

A thought-only step is followed by one continued step (every tool, ``tool_choice="auto"``)
in which the thought stays the model's message and the unsent line follows it; a second
thought, a silent step or the step limit forces submit; the forced request moves its last
thought to the user side (thought_as_request). Answers are never thoughts.
"""

from __future__ import annotations

from typing import Any

import dspy
import pytest
from helpers import NAMED_SUBMIT, TA, Look, SubmitSig, assistant, inputs, moved, settled, submit_line, tool, user

import dspy_imp
from dspy_imp.testing import ScriptedLM, call, reply

# E11 (written tool calls under finish="submit": the step's fields, the line, then the tool
# listing) is a later issue and is deliberately not covered here.


# SPEC §4, spelled out here rather than built, so a wrong helper cannot hide a wrong line.
LINE = "Your message above was not sent. To reply, call `submit` with `answer`; to keep working, call a tool."
LINE_TWO = (
    "Your message above was not sent. To reply, call `submit` with `answer` and `confidence`; "
    "to keep working, call a tool."
)
LINE_THREE = (
    "Your message above was not sent. To reply, call `submit` with `answer`, `confidence` and `source`; "
    "to keep working, call a tool."
)
NOT_SENT = "was not sent"

SYSTEM_TA_SUBMIT = "Answer the intent.\nWhen the final answer is ready, call `submit`."
SYSTEM = {"role": "system", "content": SYSTEM_TA_SUBMIT}
EXTRACTED_CAT = "[[ ## reasoning ## ]]\nThe thoughts say so.\n\n[[ ## answer ## ]]\ncat\n\n[[ ## completed ## ]]"


def thought_step(text: str, **keys: Any) -> dict[str, Any]:
    return {**keys, "next_thought": text, "tool_calls": [], "tool_call_results": []}


def submit(answer: str = "It is a cat.", *, id: str = "s1") -> Any:
    return call("submit", {"answer": answer}, id=id)


def submit_step(answer: str = "It is a cat.", *, id: str = "s1", **keys: Any) -> dict[str, Any]:
    """The entry of a step whose only call was a valid one-output submit."""
    return {
        **keys,
        "tool_calls": [{"id": id, "name": "submit", "args": {"answer": answer}}],
        "tool_call_results": [{"id": id, "name": "submit", "result": {"answer": answer}, "error": False}],
        "answer": answer,
    }


def empty_submit_step(id: str = "s0", **keys: Any) -> dict[str, Any]:
    return {
        **keys,
        "tool_calls": [{"id": id, "name": "submit", "args": {}}],
        "tool_call_results": [
            {
                "id": id,
                "name": "submit",
                "result": "submit is missing: answer",
                "error": True,
                "error_kind": "missing_output_fields",
            }
        ],
    }


def look_step(call_id: str = "c1", thought: str | None = None, **keys: Any) -> dict[str, Any]:
    entry: dict[str, Any] = dict(keys)
    if thought is not None:
        entry["next_thought"] = thought
    entry["tool_calls"] = [{"id": call_id, "name": "look", "args": {}}]
    entry["tool_call_results"] = [{"id": call_id, "name": "look", "result": {"seen": True}, "error": False}]
    return entry


def assert_ordinary(request: Any, roster: tuple[str, ...] = ("look", "submit")) -> None:
    assert request.tool_choice == "auto"
    assert request.tool_names == list(roster)
    assert request.options == {}


def assert_forced(request: Any, roster: tuple[str, ...] = ("look", "submit")) -> None:
    assert request.tool_choice == NAMED_SUBMIT
    assert request.tool_names == list(roster)
    assert "reasoning_effort" not in request.options  # None never reaches the engine


def no_line_anywhere(requests: list[Any]) -> bool:
    return not any(NOT_SENT in str(m.get("content") or "") for r in requests for m in r.messages)


def test_the_lines_spelled_here_are_the_helpers_lines():
    assert submit_line("answer") == LINE
    assert submit_line("answer", "confidence") == LINE_TWO


# -- E1–E4: the continued step -----------------------------------------------------------------------


def test_e1_a_thought_then_the_continued_step_submits(run):
    look = Look()
    lm = ScriptedLM([reply("Let me look first."), reply(calls=[submit()])])
    agent = dspy_imp.ReActV2(TA, tools=[look], finish="submit")
    with dspy.context(lm=lm):
        pred = run(agent, intent="what is it?")

    assert len(lm.requests) == 2
    r1, r2 = lm.requests
    assert_ordinary(r1)
    assert_ordinary(r2)
    assert r2.tools == r1.tools
    assert r1.messages == [SYSTEM, inputs(intent="what is it?")]
    assert r2.messages == [SYSTEM, inputs(intent="what is it?"), assistant("Let me look first."), user(LINE)]
    assert pred.answer == "It is a cat."
    assert list(pred.keys()) == ["answer"]
    meta = pred.metadata
    assert (meta.termination_reason, meta.termination_cause) == ("submit", None)
    assert meta.complete and meta.termination_error is None and meta.unexecuted_tool_calls == ()
    assert settled(meta.history.messages) == [
        thought_step("Let me look first.", intent="what is it?"),
        submit_step(),
    ]
    assert look.runs == []
    lm.assert_complete()


def test_e2_two_thoughts_in_a_row_force_submit(run):
    lm = ScriptedLM([reply("t1"), reply("t2"), reply(calls=[submit()])])
    agent = dspy_imp.ReActV2(TA, tools=[Look()], finish="submit")
    with dspy.context(lm=lm):
        pred = run(agent, intent="what is it?")

    assert len(lm.requests) == 3
    r1, r2, r3 = lm.requests
    assert_ordinary(r1)
    assert_ordinary(r2)
    assert_forced(r3)
    assert r3.tools == r1.tools
    assert r2.messages == [SYSTEM, inputs(intent="what is it?"), assistant("t1"), user(LINE)]
    # t2 moves to the user side with no line after it; t1 keeps its line.
    assert r3.messages == [SYSTEM, inputs(intent="what is it?"), assistant("t1"), user(LINE), moved("t2")]
    assert (pred.answer, pred.metadata.termination_reason) == ("It is a cat.", "forced_submit")
    assert pred.metadata.termination_cause == "empty_tool_calls"
    assert settled(pred.metadata.history.messages) == [
        thought_step("t1", intent="what is it?"),
        thought_step("t2"),
        submit_step(),
    ]
    lm.assert_complete()


def test_e2_a_silent_step_after_a_thought_forces_submit(run):
    lm = ScriptedLM([reply("t1"), reply("  \n "), reply(calls=[submit()])])
    agent = dspy_imp.ReActV2(TA, tools=[Look()], finish="submit")
    with dspy.context(lm=lm):
        pred = run(agent, intent="what is it?")

    r1, r2, r3 = lm.requests
    assert_ordinary(r1)
    assert_ordinary(r2)
    assert r2.messages == [*r1.messages, assistant("t1"), user(LINE)]
    assert_forced(r3)
    # The silent step records nothing, so t1 is the forced request's last thought: it is moved.
    assert r3.messages == [SYSTEM, inputs(intent="what is it?"), moved("t1")]
    meta = pred.metadata
    assert (meta.termination_reason, meta.termination_cause) == ("forced_submit", "empty_tool_calls")
    assert settled(meta.history.messages) == [thought_step("t1", intent="what is it?"), submit_step()]
    lm.assert_complete()


def test_e3_a_tool_call_resets_the_count(run):
    look = Look()
    lm = ScriptedLM(
        [reply("t1"), reply(calls=[call("look", {}, id="c1")]), reply("t2"), reply(calls=[submit()])],
    )
    agent = dspy_imp.ReActV2(TA, tools=[look], finish="submit")
    with dspy.context(lm=lm):
        pred = run(agent, intent="what is it?")

    assert len(lm.requests) == 4
    for request in lm.requests:
        assert_ordinary(request)
    r1, r2, r3, r4 = (r.messages for r in lm.requests)
    assert r2 == [*r1, assistant("t1"), user(LINE)]
    assert r3 == [*r2, assistant("", [("c1", "look", "{}")]), tool("c1", '{"seen": true}')]
    assert r4 == [*r3, assistant("t2"), user(LINE)]
    assert r4 == [
        SYSTEM,
        inputs(intent="what is it?"),
        assistant("t1"),
        user(LINE),
        assistant("", [("c1", "look", "{}")]),
        tool("c1", '{"seen": true}'),
        assistant("t2"),
        user(LINE),
    ]
    assert look.runs == [{"where": "here"}]
    assert (pred.metadata.termination_reason, pred.metadata.termination_cause) == ("submit", None)
    assert settled(pred.metadata.history.messages) == [
        thought_step("t1", intent="what is it?"),
        look_step("c1"),
        thought_step("t2"),
        submit_step(),
    ]
    lm.assert_complete()


def test_e4_the_step_limit_right_after_a_thought_forces_submit(run):
    lm = ScriptedLM([reply("t1"), reply(calls=[submit()])])
    agent = dspy_imp.ReActV2(TA, tools=[Look()], max_iters=1, finish="submit")
    with dspy.context(lm=lm):
        pred = run(agent, intent="what is it?")

    assert len(lm.requests) == 2
    r1, r2 = lm.requests
    assert_ordinary(r1)
    assert_forced(r2)
    assert r2.messages == [SYSTEM, inputs(intent="what is it?"), moved("t1")]
    meta = pred.metadata
    assert (meta.termination_reason, meta.termination_cause) == ("forced_submit", "max_iters")
    assert settled(meta.history.messages) == [thought_step("t1", intent="what is it?"), submit_step()]
    lm.assert_complete()


# -- E5, E6: the deadline and a whitespace reply -----------------------------------------------------


def test_e5_a_deadline_passed_before_the_continued_step_sends_nothing_more(run, fake_clock):
    lm = ScriptedLM([fake_clock.after(0.8, reply("t1"))])  # 0.8 s on the test's clock
    agent = dspy_imp.ReActV2(TA, tools=[Look()], finish="submit")
    with dspy.context(lm=lm), dspy_imp.deadline(seconds=0.4):
        pred = run(agent, intent="what is it?")

    assert len(lm.requests) == 1
    assert_ordinary(lm.requests[0])
    assert pred.answer is None and list(pred.keys()) == ["answer"]
    meta = pred.metadata
    assert (meta.termination_reason, meta.termination_cause) == ("incomplete", "deadline_exceeded")
    assert not meta.complete and not dspy_imp.is_complete(pred)
    assert meta.termination_error is None
    assert meta.history.messages == [thought_step("t1", intent="what is it?")]
    lm.assert_complete()


def test_e6_whitespace_only_text_is_not_continued(run):
    lm = ScriptedLM([reply("   "), reply(calls=[submit()])])
    agent = dspy_imp.ReActV2(TA, tools=[Look()], finish="submit")
    with dspy.context(lm=lm):
        pred = run(agent, intent="what is it?")

    assert len(lm.requests) == 2
    r1, r2 = lm.requests
    assert_ordinary(r1)
    assert_forced(r2)
    assert r2.messages == [SYSTEM, inputs(intent="what is it?")]  # nothing recorded; inputs still pending
    assert no_line_anywhere(lm.requests)
    meta = pred.metadata
    assert (meta.termination_reason, meta.termination_cause) == ("forced_submit", "empty_tool_calls")
    assert settled(meta.history.messages) == [submit_step(intent="what is it?")]
    lm.assert_complete()


# -- E7, E8: the line --------------------------------------------------------------------------------


def test_e7_the_line_names_every_output(run):
    lm = ScriptedLM([reply("t"), reply(calls=[call("submit", {"answer": "A cat.", "confidence": 0.8}, id="s1")])])
    agent = dspy_imp.ReActV2(SubmitSig, tools=[Look()], finish="submit")
    with dspy.context(lm=lm):
        pred = run(agent, intent="what is it?")

    r1, r2 = lm.requests
    assert_ordinary(r2)
    assert r2.messages == [*r1.messages, assistant("t"), user(LINE_TWO)]
    assert (pred.answer, pred.confidence) == ("A cat.", 0.8)
    assert pred.metadata.termination_reason == "submit"
    lm.assert_complete()


def test_e7_three_outputs_join_with_commas_and_and(run):
    class Three(dspy.Signature):
        """Answer with a confidence and a source."""

        intent: str = dspy.InputField()
        answer: str = dspy.OutputField()
        confidence: float = dspy.OutputField()
        source: str = dspy.OutputField()

    args = {"answer": "A cat.", "confidence": 0.8, "source": "the shelf"}
    lm = ScriptedLM([reply("t"), reply(calls=[call("submit", args, id="s1")])])
    agent = dspy_imp.ReActV2(Three, tools=[Look()], finish="submit")
    with dspy.context(lm=lm):
        pred = run(agent, intent="what is it?")

    r1, r2 = lm.requests
    assert r2.messages == [*r1.messages, assistant("t"), user(LINE_THREE)]
    assert pred.metadata.termination_reason == "submit"
    lm.assert_complete()


def test_e8_the_line_stays_in_every_later_request(run):
    lm = ScriptedLM(
        [reply("t1"), reply("checking", calls=[call("look", {}, id="c1")]), reply(calls=[submit()])],
    )
    agent = dspy_imp.ReActV2(TA, tools=[Look()], finish="submit")
    with dspy.context(lm=lm):
        pred = run(agent, intent="what is it?")

    assert len(lm.requests) == 3
    for request in lm.requests:
        assert_ordinary(request)
    _, r2, r3 = (r.messages for r in lm.requests)
    assert r3 == [*r2, assistant("checking", [("c1", "look", "{}")]), tool("c1", '{"seen": true}')]
    assert r3[2:4] == [assistant("t1"), user(LINE)]
    assert pred.metadata.termination_reason == "submit"
    lm.assert_complete()


# -- E9, E10: an empty submit is an observation ------------------------------------------------------


def test_e9_an_empty_submit_in_the_continued_step_then_a_valid_one(run):
    lm = ScriptedLM([reply("t1"), reply(calls=[call("submit", {}, id="s0")]), reply(calls=[submit()])])
    agent = dspy_imp.ReActV2(TA, tools=[Look()], finish="submit")
    with dspy.context(lm=lm):
        pred = run(agent, intent="what is it?")

    assert len(lm.requests) == 3
    for request in lm.requests:
        assert_ordinary(request)
    assert lm.requests[2].messages == [
        SYSTEM,
        inputs(intent="what is it?"),
        assistant("t1"),
        user(LINE),
        assistant("", [("s0", "submit", "{}")]),
        tool("s0", "Error: submit is missing: answer"),
    ]
    meta = pred.metadata
    assert (pred.answer, meta.termination_reason, meta.termination_cause) == ("It is a cat.", "submit", None)
    assert settled(meta.history.messages) == [
        thought_step("t1", intent="what is it?"),
        empty_submit_step("s0"),
        submit_step(),
    ]
    lm.assert_complete()


def test_e10_an_empty_submit_in_the_first_step_then_a_valid_one(run):
    lm = ScriptedLM([reply(calls=[call("submit", {}, id="s0")]), reply(calls=[submit()])])
    agent = dspy_imp.ReActV2(TA, tools=[Look()], finish="submit")
    with dspy.context(lm=lm):
        pred = run(agent, intent="what is it?")

    assert len(lm.requests) == 2
    for request in lm.requests:
        assert_ordinary(request)
    assert lm.requests[1].messages == [
        SYSTEM,
        inputs(intent="what is it?"),
        assistant("", [("s0", "submit", "{}")]),
        tool("s0", "Error: submit is missing: answer"),
    ]
    meta = pred.metadata
    assert (pred.answer, meta.termination_reason, meta.termination_cause) == ("It is a cat.", "submit", None)
    assert settled(meta.history.messages) == [empty_submit_step("s0", intent="what is it?"), submit_step()]
    lm.assert_complete()


# -- E12, E13: extracted outputs ---------------------------------------------------------------------


def _extracted_turn(run: Any) -> Any:
    """E12's turn: two thoughts, a forced request answered in text, then the extractor."""
    lm = ScriptedLM([reply("t1"), reply("t2"), reply("I think it's a cat."), reply(EXTRACTED_CAT)])
    agent = dspy_imp.ReActV2(TA, tools=[Look()], finish="submit")
    with dspy.context(lm=lm):
        pred = run(agent, intent="what is it?")
    lm.assert_complete()
    return lm, agent, pred


def test_e12_extracted_outputs_end_the_history_and_render_nothing_on_replay(run):
    lm, agent, pred = _extracted_turn(run)

    assert len(lm.requests) == 4
    assert_forced(lm.requests[2])
    assert lm.requests[2].messages == [
        SYSTEM,
        inputs(intent="what is it?"),
        assistant("t1"),
        user(LINE),
        moved("t2"),
    ]
    extraction = lm.requests[3]
    assert extraction.tools is None and extraction.tool_choice is None
    assert pred.answer == "cat"
    meta = pred.metadata
    assert (meta.termination_reason, meta.termination_cause) == ("extracted", "empty_tool_calls")
    assert meta.history.messages == [
        thought_step("t1", intent="what is it?"),
        thought_step("t2"),
        thought_step("I think it's a cat."),
        {"tool_calls": [], "tool_call_results": [], "answer": "cat"},
    ]

    # Next call, new intent: every thought keeps its line but the one the extracted outputs
    # directly follow; the extracted entry renders no message.
    lm2 = ScriptedLM([reply(calls=[submit("Still a cat.")])])
    with dspy.context(lm=lm2):
        again = run(agent, intent="and now?", history=meta.history)

    [request] = lm2.requests
    assert_ordinary(request)
    assert request.messages == [
        SYSTEM,
        inputs(intent="what is it?"),
        assistant("t1"),
        user(LINE),
        assistant("t2"),
        user(LINE),
        assistant("I think it's a cat."),
        inputs(intent="and now?"),
    ]
    assert not any(m["content"] == "cat" for m in request.messages)
    assert again.metadata.termination_reason == "submit"
    lm2.assert_complete()


def test_e13_a_resume_after_an_extracted_turn_ends_on_a_user_turn(run):
    _, agent, pred = _extracted_turn(run)
    history = pred.metadata.history

    lm = ScriptedLM([reply(calls=[submit("A cat.")])])
    with dspy.context(lm=lm):
        resumed = run(agent, history=history, max_iters=0)

    [forced] = lm.requests
    assert_forced(forced)
    # The last thought is found looking past the extracted entry, and moved.
    assert forced.messages == [
        SYSTEM,
        inputs(intent="what is it?"),
        assistant("t1"),
        user(LINE),
        assistant("t2"),
        user(LINE),
        moved("I think it's a cat."),
    ]
    assert forced.roles[-1] == "user"
    meta = resumed.metadata
    assert (resumed.answer, meta.termination_reason, meta.termination_cause) == (
        "A cat.",
        "forced_submit",
        "max_iters",
    )
    assert settled(meta.history.messages) == [*history.messages, submit_step("A cat.")]
    lm.assert_complete()


# -- E14–E16: forced requests over a held history ----------------------------------------------------


def test_e14_a_forced_request_with_new_inputs_keeps_the_line(run):
    history = dspy.History(messages=[thought_step("It might be a cat.", intent="what is it?")])
    lm = ScriptedLM([reply(calls=[submit()])])
    agent = dspy_imp.ReActV2(TA, tools=[Look()], finish="submit")
    with dspy.context(lm=lm):
        pred = run(agent, intent="are you sure?", history=history, max_iters=0)

    [forced] = lm.requests
    assert_forced(forced)
    assert forced.messages == [
        SYSTEM,
        inputs(intent="what is it?"),
        assistant("It might be a cat."),
        user(LINE),
        inputs(intent="are you sure?"),
    ]
    meta = pred.metadata
    assert (meta.termination_reason, meta.termination_cause) == ("forced_submit", "max_iters")
    assert settled(meta.history.messages) == [*history.messages, submit_step(intent="are you sure?")]
    assert history.messages == [thought_step("It might be a cat.", intent="what is it?")]  # not mutated
    lm.assert_complete()


def _two_auto_answers(run: Any) -> Any:
    """Two turns a text-answer program answered in plain text under ``"auto"``."""
    lm = ScriptedLM([reply("It is a cat."), reply("Still a cat.")])
    auto = dspy_imp.ReActV2(TA, tools=[Look()])
    with dspy.context(lm=lm):
        first = run(auto, intent="what is it?")
        second = run(auto, intent="and now?", history=first.metadata.history)
    assert second.metadata.termination_reason == "answered"
    lm.assert_complete()
    return second.metadata.history


def test_e15_auto_answers_replayed_under_submit_get_no_line(run):
    history = _two_auto_answers(run)
    lm = ScriptedLM([reply(calls=[submit("A dog.")])])
    agent = dspy_imp.ReActV2(TA, tools=[Look()], finish="submit")
    with dspy.context(lm=lm):
        pred = run(agent, intent="and that one?", history=history)

    [request] = lm.requests
    assert_ordinary(request)
    assert request.roles == ["system", "user", "assistant", "user", "assistant", "user"]
    assert request.messages == [
        SYSTEM,
        inputs(intent="what is it?"),
        assistant("It is a cat."),
        inputs(intent="and now?"),
        assistant("Still a cat."),
        inputs(intent="and that one?"),
    ]
    assert no_line_anywhere(lm.requests)
    assert (pred.answer, pred.metadata.termination_reason) == ("A dog.", "submit")
    lm.assert_complete()


def test_e16_known_gap_a_forced_request_over_an_answer_ends_on_it(run):
    history = _two_auto_answers(run)
    lm = ScriptedLM([reply(calls=[submit("A dog.")])])
    agent = dspy_imp.ReActV2(TA, tools=[Look()], finish="submit")
    with dspy.context(lm=lm):
        pred = run(agent, history=history, max_iters=0)

    [forced] = lm.requests
    assert_forced(forced)
    # Answers are never moved, so with nothing new the request ends on the model's answer.
    assert forced.messages == [
        SYSTEM,
        inputs(intent="what is it?"),
        assistant("It is a cat."),
        inputs(intent="and now?"),
        assistant("Still a cat."),
    ]
    assert forced.roles[-1] == "assistant"
    assert no_line_anywhere(lm.requests)
    assert (pred.metadata.termination_reason, pred.metadata.termination_cause) == ("forced_submit", "max_iters")
    lm.assert_complete()


# -- E17: a text-answer signature under "submit" -----------------------------------------------------


def test_e17_a_text_answer_signature_is_told_to_call_submit_and_text_never_answers(run):
    lm = ScriptedLM(
        [reply("It is a cat."), reply("It is a cat, really."), reply("A cat."), reply("cat, no doubt")],
    )
    agent = dspy_imp.ReActV2(TA, tools=[Look()], finish="submit")
    with dspy.context(lm=lm):
        pred = run(agent, intent="what is it?")

    assert len(lm.requests) == 4  # step, continued step, forced submit, extraction
    assert lm.requests[0].messages[0] == SYSTEM
    assert "When the final answer is ready, call `submit`." in SYSTEM_TA_SUBMIT
    for request in lm.requests[:2]:
        assert_ordinary(request)
    assert_forced(lm.requests[2])
    assert lm.requests[3].tools is None
    # No text became the answer: the extraction reply could not be read, so nothing was answered.
    assert pred.answer is None
    meta = pred.metadata
    assert (meta.termination_reason, meta.termination_cause) == ("incomplete", "empty_tool_calls")
    assert set(meta.termination_error) == {"extraction"}
    assert meta.history.messages == [
        thought_step("It is a cat.", intent="what is it?"),
        thought_step("It is a cat, really."),
        thought_step("A cat."),
    ]
    assert not any("answer" in entry for entry in meta.history.messages)
    lm.assert_complete()


# -- replay of extracted outputs by hand ---------------------------------------------------------------


def test_only_the_thought_the_extracted_outputs_directly_follow_loses_its_line(run):
    history = dspy.History(
        messages=[
            thought_step("First I look.", intent="what is it?"),
            look_step("c1", thought="checking"),
            thought_step("It is a cat."),
            {"tool_calls": [], "tool_call_results": [], "answer": "cat"},
        ]
    )
    lm = ScriptedLM([reply(calls=[submit()])])
    agent = dspy_imp.ReActV2(TA, tools=[Look()], finish="submit")
    with dspy.context(lm=lm):
        run(agent, intent="and now?", history=history)

    [request] = lm.requests
    assert request.messages == [
        SYSTEM,
        inputs(intent="what is it?"),
        assistant("First I look."),
        user(LINE),
        assistant("checking", [("c1", "look", "{}")]),
        tool("c1", '{"seen": true}'),
        assistant("It is a cat."),
        inputs(intent="and now?"),
    ]
    lm.assert_complete()


def test_extracted_outputs_carrying_unspent_inputs_render_only_their_user_message(run):
    history = dspy.History(
        messages=[{"intent": "what is it?", "tool_calls": [], "tool_call_results": [], "answer": "cat"}]
    )
    lm = ScriptedLM([reply(calls=[submit()])])
    agent = dspy_imp.ReActV2(TA, tools=[Look()], finish="submit")
    with dspy.context(lm=lm):
        run(agent, intent="and now?", history=history)

    [request] = lm.requests
    assert request.messages == [SYSTEM, inputs(intent="what is it?"), inputs(intent="and now?")]
    lm.assert_complete()


# -- [Q17]: last_request_note under "submit" -----------------------------------------------------------

NOTE = "You have used every step. Submit your answer now."


@pytest.mark.parametrize("where", ["program", "call"])
def test_q17_the_note_applies_to_the_forced_submit_never_to_the_continued_step(run, where):
    lm = ScriptedLM([reply("t1"), reply("t2"), reply(calls=[submit()])])
    program_note = NOTE if where == "program" else None
    call_note = {"last_request_note": NOTE} if where == "call" else {}
    agent = dspy_imp.ReActV2(TA, tools=[Look()], finish="submit", last_request_note=program_note)
    with dspy.context(lm=lm):
        pred = run(agent, intent="what is it?", **call_note)

    r1, r2, r3 = lm.requests
    assert_ordinary(r1)
    assert_ordinary(r2)
    assert r1.messages == [SYSTEM, inputs(intent="what is it?")]
    assert r2.messages == [SYSTEM, inputs(intent="what is it?"), assistant("t1"), user(LINE)]
    assert_forced(r3)
    # The note follows t2, so t2 is not moved and keeps its line.
    assert r3.messages == [
        SYSTEM,
        inputs(intent="what is it?"),
        assistant("t1"),
        user(LINE),
        assistant("t2"),
        user(LINE),
        inputs(intent=NOTE),
    ]
    meta = pred.metadata
    assert (meta.termination_reason, meta.termination_cause) == ("forced_submit", "empty_tool_calls")
    assert settled(meta.history.messages) == [
        thought_step("t1", intent="what is it?"),
        thought_step("t2"),
        {"intent": NOTE, "tool_calls": [], "tool_call_results": []},
        submit_step(),
    ]
    lm.assert_complete()


def test_q17_a_turn_ending_in_the_continued_step_never_sees_the_note(run):
    lm = ScriptedLM([reply("t1"), reply(calls=[submit()])])
    agent = dspy_imp.ReActV2(TA, tools=[Look()], finish="submit", last_request_note=NOTE)
    with dspy.context(lm=lm):
        pred = run(agent, intent="what is it?")

    assert not any(NOTE in str(m["content"]) for r in lm.requests for m in r.messages)
    assert pred.metadata.termination_reason == "submit"
    assert len(pred.metadata.history.messages) == 2
    lm.assert_complete()


# -- a per-call finish="submit" on an "auto" text-answer program ---------------------------------------


def test_per_call_finish_submit_on_an_auto_text_answer_program(run):
    lm = ScriptedLM([reply("Let me look first."), reply(calls=[submit()]), reply("Still a cat.")])
    agent = dspy_imp.ReActV2(TA, tools=[Look()])
    with dspy.context(lm=lm):
        first = run(agent, intent="what is it?", finish="submit")
        second = run(agent, intent="and now?", history=first.metadata.history)

    r1, r2, r3 = lm.requests
    assert_ordinary(r1)
    assert_ordinary(r2)
    assert r2.messages == [SYSTEM, inputs(intent="what is it?"), assistant("Let me look first."), user(LINE)]
    assert (first.answer, first.metadata.termination_reason) == ("It is a cat.", "submit")
    assert settled(first.metadata.history.messages) == [
        thought_step("Let me look first.", intent="what is it?"),
        submit_step(),
    ]

    # The next call is the program's own "auto": no submit, the plain line, the submit as the answer.
    assert_ordinary(r3, roster=("look",))
    assert (
        "When the final answer is ready, reply without calling a tool: that message is `answer`."
        in (r3.messages[0]["content"])
    )
    assert r3.messages[1:] == [
        inputs(intent="what is it?"),
        assistant("Let me look first."),
        user("Your message above was not sent."),
        assistant("It is a cat."),
        inputs(intent="and now?"),
    ]
    assert (second.answer, second.metadata.termination_reason) == ("Still a cat.", "answered")
    lm.assert_complete()
