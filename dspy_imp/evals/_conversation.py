"""Conversations as programs, metrics over them, and pass^k over repeated trials.

``Conversing(agent, user)`` is a DSPy program whose call runs a whole conversation (``converse``)
for one task (``goal``, ``facts``) and returns the agent's last prediction, whose record holds
every turn, with the ``Conversation`` attached. So ``dspy.Evaluate`` and the optimizers run
conversations like any program, and every metric reads the tool trajectory across turns. The user
is frozen (an optimizer tunes the agent, not the user it is tested against) unless
``optimize_user=True``.

pass^k (tau-bench): the chance that *all* of k trials of a task succeed, estimated from n >= k
trials with c successes as C(c, k) / C(n, k), averaged over the tasks. pass^1 is the mean
success; pass^k falls as k grows for an agent that succeeds only sometimes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import dspy

from dspy_imp._program.module import ReActV2
from dspy_imp._program.prediction import make_prediction
from dspy_imp._records.errors import ConfigurationError
from dspy_imp._routes import dspy_private
from dspy_imp.evals._metric import Judged, Metric, Verdict, as_verdict
from dspy_imp.evals._record import Record
from dspy_imp.evals._users import Conversation, SimulatedUser, aconverse, check_options, converse

_CONVERSE_OPTIONS = ("max_turns", "until", "message_field", "reply_field")
_DEFAULTS: dict[str, Any] = {"goal": "", "facts": "", "opening": None, "max_turns": 8, "until": None}
_DEFAULTS |= {"message_field": None, "reply_field": None}


class Conversing(dspy.Module):
    """A program that runs one conversation per call: ``Conversing(agent, user)(goal=..., facts=...)``.

    Args:
        agent: The agent (optimized by a compile). user: The simulated user (frozen unless
            ``optimize_user``). **options: Passed to ``converse`` (``max_turns``, ``until``, ...).

    Returns (per call): the agent's last prediction (its outputs and its record of the whole
    conversation), with ``evals.conversation_of(pred)`` the ``Conversation``.
    """

    def __init__(self, agent: ReActV2, user: SimulatedUser, *, optimize_user: bool = False, **options: Any):
        super().__init__()
        if not isinstance(user, SimulatedUser):
            raise ConfigurationError(f"`user` must be a dspy_imp.evals.SimulatedUser, got {user!r}")
        unknown = sorted(set(options) - set(_CONVERSE_OPTIONS))
        if unknown:
            raise ConfigurationError(f"Conversing got unknown option(s) {unknown!r}; it takes {_CONVERSE_OPTIONS!r}")
        check_options(agent, user, **{**_DEFAULTS, **options})  # a bad option fails here, not at the first call
        self.agent = agent
        self.user = user if optimize_user else _frozen(user)
        self.options = options

    def forward(self, goal: str, facts: str = "", opening: str | None = None) -> dspy.Prediction:
        return _carrying(converse(self.agent, self.user, goal=goal, facts=facts, opening=opening, **self.options))

    async def aforward(self, goal: str, facts: str = "", opening: str | None = None) -> dspy.Prediction:
        talk = await aconverse(self.agent, self.user, goal=goal, facts=facts, opening=opening, **self.options)
        return _carrying(talk)


def _carrying(talk: Conversation) -> dspy.Prediction:
    """The agent's last prediction (a copy), with the conversation attached."""
    last = talk.last
    pred = dspy.Prediction() if last is None else make_prediction(dict(last.items()), last.metadata)
    pred._conversation = talk
    return pred


def _frozen(user: SimulatedUser) -> SimulatedUser:
    """A copy that DSPy's optimizers leave alone (a compiled sub-module's parameters are not tuned)."""
    return dspy_private.freeze(user.deepcopy())


def conversation_of(pred: Any) -> Conversation:
    """The ``Conversation`` a ``Conversing`` program's prediction carries."""
    talk = getattr(pred, "__dict__", {}).get("_conversation")
    if not isinstance(talk, Conversation):
        raise TypeError(f"conversation_of() takes a Conversing program's prediction, got {type(pred).__name__}")
    return talk


