"""Streaming under ``dspy.streamify``: a driver concern, never a branch of the machine.

``dspy.streamify`` puts a send stream and the user's listeners in ``dspy.settings``. When
a turn runs under it, the drivers hold a ``Watch``, which forwards what they perform:

- *field chunks*. During each request the watch stands in for DSPy's send stream (a
  ``_Relay``): the LM engine's raw chunks (lm15 or LiteLLM) reach the relay, which reads the
  listened fields out of them for *this* request's kind and dialect and sends
  ``StreamResponse``s on. Raw chunks of a listened program never reach ``streamify``,
  whose marker-based listener could not read them.
- *status messages* (``_watch.status``) for each request kind, deadline retries, context-window
  recovery and the end of the turn, beside DSPy's own callback-driven tool messages.

This module is the one place that leans on DSPy's streaming internals, because
``streamify`` offers no hook for a program to read its own chunks: the ``send_stream`` and
``stream_listeners`` settings, ``Predict._should_stream``'s rule (a predictor streams when
no listener is set), ``StatusStreamingCallback`` (where the user's status provider lives) and
``sync_send_to_stream`` (dspy/streaming/streamify.py, messages.py; dspy/predict/predict.py).

DSPy's ``StreamListener`` finds its predictor by field and its markers by adapter class
name; native replies carry no markers and no predictor has the task's output fields. So
``dspy_imp.StreamListener`` is the listener for ``dspy_imp`` programs, and a DSPy listener
aimed at one raises ``ConfigurationError`` before any request (instead of streaming nothing).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any

import dspy
from dspy.streaming.messages import StatusMessage, StatusStreamingCallback, StreamResponse, sync_send_to_stream

from dspy_imp._records.errors import ConfigurationError, StreamClosed, ToolTimedOut
from dspy_imp._records.outcomes import Failed, Raised
from dspy_imp._routes.dspy_private import install_closing_sync_streams
from dspy_imp._turn.effects import (
    CheckGuardrails,
    DecidedCall,
    Extraction,
    Failure,
    ModelRequest,
    RunAgent,
    RunTool,
    Sleep,
)
from dspy_imp._turn.plan import Program
from dspy_imp._watch import genai
from dspy_imp._watch.events import Calling, Reporter, current_observer, hosted_calls, running, within
from dspy_imp._watch.holding import Hold
from dspy_imp._watch.listener import StreamListener
from dspy_imp._watch.progress import Progress
from dspy_imp._watch.reading import FieldReader, readers_for
from dspy_imp._watch.status import StatusMessageProvider, status_for


class Watch:
    """Forwards what a turn's driver performs: status messages, field chunks, progress, the
    turn's events to an observer (``_watch.events``, for user interfaces), and GenAI spans
    (``_watch.genai_spans``, once ``dspy_imp.tracing.instrument()`` turned them on)."""

    def __init__(
        self,
        program: Program,
        stream: Any,
        listeners: Sequence[StreamListener],
        progress: Progress | None,
        reporter: Reporter | None = None,
        spans: Any = None,
        hold: Hold | None = None,
    ):
        self.program = program
        self.spans = spans
        self.reporter = reporter
        self.hold = hold if hold is not None else Hold(program)
        self.stream = stream
        self.listeners = tuple(listeners)
        self.progress = progress
        self.provider = stream_provider() if stream is not None else StatusMessageProvider()
        self.omitted = 0
        self.steps = 0
        self.last_error: BaseException | None = None
        self.failed = False  # the turn ended in a StepError
        self.agent = ""  # a sub-agent's path ("researcher"): its end line names it
        self.stopped: Callable[[], bool] | None = None
        self.until_stopped: Callable[[], Awaitable[None]] | None = None  # returns once the stop is asked
        self.model_slot: Callable[[], AbstractAsyncContextManager[None]] | None = None  # held while a request runs
        self.model_loop: asyncio.AbstractEventLoop | None = None  # the loop whose slots those are

    @classmethod
    def of(cls, program: Program, agent: str = "", call_id: str = "") -> Watch | None:
        """The watch for a turn of ``program``, or ``None`` when nothing is watching.

        ``agent``, ``call_id``: a sub-agent's turn, its path and the id path of the call it runs for
        (``_drivers.child``): its status lines name it, its events are the observer's ``SubAgentEvent``s.
        """
        stream = dspy.settings.send_stream
        progress = Progress.of()
        observer = current_observer()
        spans = genai.turn_of(program)
        if stream is None and progress is None and observer is None and spans is None:
            return None
        listeners = (dspy.settings.stream_listeners or []) if stream is not None else []
        if stream is not None:
            install_closing_sync_streams()  # for the streams opened from now on (see also ``ReActV2``)
        _refuse_dspy_listeners(program, listeners)
        ours = [lst for lst in listeners if isinstance(lst, StreamListener) and lst.follows(program)]
        reported = within(observer, agent, call_id) if observer is not None and agent else observer
        hold = Hold(program, reported)  # what a guardrail may still block is held (``_watch.holding``)
        reporter = Reporter(hold.observe) if observer is not None else None
        watch = cls(program, stream, ours, progress, reporter, spans=spans, hold=hold)
        watch.agent = agent
        watch.stopped = getattr(observer, "stopped", None)  # an observer that may ask the turn to stop
        watch.until_stopped = getattr(observer, "until_stopped", None)  # ... and end the effect running then
        watch.model_slot = getattr(observer, "model_slot", None)  # an observer that bounds model requests in flight
        watch.model_loop = getattr(observer, "loop", None)
        return watch

    # -- status -------------------------------------------------------------------------------

    def before(self, effect: Any) -> list[Any]:
        released = self.hold.before(effect)
        return [*released, *self._before(effect)]

    def _before(self, effect: Any) -> list[Any]:
        if self.reporter is not None:
            self.reporter.before(effect)
        hop = self._messages(self._hop(effect))
        message = None
        if isinstance(effect, ModelRequest):
            shortened = bool(effect.context and effect.context.get("applied"))
            recovered = effect.guidance.omitted > self.omitted and not shortened
            self.omitted = effect.guidance.omitted
            if shortened:
                messages = self._messages(status_for(self.provider, "context", dict(effect.context or {})))
                return (
                    messages
                    + self._messages(
                        status_for(self.provider, "request", effect.guidance.kind, effect.guidance.omitted, False)
                    )
                    + self._bust(effect)
                )
            message = status_for(self.provider, "request", effect.guidance.kind, effect.guidance.omitted, recovered)
            if message is None and self.progress is not None:
                self.steps += 1
                self.progress.show(f"Step {self.steps}: waiting for the model")
        elif isinstance(effect, Extraction):
            message = status_for(self.provider, "request", "extraction", self.omitted, False)
        elif isinstance(effect, Sleep):
            message = status_for(self.provider, "retry", effect.seconds, self.last_error)
        elif self.progress is not None and _calls_a_tool(effect):
            self.progress.show(_tool_line(self.provider, effect))  # streamed: DSPy's tool callbacks send it
        return [*hop, *self._messages(message), *self._bust(effect)]

    def _bust(self, effect: Any) -> list[Any]:
        """After the request's own line: that it does not extend the request before (``_turn.busts``)."""
        if not isinstance(effect, ModelRequest) or effect.cache_bust is None:
            return []
        return self._messages(status_for(self.provider, "cache_bust", effect.cache_bust))

    def after(self, effect: Any, outcome: Any) -> list[Any]:
        if self.reporter is not None:
            self.reporter.after(effect, outcome)
        self.last_error = outcome.error if isinstance(outcome, Failed) else None
        released = self.hold.after(effect, outcome)
        hosted = [
            line
            for call in (hosted_calls(outcome) if isinstance(effect, ModelRequest) else ())
            for line in self._messages(status_for(self.provider, "hosted_tool", call))
        ]
        return [*released, *hosted, *self._messages(_after_line(self.provider, effect, outcome))]

    def _hop(self, effect: Any) -> str | None:
        """A request sent on to a fallback LM (``ModelRequest.model``): which one, after what."""
        index = getattr(effect, "model", 0) if isinstance(effect, ModelRequest | Extraction) else 0
        if not index:
            return None
        lm = self.program.fallback_chain()[index - 1]
        return status_for(self.provider, "fallback", getattr(lm, "model", type(lm).__name__), self.last_error)

    def ended(self, outcome: Any) -> list[Any]:
        self.failed = isinstance(outcome, Failure)
        if self.spans is not None:
            self.spans.ended(outcome)
        released = self.hold.ended(outcome)
        line = status_for(self.provider, "end", outcome)
        return [*released, *self._messages(f"{self.agent}: {line}" if line and self.agent else line)]

    def _messages(self, message: str | None) -> list[Any]:
        if not message:
            return []
        if self.progress is not None:
            self.progress.show(message)
        return [StatusMessage(message)] if self.stream is not None else []

    @contextlib.contextmanager
    def spanning(self, effect: Any, job: Any) -> Iterator[Any]:
        """Around performing one effect: its GenAI span; the yielded function takes the outcome."""
        if self.spans is None:
            yield lambda _: None
            return
        with self.spans.spanning(effect, job) as end:
            yield end

    def calling(self, effect: Any) -> contextlib.AbstractContextManager[None]:
        """While a tool call runs: the call, for a tool that reports while it runs (an MCP server's
        progress and log messages: ``_watch.events.calling``), when an observer follows the turn."""
        if self.reporter is None or not isinstance(effect, RunTool) or effect.call is None:
            return contextlib.nullcontext()
        return running(Calling(effect.call.id, effect.call.name, self.reporter.observer))

    # -- field chunks -------------------------------------------------------------------------

    @contextlib.contextmanager
    def relaying(self, effect: Any, exchange: Any = None) -> Iterator[_Relay | None]:
        """During one request: the engine's raw chunks go to a relay, which reads the listened fields
        (and, for an observer, the request's text and reasoning). A sub-agent's call has none: its turn
        watches its own requests, with the stream and the listeners as the caller's turn has them."""
        if isinstance(effect, RunAgent):
            yield None
            return
        follower = self.reporter.follower(effect, exchange) if self.reporter is not None else None
        listened = self.stream is not None and bool(self.listeners)
        held = self.stream is not None and self.hold.holding  # what DSPy sends meanwhile is held too
        if not listened and follower is None and not held:
            yield None
            return
        readers = readers_for(self.listeners, self.program, effect, exchange) if listened else []
        relay = _Relay(self.stream, readers, follower, passthrough=not listened, hold=self.hold)
        # ``stream_listeners=[]``: DSPy's ``Predict`` then streams whatever predictor runs in here.
        with dspy.context(send_stream=relay, stream_listeners=[]):
            yield relay

    # -- sending ------------------------------------------------------------------------------

    def send(self, items: Sequence[Any]) -> None:
        """Items for the consumer; none once it closed the stream (the next effect stops the turn,
        so what an effect returned is recorded, not lost in a failed send)."""
        for item in items:
            if self.stream is None or _unread(self.stream):
                return
            try:
                sync_send_to_stream(self.stream, item)
            except Exception:
                if not _unread(self.stream):
                    raise
                return  # closed meanwhile

    async def asend(self, items: Sequence[Any]) -> None:
        for item in items:
            if self.stream is None or _unread(self.stream):
                return
            try:
                await self.stream.send(item)
            except Exception:
                if not _unread(self.stream):
                    raise
                return

    def check(self) -> None:
        """Stop the turn (``StreamClosed``) once nobody reads the stream any more.

        ``streamify`` closes its stream's receiving end when its consumer is gone: an async
        consumer that closed its generator, or a sync one (``install_closing_sync_streams``).
        A sync program it runs is then abandoned in its worker thread, still running: this
        check, before each effect (``Effects.perform``), is what stops it there, with the history
        kept.
        """
        if self.stream is not None and _unread(self.stream):
            raise StreamClosed("the consumer of the dspy.streamify stream closed it; the turn stopped")
        if self.stopped is not None and self.stopped():  # an observer's ``stopped()`` (the web page's Stop)
            raise StreamClosed("the turn was stopped")

    def close(self) -> None:
        if self.progress is not None:
            self.progress.close(failed=self.failed)

    # -- a turn that fails: its last lines reach the consumer before the error ---------------

    def flush(self, outcome: Any) -> None:
        """Before a failed turn raises, wait (bounded) until the consumer took what was sent.

        ``dspy.streamify`` runs the program in a task group beside the loop that hands items to
        the consumer: the program's exception cancels that loop, and whatever is still in the
        stream's buffer (the last tool lines, "Turn ended: error") is lost. A run that returns
        is not delayed.
        """
        if not isinstance(outcome, Failure) or self.stream is None:
            return
        until = time.monotonic() + _FLUSH_SECONDS
        while _buffered(self.stream) and time.monotonic() < until:
            time.sleep(0.002)

    async def aflush(self, outcome: Any) -> None:
        if not isinstance(outcome, Failure) or self.stream is None:
            return
        until = time.monotonic() + _FLUSH_SECONDS
        while _buffered(self.stream) and time.monotonic() < until:
            await asyncio.sleep(0.002)


