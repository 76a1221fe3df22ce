"""One turn told as a UI stream: the turn's events in, calls on an encoder out.

The narration owns what both protocols share (``agui`` and ``vercel`` only spell it):

- a *step* per request, opened when the request starts and closed when the next one starts or
  the turn ends, so the calls a reply made and their results sit in the step of that reply;
- one open message at a time: the request's text (the answer channel, or a thought) and the
  provider's reasoning are messages; a tool call closes the open message first;
- a call is shown once: a resumed turn answers the paused step's calls, which the run that
  paused already showed, so only their results are told again;
- at the end: the calls of a paused step that were not shown yet, the answer as a message when
  the outputs were not the streamed text (``submit``, ``finish_on``, the extractor, a forced
  submit), then how the turn ended.

Ids are made from the run id and a counter, so a run's stream is the same every time.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from dspy_imp._records.outcomes import Reply
from dspy_imp._watch.events import (
    ReasoningDelta,
    RequestEnded,
    RequestStarted,
    TextDelta,
    ToolEnded,
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
    def finished(self, prediction: Any, pending: tuple[Mapping[str, Any], ...]) -> list[Any]: ...
    def failed(self, error: BaseException) -> list[Any]: ...


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
    """

    encoder: Encoder
    run_id: str
    shown: Collection[str] = ()
    refused: Collection[str] = ()
    _step: str | None = None
    _open: _Open | None = None
    _number: int = 0
    _channel: str = "thought"
    _streamed: dict[str, str] = field(default_factory=dict)
    _said: str | None = None  # the answer-channel message of the last request, if any
    _calls: set[str] = field(default_factory=set)

    def start(self) -> list[Any]:
        return self.encoder.run_started()

    def event(self, event: TurnEvent) -> list[Any]:
        if isinstance(event, RequestStarted):
            return self._request(event)
        if isinstance(event, TextDelta):
            return self._delta("text" if self._channel == "text" else "thought", event.text)
        if isinstance(event, ReasoningDelta):
            return self._delta("reasoning", event.text)
        if isinstance(event, RequestEnded):
            return self._request_ended(event.outcome)
        if isinstance(event, ToolStarted):
            return self._tool_started(event)
        assert isinstance(event, ToolEnded)
        return self.encoder.tool_result(event.call_id, event.value, event.error, event.call_id in self.refused)

    def finished(self, prediction: Any) -> list[Any]:
        out = self._close()
        metadata = prediction.metadata
        if metadata.pending_calls:  # in the step of the reply that made them
            out += self._unshown_calls(metadata.history)
        out += self._close_step()
        answer = _answer_text(prediction)
        said_it = metadata.termination_reason in ("answered", "last_text") and self._said is not None
        if answer and not said_it:
            message_id = f"{self.run_id}-answer"
            out += self.encoder.message_started(message_id, "text")
            out += self.encoder.message_delta(message_id, "text", answer)
            out += self.encoder.message_ended(message_id, "text")
        return out + self.encoder.finished(prediction, tuple(metadata.pending_calls))

    def failed(self, error: BaseException) -> list[Any]:
        return [*self._close(), *self._close_step(), *self.encoder.failed(error)]

    # -- requests and messages ----------------------------------------------------------------

    def _request(self, event: RequestStarted) -> list[Any]:
        out = [*self._close(), *self._close_step()]
        self._number, self._channel, self._said = event.number, event.channel, None
        self._streamed = {}
        self._step = f"request {event.number}: {event.kind}"
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
        if event.call_id in self.shown or event.call_id in self._calls:
            return out
        self._calls.add(event.call_id)
        return out + self.encoder.tool_call(event.call_id, event.name or "", event.args, self._said)

    def _unshown_calls(self, history: Any) -> list[Any]:
        entry = history.messages[-1] if history.messages else {}
        out: list[Any] = []
        for call in entry.get("tool_calls") or []:
            if call["id"] not in self.shown and call["id"] not in self._calls:
                self._calls.add(call["id"])
                out += self.encoder.tool_call(call["id"], call.get("name") or "", call.get("args") or {}, self._said)
        return out


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
