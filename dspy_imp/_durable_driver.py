"""The durable driver: the turn as a DBOS workflow, each effect a checkpointed DBOS step.

Theory of operation. The machine is deterministic given what it is sent back, so a turn is
durable when every effect's result is recorded before the machine sees it, and replayed from the
record afterwards. ``DurableEffects`` performs each effect inside ``DBOS.run_step`` (a model
request, an extraction, one tool call: one step each; a retry pause is ``DBOS.sleep``, durable
by itself). DBOS records the step's output under the workflow id and the step's position; when a
workflow is recovered, DBOS re-runs the workflow function and returns the recorded outputs of
finished steps without calling them, so the machine walks the same path to where it stopped.

Time. The machine reads the clock to decide (the deadline) and to stamp results
(``returned_at``). Every record carries the time it was made (``at``, epoch seconds); the clock the
machine reads during a durable turn is the time of the latest record (``_deadline.recorded_clock``),
so a replay sees the same times and takes the same decisions. The deadline crosses into the
workflow as epoch seconds (``call["deadline"]``), fixed when the turn was submitted.

Records are JSON-safe (``_durable_codec``). The workflow returns the turn's conclusion encoded
the same way; the caller's side decodes it into the prediction or the ``StepError``.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from dbos import DBOS, StepOptions

from . import _deadline
from ._drivers import Effects, adrive, drive
from ._durable_codec import decode_error, decode_outcome, decode_value, encode_error, encode_outcome, encode_value
from ._effects import Ending, Extraction, Failure, ModelRequest, RunTool, Sleep
from ._errors import StepError
from ._machine import Turn
from ._records import make_history

if TYPE_CHECKING:
    from ._module import ReActV2
    from ._prediction import Prediction

_CLOCK_STEP: StepOptions = {"name": "dspy_imp.clock"}


class _Clock:
    """The time of the latest record, as the machine reads it."""

    def __init__(self, at: float):
        self.at = at

    def __call__(self) -> float:
        return self.at


class DurableEffects(Effects):
    """Performs each effect as a DBOS step and sends the machine the decoded record."""

    def __init__(self, program: ReActV2, clock: _Clock):
        super().__init__(program)
        self.clock = clock

    def perform(self, effect: Any) -> Any:
        if isinstance(effect, Sleep):
            DBOS.sleep(effect.seconds)
            return self._advance({"at": DBOS.run_step(_CLOCK_STEP, time.time), "outcome": {"kind": "none"}})
        return self._advance(DBOS.run_step({"name": step_name(effect)}, self._record, effect))

    async def aperform(self, effect: Any) -> Any:
        if isinstance(effect, Sleep):
            await DBOS.sleep_async(effect.seconds)
            at = await DBOS.run_step_async(_CLOCK_STEP, _anow)
            return self._advance({"at": at, "outcome": {"kind": "none"}})
        return self._advance(await DBOS.run_step_async({"name": step_name(effect)}, self._arecord, effect))

    def _record(self, effect: Any) -> dict[str, Any]:
        return {"outcome": encode_outcome(super().perform(effect)), "at": time.time()}

    async def _arecord(self, effect: Any) -> dict[str, Any]:
        return {"outcome": encode_outcome(await super().aperform(effect)), "at": time.time()}

    def _advance(self, record: dict[str, Any]) -> Any:
        self.clock.at = record["at"]
        return decode_outcome(record["outcome"])


def step_name(effect: ModelRequest | Extraction | RunTool) -> str:
    """What the step is called in DBOS's records (and checked against on replay)."""
    if isinstance(effect, RunTool):
        return f"dspy_imp.tool.{effect.tool.name}"
    if isinstance(effect, Extraction):
        return "dspy_imp.extraction"
    return f"dspy_imp.request.{effect.guidance.kind}"


async def _anow() -> float:
    return time.time()


# -- the workflow bodies --------------------------------------------------------------------------


def run_turn(program: ReActV2, call: dict[str, Any]) -> dict[str, Any]:
    clock = _Clock(DBOS.run_step(_CLOCK_STEP, time.time))
    with _deadline.recorded_clock(clock, call["deadline"]):
        turn = program._turn(decode_value(call["kwargs"]))
        return _concluded(program, turn, drive(turn.run(), DurableEffects(program, clock)))


async def arun_turn(program: ReActV2, call: dict[str, Any]) -> dict[str, Any]:
    clock = _Clock(await DBOS.run_step_async(_CLOCK_STEP, _anow))
    with _deadline.recorded_clock(clock, call["deadline"]):
        turn = program._turn(decode_value(call["kwargs"]))
        return _concluded(program, turn, await adrive(turn.run(), DurableEffects(program, clock)))


def _concluded(program: ReActV2, turn: Turn, outcome: Ending | Failure) -> dict[str, Any]:
    if isinstance(outcome, Failure):
        return {"failure": encode_error(outcome.error), "history": encode_value(make_history(turn.entries))}
    return {"prediction": encode_value(program._conclude(turn, outcome))}


def conclusion(result: dict[str, Any]) -> Prediction:
    """The prediction a workflow's result holds, or its ``StepError`` raised."""
    if "failure" in result:
        error = decode_error(result["failure"])
        raise StepError(error, decode_value(result["history"])) from error
    prediction: Prediction = decode_value(result["prediction"])
    return prediction
