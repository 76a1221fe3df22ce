"""Reference §12 A: classification and the text answer under finish="auto"."""

from __future__ import annotations

import dspy
import pytest
from helpers import TA, EnumSig, Look, SubmitSig, assistant, inputs, tool, user

import dspy_imp
from dspy_imp.testing import ScriptedLM, call, reply

SYSTEM_TA = (
    "Answer the intent.\nWhen the final answer is ready, reply without calling a tool: that message is `answer`."
)


def test_a1_text_answers_in_one_request(run):
    lm = ScriptedLM([reply("It is a cat.")])
    agent = dspy_imp.ReActV2(TA, tools=[Look()])
    with dspy.context(lm=lm):
        pred = run(agent, intent="what is it?")

    assert len(lm.requests) == 1
    request = lm.requests[0]
    assert request.messages == [{"role": "system", "content": SYSTEM_TA}, inputs(intent="what is it?")]
    assert request.tool_names == ["look"]
    assert request.tool_choice == "auto"
    assert pred.answer == "It is a cat."
    assert list(pred.keys()) == ["answer"]
    meta = pred.metadata
    assert (meta.termination_reason, meta.termination_cause, meta.finish_reason) == ("answered", None, "stop")
    assert meta.complete and dspy_imp.is_complete(pred)
    assert meta.history.messages == [
        {
            "intent": "what is it?",
            "next_thought": "It is a cat.",
            "tool_calls": [],
            "tool_call_results": [],
            "answer": "It is a cat.",
        }
    ]
    lm.assert_complete()


def test_a2_a_silent_step_is_an_empty_answer(run):
    lm = ScriptedLM([reply(""), reply("Now I say it.")])
    agent = dspy_imp.ReActV2(TA, tools=[Look()])
    with dspy.context(lm=lm):
        pred = run(agent, intent="anything?")
        assert len(lm.requests) == 1
        assert pred.answer is None
        assert pred.metadata.termination_reason == "answered"
        entry = pred.metadata.history.messages[0]
        assert entry == {"intent": "anything?", "tool_calls": [], "tool_call_results": [], "answer": None}

        # Replayed later: its user message alone, no assistant message, no filler.
        again = run(agent, intent="and now?", history=pred.metadata.history)
    replay = lm.requests[1].messages
    assert replay[1:] == [inputs(intent="anything?"), inputs(intent="and now?")]
    assert again.answer == "Now I say it."
    assert "Not supplied" not in str(replay)


def test_a3_a_text_answer_loop_has_no_submit(run):
    def lookup(city: str) -> str:
        """Find a city."""
        return city

    lm = ScriptedLM([reply(calls=[call("submit", {"answer": "Paris"}, id="s1")]), reply("Paris")])
    agent = dspy_imp.ReActV2(TA, tools=[lookup])
    with dspy.context(lm=lm):
        pred = run(agent, intent="capital of France?")

    assert [r.tool_names for r in lm.requests] == [["lookup"], ["lookup"]]
    assert pred.answer == "Paris"
    assert pred.metadata.termination_reason == "answered"
    first, second = pred.metadata.history.messages
    [result] = first["tool_call_results"]
    assert (result["error"], result["error_kind"], result["result"]) == (
        True,
        "unknown_tool",
        "there is no tool named submit.",
    )
    assert lm.requests[1].messages[-1] == tool("s1", "Error: there is no tool named submit.")
    assert second["answer"] == "Paris"


def test_a4_tool_steps_then_text_extend_the_prefix(run):
    look = Look()
    lm = ScriptedLM(
        [
            reply("look 1", calls=[call("look", {}, id="c1")]),
            reply("look 2", calls=[call("look", {}, id="c2")]),
            reply("ok"),
        ]
    )
    agent = dspy_imp.ReActV2(TA, tools=[look])
    with dspy.context(lm=lm):
        pred = run(agent, intent="look twice")

    r1, r2, r3 = (r.messages for r in lm.requests)
    assert r2[: len(r1)] == r1 and r3[: len(r2)] == r2
    assert len(r2) == len(r1) + 2 and len(r3) == len(r2) + 2
    assert r2 == [
        {"role": "system", "content": SYSTEM_TA},
        inputs(intent="look twice"),
        assistant("look 1", [("c1", "look", "{}")]),
        tool("c1", '{"seen": true}'),
    ]
    assert pred.answer == "ok" and len(look.runs) == 2


def test_a5_several_outputs_text_is_a_thought_forced_at_once(run):
    lm = ScriptedLM(
        [
            reply("I already know this one."),
            reply(calls=[call("submit", {"answer": "Paris", "confidence": 0.9}, id="s1")]),
        ]
    )
    agent = dspy_imp.ReActV2(SubmitSig, tools=[])
    with dspy.context(lm=lm):
        pred = run(agent, intent="capital?")

    forced = lm.requests[1]
    assert forced.tool_choice == {"type": "function", "function": {"name": "submit"}}
    assert forced.messages[1:] == [
        inputs(intent="capital?"),
        user("[[ ## next_thought ## ]]\nI already know this one."),
    ]
    assert (pred.answer, pred.confidence) == ("Paris", 0.9)
    assert pred.metadata.termination_reason == "forced_submit"
    assert pred.metadata.termination_cause == "empty_tool_calls"


