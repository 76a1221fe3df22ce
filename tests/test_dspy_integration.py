"""ReActV2 as a dspy.Module: pickling, copies, save/load, traces, Evaluate, Parallel, optimizers."""

from __future__ import annotations

import copy
import pickle

import dspy
from helpers import TA, Look, SubmitSig

import dspy_imp
from dspy_imp.testing import ScriptedLM, call, reply


def test_submit_and_the_program_pickle_and_deepcopy():
    agent = dspy_imp.ReActV2(SubmitSig, tools=[Look()])
    restored = pickle.loads(pickle.dumps(agent.submit_tool))
    assert restored.name == "submit" and restored.func(answer="a", confidence=1.0) == {"answer": "a", "confidence": 1.0}
    clone = copy.deepcopy(agent)
    assert clone.submit_tool.format_as_litellm_function_call() == agent.submit_tool.format_as_litellm_function_call()
    assert [name for name, _ in agent.named_predictors()] == ["react"]


def test_the_inner_predictor_has_fixed_outputs_and_the_tasks_instructions():
    agent = dspy_imp.ReActV2(SubmitSig, tools=[Look()], finish="submit")
    step = agent.react.signature
    assert list(step.output_fields) == ["next_thought", "tool_calls"]
    assert list(step.input_fields) == ["intent", "history", "tools"]
    assert step.instructions == SubmitSig.instructions


def test_prediction_keys_are_the_outputs_and_compat_attributes_read_metadata(run):
    lm = ScriptedLM([reply("It is a cat.")])
    agent = dspy_imp.ReActV2(TA, tools=[Look()])
    with dspy.context(lm=lm):
        pred = run(agent, intent="what?")
    assert list(pred.keys()) == ["answer"]
    assert pred.termination_reason == "answered"
    assert pred.history is pred.metadata.history
    assert pickle.loads(pickle.dumps(pred)).metadata.termination_reason == "answered"
    assert copy.deepcopy(pred).answer == "It is a cat."


def test_an_output_named_history_is_an_output(run):
    class Sig(dspy.Signature):
        question: str = dspy.InputField()
        history_summary: str = dspy.OutputField()
        history: str = dspy.OutputField()

    lm = ScriptedLM([reply(calls=[call("submit", {"history_summary": "s", "history": "h"}, id="s1")])])
    with dspy.context(lm=lm):
        pred = run(dspy_imp.ReActV2(Sig, tools=[]), question="q")
    assert pred.history == "h"
    assert isinstance(pred.metadata.history, dspy.History)


def test_traces_carry_the_history_as_it_was_at_each_step():
    lm = ScriptedLM([reply("look", calls=[call("look", {}, id="c1")]), reply("done")])
    agent = dspy_imp.ReActV2(TA, tools=[Look()])
    with dspy.context(lm=lm, trace=[]):
        agent(intent="look once")
        trace = dspy.settings.trace
    assert [len(inputs["history"].messages) for _, inputs, _ in trace] == [0, 1]
    assert all(predictor is agent.react for predictor, _, _ in trace)
    assert all(isinstance(t, str) for t in trace[0][1]["tools"])  # no dspy.Tool objects in a trace
    pickle.dumps([inputs for _, inputs, _ in trace])


def test_save_and_load_json_keep_the_requests(tmp_path):
    agent = dspy_imp.ReActV2(TA, tools=[Look()])
    agent.react.signature = agent.react.signature.with_instructions("Be brief.")
    path = tmp_path / "agent.json"
    agent.save(path)
    loaded = dspy_imp.ReActV2(TA, tools=[Look()])
    loaded.load(path)
    lms = [ScriptedLM([reply("ok")]), ScriptedLM([reply("ok")])]
    for program, lm in zip([agent, loaded], lms, strict=True):
        with dspy.context(lm=lm):
            program(intent="hi")
    assert lms[0].requests[0].messages == lms[1].requests[0].messages
    assert "Be brief." in lms[1].requests[0].messages[0]["content"]


def test_evaluate_scores_incomplete_turns_as_failures_without_errors():
    lm = ScriptedLM(lambda request: reply("nothing useful"))
    agent = dspy_imp.ReActV2(SubmitSig, tools=[], max_iters=1)
    devset = [dspy.Example(intent=f"q{i}", answer="a").with_inputs("intent") for i in range(3)]

    def metric(example, pred, trace=None):
        return float(pred.answer == example.answer)

    with dspy.context(lm=lm):
        result = dspy.Evaluate(devset=devset, metric=metric, num_threads=1, display_progress=False)(agent)
    assert result.score == 0.0


def test_finish_reason_is_this_requests_under_parallel_threads():
    def answer(request):
        text = request.messages[-1]["content"]
        return reply(text, finish_reason="length" if "long" in text else "stop")

    lm = ScriptedLM(answer)
    agent = dspy_imp.ReActV2(TA, tools=[])
    examples = [dspy.Example(intent="long" if i % 2 else "short").with_inputs("intent") for i in range(12)]
    with dspy.context(lm=lm):
        results = dspy.Parallel(num_threads=4)([(agent, ex) for ex in examples])
    for example, pred in zip(examples, results, strict=True):
        expected = "length" if example.intent == "long" else "stop"
        assert pred.metadata.finish_reason == expected


def test_bootstrap_few_shot_compiles_a_program_with_closure_tools():
    def make_tool():
        seen = []

        def look(where: str) -> str:
            """Look somewhere."""
            seen.append(where)
            return f"a cat on the {where}"

        return look

    def script(request):
        if request.roles[-1] == "tool":
            return reply("a cat")
        return reply("checking", calls=[call("look", {"where": "shelf"}, id="c1")])

    lm = ScriptedLM(script)
    agent = dspy_imp.ReActV2(TA, tools=[make_tool()])
    trainset = [dspy.Example(intent="what is on the shelf?", answer="a cat").with_inputs("intent")]

    def metric(example, pred, trace=None):
        return pred.answer == example.answer

    with dspy.context(lm=lm):
        compiled = dspy.BootstrapFewShot(metric=metric, max_bootstrapped_demos=4, max_labeled_demos=0).compile(
            agent, trainset=trainset
        )
        again = compiled(intent="and now?")
    # DSPy keeps one demo per predictor and example (its pick among the turn's steps is hash-seeded).
    assert len(compiled.react.demos) == 1
    assert {"history", "next_thought", "tool_calls"} <= set(compiled.react.demos[0].keys())
    assert again.answer == "a cat" and again.metadata.termination_reason == "answered"


def test_usage_is_tracked_across_the_turns_requests(run):
    lm = ScriptedLM([reply("look", calls=[call("look", {}, id="c1")], usage=(10, 2)), reply("done", usage=(20, 3))])
    with dspy.context(lm=lm, track_usage=True):
        pred = run(dspy_imp.ReActV2(TA, tools=[Look()]), intent="look")
    usage = pred.get_lm_usage()["openai/scripted"]
    assert (usage["prompt_tokens"], usage["completion_tokens"]) == (30, 5)
