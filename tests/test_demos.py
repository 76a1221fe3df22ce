"""Every demo an optimizer puts on ``agent.react`` reaches the prompt, in the live tool-call format."""

from __future__ import annotations

from typing import Any

import dspy
import pytest
from helpers import TA, Look, SubmitSig, assistant, inputs, tool, user

import dspy_imp
from dspy_imp.testing import ScriptedLM, call, reply

LOOK_JSON = '[{"name": "look", "arguments": {"where": "shelf"}}]'
NOT_SHOWN = "(The result of this call is not part of the example.)"


def _script(request: Any) -> Any:
    if request.roles[-1] == "tool":
        return reply("a cat")
    return reply("checking", calls=[call("look", {"where": "shelf"})])


def _traced_demos(native: bool = True) -> list[dspy.Example]:
    """The demos BootstrapFewShot builds from one turn: one per traced step, as DSPy builds them."""
    if native:
        lm = ScriptedLM(_script)
    else:
        written = f"[[ ## answer ## ]]\n\n[[ ## tool_calls ## ]]\n{LOOK_JSON}"
        answer = "[[ ## answer ## ]]\na cat\n\n[[ ## tool_calls ## ]]\n[]"
        lm = ScriptedLM([reply(written), reply(answer)], native=False)
    agent = dspy_imp.ReActV2(TA, tools=[Look()])
    with dspy.context(lm=lm, trace=[]):
        agent(intent="what is on the shelf?")
        trace = list(dspy.settings.trace)
    return [dspy.Example(augmented=True, **inputs_, **outputs) for _, inputs_, outputs in trace]


def test_the_trace_carries_each_steps_recorded_calls_and_results():
    first, second = _traced_demos()
    assert first["tool_calls"] == [{"id": "scripted_1_0", "name": "look", "args": {"where": "shelf"}}]
    assert first["tool_call_results"] == [
        {"id": "scripted_1_0", "name": "look", "result": {"seen": True}, "error": False}
    ]
    assert "tool_call_results" not in second  # a step without calls has nothing to add


def test_bootstrapped_demos_render_as_native_calls_with_results_and_later_steps_with_context(run):
    agent = dspy_imp.ReActV2(TA, tools=[Look()])
    agent.react.demos = _traced_demos()
    lm = ScriptedLM([reply("a dog")])
    with dspy.context(lm=lm):
        run(agent, intent="and now?")
    assert lm.requests[0].messages[1:] == [
        # the first step: its inputs, its native call and the result it got
        inputs(intent="what is on the shelf?"),
        assistant("checking", [("demo0_0_0", "look", '{"where":"shelf"}')]),
        tool("demo0_0_0", '{"seen": true}'),
        # the later step, with the turn it was taken in
        inputs(intent="what is on the shelf?"),
        assistant("checking", [("demo1_0_0", "look", '{"where":"shelf"}')]),
        tool("demo1_0_0", '{"seen": true}'),
        assistant("a cat"),
        # the live turn
        inputs(intent="and now?"),
    ]


def test_demos_render_written_where_the_live_steps_are_written(run):
    agent = dspy_imp.ReActV2(TA, tools=[Look()])
    agent.react.demos = _traced_demos(native=False)[:1]
    lm = ScriptedLM([reply("[[ ## answer ## ]]\na dog\n\n[[ ## tool_calls ## ]]\n[]")], native=False)
    with dspy.context(lm=lm):
        pred = run(agent, intent="and now?")
    assert pred.answer == "a dog"
    demo = lm.requests[0].messages[1:4]
    assert demo == [
        user("[[ ## intent ## ]]\nwhat is on the shelf?"),
        {
            "role": "assistant",
            "content": f"[[ ## answer ## ]]\n\n\n[[ ## tool_calls ## ]]\n{LOOK_JSON}\n\n[[ ## completed ## ]]\n",
        },
        user('[[ ## tool_call_results ## ]]\nlook (demo0_0_0): {"seen": true}'),
    ]
    assert all("tool_calls" not in m for m in lm.requests[0].messages)


def test_a_call_whose_result_the_demo_lacks_gets_the_not_shown_note(run):
    agent = dspy_imp.ReActV2(TA, tools=[Look()])
    agent.react.demos = [
        dspy.Example(
            augmented=True,
            intent="what is on the shelf?",
            history=dspy.History(messages=[]),
            tools=["look"],
            next_thought="checking",
            tool_calls=[{"id": "c1", "name": "look", "args": {"where": "shelf"}}],
        )
    ]
    lm = ScriptedLM([reply("a dog")])
    with dspy.context(lm=lm):
        run(agent, intent="and now?")
    assert lm.requests[0].messages[1:4] == [
        inputs(intent="what is on the shelf?"),
        assistant("checking", [("demo0_0_0", "look", '{"where":"shelf"}')]),
        tool("demo0_0_0", NOT_SHOWN),
    ]


def test_a_labeled_example_ends_as_a_text_answer_turn_ends(run):
    agent = dspy_imp.ReActV2(TA, tools=[Look()])
    agent.react.demos = [dspy.Example(intent="what is on the shelf?", answer="a cat")]
    lm = ScriptedLM([reply("a dog")])
    with dspy.context(lm=lm):
        run(agent, intent="and now?")
    assert lm.requests[0].messages[1:] == [
        inputs(intent="what is on the shelf?"),
        assistant("a cat"),
        inputs(intent="and now?"),
    ]


