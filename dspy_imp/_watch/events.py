"""What a running turn shows a user interface: typed events, sent to an observer as they happen.

``observing(observer)`` sets, for a block, a callable that the turn's ``Watch`` (``streaming``)
sends one event at a time, in the order things happen:

    RequestStarted   before each model request (a step, the last-text request, the forced
                     submit, the ``"required"`` retry, the extraction)
    TextDelta        a piece of the request's text as it streams in
    ReasoningDelta   a piece of the provider's reasoning as it streams in
    RequestEnded     the request's answer: ``Reply``, ``Extracted`` or ``Failed`` (with its usage)
    ToolStarted      a call about to run, or decided without running (refused, unknown, ``submit``);
                     a sub-agent's call (``agent.as_tool()``) too
    ToolEnded        what came back: the value, or the error sentence the model reads (a
                     sub-agent's call: its outputs, or why it ended without; none when it paused)
    ToolProgress     during a call, between its ToolStarted and its ToolEnded: the progress its
                     tool reported (an MCP server's progress notification)
    ToolLog          during a call: a log message its tool's server sent (MCP's
                     ``notifications/message``), bounded by the server (``dspy_imp.mcp``)
    HostedToolCall   a call the provider ran inside the reply (``dspy_imp.hosted``: a web search,
                     code execution, ...), with its result; told after the request's
                     ``RequestEnded``, before the reply's own calls start
    SubAgentEvent    one of the above in a sub-agent's turn: which agent, for which call

The events decide nothing and change nothing of the turn; they carry the call ids the history
records. A sub-agent's turn reports to the same observer, each of its events wrapped in a
``SubAgentEvent`` naming the agent's path (``"researcher"``, ``"researcher/coder"``) and the call
it runs for, by its id path from the observed turn's own call (``"p1"``, ``"p1/r1"``: the ids a
pause gives the sub-agent's pending calls, ``"p1/c1"``); its request numbers are its own.
``dspy_imp.web`` encodes them as AG-UI events and AI SDK stream parts. A turn's pause and its
end are not events: the caller reads them from the prediction (or the ``StepError``).

An observer may also stop the turn: ``stopped()``, asked before each effect, ends it there
(``StreamClosed``), and ``until_stopped()``, a coroutine of the observer's event loop that returns
once the stop is asked, lets a sync turn running in an AnyIO worker thread of that loop be stopped
while an effect runs (``_drivers.stopping``).

The observer is called from the thread doing the work (a sync turn's worker thread, a parallel
tool's pool thread, the event loop of an async turn), so it must be thread-safe and quick. While
one is set, each request streams (DSPy's ``send_stream`` is set for it): a sync turn observed this
way runs in an AnyIO worker thread (``anyio.to_thread.run_sync``), as under ``dspy.streamify``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Literal

from dspy_imp._records.outcomes import AgentEnded, Raised, Reply, Returned
from dspy_imp._records.scoped import scoped
from dspy_imp._routes.hosted import calls_of
from dspy_imp._routes.hosted_types import HostedCall
from dspy_imp._turn.agents import came_to
from dspy_imp._turn.effects import DecidedCall, Extraction, ModelRequest, RunAgent, RunTool
from dspy_imp._watch.reading import TextFollower, delta_of

Channel = Literal["text", "thought"]
"""Where a request's text goes: ``"text"`` when it may be the answer (a text-answer step or the
last-text request), ``"thought"`` when it cannot (the text of a ``submit`` or ``"tools"`` turn)."""


@dataclass(frozen=True)
class _OfRequest:
    """What an event about one request carries first: its ``number`` (1, 2, ... in this turn)."""

    number: int


@dataclass(frozen=True)
class RequestStarted(_OfRequest):
    """Request ``number`` of ``kind`` (a ``RequestKind``) is about to leave."""

    kind: str
    channel: Channel


@dataclass(frozen=True)
class _Delta(_OfRequest):
    text: str


@dataclass(frozen=True)
class TextDelta(_Delta):
    """A piece of the request's text."""


