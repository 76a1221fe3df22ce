"""Reference §9 and §12 K: context-window recovery by leaving out the oldest prior episodes."""

from __future__ import annotations

import dspy
from helpers import TA, Look, SubmitSig, inputs

import dspy_imp
from dspy_imp.testing import ScriptedLM, call, fail, reply


def answered(n: int) -> list[dict]:
    return [
        {"intent": f"q{i}", "next_thought": f"a{i}", "answer": f"a{i}", "tool_calls": [], "tool_call_results": []}
        for i in range(n)
    ]


def test_k1_the_oldest_episodes_are_left_out(run):
    lm = ScriptedLM([fail.context_window(), reply("fits now")])
    history = dspy.History(messages=answered(4))
    with dspy.context(lm=lm):
        pred = run(dspy_imp.ReActV2(TA, tools=[Look()]), intent="q4", history=history)

    first, second = (r.messages for r in lm.requests)
    assert len(first) == 1 + 4 * 2 + 1
    assert second[1:] == [
        inputs(intent="q2"),
        {"role": "assistant", "content": "a2"},
        inputs(intent="q3"),
        {"role": "assistant", "content": "a3"},
        inputs(intent="q4"),
    ]
    assert pred.metadata.context_projection == {
        "reason": "context_window_exceeded",
        "omitted_prior_entries": 2,
        "omitted_prior_groups": 2,
        "recovery_requests": 1,
    }
    assert pred.metadata.history.messages[:4] == answered(4)  # the record keeps everything
    assert len(pred.metadata.history.messages) == 5
    assert pred.answer == "fits now" and pred.metadata.termination_reason == "answered"


def test_k2_nothing_to_drop_ends_incomplete_with_no_last_request(run):
    lm = ScriptedLM([fail.context_window()])
    with dspy.context(lm=lm):
        pred = run(dspy_imp.ReActV2(TA, tools=[Look()]), intent="too long")
    assert len(lm.requests) == 1
    meta = pred.metadata
    assert (meta.termination_reason, meta.termination_cause) == ("incomplete", "context_window_exceeded")
    assert "ContextWindowExceededError" in meta.termination_error["initial"]
    assert meta.context_projection is None and pred.answer is None


def test_k3_entries_of_the_current_call_are_never_left_out(run):
    lm = ScriptedLM(
        [
            reply("one", calls=[call("look", {"where": "a"}, id="c1")]),
            reply("two", calls=[call("look", {"where": "b"}, id="c2")]),
            fail.context_window(),
            fail.context_window(),
            fail.context_window(),
        ]
    )
    with dspy.context(lm=lm):
        pred = run(dspy_imp.ReActV2(TA, tools=[Look()]), intent="q2", history=dspy.History(messages=answered(2)))

    last = lm.requests[-1].messages
    assert last[1:] == lm.requests[2].messages[1 + 4 :]  # both prior episodes gone, this call's steps all kept
    assert [m.get("tool_call_id") for m in last if m["role"] == "tool"] == ["c1", "c2"]
    assert len(lm.requests) == 5  # step, step, refused, refused with 1 dropped, refused with 2 dropped; then give up
    meta = pred.metadata
    assert (meta.termination_reason, meta.termination_cause) == ("incomplete", "context_window_exceeded")
    assert meta.context_projection == {
        "reason": "context_window_exceeded",
        "omitted_prior_entries": 2,
        "omitted_prior_groups": 2,
        "recovery_requests": 2,
    }
    assert len(meta.history.messages) == 4


def test_a_model_that_refuses_until_the_prompt_fits_recovers_by_halving(run):
    limit = 12  # messages

    def answer(request):
        if len(request.messages) > limit:
            return fail.context_window(f"{len(request.messages)} messages is too many")
        return reply("recovered")

    lm = ScriptedLM(answer)
    history = dspy.History(messages=answered(16))
    with dspy.context(lm=lm):
        pred = run(dspy_imp.ReActV2(TA, tools=[Look()]), intent="q16", history=history)

    sizes = [len(r.messages) for r in lm.requests]
    assert sizes == [34, 18, 10]  # 16 episodes, then 8 (half dropped), then 4
    assert pred.metadata.context_projection == {
        "reason": "context_window_exceeded",
        "omitted_prior_entries": 12,
        "omitted_prior_groups": 12,
        "recovery_requests": 2,
    }
    assert len(pred.metadata.history.messages) == 17
    assert pred.answer == "recovered"


def test_an_unfinished_trailing_group_is_kept_together(run):
    prior = [
        *answered(2),
        {"intent": "q2", "next_thought": "looking", "tool_calls": [{"id": "c9", "name": "look", "args": {}}],
         "tool_call_results": [{"id": "c9", "name": "look", "result": "x", "error": False, "returned_at": "t"}]},
        {"next_thought": "still looking", "tool_calls": [], "tool_call_results": []},
    ]  # fmt: skip
    lm = ScriptedLM([fail.context_window(), fail.context_window(), reply("ok")])
    with dspy.context(lm=lm):
        pred = run(dspy_imp.ReActV2(TA, tools=[Look()]), intent="q3", history=dspy.History(messages=prior))
    # boundaries: 1, 2 (answers) and 4 (the trailing unfinished group): first drop 2 of 3 groups, then the rest
    assert pred.metadata.context_projection["omitted_prior_entries"] == 4
    assert pred.metadata.context_projection["omitted_prior_groups"] == 3
    assert lm.requests[1].messages[1] == inputs(intent="q2")
    assert lm.requests[2].messages[1:] == [inputs(intent="q3")]


def test_a_resume_never_drops_what_it_resumes(run):
    prior = answered(2)
    lm = ScriptedLM([fail.context_window(), fail.context_window()])
    with dspy.context(lm=lm):
        pred = run(dspy_imp.ReActV2(TA, tools=[Look()]), history=dspy.History(messages=prior), max_iters=1)
    # nothing new in this call: the last prior group stays, or the request would be the system message alone
    assert [len(r.messages) for r in lm.requests] == [5, 3]
    assert (pred.metadata.termination_reason, pred.metadata.termination_cause) == (
        "incomplete",
        "context_window_exceeded",
    )


def test_the_extractor_goes_through_the_same_projection(run):
    def answer(request):
        if request.tools is None:  # the extraction request
            assert "q0" not in request.messages[-1]["content"]
            fields = {"reasoning": "r", "answer": "x", "confidence": "0.5", "completed": ""}
            return reply("\n\n".join(f"[[ ## {k} ## ]]\n{v}" for k, v in fields.items()).strip())
        if any("q0" in str(m.get("content")) for m in request.messages):
            return fail.context_window()
        return reply("thinking")

    lm = ScriptedLM(answer)
    history = dspy.History(
        messages=[
            {"intent": f"q{i}", "answer": f"a{i}", "confidence": 1.0, "tool_calls": [], "tool_call_results": []}
            for i in range(2)
        ]
    )
    with dspy.context(lm=lm):
        pred = run(dspy_imp.ReActV2(SubmitSig, tools=[], max_iters=1), intent="q2", history=history)
    assert pred.metadata.termination_reason == "extracted"
    assert pred.metadata.context_projection["omitted_prior_entries"] == 1
    assert "q1" in lm.requests[-1].messages[-1]["content"]