def test_a5_with_a_note_the_thought_stays_the_models_message(run):
    lm = ScriptedLM(
        [
            reply("I already know this one."),
            reply(calls=[call("submit", {"answer": "Paris", "confidence": 0.9}, id="s1")]),
        ]
    )
    agent = dspy_imp.ReActV2(SubmitSig, tools=[], last_request_note="Submit now.")
    with dspy.context(lm=lm):
        run(agent, intent="capital?")

    assert lm.requests[1].messages[1:] == [
        inputs(intent="capital?"),
        assistant("I already know this one."),
        inputs(intent="Submit now."),
    ]


def test_a6_an_enum_output_keeps_submit_and_text_never_answers(run):
    lm = ScriptedLM([reply("team: harbor"), reply("harbor"), reply("no idea")])
    agent = dspy_imp.ReActV2(EnumSig, tools=[], max_iters=2)
    with dspy.context(lm=lm):
        pred = run(agent, ticket="The site is down.")

    submit = lm.requests[0].tools[-1]["function"]
    assert submit["name"] == "submit"
    assert submit["parameters"]["properties"]["team"]["enum"] == ["atlas", "harbor"]
    assert len(lm.requests) == 3  # step, forced submit, extraction
    assert lm.requests[1].tool_choice == {"type": "function", "function": {"name": "submit"}}
    assert lm.requests[2].tools is None and lm.requests[2].tool_choice is None
    assert pred.team is None
    assert (pred.metadata.termination_reason, pred.metadata.termination_cause) == ("incomplete", "empty_tool_calls")
    assert not dspy_imp.is_complete(pred)


def test_a7_a_constrained_string_output_gets_submit(run):
    class Code(dspy.Signature):
        question: str = dspy.InputField()
        answer: str = dspy.OutputField(min_length=3)

    lm = ScriptedLM([reply("abc"), reply(calls=[call("submit", {"answer": "abcd"}, id="s")])])
    agent = dspy_imp.ReActV2(Code, tools=[])
    with dspy.context(lm=lm):
        pred = run(agent, question="code?")
    assert lm.requests[0].tool_names == ["submit"]
    assert pred.metadata.termination_reason == "forced_submit"
    assert pred.answer == "abcd"


def test_a8_the_submit_schema_requires_every_output(run):
    class Sig(dspy.Signature):
        question: str = dspy.InputField()
        answer: str = dspy.OutputField(desc="One sentence, no citation.")
        count: int = dspy.OutputField(default=0)
        maybe: str | None = dspy.OutputField()

    lm = ScriptedLM(
        [
            reply(calls=[call("submit", {"answer": "ok"}, id="s1")]),
            reply(calls=[call("submit", {"answer": "ok", "count": "no", "maybe": None}, id="s2")]),
            reply(calls=[call("submit", {"answer": "ok", "count": "3", "maybe": None}, id="s3")]),
        ]
    )
    agent = dspy_imp.ReActV2(Sig, tools=[])
    with dspy.context(lm=lm):
        pred = run(agent, question="q")

    params = lm.requests[0].tools[0]["function"]["parameters"]
    assert params["required"] == ["answer", "count", "maybe"]
    assert params["properties"]["answer"]["description"] == "One sentence, no citation."
    assert "description" not in params["properties"]["count"]
    assert "description" not in params["properties"]["maybe"]
    first, second, third = pred.metadata.history.messages
    assert first["tool_call_results"][0]["result"] == "submit is missing: count, maybe"
    assert first["tool_call_results"][0]["error_kind"] == "missing_output_fields"
    assert second["tool_call_results"][0]["error_kind"] == "invalid_submit_outputs"
    # Pydantic's own message only: not its error type, the value again or a link to its docs (issue 29).
    assert second["tool_call_results"][0]["result"] == (
        "submit outputs were not accepted: `count`: "
        "Input should be a valid integer, unable to parse string as an integer"
    )
    assert (pred.answer, pred.count, pred.maybe) == ("ok", 3, None)
    assert third["count"] == 3


@pytest.mark.parametrize(
    ("signature", "declared", "roster"),
    [
        (SubmitSig, ["zeta_probe", "alpha_probe"], ["zeta_probe", "alpha_probe", "submit"]),
        (TA, ["alpha_probe", "zeta_probe"], ["alpha_probe", "zeta_probe"]),
    ],
)
def test_a9_roster_keeps_declared_order_submit_last(signature, declared, roster):
    def make(name: str):
        def probe() -> str:
            return name

        probe.__name__ = name
        probe.__doc__ = f"Probe {name}."
        return probe

    lm = ScriptedLM(lambda request: reply("done"))
    agent = dspy_imp.ReActV2(signature, tools=[make(n) for n in declared], max_iters=0)
    with dspy.context(lm=lm):
        agent(intent="x")
    assert lm.requests[0].tool_names == roster