@dataclass(frozen=True)
class ReasoningDelta(_Delta):
    """A piece of the provider's reasoning for the request."""


@dataclass(frozen=True)
class RequestEnded(_OfRequest):
    """``outcome``: the ``Reply``, ``Extracted`` or ``Failed`` the driver sends the machine."""

    kind: str
    outcome: Any


@dataclass(frozen=True)
class _OfCall:
    """What an event about one tool call carries first: its id and the tool's name."""

    call_id: str
    name: str | None


@dataclass(frozen=True)
class ToolStarted(_OfCall):
    args: Any


@dataclass(frozen=True)
class ToolEnded(_OfCall):
    """``value``: what the tool returned, or (``error``) the sentence the model reads."""

    value: Any
    error: bool


@dataclass(frozen=True)
class ToolProgress(_OfCall):
    """The call's tool reported progress: ``progress`` of ``total`` (``None``: unknown), and a message."""

    progress: float
    total: float | None
    message: str | None


@dataclass(frozen=True)
class ToolLog(_OfCall):
    """A log message the call's tool sent: its ``level`` (``"debug"`` to ``"emergency"``, MCP's
    RFC 5424 names), the ``logger`` it names (or ``None``), and its ``text``, cut and on one line."""

    level: str
    logger: str | None
    text: str


@dataclass(frozen=True)
class HostedToolCall(_OfCall):
    """A call the provider ran inside request ``number``'s reply (``_routes.hosted_types.HostedCall``):
    ``name`` one spelling across providers (``web_search``, ``code_execution``, ``web_fetch``,
    ``file_search``, ``mcp_call``), ``args`` its input as served, ``result`` what came back
    summarized, ``error`` the provider's error code (None: it ran), ``provider`` who ran it. It is
    no call of the loop's: nothing runs it, approves it or answers it."""

    number: int
    args: Any
    result: Any
    error: str | None
    provider: str


OwnEvent = (
    RequestStarted
    | TextDelta
    | ReasoningDelta
    | RequestEnded
    | HostedToolCall
    | ToolStarted
    | ToolEnded
    | ToolProgress
    | ToolLog
)


@dataclass(frozen=True)
class SubAgentEvent:
    """``event`` happened in the turn of the sub-agent ``agent`` (its path), run for the call ``call_id``.

    ``call_id`` is the call's id path from the observed turn: the observed agent's own call
    (``"p1"``), then each call down to this agent (``"p1/r1"`` for a grandchild). The ids inside
    ``event`` are the sub-agent's own; under that path they are the ids its pending calls get.
    """

    agent: str
    call_id: str
    event: OwnEvent


TurnEvent = OwnEvent | SubAgentEvent
Observer = Callable[[TurnEvent], None]

_OBSERVER: ContextVar[Observer | None] = ContextVar("dspy_imp_observer", default=None)


def current_observer() -> Observer | None:
    return _OBSERVER.get()


def observing(observer: Observer) -> contextlib.AbstractContextManager[None]:
    """Send the events of every turn run in this block (and the threads it starts) to ``observer``."""
    return scoped(_OBSERVER, observer)


@dataclass(frozen=True)
class Calling:
    """The tool call running in this context, for a tool that reports while it runs (``calling``):
    its id and name, and the observer its ``ToolProgress`` and ``ToolLog`` events go to."""

    call_id: str
    name: str | None
    observe: Observer


_CALLING: ContextVar[Calling | None] = ContextVar("dspy_imp_calling", default=None)


def calling() -> Calling | None:
    """The observed call running now (set by the ``Watch`` around a ``RunTool``), or ``None``."""
    return _CALLING.get()


def running(call: Calling | None) -> contextlib.AbstractContextManager[None]:
    """Mark ``call`` as the call running in this block (``calling``)."""
    return scoped(_CALLING, call)


def within(observer: Observer, agent: str, call_id: str) -> Observer:
    """The observer a sub-agent's turn reports to: ``observer``, each event wrapped (``SubAgentEvent``)."""

    def observe(event: Any) -> None:
        observer(SubAgentEvent(agent, call_id, event))

    return observe


