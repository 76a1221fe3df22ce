"""Reference §12 A5 and D: the forced submit, the "required" retry and the extractor (§3.4, §7.5)."""

from __future__ import annotations

from typing import Any

import dspy
import pytest
from dspy.utils.exceptions import LMBillingError, LMInvalidRequestError, LMServerError
from helpers import NAMED_SUBMIT, Look, SubmitSig, assistant, inputs, moved, settled, tool, user

import dspy_imp
from dspy_imp.testing import ScriptedLM, call, fail, reply

APPENDIX_A = (
    "Produce the final outputs only from the original inputs and successful tool results recorded in "
    "`history`. A proposed tool call, model reasoning, a malformed call, or an error result is not evidence "
    "that an action happened. Never claim that an action or verification succeeded unless `history` contains "
    "its successful result. If the requested outcome is not established, report that limitation honestly in "
    "the declared output fields. No tools are available during this extraction step."
)
EXTRACTED = (
    "[[ ## reasoning ## ]]\nThe history settles it.\n\n[[ ## answer ## ]]\nParis\n\n"
    "[[ ## confidence ## ]]\n0.9\n\n[[ ## completed ## ]]"
)
EXTRACTED_ENTRY = {"tool_calls": [], "tool_call_results": [], "answer": "Paris", "confidence": 0.9}


def submit(answer: Any = "Paris", confidence: Any = 0.9, *, id: str = "s1") -> Any:
    return call("submit", {"answer": answer, "confidence": confidence}, id=id)


def submit_step(answer: Any = "Paris", confidence: Any = 0.9, *, id: str = "s1", **keys: Any) -> dict[str, Any]:
    """The entry of a step whose only call was a valid submit."""
    return {
        **keys,
        "tool_calls": [{"id": id, "name": "submit", "args": {"answer": answer, "confidence": confidence}}],
        "tool_call_results": [
            {"id": id, "name": "submit", "result": {"answer": answer, "confidence": float(confidence)}, "error": False}
        ],
        "answer": answer,
        "confidence": float(confidence),
    }


def empty_submit_step(id: str = "s0", **keys: Any) -> dict[str, Any]:
    """The entry of a step whose only call was ``submit({})``."""
    return {
        **keys,
        "tool_calls": [{"id": id, "name": "submit", "args": {}}],
        "tool_call_results": [
            {
                "id": id,
                "name": "submit",
                "result": "submit is missing: answer, confidence",
                "error": True,
                "error_kind": "missing_output_fields",
            }
        ],
    }


def thought_step(text: str, **keys: Any) -> dict[str, Any]:
    return {**keys, "next_thought": text, "tool_calls": [], "tool_call_results": []}


def lookup(query: str) -> str:
    """Look something up."""
    return f"found {query}"


def assert_forced(request: Any) -> None:
    """The forced request: submit named, no reasoning spent (None never reaches the engine)."""
    assert request.tool_choice == NAMED_SUBMIT
    assert "reasoning_effort" not in request.options


# -- A5: several outputs, text is a thought, forced at once (DSPy's ending) ------------------------


def test_a5_text_is_a_thought_and_the_forced_submit_follows_with_it_moved(run):
    thought = "I already know this one."
    lm = ScriptedLM([reply(thought), reply(calls=[submit()])])
    agent = dspy_imp.ReActV2(SubmitSig, tools=[])
    with dspy.context(lm=lm):
        pred = run(agent, intent="capital of France?")

    assert len(lm.requests) == 2
    r1, r2 = lm.requests
    assert r1.tool_choice == "auto" and r1.tool_names == ["submit"]
    assert_forced(r2)
    assert r2.tool_names == ["submit"]
    assert r2.messages == [r1.messages[0], inputs(intent="capital of France?"), moved(thought)]
    assert (pred.answer, pred.confidence) == ("Paris", 0.9)
    assert list(pred.keys()) == ["answer", "confidence"]
    meta = pred.metadata
    assert (meta.termination_reason, meta.termination_cause) == ("forced_submit", "empty_tool_calls")
    assert meta.finish_reason is None and meta.unexecuted_tool_calls == ()
    assert settled(meta.history.messages) == [
        thought_step(thought, intent="capital of France?"),
        submit_step(),
    ]
    lm.assert_complete()


