"""Simulated users and multi-turn evaluation: a conversation to its end, its record, its metrics, pass^k.

The agent and the simulated user each answer from their own scripted model, so a conversation is
reproducible; every test runs through the sync (``converse``) and the async (``aconverse``) driver.
"""

from __future__ import annotations

import asyncio
from typing import Any

import dspy
import pytest

import dspy_imp
from dspy_imp import ConfigurationError, evals
from dspy_imp.testing import ScriptedLM, call, reply

REFUNDS: list[tuple[str, float]] = []


def lookup_order(order_id: str) -> dict:
    """Look an order up: its charges."""
    return {"order_id": order_id, "charges": [19.9, 19.9]}


def refund(order_id: str, amount: float) -> str:
    """Refund an amount on an order."""
    REFUNDS.append((order_id, amount))
    return f"refunded {amount} on {order_id}"


def agent() -> dspy_imp.ReActV2:
    return dspy_imp.ReActV2("message -> reply", tools=[lookup_order, refund])


def says(message: str, done: bool = False) -> Any:
    return reply(f"[[ ## message ## ]]\n{message}\n\n[[ ## done ## ]]\n{done}\n\n[[ ## completed ## ]]")


USER_SCRIPT = [says("I was charged twice for A-42."), says("Yes, refund the 19.90 please."), says("Thanks, bye!", True)]
AGENT_SCRIPT = [
    reply(calls=[call("lookup_order", {"order_id": "A-42"}, id="c1")]),
    reply("I see two charges of 19.90. Shall I refund one?"),
    reply(calls=[call("refund", {"order_id": "A-42", "amount": 19.9}, id="c2")]),
    reply("Refunded 19.90 on A-42."),
]
GOAL, FACTS = "Get the duplicate charge on A-42 refunded.", "Order A-42; charged 19.90 twice."


def user(script: list[Any] = USER_SCRIPT) -> tuple[evals.SimulatedUser, ScriptedLM]:
    simulated, lm = evals.SimulatedUser(), ScriptedLM(list(script), model="openai/user")
    simulated.set_lm(lm)
    return simulated, lm


@pytest.fixture
def talk(run: Any) -> Any:
    """``talk(agent, user, **options)`` through ``converse`` or ``await aconverse``."""

    def go(*args: Any, **kwargs: Any) -> evals.Conversation:
        if run.mode == "sync":
            return evals.converse(*args, **kwargs)
        return asyncio.run(evals.aconverse(*args, **kwargs))

    return go


def test_a_conversation_runs_until_the_user_is_done(talk):
    simulated, user_lm = user()
    agent_lm = ScriptedLM(AGENT_SCRIPT)
    with dspy.context(lm=agent_lm):
        conversation = talk(agent(), simulated, goal=GOAL, facts=FACTS)
    agent_lm.assert_complete()
    user_lm.assert_complete()
    assert conversation.ended == "user_done" and conversation.turns == 2
    assert conversation.transcript() == "\n".join(
        [
            "user: I was charged twice for A-42.",
            "agent: I see two charges of 19.90. Shall I refund one?",
            "user: Yes, refund the 19.90 please.",
            "agent: Refunded 19.90 on A-42.",
            "user: Thanks, bye!",
        ]
    )
    # The user saw the goal, its facts and the conversation so far; the agent saw only the messages.
    last_seen = user_lm.requests[2].messages[-1]["content"]
    assert f"[[ ## goal ## ]]\n{GOAL}" in last_seen and f"[[ ## facts ## ]]\n{FACTS}" in last_seen
    assert "user: Yes, refund the 19.90 please.\nagent: Refunded 19.90 on A-42." in last_seen
    assert all(GOAL not in str(r.messages) for r in agent_lm.requests)
    # The user's usage is counted apart from the agent's.
    assert conversation.agent_usage.requests == {"step": 4}
    assert conversation.user_usage.requests == {"step": 3}
    assert conversation.user_usage.input_tokens > 0
    assert conversation.agent_usage.input_tokens == sum(
        e.agent.metadata.usage.input_tokens for e in conversation.exchanges[:2]
    )
    # The last prediction's record holds both turns: the trajectory across turns.
    calls = [str(c) for c in evals.read(dspy.Example(), conversation.last).calls]
    assert calls == ["lookup_order(order_id='A-42')", "refund(order_id='A-42', amount=19.9)"]


