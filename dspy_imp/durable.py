"""Durable turns on DBOS Transact: a turn killed mid-way finishes when its program starts again.

Install with ``pip install -e ".[dbos]"`` from a clone (README, "Installing"). A ``DurableAgent``
runs a ``ReActV2`` turn as a DBOS workflow whose model requests and tool calls are checkpointed
steps (``_durable.driver``): after a crash, DBOS recovers the workflow, recorded replies and tool
results are replayed rather than sent or run again, and the turn ends as an uninterrupted one
would have. See ``docs/durable.md``.

Example:
    ```python
    from dbos import DBOS
    from dspy_imp import durable
    DBOS(config=durable.config("support"))            # SQLite next to the program by default
    agent = durable.DurableAgent(dspy_imp.ReActV2("ticket -> reply", tools=[refund]), name="support")
    DBOS.launch()                                      # recovers turns a crash interrupted
    pred = agent(ticket="I was charged twice.", workflow_id="ticket-4711")
    ```

A turn that pauses for approval waits in its workflow: ``pending(workflow_id)`` lists the calls,
``agent.decide(workflow_id, approvals={...})`` (from any process) resumes it.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dspy_imp._records.errors import require_extra

require_extra('dspy_imp.durable runs on DBOS Transact: pip install -e ".[dbos]" (from a clone)', "dbos")

from dbos import DBOS, DBOSConfig, DBOSPortableJSONSerializer, Queue, SetWorkflowID, WorkflowSerializationFormat

from dspy_imp._durable.codec import decode_value, encode_value
from dspy_imp._durable.driver import DECISIONS_TOPIC, PENDING_EVENT, arun_turn, conclusion, decision, run_turn
from dspy_imp._durable.driver import idempotency_key as _idempotency_key
from dspy_imp._program import options as opts
from dspy_imp._program.module import ReActV2
from dspy_imp._program.prediction import Prediction
from dspy_imp._records import clock
from dspy_imp._records.errors import ConfigurationError

__all__ = [
    "DurableAgent",
    "TurnHandle",
    "ahandle",
    "apending",
    "config",
    "handle",
    "idempotency_key",
    "pending",
    "recover",
    "resume",
]

_CALL_KEYS = frozenset({*opts.CALL_OPTIONS, "history"})
_NAME = re.compile(r"[A-Za-z0-9_.-]+")


def config(name: str, *, system_database_url: str | None = None, **options: Any) -> DBOSConfig:
    """A ``DBOSConfig`` for durable turns.

    The system database is, in order: ``system_database_url``; the ``DBOS_SYSTEM_DATABASE_URL``
    environment variable (e.g. ``postgresql://user:pw@host:5432/agents``); else a SQLite file
    ``<name>.sqlite`` next to the program (the directory of ``sys.argv[0]``).

    Args:
        name: The DBOS application name (lowercase letters, digits, ``-`` and ``_``).
        system_database_url: Where workflows and step results are recorded.
        **options: Any other ``DBOSConfig`` key (``executor_id``, ``application_version``, ...).
            ``serializer`` defaults to DBOS's portable JSON: every record of a durable turn (step
            results, messages, events) is then stored as JSON, never as a pickle. Pass
            ``serializer=`` to choose another for workflows of your own that need it.
    """
    url = system_database_url or os.environ.get("DBOS_SYSTEM_DATABASE_URL") or _sqlite_next_to_program(name)
    options.setdefault("serializer", DBOSPortableJSONSerializer())
    return DBOSConfig(name=name, system_database_url=url, **options)  # type: ignore[typeddict-item]


def _sqlite_next_to_program(name: str) -> str:
    program = Path(sys.argv[0]) if sys.argv and sys.argv[0] else None
    folder = program.resolve().parent if program is not None and program.is_file() else Path.cwd()
    return f"sqlite:///{folder / f'{name}.sqlite'}"


class TurnHandle:
    """A durable turn by its workflow id: look it up, wait on it, read its outcome.

    ``start``/``handle`` give a handle for ``status``/``result``; ``astart``/``ahandle`` one for
    ``astatus``/``aresult``.
    """

    def __init__(self, handle: Any, asynchronous: bool = False):
        self._handle = handle
        self._async = asynchronous

    @property
    def workflow_id(self) -> str:
        return str(self._handle.get_workflow_id())

    def status(self) -> str:
        """DBOS's status: ``"PENDING"``, ``"ENQUEUED"``, ``"SUCCESS"``, ``"ERROR"``, ``"CANCELLED"``, ..."""
        self._check(False)
        return str(self._handle.get_status().status)

    async def astatus(self) -> str:
        self._check(True)
        return str((await self._handle.get_status()).status)

    def result(self, *, polling_interval_sec: float = 1.0) -> Prediction:
        """Wait for the turn; its prediction, or its ``StepError`` raised.

        A turn running in another process (or recovered in the background) is polled for.
        """
        self._check(False)
        return conclusion(self._handle.get_result(polling_interval_sec=polling_interval_sec))

    async def aresult(self, *, polling_interval_sec: float = 1.0) -> Prediction:
        self._check(True)
        return conclusion(await self._handle.get_result(polling_interval_sec=polling_interval_sec))

    def _check(self, asynchronous: bool) -> None:
        if asynchronous != self._async:
            raise TypeError(
                "an async handle: await aresult()/astatus()" if self._async else "a sync handle: use result()/status()"
            )