def test_a5_with_a_note_the_thought_stays_the_models_message(run):
    thought = "I already know this one."
    lm = ScriptedLM([reply(thought), reply(calls=[submit()])])
    agent = dspy_imp.ReActV2(SubmitSig, tools=[], last_request_note="Submit now.")
    with dspy.context(lm=lm):
        pred = run(agent, intent="capital of France?")

    r1, r2 = lm.requests
    assert_forced(r2)
    # Under "auto" with a submit signature no unsent line is rendered (DSPy's ending).
    assert r2.messages == [
        r1.messages[0],
        inputs(intent="capital of France?"),
        assistant(thought),
        inputs(intent="Submit now."),
    ]
    assert pred.metadata.termination_reason == "forced_submit"
    assert settled(pred.metadata.history.messages) == [
        thought_step(thought, intent="capital of France?"),
        {"intent": "Submit now.", "tool_calls": [], "tool_call_results": []},
        submit_step(),
    ]
    lm.assert_complete()


# -- D1–D4: the forced request's shape -------------------------------------------------------------


def test_d1_a_thought_forces_submit_with_no_reasoning_spent(run):
    lm = ScriptedLM([reply("ready"), reply(calls=[submit("forced", 1.0)])])
    agent = dspy_imp.ReActV2(SubmitSig, tools=[Look()], config={"reasoning_effort": "high", "temperature": 0.3})
    with dspy.context(lm=lm):
        pred = run(agent, intent="go")

    assert len(lm.requests) == 2
    r1, r2 = lm.requests
    assert r1.tool_choice == "auto"
    assert r1.options == {"reasoning_effort": "high", "temperature": 0.3}
    assert_forced(r2)
    # The loop sets reasoning_effort=None on the forced request, over the program's "high".
    assert r2.options == {"temperature": 0.3}
    assert r2.tools == r1.tools and r2.tool_names == ["look", "submit"]
    meta = pred.metadata
    assert (pred.answer, pred.confidence) == ("forced", 1.0)
    assert (meta.termination_reason, meta.termination_cause) == ("forced_submit", "empty_tool_calls")
    lm.assert_complete()


def test_d2_step_limit_after_a_tool_step_ends_on_the_tool_message(run):
    lm = ScriptedLM([reply(calls=[call("submit", {}, id="toolu_incomplete")]), reply(calls=[submit()])])
    agent = dspy_imp.ReActV2(SubmitSig, tools=[], max_iters=1)
    with dspy.context(lm=lm):
        pred = run(agent, intent="capital of France?")

    r1, r2 = lm.requests
    assert_forced(r2)
    assert r2.roles == ["system", "user", "assistant", "tool"]
    assert r2.messages == [
        r1.messages[0],
        inputs(intent="capital of France?"),
        assistant("", [("toolu_incomplete", "submit", "{}")]),
        tool("toolu_incomplete", "Error: submit is missing: answer, confidence"),
    ]
    meta = pred.metadata
    assert (pred.answer, pred.confidence) == ("Paris", 0.9)
    assert (meta.termination_reason, meta.termination_cause) == ("forced_submit", "max_iters")
    assert settled(meta.history.messages) == [
        empty_submit_step("toolu_incomplete", intent="capital of France?"),
        submit_step(),
    ]
    lm.assert_complete()


NOTE = "You have used every turn. Submit the answer you have now."


