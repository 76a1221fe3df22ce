"""The durable driver: the turn as a DBOS workflow, each effect a checkpointed DBOS step.

Theory of operation. The machine is deterministic given what it is sent back, so a turn is
durable when every effect's result is recorded before the machine sees it, and replayed from the
record afterwards. ``DurableEffects`` performs each effect inside ``DBOS.run_step`` (a model
request, an extraction, one tool call: one step each; a retry pause is ``DBOS.sleep``, durable
by itself). DBOS records the step's output under the workflow id and the step's position; when a
workflow is recovered, DBOS re-runs the workflow function and returns the recorded outputs of
finished steps without calling them, so the machine walks the same path to where it stopped.

Time. The machine reads the clock to decide (the deadline) and to stamp refusals' results
(``returned_at``; a tool's own result is stamped inside its step, on live time, and recorded).
Every record carries the time it was made (``at``, epoch seconds); the clock the machine reads
during a durable turn is the time of the latest record (``deadline_clock.recorded_clock``), so a replay
sees the same times and takes the same decisions. The deadline crosses into the workflow as epoch
seconds (``call["deadline"]``), fixed when the turn was submitted.

A turn that ends ``"paused"`` does not end the workflow: it publishes the pending calls (the
``dspy_imp.pending`` event), waits with ``DBOS.recv`` for the decisions ``DurableAgent.decide``
sends, and runs the resuming call (``history=``, ``approvals=``, ``results=``) in the same
workflow. The received decisions are recorded like any step, so a replay resumes the same way. A
sync turn's wait never keeps the process from exiting (``_durable.waiting``): the turn stays
pending for the next process.

Records are JSON-safe (``_durable.codec``). The workflow returns the turn's conclusion encoded
the same way; the caller's side decodes it into the prediction or the ``StepError``.

A stop (the web page's Stop, through the turn's observer) is asked before each step; an async
step it lands in is ended (``_drivers.stopping``: the model request's HTTP stream closed, a tool
cancelled or left behind) and records only that it was stopped, so the turn ends stopped there,
on a replay too. The cut step's reply or result is never recorded: the history is that of the
finished steps.

A sub-agent's call (``RunAgent``) is not a step: the child's turn runs inline in the workflow on a
``DurableEffects`` of its own (``child``), so each of its requests and tools is a step, and a
recovered workflow replays the child to where it stopped, as it replays the caller.

Parallel tool calls (``RunTools``) are one step: the calls run at once inside it, as the plain
driver runs them, and their outcomes are recorded together. Each call inside gets its own
idempotency key (the step id and its position in the batch).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import time
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any

from dbos import DBOS, StepOptions

from dspy_imp._drivers import stopping
from dspy_imp._drivers.driver import Effects, adrive, drive
from dspy_imp._drivers.interrupts import HISTORY_ATTRIBUTE, attach_history
from dspy_imp._durable.codec import (
    decode_error,
    decode_outcome,
    decode_value,
    encode_error,
    encode_outcome,
    encode_value,
)
from dspy_imp._durable.values import revive_fields
from dspy_imp._durable.waiting import receive
from dspy_imp._program import toolsets
from dspy_imp._program.module import ReActV2, escaped
from dspy_imp._program.options import CALL_OPTIONS
from dspy_imp._program.prediction import Prediction
from dspy_imp._records import clock as deadline_clock
from dspy_imp._records.errors import ConfigurationError, StreamClosed
from dspy_imp._records.step_error import StepError
from dspy_imp._turn.effects import (
    Alongside,
    CheckArguments,
    CheckGuardrails,
    DecidedCall,
    Ending,
    Extraction,
    Failure,
    Measure,
    RunAgent,
    RunTool,
    RunTools,
    Sleep,
)
from dspy_imp._turn.machine import Turn
from dspy_imp._turn.plan import Program

logger = logging.getLogger("dspy_imp")
_CLOCK_STEP: StepOptions = {"name": "dspy_imp.clock"}
_LISTING_STEP: StepOptions = {"name": "dspy_imp.toolsets"}


_BATCH: ContextVar[tuple[RunTool, ...] | None] = ContextVar("dspy_imp_durable_batch", default=None)


_POSITION: ContextVar[int | None] = ContextVar("dspy_imp_durable_position", default=None)


class _Clock:
    """The time of the latest record, as the machine reads it."""

    def __init__(self, at: float):
        self.at = at

    def __call__(self) -> float:
        return self.at


class DurableEffects(Effects):
    """Performs each effect as a DBOS step and sends the machine the decoded record."""

    def __init__(self, program: Program, clock: _Clock):
        super().__init__(program)
        self.clock = clock
        # An observer's ``stopped()`` (the web page's Stop) is asked here, before a step begins:
        # a stop is then the workflow's result, not a step that failed. Its ``until_stopped()`` ends
        # an async step while it runs (``_arecord``): the step records that it was stopped.
        self.stopped = self.watch.stopped if self.watch is not None else None
        self.until_stopped = self.watch.until_stopped if self.watch is not None else None
        if self.watch is not None:
            self.watch.stopped = self.watch.until_stopped = None

    def _check_stop(self) -> None:
        if self.stopped is not None and self.stopped():
            raise StreamClosed("the turn was stopped")

    def child(self, program: Program) -> Effects:
        """A sub-agent's turn runs in this workflow, each of its effects a step of its own."""
        return DurableEffects(program, self.clock)

    def listing(self, program: Any) -> Any:
        """The toolsets' listing, recorded as a step: a replay revives the tools the turn started with
        (a server's changed list reaches the next turn, never a resumed one) without listing again."""
        record = DBOS.run_step(_LISTING_STEP, toolsets.record, program.toolsets)
        return toolsets.revive(program.toolsets, program.own_tools, record)

    async def alisting(self, program: Any) -> Any:
        record = await DBOS.run_step_async(_LISTING_STEP, toolsets.arecord, program.toolsets)
        return toolsets.revive(program.toolsets, program.own_tools, record)

    def perform(self, effect: Any) -> Any:
        batch = _BATCH.get()
        if batch is not None:  # one call of a parallel batch, inside the batch's step
            with _position(batch, effect):
                return Effects.perform(self, effect)
        # Not steps: a measure is pure (a replay measures the same); a sub-agent's own effects are (``child``);
        # an arguments check is the call's (a durable agent offers no client tools, the only ones that carry one).
        if isinstance(effect, Measure | RunAgent | CheckArguments):
            return Effects.perform(self, effect)
        self._check_stop()
        if isinstance(effect, Sleep):
            DBOS.sleep(effect.seconds)
            return self._advance({"at": DBOS.run_step(_CLOCK_STEP, time.time), "outcome": {"kind": "none"}})
        return self._advance(DBOS.run_step({"name": step_name(effect)}, self._record, effect))

    async def aperform(self, effect: Any) -> Any:
        batch = _BATCH.get()
        if batch is not None:
            with _position(batch, effect):
                return await Effects.aperform(self, effect)
        if isinstance(effect, Measure | RunAgent | CheckArguments):
            return await Effects.aperform(self, effect)
        self._check_stop()
        if isinstance(effect, Sleep):
            await DBOS.sleep_async(effect.seconds)
            at = await DBOS.run_step_async(_CLOCK_STEP, _anow)
            return self._advance({"at": at, "outcome": {"kind": "none"}})
        return self._advance(await DBOS.run_step_async({"name": step_name(effect)}, self._arecord, effect))

    def _record(self, effect: Any) -> dict[str, Any]:
        with deadline_clock.reading(time.time), _batch(effect):  # the step itself runs on live time
            outcome = Effects.perform(self, effect)
        return {"outcome": encode_outcome(outcome), "at": time.time()}

    async def _arecord(self, effect: Any) -> dict[str, Any]:
        with deadline_clock.reading(time.time), _batch(effect):
            if self.until_stopped is None:
                outcome = await Effects.aperform(self, effect)
            else:  # a stop while the step runs ends it (the request's stream closed, a tool cancelled)
                try:
                    outcome = await stopping.race(functools.partial(Effects.aperform, self, effect), self.until_stopped)
                except StreamClosed as stop:  # recorded: a recovered workflow stops here again
                    return {"stopped": str(stop), "at": time.time()}
        return {"outcome": encode_outcome(outcome), "at": time.time()}

    def _advance(self, record: dict[str, Any]) -> Any:
        self.clock.at = record["at"]
        if "stopped" in record:  # the step was cut by a stop: the turn stops, its result never read
            raise StreamClosed(record["stopped"])
        return decode_outcome(record["outcome"])


