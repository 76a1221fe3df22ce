"""Each metric of dspy_imp.evals on recorded turns: matching, not matching, sub-agents, paused and failed turns.

The turns are recorded by the scripted model (``evals_world``) through both drivers; every test
asserts the score and the whole feedback, and the three call forms DSPy uses.
"""

from __future__ import annotations

import dspy
import pytest
from evals_world import EXPECTED, TICKET, example, recorded

from dspy_imp import ConfigurationError, evals
from dspy_imp.testing import ScriptedLM, reply

CALLED_RIGHT = (
    "`researcher(question='Was A-42 charged twice?')` → `researcher/lookup_order(order_id='A-42')` → "
    "`billing(order_id='A-42', amount=19.9)` → `billing/refund(order_id='A-42', amount=19.9)`"
)
WANTED = "Expected: `researcher/lookup_order(order_id='A-42')` → `billing/refund(order_id='A-42', amount=19.9)`."


def test_a_matching_trajectory_passes_in_every_mode(run):
    pred = recorded("right", run)
    whole = [evals.Call("researcher"), EXPECTED[0], evals.Call("billing"), EXPECTED[1]]
    for match in ("exact", "any_order"):
        verdict = evals.ToolTrajectory(match, expected=lambda _: whole).verdict(example(), pred)
        assert (verdict.score, verdict.feedback) == (
            1.0,
            f"The tool calls matched the expected ones ({match.replace('_', ' ')}): {CALLED_RIGHT}.",
        )
    for match in ("in_order", "superset"):
        verdict = evals.ToolTrajectory(match).verdict(example(), pred)
        assert verdict.score == 1.0 and verdict.passed


def test_calls_in_the_wrong_order(run):
    pred = recorded("refund_first", run)
    verdict = evals.ToolTrajectory("in_order").verdict(example(), pred)
    assert verdict.score == 0.5
    assert verdict.feedback == "\n".join(
        [
            "The tool calls did not match the expected ones (in order).",
            WANTED,
            "The agent called: `billing(order_id='A-42', amount=19.9)` → "
            "`billing/refund(order_id='A-42', amount=19.9)` → "
            "`researcher(question='Was A-42 charged twice?')` → `researcher/lookup_order(order_id='A-42')`.",
            "Called `refund` before `lookup_order`.",
            "The turn ended `answered` after 7 requests.",
        ]
    )
    assert evals.ToolTrajectory("any_order", expected=lambda _: EXPECTED).verdict(example(), pred).score == 0.5
    assert evals.ToolTrajectory("superset").verdict(example(), pred).passed


def test_an_argument_that_differs_is_named_with_both_values(run):
    pred = recorded("wrong_amount", run)
    verdict = evals.ToolTrajectory().verdict(example(), pred)
    assert verdict.score == 0.5
    assert verdict.feedback.splitlines()[3] == (
        "Call `billing/refund(order_id='A-42', amount=99.0)`: argument `amount` was 99.0, expected 19.9."
    )
    assert evals.ToolTrajectory(args="ignore").verdict(example(), pred).passed
    near = {"amount": lambda got, want: abs(got - want) < 100}
    assert evals.ToolTrajectory(args=near).verdict(example(), pred).passed
    strict = {"amount": lambda got, want: abs(got - want) < 0.01}
    assert not evals.ToolTrajectory(args=strict).verdict(example(), pred).passed


def test_exact_and_subset_count_extra_calls_against_the_turn(run):
    pred = recorded("right", run)
    exact = evals.ToolTrajectory("exact").verdict(example(), pred)
    assert exact.score == 0.0
    assert exact.feedback.splitlines()[3:] == [
        "Call 1 was `researcher(question='Was A-42 charged twice?')`, expected "
        "`researcher/lookup_order(order_id='A-42')`.",
        "Call 2 was `researcher/lookup_order(order_id='A-42')`, expected "
        "`billing/refund(order_id='A-42', amount=19.9)`.",
        "Call 3 `billing(order_id='A-42', amount=19.9)` was not expected.",
        "Call 4 `billing/refund(order_id='A-42', amount=19.9)` was not expected.",
        "The turn ended `answered` after 7 requests.",
    ]
    subset = evals.ToolTrajectory("subset").verdict(example(), pred)
    assert subset.score == 0.5
    assert subset.feedback.splitlines()[3:5] == [
        "Called `researcher(question='Was A-42 charged twice?')`, which was not expected.",
        "Called `billing(order_id='A-42', amount=19.9)`, which was not expected.",
    ]


def test_a_missing_sub_agent_call_names_the_agent(run):
    pred = recorded("no_refund", run)
    verdict = evals.ToolTrajectory().verdict(example(), pred)
    assert verdict.score == 0.5
    assert verdict.feedback.splitlines()[3:] == [
        "Expected a call to `refund` by `billing`, which was not made.",
        "The turn ended `answered` after 4 requests.",
    ]
    assert evals.ToolTrajectory("subset").verdict(example(), pred).score == 0.5