def test_d3_the_note_is_the_forced_requests_last_message_and_replays(run):
    lm = ScriptedLM(
        [
            reply("look first", calls=[call("look", {"where": "shelf"}, id="c1")]),
            reply(calls=[submit("ok", 1.0)]),
            reply(calls=[submit("again", 0.5, id="s2")]),
        ]
    )
    agent = dspy_imp.ReActV2(SubmitSig, tools=[Look()], max_iters=1, last_request_note=NOTE)
    with dspy.context(lm=lm):
        pred = run(agent, intent="is it there?")
        r1, r2 = lm.requests
        assert_forced(r2)
        assert r2.messages == [
            r1.messages[0],
            inputs(intent="is it there?"),
            assistant("look first", [("c1", "look", '{"where":"shelf"}')]),
            tool("c1", '{"seen": true}'),
            inputs(intent=NOTE),
        ]
        assert all((m["content"] or "").strip() for m in r2.messages if m["role"] == "user")
        assert "Not supplied" not in str(r2.messages)
        meta = pred.metadata
        assert (meta.termination_reason, meta.termination_cause) == ("forced_submit", "max_iters")
        assert settled(meta.history.messages) == [
            {
                "intent": "is it there?",
                "next_thought": "look first",
                "tool_calls": [{"id": "c1", "name": "look", "args": {"where": "shelf"}}],
                "tool_call_results": [{"id": "c1", "name": "look", "result": {"seen": True}, "error": False}],
            },
            {"intent": NOTE, "tool_calls": [], "tool_call_results": []},
            submit_step("ok", 1.0),
        ]

        # Replayed next call: right after the note, the assistant's submit call and its result.
        again = run(agent, intent="and now?", history=meta.history)

    replay = lm.requests[2].messages
    note_at = replay.index(inputs(intent=NOTE))
    assert replay[note_at + 1 :] == [
        assistant("", [("s1", "submit", '{"answer":"ok","confidence":1.0}')]),
        tool("s1", '{"answer": "ok", "confidence": 1.0}'),
        inputs(intent="and now?"),
    ]
    assert again.metadata.termination_reason == "submit"
    lm.assert_complete()


def test_d4_without_a_note_nothing_is_added(run):
    lm = ScriptedLM(
        [reply("look first", calls=[call("look", {"where": "shelf"}, id="c1")]), reply(calls=[submit("ok", 1.0)])]
    )
    agent = dspy_imp.ReActV2(SubmitSig, tools=[Look()], max_iters=1)
    with dspy.context(lm=lm):
        pred = run(agent, intent="is it there?")

    first, forced = (r.messages for r in lm.requests)
    assert len(forced) == len(first) + 2
    assert forced[: len(first)] == first
    assert forced[-1] == tool("c1", '{"seen": true}')
    assert len(pred.metadata.history.messages) == 2
    lm.assert_complete()


# -- D5–D8: the "required" retry and the extractor -------------------------------------------------


def test_d5_a_refused_named_tool_choice_gets_one_required_retry(run):
    lm = ScriptedLM(
        [reply(calls=[call("submit", {}, id="s0")]), fail.tool_choice_refused(), reply(calls=[submit(id="s2")])]
    )
    agent = dspy_imp.ReActV2(SubmitSig, tools=[lookup], max_iters=1)
    with dspy.context(lm=lm):
        pred = run(agent, intent="capital of France?")

    assert len(lm.requests) == 3
    r1, r2, r3 = lm.requests
    assert [r.tool_choice for r in lm.requests] == ["auto", NAMED_SUBMIT, "required"]
    assert r1.tool_names == ["lookup", "submit"] and r2.tool_names == ["lookup", "submit"]
    assert r3.tool_names == ["submit"]
    assert r3.tools == [r2.tools[1]]
    assert "reasoning_effort" not in r3.options
    # Same messages: the native system message lists no tools, so the reduced roster leaves it as it was.
    assert r3.messages == r2.messages
    assert r2.messages[-1] == tool("s0", "Error: submit is missing: answer, confidence")
    meta = pred.metadata
    assert (pred.answer, pred.confidence) == ("Paris", 0.9)
    assert (meta.termination_reason, meta.termination_cause) == ("forced_submit", "max_iters")
    assert meta.termination_error is None
    assert settled(meta.history.messages) == [
        empty_submit_step(intent="capital of France?"),
        submit_step(id="s2"),
    ]
    lm.assert_complete()


def test_d6_an_unrelated_rejection_of_the_forced_request_raises_step_error(run):
    lm = ScriptedLM(
        [reply(calls=[call("submit", {}, id="s0")]), fail.invalid_request("Invalid request: model is unavailable")]
    )
    agent = dspy_imp.ReActV2(SubmitSig, tools=[lookup], max_iters=1)
    with dspy.context(lm=lm), pytest.raises(dspy_imp.StepError) as caught:
        run(agent, intent="capital of France?")

    assert len(lm.requests) == 2
    error = caught.value
    assert isinstance(error.reason, LMInvalidRequestError)
    assert "model is unavailable" in str(error.reason)
    assert settled(error.history.messages) == [empty_submit_step(intent="capital of France?")]
    lm.assert_complete()