class Reporter:
    """Turns what one turn's driver performs into events for ``observer`` (used by the ``Watch``)."""

    def __init__(self, observer: Observer):
        self.observer = observer
        self.number = 0
        self.kind = "step"

    def before(self, effect: Any) -> None:
        if isinstance(effect, ModelRequest | Extraction):
            self.number += 1
            guidance = effect.guidance
            self.kind = "extraction" if isinstance(effect, Extraction) else guidance.kind
            text = isinstance(effect, ModelRequest) and (guidance.text_answer or self.kind == "last_text")
            self.observer(RequestStarted(self.number, self.kind, "text" if text else "thought"))
        elif isinstance(effect, RunTool) and effect.call is not None:
            self.observer(ToolStarted(effect.call.id, effect.call.name, dict(effect.args)))
        elif isinstance(effect, DecidedCall) and effect.stage == "call":
            call, result = effect.call, effect.result
            self.observer(ToolStarted(call.id, call.name, effect.args))
            self.observer(ToolEnded(call.id, call.name, result.value, result.error))

    def after(self, effect: Any, outcome: Any) -> None:
        if isinstance(effect, ModelRequest | Extraction):
            self.observer(RequestEnded(self.number, self.kind, outcome))
            for hosted in hosted_calls(outcome):
                self.observer(
                    HostedToolCall(
                        hosted.id,
                        hosted.name,
                        self.number,
                        dict(hosted.input),
                        dict(hosted.result),
                        hosted.error,
                        hosted.provider,
                    )
                )
        elif isinstance(effect, RunAgent) and effect.call is not None and isinstance(outcome, AgentEnded):
            self._agent_ended(effect, outcome)
        elif isinstance(effect, RunTool) and effect.call is not None:
            call = effect.call
            if isinstance(outcome, Returned):
                self.observer(ToolEnded(call.id, call.name, outcome.value, False))
            elif isinstance(outcome, Raised):
                self.observer(ToolEnded(call.id, call.name, _raised(outcome.error), True))

    def _agent_ended(self, effect: RunAgent, ended: AgentEnded) -> None:
        """A sub-agent's call: its result as the caller's step records it (none when it paused)."""
        assert effect.call is not None
        call = effect.call
        came = came_to(effect.tool, call, ended, can_wait=True)
        if came.rejection is not None:
            self.observer(ToolEnded(call.id, call.name, came.rejection.sentence, True))
        elif isinstance(came.outcome, Returned):
            self.observer(ToolEnded(call.id, call.name, came.outcome.value, False))
        elif isinstance(came.outcome, Raised):
            self.observer(ToolEnded(call.id, call.name, _raised(came.outcome.error), True))

    def follower(self, effect: Any, exchange: Any) -> _Deltas | None:
        """What reads one request's chunks for the UI (its text and its reasoning), if it is a step request."""
        if not isinstance(effect, ModelRequest) or exchange is None:
            return None
        return _Deltas(self.observer, self.number, TextFollower(exchange))


def hosted_calls(outcome: Any) -> list[HostedCall]:
    """The calls the provider ran inside a request's reply (its served blocks), in order."""
    return calls_of(outcome.reasoning_details) if isinstance(outcome, Reply) else []


def _raised(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"


class _Deltas:
    def __init__(self, observer: Observer, number: int, text: TextFollower):
        self.observer = observer
        self.number = number
        self.text = text

    def feed(self, chunk: Any) -> None:
        reasoning = delta_of(chunk, "reasoning_content")
        if isinstance(reasoning, str) and reasoning:
            self.observer(ReasoningDelta(self.number, reasoning))
        self._send(self.text.feed(chunk))

    def close(self, outcome: Any) -> None:
        self._send(self.text.close(outcome))

    def _send(self, responses: Any) -> None:
        for response in responses:
            if response.chunk:
                self.observer(TextDelta(self.number, response.chunk))