@contextlib.contextmanager
def _batch(effect: Any) -> Iterator[None]:
    token = _BATCH.set(effect.runs) if isinstance(effect, RunTools) else None
    try:
        yield
    finally:
        if token is not None:
            _BATCH.reset(token)


@contextlib.contextmanager
def _position(batch: tuple[RunTool, ...], effect: Any) -> Iterator[None]:
    token = _POSITION.set(next(i for i, run in enumerate(batch) if run is effect))
    try:
        yield
    finally:
        _POSITION.reset(token)


def idempotency_key() -> str | None:
    """``"<workflow id>:<step id>"`` (``.<position>`` for a call of a parallel batch), or ``None``."""
    workflow, step = DBOS.workflow_id, DBOS.step_id
    if workflow is None or step is None:
        return None
    position = _POSITION.get()
    return f"{workflow}:{step}" if position is None else f"{workflow}:{step}.{position}"


def step_name(effect: Any) -> str:
    """What the step is called in DBOS's records (and checked against on replay).

    A ``DecidedCall`` (a refused or rejected call, reported to tracers) is a step too, so a
    replay does not report it twice; so are guardrail checks (a replay does not run them again),
    and the first request with its alongside input guardrails is one step.
    """
    if isinstance(effect, CheckGuardrails):
        return f"dspy_imp.guardrails.{effect.stage}"
    if isinstance(effect, Alongside):
        return f"dspy_imp.request.{effect.request.guidance.kind}+guardrails.input"
    if isinstance(effect, DecidedCall):
        return f"dspy_imp.decided.{effect.call.name or 'malformed'}"
    if isinstance(effect, RunTool):
        return f"dspy_imp.tool.{effect.tool.name}"
    if isinstance(effect, RunTools):
        return "dspy_imp.tools." + "+".join(run.tool.name for run in effect.runs)
    if isinstance(effect, Extraction):
        return "dspy_imp.extraction"
    return f"dspy_imp.request.{effect.guidance.kind}"