def test_d7_a_required_retry_answering_text_goes_to_the_extractor(run):
    lm = ScriptedLM(
        [
            reply(calls=[call("submit", {}, id="s0")]),
            fail.tool_choice_refused(),
            reply("I will submit Paris now."),
            reply(EXTRACTED),
        ]
    )
    agent = dspy_imp.ReActV2(SubmitSig, tools=[lookup], max_iters=1)
    with dspy.context(lm=lm):
        pred = run(agent, intent="capital of France?")

    assert len(lm.requests) == 4
    assert [r.tool_choice for r in lm.requests[:3]] == ["auto", NAMED_SUBMIT, "required"]
    extraction = lm.requests[3]
    assert extraction.tools is None and extraction.tool_choice is None
    assert extraction.roles == ["system", "user"]
    system, prompt = (m["content"] for m in extraction.messages)
    assert "only from the original inputs and successful tool" in system
    assert "is not evidence that an action happened" in system
    assert APPENDIX_A in system
    assert "Answer the intent with a confidence." in system
    assert system.index("Answer the intent with a confidence.") < system.index(APPENDIX_A)
    assert prompt.startswith(
        "[[ ## intent ## ]]\ncapital of France?\n\n[[ ## history ## ]]\n"
        "[1]\nintent: capital of France?\ncall submit({}) -> Error: submit is missing: answer, confidence\n\n"
        "[2]\nassistant: I will submit Paris now.\n\n"
    )
    assert "Not supplied" not in prompt

    assert list(pred.keys()) == ["answer", "confidence"]
    assert (pred.answer, pred.confidence) == ("Paris", 0.9)
    meta = pred.metadata
    assert (meta.termination_reason, meta.termination_cause) == ("extracted", "max_iters")
    assert settled(meta.history.messages) == [
        empty_submit_step(intent="capital of France?"),
        thought_step("I will submit Paris now."),
        EXTRACTED_ENTRY,
    ]
    lm.assert_complete()


def test_d8_an_extraction_request_that_fails_raises_step_error(run):
    lm = ScriptedLM([reply("thinking"), reply("still thinking"), fail.server_error(503)])
    agent = dspy_imp.ReActV2(SubmitSig, tools=[])
    with dspy.context(lm=lm), pytest.raises(dspy_imp.StepError) as caught:
        run(agent, intent="capital of France?")

    assert isinstance(caught.value.reason, LMServerError) and caught.value.reason.status == 503
    assert len(lm.requests) == 3
    assert caught.value.history.messages == [
        thought_step("thinking", intent="capital of France?"),
        thought_step("still thinking"),
    ]
    lm.assert_complete()


def test_d8_an_unparseable_extraction_is_incomplete(run):
    lm = ScriptedLM([reply("thinking"), reply("still thinking"), reply("Paris, I suppose.")])
    agent = dspy_imp.ReActV2(SubmitSig, tools=[])
    with dspy.context(lm=lm):
        pred = run(agent, intent="capital of France?")

    assert len(lm.requests) == 3  # one extraction request: no JSON fallback
    assert (pred.answer, pred.confidence) == (None, None)
    meta = pred.metadata
    assert (meta.termination_reason, meta.termination_cause) == ("incomplete", "empty_tool_calls")
    assert set(meta.termination_error) == {"extraction"}
    assert meta.termination_error["extraction"].startswith("AdapterParseError: ")
    assert len(meta.history.messages) == 2
    lm.assert_complete()


def test_d8_extracted_outputs_failing_validation_are_incomplete_with_feedback(run):
    class Strict(dspy.Signature):
        """Answer the intent with a confidence."""

        intent: str = dspy.InputField()
        answer: str = dspy.OutputField(min_length=6)
        confidence: float = dspy.OutputField()

    lm = ScriptedLM([reply("thinking"), reply("still thinking"), reply(EXTRACTED)])
    agent = dspy_imp.ReActV2(Strict, tools=[])
    with dspy.context(lm=lm):
        pred = run(agent, intent="capital of France?")

    assert (pred.answer, pred.confidence) == (None, None)
    meta = pred.metadata
    assert (meta.termination_reason, meta.termination_cause) == ("incomplete", "empty_tool_calls")
    assert set(meta.termination_error) == {"extraction"}
    assert "`answer`" in meta.termination_error["extraction"]
    assert meta.history.messages == [
        thought_step("thinking", intent="capital of France?"),
        thought_step("still thinking"),
    ]
    lm.assert_complete()