def test_a_labeled_example_ends_with_submit_for_a_submit_signature(run):
    agent = dspy_imp.ReActV2(SubmitSig, tools=[Look()])
    agent.react.demos = [dspy.Example(intent="what is on the shelf?", answer="a cat", confidence=0.9)]
    lm = ScriptedLM([reply(calls=[call("submit", {"answer": "a dog", "confidence": 0.5}, id="s1")])])
    with dspy.context(lm=lm):
        run(agent, intent="and now?")
    assert lm.requests[0].messages[1:4] == [
        inputs(intent="what is on the shelf?"),
        assistant("", [("demo0_0_0", "submit", '{"answer":"a cat","confidence":0.9}')]),
        tool("demo0_0_0", '{"answer": "a cat", "confidence": 0.9}'),
    ]


def test_labeled_examples_from_the_real_labeled_few_shot_render(run):
    agent = dspy_imp.ReActV2(TA, tools=[Look()])
    trainset = [dspy.Example(intent="what is on the shelf?", answer="a cat").with_inputs("intent")]
    compiled = dspy.LabeledFewShot(k=1).compile(agent, trainset=trainset)
    lm = ScriptedLM([reply("a dog")])
    with dspy.context(lm=lm):
        run(compiled, intent="and now?")
    assert lm.requests[0].messages[1:3] == [inputs(intent="what is on the shelf?"), assistant("a cat")]


@pytest.mark.parametrize(
    "demo, words",
    [
        (dspy.Example(intent="what is on the shelf?"), "neither the step fields"),
        (dspy.Example(augmented=True, history=dspy.History(messages=[]), next_thought="hm", tool_calls=[]), "none of"),
    ],
)
def test_a_demo_that_cannot_be_shown_is_refused_before_any_request(run, demo, words):
    agent = dspy_imp.ReActV2(TA, tools=[Look()])
    agent.react.demos = [demo]
    lm = ScriptedLM([])
    with dspy.context(lm=lm), pytest.raises(dspy_imp.ConfigurationError, match=words):
        run(agent, intent="and now?")
    assert lm.requests == []


def test_a_labeled_example_under_finish_tools_is_refused(run):
    agent = dspy_imp.ReActV2(TA, tools=[Look()], finish="tools", finish_on={"look": lambda a, r, i: None})
    agent.react.demos = [dspy.Example(intent="what is on the shelf?", answer="a cat")]
    with dspy.context(lm=ScriptedLM([])), pytest.raises(dspy_imp.ConfigurationError, match="finish='tools'"):
        run(agent, intent="and now?")


def test_a_later_step_brings_its_turns_inputs_and_last_two_steps(run):
    def entry(where: str, call_id: str, **inputs_: Any) -> dict[str, Any]:
        return {
            **inputs_,
            "tool_calls": [{"id": call_id, "name": "look", "args": {"where": where}}],
            "tool_call_results": [{"id": call_id, "name": "look", "result": where, "error": False}],
        }

    earlier_turn = {"intent": "an older question", "next_thought": "old answer", "answer": "old answer"}
    history = [earlier_turn, entry("shelf", "a", intent="where is it?"), entry("desk", "b"), entry("box", "c")]
    demo = dspy.Example(
        augmented=True, history=dspy.History(messages=history), tools=["look"], next_thought="found it", tool_calls=[]
    )
    agent = dspy_imp.ReActV2(TA, tools=[Look()])
    agent.react.demos = [demo]
    lm = ScriptedLM([reply("a dog")])
    with dspy.context(lm=lm):
        run(agent, intent="and now?")
    assert lm.requests[0].messages[1:] == [
        inputs(intent="where is it?"),  # the turn's inputs, on the first step kept
        assistant("", [("demo0_0_0", "look", '{"where":"desk"}')]),
        tool("demo0_0_0", "desk"),
        assistant("", [("demo0_1_0", "look", '{"where":"box"}')]),
        tool("demo0_1_0", "box"),
        assistant("found it"),
        inputs(intent="and now?"),
    ]


def test_a_demo_recorded_by_dspy_react_v2_renders_with_its_nested_results(run):
    results = dspy.ToolCallResults(
        tool_call_results=[dspy.ToolCallResults.ToolCallResult(call_id="c1", name="look", value="a cat")]
    )
    calls = dspy.ToolCalls(
        tool_calls=[dspy.ToolCalls.ToolCall(id="c1", name="look", args={"where": "shelf"})], tool_call_results=results
    )
    stock = dspy.Example(
        augmented=True,
        intent="what is on the shelf?",
        history=dspy.History(messages=[]),
        next_thought=dspy.Reasoning(content="checking"),
        tool_calls=calls.model_dump(),  # as a saved state holds it
    )
    agent = dspy_imp.ReActV2(TA, tools=[Look()])
    agent.react.demos = [stock]
    lm = ScriptedLM([reply("a dog")])
    with dspy.context(lm=lm):
        run(agent, intent="and now?")
    assert lm.requests[0].messages[1:4] == [
        inputs(intent="what is on the shelf?"),
        assistant("checking", [("demo0_0_0", "look", '{"where":"shelf"}')]),
        tool("demo0_0_0", "a cat"),
    ]