_FLUSH_SECONDS = 2.0


def _buffered(stream: Any) -> int:
    """Items sent but not yet taken (an AnyIO memory stream's statistics; 0 for another stream)."""
    statistics = getattr(stream, "statistics", None)
    try:
        return int(statistics().current_buffer_used) if callable(statistics) else 0
    except Exception:  # a stream of another kind, or one already closed
        return 0


def _unread(stream: Any) -> bool:
    """No receiving end is open (an AnyIO memory stream's statistics; ``False`` for another stream)."""
    statistics = getattr(stream, "statistics", None)
    try:
        return callable(statistics) and int(statistics().open_receive_streams) == 0
    except Exception:  # a stream of another kind
        return False


class _Relay:
    """DSPy's send stream during one request: raw chunks in, ``StreamResponse``s out."""

    def __init__(
        self,
        target: Any,
        readers: Sequence[FieldReader],
        follower: Any = None,
        passthrough: bool = False,
        hold: Hold | None = None,
    ):
        self.target = target  # ``None``: only an observer follows this request
        self.readers = tuple(readers)
        self.follower = follower
        self.passthrough = passthrough  # no listener: raw chunks go on as they are (DSPy's behaviour)
        self.hold = hold

    async def send(self, value: Any) -> None:
        chunk = _is_chunk(value)
        if chunk and self.follower is not None:
            self.follower.feed(value)
        if self.target is None:
            return
        items = self.read(value) if chunk and not self.passthrough else [value]
        for item in self.hold.keep(items) if self.hold is not None else items:
            await self.target.send(item)

    def read(self, chunk: Any) -> list[StreamResponse]:
        return [response for reader in self.readers for response in reader.feed(chunk)]

    def close(self, reply: Any) -> list[StreamResponse]:
        """The readers' last chunks, once the request is over (``reply``: what it answered)."""
        if self.follower is not None:
            self.follower.close(reply)
        responses = [response for reader in self.readers for response in reader.close(reply)]
        return self.hold.keep(responses) if self.hold is not None else responses