async def _anow() -> float:
    return time.time()


def run_turn(program: ReActV2, call: dict[str, Any]) -> dict[str, Any]:
    clock = _Clock(DBOS.run_step(_CLOCK_STEP, time.time))
    kwargs, end = _inputs(program, call), call["deadline"]
    listing = None
    while True:
        with deadline_clock.recorded_clock(clock, end):
            effects = DurableEffects(program, clock)
            if program.toolsets and listing is None:  # listed once: a turn resumed from a pause keeps its tools
                listing = effects.listing(program)
            turn = program._turn(kwargs, None, listing)
            try:
                outcome: Ending | Failure = drive(turn.run(), effects)
            except StreamClosed as stop:  # stopped (the web page's Stop): the history is the result
                return _stopped(program, turn, stop)
            except BaseException as error:  # host code failing: a StepError with the history (``escaped``)
                outcome = escaped(program, turn, error)
        if not _paused(outcome):
            return _concluded(program, turn, outcome)
        paused = program._conclude(turn, outcome)
        DBOS.set_event(PENDING_EVENT, _waiting(paused))
        resumed = None
        while resumed is None:  # each wait is recorded: a replay gets the same messages, and ignores the same
            sent = receive(DECISIONS_TOPIC, _WAIT_SECONDS)  # never holds the process at exit
            resumed = _accepted(program, kwargs, paused, sent, listing)
        DBOS.set_event(PENDING_EVENT, None)
        clock.at = DBOS.run_step(_CLOCK_STEP, time.time)
        kwargs, end = resumed


async def arun_turn(program: ReActV2, call: dict[str, Any]) -> dict[str, Any]:
    clock = _Clock(await DBOS.run_step_async(_CLOCK_STEP, _anow))
    kwargs, end = _inputs(program, call), call["deadline"]
    listing = None
    while True:
        with deadline_clock.recorded_clock(clock, end):
            effects = DurableEffects(program, clock)
            if program.toolsets and listing is None:
                listing = await effects.alisting(program)
            turn = program._turn(kwargs, None, listing)
            try:
                outcome: Ending | Failure = await adrive(turn.run(), effects)
            except StreamClosed as stop:
                return _stopped(program, turn, stop)
            except BaseException as error:
                outcome = escaped(program, turn, error)
        if not _paused(outcome):
            return _concluded(program, turn, outcome)
        paused = program._conclude(turn, outcome)
        await DBOS.set_event_async(PENDING_EVENT, _waiting(paused))
        resumed = None
        while resumed is None:
            sent = await DBOS.recv_async(DECISIONS_TOPIC, timeout_seconds=_WAIT_SECONDS)
            resumed = _accepted(program, kwargs, paused, sent, listing)
        await DBOS.set_event_async(PENDING_EVENT, None)
        clock.at = await DBOS.run_step_async(_CLOCK_STEP, _anow)
        kwargs, end = resumed