def test_a_paused_turn(run):
    pred = recorded("paused", run)
    trajectory = evals.ToolTrajectory().verdict(example(), pred)
    assert trajectory.passed and "`billing/refund(order_id='A-42', amount=19.9) [waiting]`" in trajectory.feedback
    ended = evals.Ended().verdict(example(), pred)
    assert (ended.score, ended.feedback) == (
        0.0,
        "The turn ended `paused` after 5 requests, waiting for `billing/refund` (approval); "
        "expected it to end with an answer.",
    )
    assert evals.Ended("paused").verdict(example(), pred).feedback == (
        "The turn ended `paused` after 5 requests, waiting for `billing/refund` (approval), as expected."
    )


def test_a_failed_turn(run):
    pred = recorded("incomplete", run)
    ended = evals.Ended(("answered", "submit")).verdict(example(), pred)
    assert ended.feedback == (
        "The turn ended `incomplete` (`usage_limit_exceeded`) after 3 requests; expected it to end "
        "with `answered` or `submit`."
    )
    assert evals.Ended("incomplete", cause="usage_limit_exceeded").verdict(example(), pred).passed
    assert not evals.Ended("incomplete", cause="max_iters").verdict(example(), pred).passed
    answer = evals.Answer("reply").verdict(example(), pred)
    assert (answer.score, answer.feedback) == (
        0.0,
        "No `reply` in the answer: the turn ended `incomplete` (`usage_limit_exceeded`) after 3 requests.",
    )


def test_budgets_of_the_turn_and_of_one_sub_agent(run):
    pred = recorded("right", run)
    over = evals.Budget(requests=5, tool_calls=4, total_tokens=10**6).verdict(example(), pred)
    tokens = pred.metadata.usage.total_tokens
    assert over.score == pytest.approx(2 / 3)
    assert over.feedback == (
        f"Over budget: the turn used 7 requests (budget 5, over), {tokens} tokens (budget 1000000), "
        f"4 tool calls (budget 4)."
    )
    researcher = evals.Budget(requests=2, tool_calls=1, agent="researcher").verdict(example(), pred)
    assert (researcher.score, researcher.feedback) == (
        1.0,
        "`researcher` used 2 requests (budget 2), 1 tool call (budget 1).",
    )


class Replay(dspy.Module):
    """Gives back recorded predictions in turn: ``dspy.Evaluate`` over recorded turns."""

    def __init__(self, *preds: dspy.Prediction):
        super().__init__()
        self.preds = list(preds)

    def forward(self, **inputs: object) -> dspy.Prediction:
        return self.preds.pop(0)


def test_a_wall_time_budget_on_recorded_turns_under_dspy_evaluate(run, fake_clock):
    slow, quick = recorded("right", run, fake_clock), recorded("no_refund", run, fake_clock)
    assert (slow.metadata.duration, quick.metadata.duration) == (10.5, 6.0)  # 7 and 4 requests of 1.5 s
    metric = evals.Budget(seconds=10)
    result = dspy.Evaluate(devset=[example(), example()], metric=metric, num_threads=1, display_progress=False)(
        Replay(slow, quick)
    )
    assert (result.score, [score for _, _, score in result.results]) == (50.0, [0.0, 1.0])
    gepa = metric(example(), slow, None, "react", [])
    assert (gepa.score, gepa.feedback) == (0.0, "Over budget: the turn took 10.5 s (budget 10 s, over).")
    assert metric.verdict(example(), quick).feedback == "The turn took 6 s (budget 10 s)."
    both = evals.Budget(requests=8, seconds=10).verdict(example(), slow)
    assert (both.score, both.feedback) == (
        0.5,
        "Over budget: the turn used 7 requests (budget 8) and took 10.5 s (budget 10 s, over).",
    )
    table = evals.report(result, metric)
    assert [row.seconds for row in table.rows] == [10.5, 6.0]
    assert "<td>7</td><td></td><td>10.5 s</td>" in table._repr_html_()


def test_answer_fields_exact_by_function_and_by_an_lm_judge(run):
    pred = recorded("right", run)
    assert (
        evals.Answer("reply").verdict(example(), pred).feedback
        == "`reply` was right: 'We refunded the duplicate 19.90.'."
    )
    wrong = evals.Answer("reply").verdict(example(reply="Refunded."), pred)
    assert wrong.feedback == "`reply` was 'We refunded the duplicate 19.90.', expected 'Refunded.'."
    contains = evals.Answer("reply", match=lambda got, want: want.lower() in got.lower())
    assert contains.verdict(example(reply="duplicate"), pred).passed
    judge = evals.Judge()
    judge_lm = ScriptedLM(
        [reply("[[ ## correct ## ]]\nFalse\n\n[[ ## reason ## ]]\nIt names no amount.\n\n[[ ## completed ## ]]")]
    )
    judge.set_lm(judge_lm)
    judged = evals.Answer("reply", match=judge).verdict(example(), pred)
    assert (judged.score, judged.feedback) == (0.0, "The judge found `reply` wrong: It names no amount.")
    asked = judge_lm.requests[0].messages[-1]["content"]
    assert (
        f"[[ ## task ## ]]\nticket: {TICKET}" in asked
        and "[[ ## answer ## ]]\nWe refunded the duplicate 19.90." in asked
    )


