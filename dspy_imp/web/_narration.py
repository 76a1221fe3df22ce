"""One turn told as a UI stream: the turn's events in, calls on an encoder out.

The narration owns what both protocols share (``agui`` and ``vercel`` only spell it):

- a *step* per request, opened when the request starts and closed when the next one starts or
  the turn ends, so the calls a reply made and their results sit in the step of that reply;
- one open message at a time: the request's text (the answer channel, or a thought) and the
  provider's reasoning are messages; a tool call closes the open message first;
- what a tool reports while it runs (``ToolProgress``, ``ToolLog``: an MCP server's progress and
  log messages) is told as it comes, between the call and its result, as the protocol's
  activity (AG-UI) or data parts (AI SDK): never a message of the conversation;
- a call is shown once: a resumed turn answers the paused step's calls, which the run that
  paused already showed, so only their results are told again;
- at the end: the calls of a paused step that were not shown yet, the answer as a message when
  the outputs were not the streamed text (``submit``, ``finish_on``, the extractor, a forced
  submit), then how the turn ended.

A call the provider ran inside its reply (``HostedToolCall``: ``dspy_imp.hosted``) is told after
the reply's text, before the reply's own calls, whole: its start, its input, its result, each
marked as run by the provider (the encoder's ``hosted_call``).

A sub-agent's call (``agent.as_tool()``) is a call of the agent like any other: its start, its
arguments, its result (what the model read). What happens in the sub-agent's turn
(``SubAgentEvent``s) is told by a narration of its own per sub-agent call, nested under the call
and never as the agent's own messages or calls: the encoder says the segment started
(``agent_started``), wraps each of its moments (``nested``), and says how it ended
(``agent_ended``: its result, its error, or suspended on a pause). A nested call's id is its id
path (``"p1/c1"``: the id its pause gives it), its step names carry the agent and the path.
A sub-agent's pending call is told before the pause that names it: nested, for a protocol whose
interrupts name a sub-agent's call (``nests_pauses``, AG-UI), else as a call of the agent
(``"researcher/lookup_order"``: an AI SDK approval request needs a tool part of the message).

Ids are made from the run id, the sub-agent's call path and a counter, so a run's stream is the
same every time and no id repeats within it.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal, Protocol

from dspy_imp._records.outcomes import Reply
from dspy_imp._watch.events import (
    HostedToolCall,
    ReasoningDelta,
    RequestEnded,
    RequestStarted,
    SubAgentEvent,
    TextDelta,
    ToolEnded,
    ToolLog,
    ToolProgress,
    ToolStarted,
    TurnEvent,
)

MessageKind = Literal["text", "thought", "reasoning"]
"""``text``: the answer channel; ``thought``: text the model wrote that is not an answer;
``reasoning``: the provider's reasoning. The last two are reasoning to a UI."""


class Encoder(Protocol):
    """What a protocol turns each moment of a turn into (a list of its own events or parts)."""

    def run_started(self) -> list[Any]: ...
    def step_started(self, name: str) -> list[Any]: ...
    def step_finished(self, name: str) -> list[Any]: ...
    def message_started(self, message_id: str, kind: MessageKind) -> list[Any]: ...
    def message_delta(self, message_id: str, kind: MessageKind, delta: str) -> list[Any]: ...
    def message_ended(self, message_id: str, kind: MessageKind) -> list[Any]: ...
    def tool_call(self, call_id: str, name: str, args: Any, parent_id: str | None) -> list[Any]: ...
    def tool_result(self, call_id: str, value: Any, error: bool, denied: bool) -> list[Any]: ...
    def tool_progress(self, event: ToolProgress) -> list[Any]: ...
    def tool_log(self, event: ToolLog) -> list[Any]: ...
    def hosted_call(self, call: HostedToolCall, parent_id: str | None) -> list[Any]: ...
    def finished(self, prediction: Any, pending: tuple[Mapping[str, Any], ...]) -> list[Any]: ...
    def failed(self, error: BaseException) -> list[Any]: ...
    def refused(self, message: str, code: str) -> list[Any]: ...
    def agent_started(self, agent: str, path: str, message_id: str | None, parent: str | None) -> list[Any]: ...
    def nested(self, agent: str, path: str, items: list[Any]) -> list[Any]: ...
    def agent_ended(self, agent: str, path: str, ended: AgentSegmentEnd) -> list[Any]: ...

    @property
    def nests_pauses(self) -> bool: ...


