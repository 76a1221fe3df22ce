"""A guardrail's own model calls are the turn's: counted in ``metadata.usage`` (kind ``"guardrail"``),
bounded by the turn's usage limits (a call that would cross one is not sent) and by its deadline
(none is sent once it has passed; each waits at most the time left)."""

from __future__ import annotations

import dspy
import pytest
from dspy.utils.callback import BaseCallback
from fake_openai_server import FakeOpenAIServer, text_completion
from helpers import TA
from streaming_helpers import chunks, segments, stream_items

import dspy_imp
from dspy_imp import StreamListener
from dspy_imp._records.usage import RequestUsage
from dspy_imp.testing import ScriptedLM, reply

PASS = "[[ ## blocked ## ]]\nFalse\n\n[[ ## reason ## ]]\nfine\n\n[[ ## completed ## ]]"
BLOCK = "[[ ## blocked ## ]]\nTrue\n\n[[ ## reason ## ]]\noff topic\n\n[[ ## completed ## ]]"


class Judge(dspy.Module):
    """A guardrail that asks a model: its predictor answers ``blocked`` and ``reason``."""

    def __init__(self, lm: dspy.BaseLM | None = None):
        super().__init__()
        self.judge = dspy.Predict("text -> blocked: bool, reason: str")
        if lm is not None:
            self.judge.set_lm(lm)

    def forward(self, answer: str | None = None, **inputs: str) -> dspy.Prediction:
        return self.judge(text=answer if answer is not None else next(iter(inputs.values())))


def test_a_module_guardrails_tokens_and_requests_are_in_the_turns_usage(run):
    judge_lm = ScriptedLM([reply(PASS, usage=(500, 50)), reply(PASS, usage=(700, 70))])
    lm = ScriptedLM([reply("Paris.", usage=(100, 10))])
    agent = dspy_imp.ReActV2(TA, input_guardrails=[Judge(judge_lm)], output_guardrails=[Judge(judge_lm)])
    with dspy.context(lm=lm):
        pred = run(agent, intent="capital of France")
    usage = pred.metadata.usage
    assert pred.answer == "Paris."
    assert usage.requests == {"guardrail": 2, "step": 1}
    assert usage.calls == (
        RequestUsage("guardrail", input_tokens=500, output_tokens=50),
        RequestUsage("step", input_tokens=100, output_tokens=10),
        RequestUsage("guardrail", input_tokens=700, output_tokens=70),
    )
    assert (usage.input_tokens, usage.output_tokens, usage.total_requests) == (1300, 130, 3)
    assert len(judge_lm.requests) == 2 and judge_lm.remaining == 0


def test_a_guardrail_that_calls_the_turns_own_lm_is_counted_too(run):
    def judged(outputs: dict, inputs: dict) -> str | None:
        verdict = dspy.Predict("text -> blocked: bool, reason: str")(text=outputs["answer"])
        return verdict.reason if verdict.blocked else None

    lm = ScriptedLM([reply("Paris.", usage=(100, 10)), reply(BLOCK, usage=(300, 30))])
    agent = dspy_imp.ReActV2(TA, output_guardrails=[judged])
    with dspy.context(lm=lm):
        pred = run(agent, intent="capital of France")
    meta = pred.metadata
    assert meta.guardrail == {"stage": "output", "name": "judged", "reason": "off topic"}
    assert meta.usage.requests == {"step": 1, "guardrail": 1}
    assert meta.usage.calls[1] == RequestUsage("guardrail", input_tokens=300, output_tokens=30)