class DurableAgent:
    """A ``ReActV2`` whose turns run as DBOS workflows.

    Create it before ``DBOS.launch()``, with the same ``name`` in every process that may run or
    recover its turns: the name is how a restarted process finds the program of a recorded turn.
    The program is used as is (its options, tools, LM and adapter; configure the LM with
    ``dspy.configure`` or ``program.set_lm``, since a recovered turn runs outside the caller's
    ``dspy.context``). A ``dspy_imp.deadline`` around a call is fixed as a wall-clock time when
    the turn is submitted, and holds across restarts.

    Args:
        program: The agent.
        name: A stable name (letters, digits, ``_``, ``.``, ``-``); the workflows are registered
            as ``dspy_imp.turn.<name>`` (sync) and ``dspy_imp.aturn.<name>`` (async).
    """

    def __init__(self, program: ReActV2, *, name: str):
        if not isinstance(program, ReActV2):
            raise ConfigurationError(f"DurableAgent takes a dspy_imp.ReActV2, got {program!r}")
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise ConfigurationError(f"DurableAgent `name` must be letters, digits, '_', '.' or '-', got {name!r}")
        for toolset in program.toolsets:  # each listing is recorded with the workflow (``Toolset.record``)
            if not toolset.durable:
                raise ConfigurationError(
                    f"DurableAgent cannot record the tool list of {toolset.label}: it implements no "
                    "`record`/`revive`; give its tools as function tools"
                )
        self.program = program
        self.name = name

        def turn(call: dict[str, Any]) -> dict[str, Any]:
            return run_turn(program, call)

        async def aturn(call: dict[str, Any]) -> dict[str, Any]:
            return await arun_turn(program, call)

        # The turn's input and result are JSON already (``_durable.codec``): DBOS stores them as
        # portable JSON rather than pickles (step records are pickled by DBOS whatever this says).
        portable = WorkflowSerializationFormat.PORTABLE
        self._turn = DBOS.workflow(name=f"dspy_imp.turn.{name}", serialization_type=portable)(turn)
        self._aturn = DBOS.workflow(name=f"dspy_imp.aturn.{name}", serialization_type=portable)(aturn)

    def __call__(self, *, workflow_id: str | None = None, **kwargs: Any) -> Prediction:
        """Run a turn in this thread and return its prediction (or raise its ``StepError``).

        With a ``workflow_id`` that already ran, the recorded outcome is returned.
        """
        call = self._call(kwargs)
        with _workflow_id(workflow_id):
            return conclusion(self._turn(call))

    async def acall(self, *, workflow_id: str | None = None, **kwargs: Any) -> Prediction:
        call = self._call(kwargs)
        with _workflow_id(workflow_id):
            return conclusion(await self._aturn(call))

    def start(self, *, workflow_id: str | None = None, queue: Queue | None = None, **kwargs: Any) -> TurnHandle:
        """Start a turn in the background (or put it on ``queue`` for any worker); returns its handle."""
        call = self._call(kwargs)
        with _workflow_id(workflow_id):
            if queue is not None:
                return TurnHandle(queue.enqueue(self._turn, call))
            return TurnHandle(DBOS.start_workflow(self._turn, call))

    async def astart(self, *, workflow_id: str | None = None, queue: Queue | None = None, **kwargs: Any) -> TurnHandle:
        """``start`` for async programs: the turn runs the async driver (async tools, ``acall``)."""
        call = self._call(kwargs)
        with _workflow_id(workflow_id):
            if queue is not None:
                return TurnHandle(await queue.enqueue_async(self._aturn, call), asynchronous=True)
            return TurnHandle(await DBOS.start_workflow_async(self._aturn, call), asynchronous=True)

    def decide(self, workflow_id: str, *, approvals: Any = None, results: Any = None) -> None:
        """Send the decisions a paused turn waits for; it resumes in whichever process runs it.

        ``approvals={call_id: True | False | "reason"}`` and ``results={call_id: value}`` as for
        ``ReActV2`` (``docs/controls.md``), checked against the pending calls here: a bad decision
        raises ``ConfigurationError`` and nothing is sent. A ``dspy_imp.deadline`` around this call
        bounds the rest of the turn.
        """
        self._check_decisions(
            _pending_record(DBOS.get_event(workflow_id, PENDING_EVENT, 0), workflow_id), approvals, results
        )
        DBOS.send(workflow_id, decision(approvals, results), topic=DECISIONS_TOPIC)

    async def adecide(self, workflow_id: str, *, approvals: Any = None, results: Any = None) -> None:
        waiting = _pending_record(await DBOS.get_event_async(workflow_id, PENDING_EVENT, 0), workflow_id)
        self._check_decisions(waiting, approvals, results)
        await DBOS.send_async(workflow_id, decision(approvals, results), topic=DECISIONS_TOPIC)

    def _check_decisions(self, waiting: dict[str, Any], approvals: Any, results: Any) -> None:
        self._call({"history": decode_value(waiting["history"]), "approvals": approvals, "results": results})

    def _call(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        """The workflow's input. Bad input fails here, before anything is recorded."""
        program = self.program
        program._turn({k: v for k, v in kwargs.items() if k in program.signature.input_fields or k in _CALL_KEYS})
        return {"kwargs": encode_value(kwargs), "deadline": clock.wall_end()}


def handle(workflow_id: str) -> TurnHandle:
    """The handle of a turn started earlier, by any process sharing the system database."""
    return TurnHandle(DBOS.retrieve_workflow(workflow_id))


def pending(workflow_id: str) -> tuple[dict[str, Any], ...]:
    """The calls a paused turn waits on (``{"id", "name", "args", "kind"}``); ``()`` when it waits for nothing."""
    waiting = DBOS.get_event(workflow_id, PENDING_EVENT, 0)
    return () if waiting is None else tuple(decode_value(waiting["pending_calls"]))


async def apending(workflow_id: str) -> tuple[dict[str, Any], ...]:
    """``pending`` for async callers."""
    waiting = await DBOS.get_event_async(workflow_id, PENDING_EVENT, 0)
    return () if waiting is None else tuple(decode_value(waiting["pending_calls"]))


def _pending_record(waiting: Any, workflow_id: str) -> dict[str, Any]:
    if waiting is None:
        raise ConfigurationError(f"turn {workflow_id!r} is not waiting for a decision")
    return dict(waiting)


def resume(workflow_id: str) -> TurnHandle:
    """Run a cancelled turn (or one DBOS gave up recovering) again from its last recorded step."""
    return TurnHandle(DBOS.resume_workflow(workflow_id))


async def ahandle(workflow_id: str) -> TurnHandle:
    """``handle`` for async callers."""
    return TurnHandle(await DBOS.retrieve_workflow_async(workflow_id), asynchronous=True)


def recover(executor_ids: Sequence[str]) -> list[TurnHandle]:
    """Finish the pending turns of dead workers (their ``executor_id``s) in this process's fleet.

    A restarted process recovers its own executor's turns at ``DBOS.launch()``; this hands
    another executor's turns to the queue workers still alive. DBOS's recovery admits one
    runner per turn, so calling it twice is harmless. It uses DBOS's internal recovery entry
    point (``DBOS._recover_pending_workflows``), the one its admin server's recovery endpoint
    calls; Conductor does the same automatically.
    """
    return [TurnHandle(found) for found in DBOS._recover_pending_workflows(list(executor_ids))]


def idempotency_key() -> str | None:
    """Inside a durable tool call: ``"<workflow id>:<step id>"``, the same when the call runs again.

    A tool that ran but whose result was not recorded (the process died mid-call) runs again on
    recovery; pass this key to the system it acts on (a payment API's idempotency key, a unique
    column) so the second run does not act twice. A call of a parallel batch (``parallel_tools``)
    gets ``".<position>"`` appended. ``None`` outside a durable turn.
    """
    return _idempotency_key()


@contextlib.contextmanager
def _workflow_id(workflow_id: str | None) -> Any:
    if workflow_id is None:
        yield
        return
    with SetWorkflowID(workflow_id):
        yield