# -- D9, D10: an invalid or refused forced submit --------------------------------------------------


def test_d9_an_invalid_forced_submit_goes_to_the_extractor(run):
    lm = ScriptedLM([reply(calls=[call("submit", {}, id="s0")]), reply(EXTRACTED)])
    agent = dspy_imp.ReActV2(SubmitSig, tools=[], max_iters=0)
    with dspy.context(lm=lm):
        pred = run(agent, intent="capital of France?")

    assert len(lm.requests) == 2
    assert_forced(lm.requests[0])
    assert lm.requests[1].tools is None and lm.requests[1].tool_choice is None
    meta = pred.metadata
    assert (pred.answer, pred.confidence) == ("Paris", 0.9)
    assert (meta.termination_reason, meta.termination_cause) == ("extracted", "max_iters")
    assert settled(meta.history.messages) == [empty_submit_step(intent="capital of France?"), EXTRACTED_ENTRY]
    lm.assert_complete()


def test_d10_a_forced_submit_refused_by_policy_never_goes_to_the_extractor(run):
    lm = ScriptedLM([reply("ready"), reply(calls=[submit()])])
    agent = dspy_imp.ReActV2(SubmitSig, tools=[Look()], tool_policy=["look"])
    with dspy.context(lm=lm):
        pred = run(agent, intent="capital of France?")

    assert len(lm.requests) == 2  # no extraction request
    assert_forced(lm.requests[1])
    meta = pred.metadata
    assert (pred.answer, pred.confidence) == (None, None)
    assert (meta.termination_reason, meta.termination_cause) == ("incomplete", "empty_tool_calls")
    assert settled(meta.history.messages) == [
        thought_step("ready", intent="capital of France?"),
        {
            "tool_calls": [{"id": "s1", "name": "submit", "args": {"answer": "Paris", "confidence": 0.9}}],
            "tool_call_results": [
                {
                    "id": "s1",
                    "name": "submit",
                    "result": "submit is not allowed.",
                    "error": True,
                    "error_kind": "tool_denied",
                }
            ],
        },
    ]
    lm.assert_complete()


# -- D13: a fatal error on the required retry ------------------------------------------------------


def test_d7_a_required_retry_that_fails_otherwise_goes_to_the_extractor(run):
    lm = ScriptedLM(
        [
            reply(calls=[call("submit", {}, id="s0")]),
            fail.tool_choice_refused(),
            fail.server_error(message="upstream hiccup"),
            reply(EXTRACTED),
        ]
    )
    agent = dspy_imp.ReActV2(SubmitSig, tools=[lookup], max_iters=1)
    with dspy.context(lm=lm):
        pred = run(agent, intent="capital of France?")

    assert [r.tool_choice for r in lm.requests] == ["auto", NAMED_SUBMIT, "required", None]
    meta = pred.metadata
    assert (meta.termination_reason, meta.termination_cause) == ("extracted", "max_iters")
    assert (pred.answer, pred.confidence) == ("Paris", 0.9)
    assert meta.termination_error is None  # set only for "incomplete" turns


def test_d13_a_fatal_error_on_the_required_retry_raises_step_error(run):
    billing = LMBillingError("Your credit balance is too low.", status=402)
    lm = ScriptedLM([reply("ready"), fail.tool_choice_refused(), fail.raises(billing)])
    agent = dspy_imp.ReActV2(SubmitSig, tools=[Look()])
    with dspy.context(lm=lm), pytest.raises(dspy_imp.StepError) as caught:
        run(agent, intent="capital of France?")

    assert caught.value.reason is billing
    assert len(lm.requests) == 3  # no extraction
    assert [r.tool_choice for r in lm.requests] == ["auto", NAMED_SUBMIT, "required"]
    assert caught.value.history.messages == [thought_step("ready", intent="capital of France?")]
    lm.assert_complete()


# -- [Q3]: non-submit calls in the forced request --------------------------------------------------