def test_a_request_limit_reached_stops_the_output_guardrails_request(run):
    judge_lm = ScriptedLM([reply(PASS)])
    lm = ScriptedLM([reply("Paris.", usage=(100, 10))])
    agent = dspy_imp.ReActV2(TA, output_guardrails=[Judge(judge_lm)], usage_limits={"requests": 1})
    with dspy.context(lm=lm):
        pred = run(agent, intent="capital of France")
    meta = pred.metadata
    assert judge_lm.requests == []  # not sent: the limit was reached by the step
    assert (meta.termination_reason, meta.termination_cause, meta.complete) == (
        "incomplete",
        "usage_limit_exceeded",
        False,
    )
    assert pred.answer is None and meta.guardrail is None  # the unchecked answer is not given
    assert meta.usage.requests == {"step": 1}
    question = {"intent": "capital of France", "tool_calls": [], "tool_call_results": []}
    assert meta.history.messages == [question]  # the answer withdrawn (as a blocked one), the question kept


def test_a_token_limit_crossed_by_a_guardrail_sends_no_further_request(run):
    judge_lm = ScriptedLM([reply(PASS, usage=(900, 90))])
    lm = ScriptedLM([])
    agent = dspy_imp.ReActV2(TA, input_guardrails=[Judge(judge_lm)], usage_limits={"total_tokens": 500})
    with dspy.context(lm=lm):
        pred = run(agent, intent="capital of France")
    meta = pred.metadata
    assert lm.requests == [] and len(judge_lm.requests) == 1
    assert (meta.termination_reason, meta.termination_cause) == ("incomplete", "usage_limit_exceeded")
    assert meta.usage.calls == (RequestUsage("guardrail", input_tokens=900, output_tokens=90),)
    assert meta.history.messages == []  # as for any turn a limit stops before its first step


def test_a_guardrails_second_call_waits_for_the_first_calls_tokens(run):
    class TwoQuestions(Judge):
        def forward(self, intent: str, answer: str | None = None) -> dspy.Prediction:
            self.judge(text=intent)
            return self.judge(text=intent + "?")

    judge_lm = ScriptedLM([reply(PASS, usage=(400, 40)), reply(PASS)])
    lm = ScriptedLM([])
    agent = dspy_imp.ReActV2(TA, input_guardrails=[TwoQuestions(judge_lm)], usage_limits={"input_tokens": 300})
    with dspy.context(lm=lm):
        pred = run(agent, intent="capital of France")
    assert len(judge_lm.requests) == 1 and lm.requests == []
    assert pred.metadata.termination_cause == "usage_limit_exceeded"


def test_a_guardrail_that_swallows_the_stop_still_ends_the_turn_for_the_limit(run):
    class Lenient(Judge):
        def forward(self, intent: str, answer: str | None = None) -> dspy.Prediction:
            try:
                return self.judge(text=answer or intent)
            except Exception:
                return dspy.Prediction(blocked=False)  # "when the judge is down, let it through"

    judge_lm = ScriptedLM([reply(PASS)])
    lm = ScriptedLM([reply("Paris.")])
    agent = dspy_imp.ReActV2(TA, output_guardrails=[Lenient(judge_lm)], usage_limits={"requests": 1})
    with dspy.context(lm=lm):
        pred = run(agent, intent="capital of France")
    assert judge_lm.requests == []
    assert (pred.metadata.termination_cause, pred.answer) == ("usage_limit_exceeded", None)


def test_alongside_guardrails_leave_the_first_request_its_place_under_a_request_limit(run):
    judge_lm = ScriptedLM([reply(PASS)])
    lm = ScriptedLM([reply("Paris.")])
    guard = dspy_imp.Guardrail(Judge(judge_lm), run="alongside")
    agent = dspy_imp.ReActV2(TA, input_guardrails=[guard], usage_limits={"requests": 1})
    with dspy.context(lm=lm):
        pred = run(agent, intent="capital of France")
    assert len(lm.requests) == 1 and judge_lm.requests == []
    assert (pred.metadata.termination_cause, pred.answer) == ("usage_limit_exceeded", None)
    assert pred.metadata.usage.total_requests == 1