@dataclass(frozen=True)
class AgentSegmentEnd:
    """How a sub-agent call's segment of a run ended: with a ``result``, an ``error`` (the sentence
    the model read), or ``suspended`` on the ids of the pending calls it owns itself (a pause)."""

    result: Any = None
    error: str | None = None
    suspended: tuple[str, ...] | None = None


@dataclass
class _Open:
    message_id: str
    kind: MessageKind


@dataclass
class Narration:
    """Feeds ``encoder`` one turn: ``event`` for each turn event, then ``finished`` or ``failed``.

    Args:
        encoder: The protocol's encoder.
        run_id: Makes the ids of the run's messages.
        shown: Call ids the client already has (the paused step's calls, on a resume).
        refused: Call ids a person refused on this resume (told as denied where the protocol can).
        label: Before each step's name (a sub-agent's narration: its agent and call path).
    """

    encoder: Encoder
    run_id: str
    shown: Collection[str] = ()
    refused: Collection[str] = ()
    label: str = ""
    _step: str | None = None
    _open: _Open | None = None
    _number: int = 0
    _channel: str = "thought"
    _streamed: dict[str, str] = field(default_factory=dict)
    _said: str | None = None  # the answer-channel message of the last request, if any
    _calls: set[str] = field(default_factory=set)
    _agents: dict[str, _Segment] = field(default_factory=dict)  # each open sub-agent call's, by its id path
    _holders: dict[str, str | None] = field(default_factory=dict)  # the message each told call sits in

    def start(self) -> list[Any]:
        return self.encoder.run_started()

    def event(self, event: TurnEvent) -> list[Any]:
        if isinstance(event, SubAgentEvent):
            return self._nested(event)
        if isinstance(event, RequestStarted):
            return self._request(event)
        if isinstance(event, TextDelta):
            return self._delta("text" if self._channel == "text" else "thought", event.text)
        if isinstance(event, ReasoningDelta):
            return self._delta("reasoning", event.text)
        if isinstance(event, RequestEnded):
            return self._request_ended(event.outcome)
        if isinstance(event, HostedToolCall):
            return self._hosted(event)
        if isinstance(event, ToolStarted):
            return self._tool_started(event)
        if isinstance(event, ToolProgress):  # during its call: no message of the step is open
            return self.encoder.tool_progress(event)
        if isinstance(event, ToolLog):
            return self.encoder.tool_log(event)
        assert isinstance(event, ToolEnded)
        out = self._segments_ended(event.call_id, _end_of(event))
        return out + self.encoder.tool_result(event.call_id, event.value, event.error, event.call_id in self.refused)

    def finished(self, prediction: Any) -> list[Any]:
        metadata = prediction.metadata
        pending = tuple(metadata.pending_calls)
        theirs = [call for call in pending if owner_of(call) is not None]  # a paused sub-agent's calls
        out = self._nested_pending(theirs) if self.encoder.nests_pauses else []
        out += self._segments_ended(None, AgentSegmentEnd(suspended=()) if pending else AgentSegmentEnd(), pending)
        out += self._close()
        if pending:  # in the step of the reply that made them
            out += self._unshown_calls(metadata.history, [] if self.encoder.nests_pauses else theirs)
        out += self._close_step()
        answer = _answer_text(prediction)
        said_it = metadata.termination_reason in ("answered", "last_text") and self._said is not None
        if answer and not said_it:
            message_id = f"{self.run_id}-answer"
            out += self.encoder.message_started(message_id, "text")
            out += self.encoder.message_delta(message_id, "text", answer)
            out += self.encoder.message_ended(message_id, "text")
        return out + self.encoder.finished(prediction, tuple(metadata.pending_calls))

    def turned_away(self, message: str, code: str) -> list[Any]:
        """A run refused before it started (a limit named by ``code``): its start, then its error."""
        return [*self.encoder.run_started(), *self.encoder.refused(message, code)]

    def failed(self, error: BaseException) -> list[Any]:
        ended = AgentSegmentEnd(error=f"{type(error).__name__}: {getattr(error, 'reason', error)}")
        out = self._segments_ended(None, ended)
        return [*out, *self._close(), *self._close_step(), *self.encoder.failed(error)]

    # -- sub-agents ---------------------------------------------------------------------------

    def _nested(self, event: SubAgentEvent) -> list[Any]:
        """A sub-agent's event, told by the narration of its call's segment (opened at its first event)."""
        segment, out = self._segment(event.agent, event.call_id)
        own = event.event
        if isinstance(own, ToolStarted | ToolEnded | ToolProgress | ToolLog | HostedToolCall):  # calls by id paths
            own = replace(own, call_id=f"{event.call_id}/{own.call_id}")
        if isinstance(own, ToolEnded):
            out += self._segments_ended(own.call_id, _end_of(own))  # a grandchild's call: its segment ends
            if own.call_id in self.shown and not self.encoder.nests_pauses:  # the client has it as ours
                denied = own.call_id in self.refused
                out += segment.narration._close()
                return out + self.encoder.tool_result(own.call_id, own.value, own.error, denied)
        return out + segment.narration.event(own)

    def _segment(self, agent: str, path: str) -> tuple[_Segment, list[Any]]:
        """The open segment of the sub-agent call ``path``, and what opening it told (when it was not open)."""
        segment = self._agents.get(path)
        if segment is not None:
            return segment, []
        parent = path.rsplit("/", 1)[0] if "/" in path else None
        caller = self._agents[parent].narration if parent in self._agents else self
        encoder = _Nested(self.encoder, agent, path)
        label = f"{agent} ({path}) "
        narration = Narration(encoder, f"{self.run_id}-{path}", self.shown, self.refused, label)
        segment = self._agents[path] = _Segment(agent, narration)
        return segment, self.encoder.agent_started(agent, path, caller._holders.get(path), parent)

    def _segments_ended(
        self, call_id: str | None, ended: AgentSegmentEnd, pending: tuple[Mapping[str, Any], ...] = ()
    ) -> list[Any]:
        """The segments of the sub-agent call ``call_id`` and its descendants (all: ``None``) closed,
        the deepest first; ``ended`` is how the call's own (or, for ``None``, each) segment ended."""
        under = [p for p in self._agents if call_id is None or p == call_id or p.startswith(f"{call_id}/")]
        out: list[Any] = []
        for path in sorted(under, key=lambda p: -p.count("/")):
            segment = self._agents.pop(path)
            out += segment.narration._close() + segment.narration._close_step()
            how = ended if call_id is None or path == call_id else AgentSegmentEnd()
            if how.suspended is not None:  # the interrupts this sub-agent raised itself
                how = replace(how, suspended=tuple(c["id"] for c in pending if owner_of(c) == path))
            out += self.encoder.agent_ended(segment.agent, path, how)
        return out

    def _nested_pending(self, calls: list[Mapping[str, Any]]) -> list[Any]:
        """A paused sub-agent's pending calls, told in its segment (before the pause that names them)."""
        out: list[Any] = []
        for call in calls:
            path, name = owner_of(call) or "", str(call.get("name") or "")
            segment, opened = self._segment(name.rsplit("/", 1)[0], path)
            inner = segment.narration
            out += opened
            if not inner._has(call["id"]):
                inner._calls.add(call["id"])
                out += inner._close() + inner._tell_call(call["id"], name.rsplit("/", 1)[-1], call.get("args") or {})
        return out

    # -- requests and messages ----------------------------------------------------------------

    def _request(self, event: RequestStarted) -> list[Any]:
        out = [*self._close(), *self._close_step()]
        self._number, self._channel, self._said = event.number, event.channel, None
        self._streamed = {}
        self._step = f"{self.label}request {event.number}: {event.kind}"
        return out + self.encoder.step_started(self._step)

    def _delta(self, kind: MessageKind, text: str) -> list[Any]:
        if not text:
            return []
        out: list[Any] = []
        if self._open is None or self._open.kind != kind:
            out += self._close()
            self._open = _Open(f"{self.run_id}-{kind}-{self._number}", kind)
            out += self.encoder.message_started(self._open.message_id, kind)
            if kind == "text":
                self._said = self._open.message_id
        self._streamed[kind] = self._streamed.get(kind, "") + text
        return out + self.encoder.message_delta(self._open.message_id, kind, text)

    def _request_ended(self, outcome: Any) -> list[Any]:
        """What the reply said that did not stream (a cached reply, a value read whole) is told now."""
        out: list[Any] = []
        if isinstance(outcome, Reply):
            if outcome.reasoning_content and "reasoning" not in self._streamed:
                out += self._delta("reasoning", outcome.reasoning_content)
            text_kind: MessageKind = "text" if self._channel == "text" else "thought"
            rest = _rest(outcome.text or "", self._streamed.get(text_kind, ""))
            out += self._delta(text_kind, rest)
        return out + self._close()

    def _close(self) -> list[Any]:
        if self._open is None:
            return []
        opened, self._open = self._open, None
        return self.encoder.message_ended(opened.message_id, opened.kind)

    def _close_step(self) -> list[Any]:
        if self._step is None:
            return []
        step, self._step = self._step, None
        return self.encoder.step_finished(step)

    # -- calls --------------------------------------------------------------------------------

    def _tool_started(self, event: ToolStarted) -> list[Any]:
        out = self._close()
        if self._has(event.call_id):
            return out
        self._calls.add(event.call_id)
        return out + self._tell_call(event.call_id, event.name or "", event.args)

    def _hosted(self, event: HostedToolCall) -> list[Any]:
        """A call the provider ran: told once, whole (its start, input and result), marked as the
        provider's so a client neither runs it nor asks anyone to approve it."""
        out = self._close()
        if self._has(event.call_id):
            return out
        self._calls.add(event.call_id)
        self._holders[event.call_id] = self._said
        return out + self.encoder.hosted_call(event, self._said)

    def _tell_call(self, call_id: str, name: str, args: Any) -> list[Any]:
        self._holders[call_id] = self._said
        return self.encoder.tool_call(call_id, name, args, self._said)

    def _has(self, call_id: str) -> bool:
        """The client has the call: told in this run, or the resumed turn's paused call, or one a
        paused call ran under (the sub-agent call ``"p1"`` of a paused ``"p1/c1"``)."""
        if call_id in self._calls or call_id in self.shown:
            return True
        return any(shown.startswith(f"{call_id}/") for shown in self.shown)

    def _unshown_calls(self, history: Any, pending: Any) -> list[Any]:
        """The paused step's calls not told yet, then a paused sub-agent's pending calls (as ours)."""
        entry = history.messages[-1] if history.messages else {}
        out: list[Any] = []
        for call in [*(entry.get("tool_calls") or []), *pending]:
            if not self._has(call["id"]):
                self._calls.add(call["id"])
                out += self._tell_call(call["id"], call.get("name") or "", call.get("args") or {})
        return out