def test_a_conversation_is_reproducible(talk):
    records = []
    for _ in range(2):
        simulated, _lm = user()
        with dspy.context(lm=ScriptedLM(AGENT_SCRIPT)):
            conversation = talk(agent(), simulated, goal=GOAL, facts=FACTS)
        records.append((conversation.transcript(), _stable(dspy_imp.dump_history(conversation.last.metadata.history))))
    assert records[0] == records[1]


def _stable(dump: Any) -> Any:
    """The dump without its clock readings (``returned_at``)."""
    if isinstance(dump, dict):
        return {k: _stable(v) for k, v in dump.items() if k != "returned_at"}
    return [_stable(v) for v in dump] if isinstance(dump, list) else dump


def test_a_simulated_user_saves_and_loads_like_any_program(talk, tmp_path):
    simulated = evals.SimulatedUser()  # saved without its model (a scripted one is not savable)
    simulated.respond.signature = simulated.respond.signature.with_instructions("You are an impatient customer.")
    simulated.respond.demos = [dspy.Example(goal="g", facts="f", conversation="", message="Hi", done=False)]
    path = tmp_path / "user.json"
    simulated.save(str(path))
    loaded = evals.SimulatedUser()
    loaded.load(str(path))
    assert loaded.respond.signature.instructions == "You are an impatient customer."
    assert loaded.dump_state() == simulated.dump_state()
    lm = ScriptedLM(list(USER_SCRIPT), model="openai/user")
    loaded.set_lm(lm)
    with dspy.context(lm=ScriptedLM(AGENT_SCRIPT)):
        conversation = talk(agent(), loaded, goal=GOAL, facts=FACTS)
    assert conversation.ended == "user_done"
    assert lm.requests[0].messages[0]["content"].count("You are an impatient customer.") == 1


@pytest.mark.parametrize("end", ["max_turns", "until", "agent_stopped"])
def test_the_other_end_conditions(talk, end):
    simulated, _lm = user()
    options: dict[str, Any] = {"max_turns": 1} if end == "max_turns" else {}
    if end == "until":
        options["until"] = lambda so_far: so_far.turns == 1
    chosen, script = agent(), AGENT_SCRIPT
    if end == "agent_stopped":  # one request allowed: the turn ends without an answer after its call
        limits = dspy_imp.UsageLimits(requests=1)
        chosen = dspy_imp.ReActV2("message -> reply", tools=[lookup_order], usage_limits=limits)
        script = AGENT_SCRIPT[:1]
    with dspy.context(lm=ScriptedLM(script)):
        conversation = talk(chosen, simulated, goal=GOAL, facts=FACTS, **options)
    assert conversation.ended == end and conversation.turns == 1
    if end == "agent_stopped":
        assert conversation.transcript().splitlines()[1] == "agent: (no answer: the turn ended incomplete)"


def test_a_bad_option_is_a_clear_error_before_any_model_is_called(talk):
    simulated, lm = user()
    with pytest.raises(ConfigurationError, match="`max_turns` must be a positive integer, got 0"):
        talk(agent(), simulated, goal=GOAL, max_turns=0)
    two = dspy_imp.ReActV2("message, account -> reply", tools=[lookup_order])
    with pytest.raises(ConfigurationError, match="`message_field` must name one of the agent's inputs"):
        talk(two, simulated, goal=GOAL)
    with pytest.raises(ConfigurationError, match="`max_turns` must be a positive integer, got -1"):
        evals.Conversing(agent(), simulated, max_turns=-1)
    with pytest.raises(ConfigurationError, match="Conversing got unknown option\\(s\\) \\['turns'\\]"):
        evals.Conversing(agent(), simulated, turns=3)
    assert lm.requests == []


def _reached(example: dspy.Example, conversation: evals.Conversation) -> tuple[float, str]:
    made = [c for c in evals.read(example, conversation.last).calls if c.name == "refund" and not c.error]
    return float(bool(made)), f"{len(made)} refund(s) made."