def test_a_passed_deadline_stops_the_guardrails_request(run, fake_clock):
    judge_lm = ScriptedLM([reply(PASS)])

    def slow_answer(request):
        fake_clock.advance(10)  # the step's reply comes back after the deadline
        return reply("Paris.")

    lm = ScriptedLM([slow_answer])
    agent = dspy_imp.ReActV2(TA, output_guardrails=[Judge(judge_lm)])
    with dspy.context(lm=lm), dspy_imp.deadline(seconds=5):
        pred = run(agent, intent="capital of France")
    meta = pred.metadata
    assert judge_lm.requests == []
    assert (meta.termination_reason, meta.termination_cause, pred.answer) == ("incomplete", "deadline_exceeded", None)
    assert meta.usage.requests == {"step": 1}


@pytest.mark.block_network(allowed_hosts=[r"127\.0\.0\.1$"])
@pytest.mark.parametrize("engine", ["auto", "litellm"])
def test_under_a_deadline_a_guardrails_call_waits_at_most_the_time_left(run, fake_clock, engine):
    seen: list[dict] = []

    class Seen(BaseCallback):
        def on_lm_start(self, call_id, instance, inputs):
            seen.append({"timeout": inputs["kwargs"].get("timeout"), "retries": instance.num_retries})

    lm = ScriptedLM([reply("Paris.")])
    with FakeOpenAIServer([text_completion(PASS)]) as server:
        url = server.base_url
        judge_lm = dspy.LM("openai/gpt-4o-mini", api_base=url, api_key="sk-test", cache=False, engine=engine)
        agent = dspy_imp.ReActV2(TA, input_guardrails=[Judge(judge_lm)])
        with dspy.context(lm=lm, callbacks=[Seen()]), dspy_imp.deadline(seconds=20):
            fake_clock.advance(8)
            pred = run(agent, intent="capital of France")
    assert pred.answer == "Paris." and len(server.requests) == 1, (pred.metadata.guardrail, seen)
    judged = seen[0]
    assert judged["retries"] == 0  # DSPy's own retries would sleep past the deadline
    if engine == "litellm":
        assert judged["timeout"] == pytest.approx(12 * 0.9)  # the deadline's ladder: nine tenths of the time left
    else:  # the native engine: bounded per request, not through the client's settings (``_routes.timeouts``)
        assert judged["timeout"] is None


def test_streaming_with_a_module_guardrail_counts_it_and_holds_an_unchecked_answer(how):
    judge_lm = ScriptedLM([reply(PASS, usage=(500, 50))])
    agent = dspy_imp.ReActV2("question -> answer", output_guardrails=[Judge(judge_lm)])
    with dspy.context(lm=ScriptedLM([reply("On the shelf.", usage=(100, 10))])):
        items = stream_items(agent, how, [StreamListener("answer")], question="Where?")
    final = items[-1]
    assert (final.answer, final.metadata.usage.requests) == ("On the shelf.", {"step": 1, "guardrail": 1})
    assert "".join(segments(chunks(items, "answer"))) == "On the shelf."

    limited = dspy_imp.ReActV2("question -> answer", output_guardrails=[Judge(judge_lm)], usage_limits={"requests": 1})
    with dspy.context(lm=ScriptedLM([reply("In the attic.")])):
        items = stream_items(limited, how, [StreamListener("answer")], question="Where?")
    assert items[-1].metadata.termination_cause == "usage_limit_exceeded"
    assert chunks(items, "answer") == []  # the answer no guardrail could check never left


def test_a_guardrails_tokens_are_counted_with_dspys_history_off(run):
    judge_lm = ScriptedLM([reply(PASS, usage=(500, 50))])
    lm = ScriptedLM([reply("Paris.", usage=(100, 10))])
    agent = dspy_imp.ReActV2(TA, input_guardrails=[Judge(judge_lm)])
    with dspy.context(lm=lm, disable_history=True):
        pred = run(agent, intent="capital of France")
    assert pred.metadata.usage.calls[0] == RequestUsage("guardrail", input_tokens=500, output_tokens=50)
    assert judge_lm.history == []  # what the host switched off stays off
