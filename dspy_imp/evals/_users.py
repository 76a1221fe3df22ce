"""Simulated users and multi-turn conversations (tau-bench's shape, as DSPy modules).

``SimulatedUser`` is a DSPy module: a user with a goal and private facts, speaking one message at a
time from the conversation so far, and saying when it is done. Being a module, it saves and loads
like any program and an optimizer can tune it (make it more realistic, more stubborn).

``converse(agent, user, ...)`` runs a conversation to an end condition: the user says it is done,
``until`` holds after an agent turn, the agent's turn ends without an answer, or ``max_turns``
agent turns have run. Each agent turn continues the agent's history (``history=``), so the last
prediction's record holds the whole conversation and every metric of ``dspy_imp.evals`` reads it
across turns. The user's requests are counted apart from the agent's (``user_usage``), and its time
too: ``duration`` is the whole conversation's, ``agent_duration`` the agent's turns'.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any, Literal

import dspy

from dspy_imp._drivers.recorder import Recorder, measured, recording
from dspy_imp._program.module import ReActV2
from dspy_imp._program.prediction import Prediction
from dspy_imp._records import clock
from dspy_imp._records.errors import ConfigurationError
from dspy_imp._records.usage import Usage, summed

ConversationEnd = Literal["user_done", "until", "agent_stopped", "max_turns"]
"""Why a conversation ended: the user said it was done, ``until`` held, the agent's turn ended
without an answer (``incomplete``, ``paused``, ``blocked``), or ``max_turns`` agent turns ran."""


class UserTurn(dspy.Signature):
    """You play a customer talking to a support agent. Pursue your goal one message at a time, in
    your own words. Share a private fact only when the agent asks for it or needs it. When your goal
    is reached, or the agent cannot reach it, say goodbye and set done to True."""

    goal: str = dspy.InputField(desc="what you want from this conversation")
    facts: str = dspy.InputField(desc="what you know: share only what the agent needs")
    conversation: str = dspy.InputField(desc="the conversation so far, one `user:`/`agent:` line each")
    message: str = dspy.OutputField(desc="your next message to the agent")
    done: bool = dspy.OutputField(desc="True when you end the conversation with this message")


class SimulatedUser(dspy.Module):
    """A user with a goal and private facts, as a DSPy module (``user.respond`` is its predictor).

    Give it its own model with ``user.set_lm(lm)`` (else it uses the context's).

    Example:
        ```python
        user = evals.SimulatedUser()
        talk = evals.converse(agent, user, goal="a refund for A-42", facts="charged twice")
        ```
    """

    def __init__(self, signature: type[dspy.Signature] = UserTurn):
        super().__init__()
        self.respond = dspy.Predict(signature)

    def forward(self, goal: str, facts: str, conversation: str) -> dspy.Prediction:
        return self.respond(goal=goal, facts=facts, conversation=conversation)

    async def aforward(self, goal: str, facts: str, conversation: str) -> dspy.Prediction:
        return await self.respond.acall(goal=goal, facts=facts, conversation=conversation)


@dataclass(frozen=True)
class Exchange:
    """One round: what the user said, and the agent's prediction (``None`` when the user ended)."""

    user: str
    agent: Prediction | None


@dataclass(frozen=True)
class Conversation:
    """A whole conversation's record.

    Attributes:
        exchanges: Each round, in order.
        ended: Why it ended (``ConversationEnd``).
        agent_usage: What the agent's turns used, summed (its sub-agents' included).
        user_usage: What the simulated user's requests used, apart from the agent's.
        duration: Seconds the whole conversation took, the simulated user's turns included, on
            the turns' clock (the one the deadline reads); ``agent_duration`` is the agent's share.
    """

    exchanges: tuple[Exchange, ...]
    ended: ConversationEnd
    agent_usage: Usage
    user_usage: Usage
    duration: float = 0.0

    @property
    def agent_duration(self) -> float:
        """Seconds the agent's turns took, summed (each turn's ``metadata.duration``)."""
        return sum(e.agent.metadata.duration or 0.0 for e in self.exchanges if e.agent is not None)

    @property
    def turns(self) -> int:
        """Agent turns taken."""
        return sum(e.agent is not None for e in self.exchanges)

    @property
    def last(self) -> Prediction | None:
        """The agent's last prediction: its record holds the whole conversation."""
        return next((e.agent for e in reversed(self.exchanges) if e.agent is not None), None)

    def transcript(self, reply_field: str | None = None) -> str:
        lines = []
        for exchange in self.exchanges:
            lines.append(f"user: {exchange.user}")
            if exchange.agent is not None:
                lines.append(f"agent: {_said(exchange.agent, reply_field)}")
        return "\n".join(lines)


def _said(pred: Prediction, field: str | None) -> str:
    if not pred.metadata.complete:
        return f"(no answer: the turn ended {pred.metadata.termination_reason})"
    return str(pred[field] if field else next(iter(pred.values()), ""))


def _fields(agent: ReActV2, message_field: str | None, reply_field: str | None) -> tuple[str, str]:
    inputs = [n for n in agent.signature.input_fields if n != "history"]
    outputs = list(agent.signature.output_fields)
    message = message_field or (inputs[0] if len(inputs) == 1 else None)
    reply = reply_field or (outputs[0] if len(outputs) == 1 else None)
    if message is None or message not in inputs:
        raise ConfigurationError(
            f"`message_field` must name one of the agent's inputs {inputs!r}, got {message_field!r}"
        )
    if reply is None or reply not in outputs:
        raise ConfigurationError(f"`reply_field` must name one of the agent's outputs {outputs!r}, got {reply_field!r}")
    return message, reply


@dataclass(frozen=True)
class _Options:
    goal: str
    facts: str
    opening: str | None
    max_turns: int
    until: Callable[[Conversation], bool] | None
    message_field: str
    reply_field: str


def check_options(agent: ReActV2, user: SimulatedUser, **given: Any) -> _Options:
    """The options checked, before any model is called."""
    max_turns, until = given["max_turns"], given["until"]
    if isinstance(max_turns, bool) or not isinstance(max_turns, int) or max_turns < 1:
        raise ConfigurationError(f"`max_turns` must be a positive integer, got {max_turns!r}")
    if not isinstance(user, SimulatedUser):
        raise ConfigurationError(f"`user` must be a dspy_imp.evals.SimulatedUser, got {user!r}")
    if until is not None and not callable(until):
        raise ConfigurationError(f"`until` must be a function of the conversation, got {until!r}")
    message, reply = _fields(agent, given.pop("message_field"), given.pop("reply_field"))
    return _Options(**given, message_field=message, reply_field=reply)


def converse(
    agent: ReActV2,
    user: SimulatedUser,
    *,
    goal: str,
    facts: str = "",
    opening: str | None = None,
    max_turns: int = 8,
    until: Callable[[Conversation], bool] | None = None,
    message_field: str | None = None,
    reply_field: str | None = None,
) -> Conversation:
    """Run a conversation between ``agent`` and ``user`` to its end; return the whole record.

    ``aconverse`` is the same with ``await agent.acall(...)`` and ``await user.acall(...)``.

    Args:
        agent: A ``dspy_imp.ReActV2`` with one input for the user's message (``message_field``
            when it has several) and one output for its reply (``reply_field``).
        user: The simulated user.
        goal: What the user wants. facts: What the user knows, shared when asked.
        opening: The user's first message (else the user writes it).
        max_turns: The most agent turns. until: Ends the conversation when it holds after an
            agent turn (e.g. the database reached the goal's state).

    Raises:
        ConfigurationError: A bad option, before any model is called.
    """
    steps = _conversation(check_options(agent, user, **_given(locals())))
    asked = next(steps)
    while True:
        if asked.agent:
            answer = agent(**asked.inputs)
        else:
            with recording(asked.recorder):
                answer = user(**asked.inputs)
        try:
            asked = steps.send(answer)
        except StopIteration as stop:
            return stop.value


async def aconverse(agent: ReActV2, user: SimulatedUser, **options: Any) -> Conversation:
    """``converse`` through the async drivers (``agent.acall``, ``user.acall``), with its options
    (``goal``, ``facts``, ``opening``, ``max_turns``, ``until``, ``message_field``, ``reply_field``)."""
    steps = _conversation(check_options(agent, user, **_defaults(options)))
    asked = next(steps)
    while True:
        if asked.agent:
            answer = await agent.acall(**asked.inputs)
        else:
            with recording(asked.recorder):
                answer = await user.acall(**asked.inputs)
        try:
            asked = steps.send(answer)
        except StopIteration as stop:
            return stop.value


def _given(local: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in local.items() if k not in ("agent", "user")}


def _defaults(options: dict[str, Any]) -> dict[str, Any]:
    """``converse``'s keyword options with its defaults, for ``aconverse``; an unknown one is refused."""
    known = inspect.signature(converse).parameters
    unknown = sorted(set(options) - set(known) - {"agent", "user"})
    if unknown:
        raise ConfigurationError(f"aconverse: unknown option(s) {unknown!r}; it takes converse's options")
    if "goal" not in options:
        raise ConfigurationError("aconverse needs `goal`: what the simulated user wants")
    given = {name: p.default for name, p in known.items() if name not in ("agent", "user", "goal")}
    return {**given, **options}


@dataclass(frozen=True)
class _Ask:
    """The next call a driver makes: the agent's (``agent``) or the user's, its inputs, where the user's usage goes."""

    agent: bool
    inputs: dict[str, Any]
    recorder: Recorder


def _conversation(options: _Options) -> Generator[_Ask, Any, Conversation]:
    """The conversation's decisions, free of I/O: it yields the next call and receives its
    prediction; it returns the record. ``converse`` and ``aconverse`` drive it."""
    talk = _Talk(options)
    text, done = (options.opening, False) if options.opening is not None else talk.heard((yield talk.asking()))
    history = dspy.History(messages=[])
    while True:
        if done:
            return talk.ended(text, "user_done")
        pred = yield _Ask(True, {options.message_field: text, "history": history}, talk.recorder)
        talk.exchanges.append(Exchange(text, pred))
        history = pred.metadata.history
        if not pred.metadata.complete:
            return talk.ended(None, "agent_stopped")
        if options.until is not None and options.until(talk.so_far("until")):
            return talk.ended(None, "until")
        if talk.turns >= options.max_turns:
            return talk.ended(None, "max_turns")
        text, done = talk.heard((yield talk.asking()))


class _Talk:
    """The conversation while it runs (``_conversation``'s local state, never on a module)."""

    def __init__(self, options: _Options):
        self.options = options
        self.exchanges: list[Exchange] = []
        self.recorder = Recorder()
        self.started = clock.now()

    @property
    def turns(self) -> int:
        return len(self.exchanges)

    def so_far(self, ended: ConversationEnd) -> Conversation:
        agent_calls = [c for e in self.exchanges if e.agent is not None for c in e.agent.metadata.usage.calls]
        user_calls = [measured("step", [entry], 0)[0] for entry in self.recorder.history]
        took = max(clock.now() - self.started, 0.0)
        return Conversation(tuple(self.exchanges), ended, summed(agent_calls), summed(user_calls), took)

    def asking(self) -> _Ask:
        """The user's next call: its goal, its facts, the conversation so far."""
        conversation = Conversation(tuple(self.exchanges), "max_turns", Usage(), Usage())
        transcript = conversation.transcript(self.options.reply_field)
        inputs = {"goal": self.options.goal, "facts": self.options.facts, "conversation": transcript}
        return _Ask(False, inputs, self.recorder)

    @staticmethod
    def heard(said: dspy.Prediction) -> tuple[str, bool]:
        return str(said.message), bool(said.done)

    def ended(self, last_words: str | None, why: ConversationEnd) -> Conversation:
        if last_words is not None:
            self.exchanges.append(Exchange(last_words, None))
        return self.so_far(why)