def _inputs(program: ReActV2, call: dict[str, Any]) -> dict[str, Any]:
    """The turn's keyword arguments; typed inputs rebuilt by the program's signature, not the record."""
    return revive_fields(decode_value(call["kwargs"]), program.signature.input_fields)


PENDING_EVENT = "dspy_imp.pending"


DECISIONS_TOPIC = "dspy_imp.decisions"


_WAIT_SECONDS = 24 * 3600.0


_RESUME_OPTIONS = frozenset(CALL_OPTIONS) - {"approvals", "results"}


def _paused(outcome: Ending | Failure) -> bool:
    return isinstance(outcome, Ending) and outcome.reason == "paused"


def _waiting(paused: Prediction) -> dict[str, Any]:
    """The workflow's ``dspy_imp.pending`` event while it waits: what ``pending``/``decide`` read."""
    meta = paused.metadata
    return {"pending_calls": encode_value(list(meta.pending_calls)), "history": encode_value(meta.history)}


def decision(approvals: Any, results: Any) -> dict[str, Any]:
    """The message ``decide`` sends; the resumed part of the turn is bound by the sender's deadline."""
    end = deadline_clock.wall_end()
    return {"approvals": encode_value(approvals), "results": encode_value(results), "deadline": end}


def _accepted(
    program: ReActV2, kwargs: dict[str, Any], paused: Prediction, sent: Any, listing: Any = None
) -> tuple[dict[str, Any], Any] | None:
    """The resuming call and its deadline for a received decision, or ``None`` to keep waiting.

    A decision that does not answer this pause (a second ``decide`` for calls already answered,
    consumed at a later pause, or a malformed message) is ignored and logged, never fatal: the
    turn goes on waiting. ``decide`` checks a decision before sending it; this is the check
    against the pause the message actually reaches.
    """
    if sent is None:
        return None
    try:
        resumed = _resumed(kwargs, paused, sent)
        program._turn(resumed, None, listing)  # the decisions against this pause, before anything runs
    except (ConfigurationError, KeyError, TypeError) as stale:
        logger.warning(
            "dspy_imp.durable %s: ignored a decision that does not answer this pause: %s", DBOS.workflow_id, stale
        )
        return None
    return resumed, sent["deadline"]


def _resumed(kwargs: dict[str, Any], paused: Prediction, sent: dict[str, Any]) -> dict[str, Any]:
    """The resuming call: the paused history, the decisions, the call's options (no new inputs)."""
    options = {k: v for k, v in kwargs.items() if k in _RESUME_OPTIONS}
    approvals, results = decode_value(sent["approvals"]), decode_value(sent["results"])
    return {**options, "history": paused.metadata.history, "approvals": approvals, "results": results}


def _concluded(program: ReActV2, turn: Turn, outcome: Ending | Failure) -> dict[str, Any]:
    try:
        return {"prediction": encode_value(program._conclude(turn, outcome))}
    except StepError as failed:
        reason = failed.reason if isinstance(failed.reason, BaseException) else RuntimeError(failed.reason)
        return {
            "failure": encode_error(reason),
            "history": encode_value(failed.history),
            "usage": encode_value(failed.usage),
            "hook": failed.hook,
        }


def _stopped(program: ReActV2, turn: Turn, stop: StreamClosed) -> dict[str, Any]:
    """A stopped turn's result: why, and the history so far (the inputs too: the conversation goes on)."""
    with contextlib.suppress(StreamClosed):
        escaped(program, turn, stop)  # what any stop does: traced, the history attached
    history = getattr(stop, HISTORY_ATTRIBUTE, None)
    return {"stopped": str(stop), "history": encode_value(history)}


def conclusion(result: dict[str, Any]) -> Prediction:
    """The prediction a workflow's result holds; its ``StepError`` raised, or the ``StreamClosed``
    of a stopped turn (its history on ``dspy_imp_history``, as on any stop)."""
    if "stopped" in result:
        stop = StreamClosed(result["stopped"])
        attach_history(stop, decode_value(result["history"]))
        raise stop
    if "failure" in result:
        error = decode_error(result["failure"])
        history, usage = decode_value(result["history"]), decode_value(result["usage"])
        raise StepError(error, history, usage=usage, hook=result.get("hook")) from error
    prediction: Prediction = decode_value(result["prediction"])
    return prediction