class GoalReached(Metric):
    """Whether the conversation reached the user's goal, by a function of the example and the conversation.

    ``fn(example, conversation)`` returns a bool, a score, ``(score, feedback)`` or a ``Verdict``;
    tau-bench's check is the state the tools left (the orders database) against the task's.
    """

    def __init__(self, fn: Callable[[Any, Conversation], Judged], *, name: str = "goal_reached"):
        if not callable(fn):
            raise ConfigurationError(f"`fn` must be callable, got {fn!r}")
        super().__init__(name=name)
        self.fn = fn

    def judge(self, example: Any, record: Record) -> Verdict:
        talk = _talk(record)
        verdict = as_verdict(self.fn(example, talk), self.name)
        turns = f"after {talk.turns} agent turn{'s' if talk.turns != 1 else ''} (ended `{talk.ended}`)"
        said = "reached" if verdict.passed else "not reached"
        return Verdict(verdict.score, f"The user's goal was {said} {turns}. {verdict.feedback}", self.name)


class TurnsTaken(Metric):
    """The conversation took at most ``max_turns`` agent turns (score 1), else ``max_turns / turns``."""

    def __init__(self, max_turns: int, *, name: str = "turns_taken"):
        if isinstance(max_turns, bool) or not isinstance(max_turns, int) or max_turns < 1:
            raise ConfigurationError(f"`max_turns` must be a positive integer, got {max_turns!r}")
        super().__init__(name=name)
        self.max_turns = max_turns

    def judge(self, example: Any, record: Record) -> Verdict:
        turns = _talk(record).turns
        score = 1.0 if turns <= self.max_turns else self.max_turns / turns
        return as_verdict(
            (score, f"The conversation took {turns} agent turns (at most {self.max_turns} wanted)."), self.name
        )


def _talk(record: Record) -> Conversation:
    if not isinstance(record.conversation, Conversation):
        raise ConfigurationError("this metric reads a conversation: evaluate a dspy_imp.evals.Conversing program")
    return record.conversation


def pass_hat_k(successes: Sequence[Sequence[bool | float]], k: int) -> float:
    """tau-bench's pass^k: for each task, C(c, k) / C(n, k) over its n trials with c successes; their mean.

    A trial succeeds when its value is True or a score of 1.
    """
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ConfigurationError(f"`k` must be a positive integer, got {k!r}")
    if not successes:
        raise ConfigurationError("`successes` must hold the trials of at least one task")
    total = 0.0
    for trials in successes:
        if len(trials) < k:
            raise ConfigurationError(f"pass^{k} needs at least {k} trials of each task, got {len(trials)}")
        passed = sum(float(t) >= 1 for t in trials)
        total += math.comb(passed, k) / math.comb(len(trials), k)
    return total / len(successes)


@dataclass(frozen=True)
class Trials:
    """The scores of n trials of each task (``repeat``): ``scores[task][trial]``."""

    scores: tuple[tuple[float, ...], ...]

    def pass_hat(self, k: int) -> float:
        return pass_hat_k(self.scores, k)


def repeat(program: dspy.Module, devset: Sequence[dspy.Example], metric: Callable[..., Any], trials: int) -> Trials:
    """Run ``program`` ``trials`` times on each example, scoring each run with ``metric``.

    Against a real model, turn DSPy's cache off (``dspy.LM(..., cache=False)``) and sample
    (``temperature > 0``), or every trial repeats the first.
    """
    if isinstance(trials, bool) or not isinstance(trials, int) or trials < 1:
        raise ConfigurationError(f"`trials` must be a positive integer, got {trials!r}")
    scores = []
    for example in devset:
        runs = [float(metric(example, program(**example.inputs()))) for _ in range(trials)]
        scores.append(tuple(runs))
    return Trials(tuple(scores))