def _after_line(provider: Any, effect: Any, outcome: Any) -> str | None:
    """The line after an effect: a tool the loop stopped waiting for, a tripped guardrail."""
    if isinstance(effect, RunTool) and isinstance(outcome, Raised) and isinstance(outcome.error, ToolTimedOut):
        return status_for(provider, "tool_timeout", effect.tool.name, outcome.error.seconds)
    tripped = getattr(outcome, "value", None) if isinstance(effect, CheckGuardrails) else None
    if isinstance(tripped, Mapping):
        return status_for(provider, "guardrail", effect.stage, str(tripped["name"]), str(tripped["reason"]))
    return None


def _calls_a_tool(effect: Any) -> bool:
    """A run or a decided call; not a hook's verdict nor a call that was not run (no line of its own)."""
    return isinstance(effect, RunTool) or (isinstance(effect, DecidedCall) and effect.stage == "call")


def _tool_line(provider: Any, effect: RunTool | DecidedCall) -> str:
    if isinstance(effect, RunTool):
        return status_for(provider, "tool", effect.tool.name, effect.args) or ""
    return status_for(provider, "tool", effect.call.name or "<malformed call>", effect.args) or ""


def _is_chunk(value: Any) -> bool:
    """An LM engine's stream chunk (lm15's ``EngineChunk`` or LiteLLM's ``ModelResponseStream``)."""
    return not isinstance(value, StatusMessage | StreamResponse | dspy.Prediction) and isinstance(
        getattr(value, "choices", None), list
    )


def stream_provider() -> StatusMessageProvider | dspy.streaming.StatusMessageProvider:
    """The provider ``streamify`` installed (its status callback holds it); ours when none is."""
    for callback in dspy.settings.callbacks or []:
        if isinstance(callback, StatusStreamingCallback):
            return callback.status_message_provider
    return StatusMessageProvider()


def _refuse_dspy_listeners(program: Program, listeners: Sequence[Any]) -> None:
    for listener in listeners:
        if isinstance(listener, StreamListener):
            continue
        if listener.predict is program.react or listener.predict is program:
            raise ConfigurationError(
                f"dspy.streaming.StreamListener(signature_field_name={listener.signature_field_name!r}) cannot read "
                "a dspy_imp turn (its replies carry no DSPy field markers); use "
                f"dspy_imp.StreamListener({listener.signature_field_name!r}) instead"
            )