@dataclass
class _Segment:
    """One sub-agent call's segment of the run: its agent's path and the narration telling it."""

    agent: str
    narration: Narration


def owner_of(call: Mapping[str, Any]) -> str | None:
    """The id path of the sub-agent call a pending call belongs to (``"p1"`` for ``"p1/c1"``), or
    ``None`` for the agent's own (a sub-agent's pending call is named by its path: ``"researcher/x"``)."""
    if "/" not in str(call.get("name") or "") or "/" not in str(call.get("id") or ""):
        return None
    return str(call["id"]).rsplit("/", 1)[0]


def _end_of(event: ToolEnded) -> AgentSegmentEnd:
    return AgentSegmentEnd(error=as_text(event.value)) if event.error else AgentSegmentEnd(result=event.value)


@dataclass
class _Nested:
    """The encoder of a sub-agent segment's narration: the served encoder's moments, each wrapped
    as the segment's (``Encoder.nested``). A segment has no run start or end of its own: its
    call's start and result bound it."""

    encoder: Encoder
    agent: str
    path: str

    @property
    def nests_pauses(self) -> bool:
        return self.encoder.nests_pauses

    def _wrap(self, items: list[Any]) -> list[Any]:
        return self.encoder.nested(self.agent, self.path, items)

    def run_started(self) -> list[Any]:
        return []

    def step_started(self, name: str) -> list[Any]:
        return self._wrap(self.encoder.step_started(name))

    def step_finished(self, name: str) -> list[Any]:
        return self._wrap(self.encoder.step_finished(name))

    def message_started(self, message_id: str, kind: MessageKind) -> list[Any]:
        return self._wrap(self.encoder.message_started(message_id, kind))

    def message_delta(self, message_id: str, kind: MessageKind, delta: str) -> list[Any]:
        return self._wrap(self.encoder.message_delta(message_id, kind, delta))

    def message_ended(self, message_id: str, kind: MessageKind) -> list[Any]:
        return self._wrap(self.encoder.message_ended(message_id, kind))

    def tool_call(self, call_id: str, name: str, args: Any, parent_id: str | None) -> list[Any]:
        return self._wrap(self.encoder.tool_call(call_id, name, args, parent_id))

    def tool_result(self, call_id: str, value: Any, error: bool, denied: bool) -> list[Any]:
        return self._wrap(self.encoder.tool_result(call_id, value, error, denied))

    def tool_progress(self, event: ToolProgress) -> list[Any]:
        return self._wrap(self.encoder.tool_progress(event))

    def tool_log(self, event: ToolLog) -> list[Any]:
        return self._wrap(self.encoder.tool_log(event))

    def hosted_call(self, call: HostedToolCall, parent_id: str | None) -> list[Any]:
        return self._wrap(self.encoder.hosted_call(call, parent_id))

    def finished(self, prediction: Any, pending: tuple[Mapping[str, Any], ...]) -> list[Any]:
        return []

    def failed(self, error: BaseException) -> list[Any]:
        return []

    def refused(self, message: str, code: str) -> list[Any]:
        return []  # a segment is never refused before it starts: its run is

    def agent_started(self, agent: str, path: str, message_id: str | None, parent: str | None) -> list[Any]:
        return self.encoder.agent_started(agent, path, message_id, parent)

    def nested(self, agent: str, path: str, items: list[Any]) -> list[Any]:
        return self.encoder.nested(agent, path, items)

    def agent_ended(self, agent: str, path: str, ended: AgentSegmentEnd) -> list[Any]:
        return self.encoder.agent_ended(agent, path, ended)


def _rest(whole: str, streamed: str) -> str:
    if not streamed:
        return whole
    return whole[len(streamed) :] if whole.startswith(streamed) else ""


def _answer_text(prediction: Any) -> str:
    """The outputs as one text: the value of a single output, else ``name: value`` lines."""
    values = {k: v for k, v in prediction.items() if v is not None}
    if not values:
        return ""
    if len(values) == 1 and len(prediction.keys()) == 1:
        return as_text(next(iter(values.values())))
    return "\n".join(f"{name}: {as_text(value)}" for name, value in values.items())


def as_text(value: Any) -> str:
    """A value as a UI shows it: a string as is, anything else as JSON (``str`` when it is not JSON)."""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        return str(value)


def hosted_result_text(call: Any) -> str:
    """A hosted call's result (a ``HostedToolCall`` or ``HostedCall``) as a tool result's text: its
    summary as JSON, the provider's error code in it."""
    result = dict(call.result or {})
    return as_text({**result, "error": call.error} if call.error else result)