def test_combinators_keep_each_parts_feedback(run):
    pred = recorded("no_refund", run)
    weighted = evals.Weighted({evals.ToolTrajectory(): 3, evals.Ended(): 1}).verdict(example(), pred)
    assert weighted.score == pytest.approx((3 * 0.5 + 1) / 4)
    lines = weighted.feedback.splitlines()
    assert lines[0] == "[tool_trajectory 0.50] The tool calls did not match the expected ones (in order)."
    assert lines[-1] == "[ended 1.00] The turn ended `answered` after 4 requests, as expected."
    assert [p.metric for p in weighted.parts] == ["tool_trajectory", "ended"]
    both = evals.AllOf(evals.Ended(), evals.Budget(requests=3)).verdict(example(), pred)
    assert (both.score, both.feedback.splitlines()) == (
        0.0,
        [
            "[budget 0.00] Over budget: the turn used 4 requests (budget 3, over).",
            "[ended 1.00] The turn ended `answered` after 4 requests, as expected.",
        ],
    )
    check = evals.Check(lambda ex, record: (0.25, f"{len(record.calls)} calls"), name="calls")
    assert (check.verdict(example(), pred).score, check.verdict(example(), pred).feedback) == (0.25, "2 calls")


def test_the_three_call_forms(run):
    pred = recorded("no_refund", run)
    metric = evals.ToolTrajectory()
    assert metric(example(), pred) == 0.5
    assert metric(example(), pred, trace=[]) is False  # bootstrapping keeps only passing turns
    assert evals.ToolTrajectory(threshold=0.5)(example(), pred, []) is True
    feedback = metric(example(), pred, None, "react", [])
    assert isinstance(feedback, dspy.Prediction)
    assert (feedback.score, feedback.feedback) == (0.5, metric.verdict(example(), pred).feedback)


def test_only_this_calls_steps_count_when_the_example_gives_a_history(run):
    first = recorded("no_refund", run)
    given = example(history=first.metadata.history).with_inputs("ticket", "history")
    assert evals.read(given, first).calls == ()
    assert len(evals.read(example(), first).calls) == 2


def test_a_prediction_without_a_record_scores_zero():
    verdict = evals.Ended().verdict(example(), dspy.Prediction(reply="hi"))
    assert (verdict.score, verdict.feedback) == (
        0.0,
        "The program returned no dspy_imp record (it raised, or is not a dspy_imp agent).",
    )


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: evals.ToolTrajectory("sorted"), "`match` must be one of"),
        (lambda: evals.ToolTrajectory(args="loose"), "`args` must be 'exact', 'ignore'"),
        (lambda: evals.Ended("done"), "`reasons` must be termination reasons"),
        (lambda: evals.Ended(cause="tired"), "`cause` must be one of"),
        (lambda: evals.Budget(), "Budget needs at least one limit"),
        (lambda: evals.Budget(requests=-1), "`requests` must be a non-negative number"),
        (lambda: evals.Budget(seconds=float("nan")), "`seconds` must be a non-negative number or None, got nan"),
        (lambda: evals.Budget(seconds=5, agent="researcher"), "it cannot be scoped to `agent` 'researcher'"),
        (lambda: evals.Answer("reply", match="fuzzy"), "`match` must be 'exact', a function"),
        (lambda: evals.Weighted({evals.Ended(): 0}), "`parts` weight of ended must be a positive number"),
        (lambda: evals.AllOf(), "`metrics` must be one or more"),
        (lambda: evals.ToolTrajectory(threshold=2), "`threshold` must be a number in [0, 1]"),
    ],
)
def test_a_bad_option_is_a_clear_error(make, message):
    with pytest.raises(ConfigurationError) as error:
        make()
    assert message in str(error.value)


def test_an_example_without_expected_calls_is_a_clear_error(run):
    pred = recorded("right", run)
    with pytest.raises(ConfigurationError, match="the example has no 'expected_calls' field"):
        evals.ToolTrajectory().verdict(dspy.Example(ticket=TICKET).with_inputs("ticket"), pred)


def test_answer_refuses_a_module_that_is_not_a_judge_as_match():
    # Called as ``match(actual, expected)``, such a module raised TypeError at every score.
    with pytest.raises(ConfigurationError, match=r"`match` takes a dspy\.Module only as a dspy_imp\.evals\.Judge"):
        evals.Answer("reply", match=dspy.Predict("question -> answer"))
    assert isinstance(evals.Answer("reply", match=evals.Judge()).match, evals.Judge)