def test_q3_non_submit_calls_in_the_forced_request_are_listed_not_run_not_recorded(run):
    look = Look()
    lm = ScriptedLM(
        [reply("ready"), reply(calls=[call("look", {"where": "attic"}, id="l1"), submit(id="s1")])],
    )
    agent = dspy_imp.ReActV2(SubmitSig, tools=[look])
    with dspy.context(lm=lm):
        pred = run(agent, intent="capital of France?")

    assert look.runs == []
    meta = pred.metadata
    assert (meta.termination_reason, meta.termination_cause) == ("forced_submit", "empty_tool_calls")
    assert meta.unexecuted_tool_calls == ({"id": "l1", "name": "look", "args": {"where": "attic"}},)
    assert settled(meta.history.messages) == [thought_step("ready", intent="capital of France?"), submit_step()]
    lm.assert_complete()


def test_q3_a_forced_request_with_only_other_calls_goes_to_the_extractor_listing_them(run):
    look = Look()
    lm = ScriptedLM([reply("ready"), reply(calls=[call("look", {"where": "attic"}, id="l1")]), reply(EXTRACTED)])
    agent = dspy_imp.ReActV2(SubmitSig, tools=[look])
    with dspy.context(lm=lm):
        pred = run(agent, intent="capital of France?")

    assert look.runs == []
    assert len(lm.requests) == 3
    assert "call look" not in lm.requests[2].messages[1]["content"]
    meta = pred.metadata
    assert (meta.termination_reason, meta.termination_cause) == ("extracted", "empty_tool_calls")
    assert meta.unexecuted_tool_calls == ({"id": "l1", "name": "look", "args": {"where": "attic"}},)
    assert settled(meta.history.messages) == [thought_step("ready", intent="capital of France?"), EXTRACTED_ENTRY]
    lm.assert_complete()


# -- [Q4]: thought_as_request on the "auto" forced submit ------------------------------------------


def test_q4_thought_after_a_tool_step_is_moved_on_the_auto_forced_submit(run):
    lm = ScriptedLM(
        [reply(calls=[call("look", {"where": "shelf"}, id="c1")]), reply("It is there."), reply(calls=[submit()])]
    )
    agent = dspy_imp.ReActV2(SubmitSig, tools=[Look()])
    with dspy.context(lm=lm):
        pred = run(agent, intent="is it there?")

    r1, _, r3 = lm.requests
    assert_forced(r3)
    assert r3.messages == [
        r1.messages[0],
        inputs(intent="is it there?"),
        assistant("", [("c1", "look", '{"where":"shelf"}')]),
        tool("c1", '{"seen": true}'),
        moved("It is there."),
    ]
    assert r3.roles[-1] == "user"
    assert pred.metadata.termination_reason == "forced_submit"
    lm.assert_complete()


def test_q4_a_resume_looks_past_an_extracted_entry_and_ends_on_a_user_turn(run):
    history = dspy.History(
        messages=[
            thought_step("I think it's Paris.", intent="capital of France?"),
            dict(EXTRACTED_ENTRY),
        ]
    )
    lm = ScriptedLM([reply(calls=[submit()])])
    agent = dspy_imp.ReActV2(SubmitSig, tools=[])
    with dspy.context(lm=lm):
        pred = run(agent, history=history, max_iters=0)

    [forced] = lm.requests
    assert_forced(forced)
    assert forced.messages == [forced.messages[0], inputs(intent="capital of France?"), moved("I think it's Paris.")]
    assert forced.roles[-1] == "user"
    meta = pred.metadata
    assert (meta.termination_reason, meta.termination_cause) == ("forced_submit", "max_iters")
    assert settled(meta.history.messages)[:2] == history.messages
    lm.assert_complete()


def test_q4_a_forced_request_with_new_inputs_keeps_the_thought_as_the_models_message(run):
    history = dspy.History(messages=[thought_step("It might be Lyon.", intent="capital of France?")])
    lm = ScriptedLM([reply(calls=[submit()])])
    agent = dspy_imp.ReActV2(SubmitSig, tools=[])
    with dspy.context(lm=lm):
        pred = run(agent, intent="are you sure?", history=history, max_iters=0)

    [forced] = lm.requests
    assert_forced(forced)
    assert forced.messages == [
        forced.messages[0],
        inputs(intent="capital of France?"),
        assistant("It might be Lyon."),
        inputs(intent="are you sure?"),
    ]
    assert moved("It might be Lyon.") not in forced.messages
    assert user("[[ ## next_thought ## ]]\nIt might be Lyon.") not in forced.messages
    assert pred.metadata.termination_reason == "forced_submit"
    lm.assert_complete()