def test_conversations_under_dspy_evaluate_with_conversation_metrics(run):
    simulated, _lm = user(USER_SCRIPT * 2)
    program = evals.Conversing(agent(), simulated, max_turns=4)
    devset = [
        dspy.Example(goal=GOAL, facts=FACTS, expected_calls=["lookup_order", "refund"]).with_inputs("goal", "facts")
    ]
    metric = evals.AllOf(evals.GoalReached(_reached), evals.TurnsTaken(2), evals.ToolTrajectory("exact", args="ignore"))
    with dspy.context(lm=ScriptedLM(AGENT_SCRIPT)):
        pred = run(program, **devset[0].inputs())
    verdict = metric.verdict(devset[0], pred)
    assert verdict.passed
    assert verdict.feedback.splitlines()[0] == (
        "[goal_reached 1.00] The user's goal was reached after 2 agent turns (ended `user_done`). 1 refund(s) made."
    )
    assert (
        verdict.feedback.splitlines()[1] == "[turns_taken 1.00] The conversation took 2 agent turns (at most 2 wanted)."
    )
    with dspy.context(lm=ScriptedLM(AGENT_SCRIPT)):
        result = dspy.Evaluate(devset=devset, metric=metric, num_threads=1, display_progress=False)(program)
    assert result.score == 100.0
    table = evals.report(result, metric)
    assert table.score == 100.0 and table.rows[0].reason == "answered" and table.rows[0].requests == 4
    assert "<td>answered</td><td>4</td>" in table._repr_html_()
    assert len(table.failing()) == 0


def test_a_conversations_wall_time_and_its_budget_count_the_agents_turns(run, talk, fake_clock):
    """On the turns' clock: each agent request takes 1 s, each of the user's 0.5 s."""
    simulated, _lm = user([fake_clock.after(0.5, item) for item in USER_SCRIPT])
    timed = [fake_clock.after(1.0, item) for item in AGENT_SCRIPT]
    with dspy.context(lm=ScriptedLM(timed)):
        conversation = talk(agent(), simulated, goal=GOAL, facts=FACTS)
    assert [e.agent.metadata.duration for e in conversation.exchanges if e.agent is not None] == [2.0, 2.0]
    assert (conversation.agent_duration, conversation.duration) == (4.0, 5.5)

    # Under dspy.Evaluate, a Budget on a conversation counts all its agent turns, the user's apart.
    simulated, _lm = user([fake_clock.after(0.5, item) for item in USER_SCRIPT * 2])  # a run, then Evaluate's
    program = evals.Conversing(agent(), simulated, max_turns=4)
    devset = [dspy.Example(goal=GOAL, facts=FACTS).with_inputs("goal", "facts")]
    metric = evals.Budget(requests=4, seconds=3)
    with dspy.context(lm=ScriptedLM([fake_clock.after(1.0, item) for item in AGENT_SCRIPT * 2])):
        pred = run(program, **devset[0].inputs())
        result = dspy.Evaluate(devset=devset, metric=metric, num_threads=1, display_progress=False)(program)
    feedback = "Over budget: the agent's turns used 4 requests (budget 4) and took 4 s (budget 3 s, over)."
    assert metric.verdict(devset[0], pred).feedback == feedback
    assert (result.score, metric.verdict(*result.results[0][:2]).feedback) == (50.0, feedback)
    assert evals.report(result, metric).rows[0].seconds == 4.0


def test_the_user_is_frozen_for_optimizers_unless_asked():
    simulated, _lm = user()
    frozen = evals.Conversing(agent(), simulated)
    assert [name for name, _ in frozen.named_predictors()] == ["agent.react"]
    both = evals.Conversing(agent(), simulated, optimize_user=True)
    assert [name for name, _ in both.named_predictors()] == ["agent.react", "user.respond"]


def test_pass_hat_k():
    assert evals.pass_hat_k([[1, 1, 0, 1]], 1) == 0.75
    assert evals.pass_hat_k([[1, 1, 0, 1]], 2) == 0.5  # C(3, 2) / C(4, 2)
    assert evals.pass_hat_k([[True, True], [True, False]], 2) == 0.5
    with pytest.raises(ConfigurationError, match="pass\\^3 needs at least 3 trials of each task, got 2"):
        evals.pass_hat_k([[1, 1]], 3)


def test_repeat_runs_trials_and_reports_pass_hat_k():
    program = agent()
    devset = [dspy.Example(message="Refund A-42", expected_calls=["lookup_order"]).with_inputs("message")]
    # Three trials: the model looks the order up in the first and the third.
    looked = [reply(calls=[call("lookup_order", {"order_id": "A-42"})]), reply("Done.")]
    with dspy.context(lm=ScriptedLM([*looked, reply("No."), *looked])):
        trials = evals.repeat(program, devset, evals.ToolTrajectory("exact", args="ignore"), trials=3)
    assert trials.scores == ((1.0, 0.0, 1.0),)
    assert trials.pass_hat(1) == pytest.approx(2 / 3) and trials.pass_hat(2) == pytest.approx(1 / 3)
