"""Running a conversation's next turn for a request, and keeping its history between requests.

The turn runs in a task of its own, observed (``_watch.events``): its events come through a queue,
then one ``Ended``. What plays the turn is a small ``Turns`` strategy: ``Calls`` for a
``ReActV2``, ``_durable.Workflows`` for a ``DurableAgent``; the queue, the task and the saving are
written once, here. The history is saved by that task when the turn ends (a ``StepError``'s
history too, so a failed turn loses nothing), whether or not anyone still reads the stream: a
client that goes away mid-turn does not cancel the turn. A conversation runs one turn at a time.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import hashlib
import json
import math
import os
import threading
import time
import weakref
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import anyio.to_thread
import dspy

from dspy_imp._program.extra_tools import with_external_tools
from dspy_imp._records.errors import StreamClosed
from dspy_imp._records.history import dump_history, load_history
from dspy_imp._records.step_error import StepError
from dspy_imp._watch import genai
from dspy_imp._watch.events import Observer, TurnEvent, observing
from dspy_imp.web import _log
from dspy_imp.web._admission import DEFAULT_MAX_TURNS, RETRY_AFTER, Admission
from dspy_imp.web._guard import BeforeStream
from dspy_imp.web._inputs import Call, paused_calls


@dataclass(frozen=True)
class Conversation:
    """What a store keeps of one conversation: its history and the user who started it.

    Attributes:
        history: The conversation so far (a paused one ends with its pending calls).
        owner: The user ``auth`` named for the request that started it; ``None`` without ``auth``.
            Only that user's requests may read or continue it.
        turns: How each turn ended, for the page to show again after a reload (JSON records:
            where it ended in the history, its termination and usage or its error, the decisions
            it was resumed with). A store that does not keep it loses only that (the page then
            shows the messages alone).
    """

    history: dspy.History
    owner: str | None = None
    turns: tuple[Mapping[str, Any], ...] = ()


MAX_TURNS = 1000
"""The most turn records a conversation keeps (the oldest go first)."""


def told(call: Call, ended: Ended, history: dspy.History) -> dict[str, Any]:
    """The record of one saved turn (``Conversation.turns``): JSON, what the page shows of its end."""
    record: dict[str, Any] = {"entries": len(history.messages)}
    if ended.error is None:
        metadata = ended.prediction.metadata
        usage = metadata.usage
        record["ending"] = {
            "termination_reason": metadata.termination_reason,
            "termination_cause": metadata.termination_cause,
            "usage": {
                "requests": dict(usage.requests),
                "input_tokens": usage.input_tokens,
                "output_tokens": usage.output_tokens,
                "cost": usage.cost,
            },
        }
    else:
        record["error"] = f"{type(ended.error).__name__}: {getattr(ended.error, 'reason', ended.error)}"
    approvals = dict(call.kwargs.get("approvals") or {})
    results = call.kwargs.get("results") or {}
    history_in = call.kwargs.get("history")
    questions = {
        c["id"]
        for c in (paused_calls(history_in) if isinstance(history_in, dspy.History) else ())
        if c.get("kind") == "elicitation"
    }
    answers = {k: _action(approvals.pop(k)) for k in sorted(questions & approvals.keys())}
    if approvals or results:
        record["approvals"] = {k: v if isinstance(v, bool | str) else bool(v) for k, v in approvals.items()}
        record["results"] = sorted(results)
    if answers:  # a request for input's answer: its action only (the fields stay in the history)
        record["answers"] = answers
    return record


def _action(answer: Any) -> str:
    """What an ``approvals`` answer to a request for input did: ``"accept"``, ``"decline"`` or ``"cancel"``."""
    return "decline" if answer is False else "cancel" if answer == "cancel" else "accept"


def kept_turns(value: Any) -> tuple[Mapping[str, Any], ...]:
    """Turn records read back from a store (input, as the history is): the well-formed ones."""
    if not isinstance(value, list):
        return ()
    return tuple(t for t in value[-MAX_TURNS:] if isinstance(t, dict) and isinstance(t.get("entries"), int))


class Store(Protocol):
    """Where conversations are kept between requests, by conversation id.

    A store shared by several processes may also keep the one-turn-per-conversation rule across
    them: ``async claim(key) -> bool`` (``False``: a turn of that conversation runs elsewhere) and
    ``async release(key)``, as ``DatabaseStore`` does; the app calls them around each turn. One
    that can lose a lease mid-turn offers ``watch(key, lost)``: ``lost(error)`` (on the event loop)
    stops the turn before its next effect, and it ends with that error; what it did is saved if the
    store still takes it (``DatabaseStore``: no other turn took the lease), else it is not. One
    that offers ``async save_and_release(key, conversation)`` has the turn's last save give its
    lease back with it (``DatabaseStore``: one transaction, not two); ``release`` is still called.
    """

    async def load(self, key: str) -> Conversation | None: ...
    async def save(self, key: str, conversation: Conversation) -> None: ...


class MemoryStore:
    """Conversations in this process's memory (the default): gone when the server stops.

    Each is kept as its JSON text, as ``FileStore`` writes its file (the owner, ``dump_history``,
    the turn records), not as the live history: one string is one object, which the cyclic garbage
    collector never walks, where a history's entries are hundreds of dicts and lists that every full
    collection walks again, each one a pause of the event loop that grows with the conversations
    kept. A load reads a conversation of its own back from the text, as every other store does;
    the encoding and the decoding run in a worker thread, not on the event loop.
    """

    def __init__(self) -> None:
        self._conversations: dict[str, str] = {}

    async def load(self, key: str) -> Conversation | None:
        text = self._conversations.get(key)
        return None if text is None else await anyio.to_thread.run_sync(_from_text, text)

    async def save(self, key: str, conversation: Conversation) -> None:
        self._conversations[key] = await anyio.to_thread.run_sync(_to_text, conversation)


def _to_text(conversation: Conversation) -> str:
    """A conversation as JSON: its owner, ``dump_history``, its turn records (``FileStore``'s file)."""
    data = {
        "owner": conversation.owner,
        "history": dump_history(conversation.history),
        "turns": list(conversation.turns),
    }
    return json.dumps(data)  # ASCII escapes: a lone surrogate too


def _from_text(text: str) -> Conversation:
    """The conversation ``_to_text`` wrote (a file written before conversations had owners: the dump alone)."""
    data = json.loads(text)
    if "history" not in data:
        return Conversation(load_history(data))
    return Conversation(load_history(data["history"]), data.get("owner"), kept_turns(data.get("turns")))


class FileStore:
    """Conversations as JSON files in ``directory`` (the owner and ``dump_history``), one per
    conversation: they survive a restart, a paused one too (its history holds the pending calls a
    resume answers).

    Example:
        ```python
        app = dspy_imp.web.app(agent, store=dspy_imp.web.FileStore("conversations"))
        ```
    """

    def __init__(self, directory: str | os.PathLike[str]):
        self.directory = Path(directory)

    async def load(self, key: str) -> Conversation | None:
        return await anyio.to_thread.run_sync(self._load, key)

    async def save(self, key: str, conversation: Conversation) -> None:
        await anyio.to_thread.run_sync(self._save, key, conversation)

    def _path(self, key: str) -> Path:
        return self.directory / f"{hashlib.sha256(key.encode('utf-8', 'surrogatepass')).hexdigest()[:32]}.json"

    def _load(self, key: str) -> Conversation | None:
        path = self._path(key)
        if not path.exists():
            return None
        return _from_text(path.read_text(encoding="utf-8"))

    def _save(self, key: str, conversation: Conversation) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self._path(key)
        partial = path.with_suffix(".partial")
        partial.write_text(_to_text(conversation), encoding="utf-8")
        partial.replace(path)  # a reader never sees half a file


@dataclass(frozen=True)
class Ended:
    """The turn's end: its prediction, or the error it raised (a ``StepError``, refused input)."""

    prediction: Any = None
    error: BaseException | None = None


class Turns(Protocol):
    """How one conversation's turn is played: the part a durable agent does its own way.

    ``play`` runs the turn for ``kwargs``, offering the client's ``tools`` besides the agent's own
    (as external tools), sending its events to ``observe`` (thread-safe), and returns its
    prediction or raises (a ``StepError``, refused input).
    """

    async def play(self, key: str, kwargs: dict[str, Any], observe: Observer, tools: Mapping[str, Any]) -> Any: ...


class Calls:
    """A ``ReActV2``'s turns: one observed call, async or (``sync``) in a worker thread.

    An async turn is ``cancellable``: Stop cancels its task, so the model request or tool it
    awaits is cancelled (the request's HTTP stream closed). A sync one hands each effect to this
    loop, where Stop ends it the same way (``_drivers.stopping``), and is asked before each effect.
    """

    def __init__(self, agent: Any, sync: bool):
        self.agent = agent
        self.sync = sync
        self.cancellable = not sync

    async def play(self, key: str, kwargs: dict[str, Any], observe: Observer, tools: Mapping[str, Any]) -> Any:
        agent = with_external_tools(self.agent, tools)  # the client's tools: this turn's external tools
        # A trace of its own per turn: DSPy's default one is a single list for the whole process, which
        # every concurrent turn appends to (its histories kept alive, up to 10,000 entries); completing
        # a turn's trace (``complete_trace``) then walked what every other turn added meanwhile.
        trace: list[Any] = []
        try:
            with observing(observe), dspy.context(trace=trace):
                if not self.sync:
                    return await agent.acall(**kwargs)
                context = contextvars.copy_context()  # the observer and DSPy's settings, in the worker thread
                return await anyio.to_thread.run_sync(context.run, functools.partial(agent, **kwargs))
        finally:
            # Emptied at the end: a timer the turn's HTTP client left (an idle pooled connection's)
            # keeps the context it was scheduled in, and with it this list, for as long as the
            # connection idles: each step's inputs and prediction, walked by every full collection.
            trace.clear()


class ModelSlots:
    """The app's bound on model requests in flight at once (``model_requests``), and who waits.

    Why the app's own, beside the engine's connection pool: a pool that is full queues a request
    inside the engine, unseen. Here a request takes a slot before it is sent (``_drivers.driver``,
    through the turn's observer), so a request that must wait is counted while it waits
    (``waiting``, told by ``/readyz``), its wait added to its turn's (the turn's log line) and
    recorded in the ``dspy_imp.model_request.wait_duration`` histogram when GenAI metrics are on.
    """

    def __init__(self, limit: int):
        self.limit = limit
        self.in_flight = 0
        self.waiting = 0
        self._semaphores: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = (
            weakref.WeakKeyDictionary()
        )

    @contextlib.asynccontextmanager
    async def slot(self) -> AsyncIterator[float]:
        """Hold one slot while the request runs; yields the seconds it waited for it."""
        loop = asyncio.get_running_loop()
        semaphore = self._semaphores.get(loop)
        if semaphore is None:
            semaphore = self._semaphores[loop] = asyncio.Semaphore(self.limit)
        waited = 0.0
        if semaphore.locked():
            started = time.monotonic()
            self.waiting += 1
            try:
                await semaphore.acquire()
            finally:
                self.waiting -= 1
            waited = time.monotonic() - started
        else:
            await semaphore.acquire()
        _record_wait(waited)
        self.in_flight += 1
        try:
            yield waited
        finally:
            self.in_flight -= 1
            semaphore.release()


def _record_wait(seconds: float) -> None:
    """The wait, into the GenAI metrics when they are on (``dspy_imp.tracing.instrument``)."""
    active = genai.active()
    if active is None:
        return
    from dspy_imp._watch import genai_facts  # OpenTelemetry: loaded only when metrics are on

    genai_facts.wait_histogram(active.meter_provider).record(seconds)


class _Observer:
    """A turn's observer: its events into the request's queue (in order, from any thread);
    ``stopped()``, which the turn's watch asks before each effect; ``until_stopped()``, which
    returns once Stop is asked (a sync turn's effect races it on this loop: ``_drivers.stopping``);
    and ``model_slot()``, which each model request holds while it runs (``ModelSlots``), adding
    its wait to the turn's ``waited``."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        queue: asyncio.Queue[Any],
        stopped: Callable[[], bool],
        slots: ModelSlots | None = None,
    ):
        self.loop = loop
        self.queue = queue
        self.stopped = stopped
        self.halted = asyncio.Event()  # set by Stop, on this loop
        self.slots = slots
        self.waited = 0.0  # seconds this turn's requests waited for a slot
        self._thread = threading.get_ident()  # the loop's: made on it

    @contextlib.asynccontextmanager
    async def model_slot(self) -> AsyncIterator[None]:
        if self.slots is None:  # a runner with no bound of its own
            yield
            return
        async with self.slots.slot() as waited:
            self.waited += waited
            yield

    def __call__(self, event: TurnEvent | Ended) -> None:
        if threading.get_ident() == self._thread:  # on the loop already: no wake-up of it through its pipe
            self.queue.put_nowait(event)
        else:  # a sync turn's worker thread: in order after what it handed the loop before
            self.loop.call_soon_threadsafe(self.queue.put_nowait, event)

    async def until_stopped(self) -> None:
        await self.halted.wait()


class Turn:
    """A started turn, as a stream tells it: its ``Call``, its events as they happen, then its
    ``Ended`` (after the history is saved); or only an ``Ended`` error (``told``)."""

    def __init__(self, call: Call | None, queue: asyncio.Queue[Any] | None, task: asyncio.Task[Ended] | None):
        self.call = call
        self.queue = queue
        self.task = task
        self.error: BaseException | None = None

    @classmethod
    def told(cls, error: BaseException) -> Turn:
        turn = cls(None, None, None)
        turn.error = error
        return turn

    def __aiter__(self) -> AsyncIterator[Call | TurnEvent | Ended]:
        return self._items()

    async def _items(self) -> AsyncIterator[Call | TurnEvent | Ended]:
        async for batch in self.batches():
            for item in batch:
                yield item

    async def batches(self) -> AsyncIterator[list[Call | TurnEvent | Ended]]:
        """The same items, a list at a time: the ``Call`` alone, then each time what the queue holds
        once one more is there (never waiting for a second), ``Ended`` last in the last list. A stream
        writes each list in one piece: under load a socket write per event cost more than the
        event's encoding, and events that happen together (a call's start and its arguments, a
        step's end and the next one's start) then arrive together anyway."""
        if self.call is None or self.queue is None or self.task is None:
            yield [Ended(error=self.error)]
            return
        yield [self.call]
        while True:
            batch = [await self.queue.get()]
            while not isinstance(batch[-1], Ended) and not self.queue.empty():
                batch.append(self.queue.get_nowait())
            if isinstance(batch[-1], Ended):
                batch[-1] = await self.task  # the history is saved before the end is told
                yield batch
                return
            yield batch


class Runner:
    """Runs the turns of one agent (played by ``turns``), one at a time per conversation; new ones
    admitted by ``admission`` (``_admission.Admission``: at most ``max_turns`` at once, none while
    the event loop runs late)."""

    def __init__(self, turns: Turns, store: Store, max_turns: int | None = None):
        self.turns = turns
        self.store = store
        self.admission = Admission(DEFAULT_MAX_TURNS if max_turns is None else max_turns)
        self.model_requests: int | None = None  # the app's ceiling on model requests in flight, told by /readyz
        self.slots: ModelSlots | None = None  # its slots (``app`` sets both)
        self.draining = False  # ``drain``: no new turns
        self._idle: asyncio.Event | None = None  # set when the last running turn is given back
        self.busy: set[str] = set()
        self.stopping: set[str] = set()
        self.plays: dict[str, asyncio.Task[Any]] = {}  # each running turn's play
        self.observers: dict[str, _Observer] = {}  # each running turn's observer
        self.taken: set[str] = set()  # turns whose ending was taken: too late to stop
        self.users: dict[str, str | None] = {}  # who runs each running turn
        self.lost: dict[str, BaseException] = {}  # turns whose store lease was lost: stopped, unsaved
        self.tasks: set[asyncio.Task[Any]] = set()

    @property
    def max_turns(self) -> int:
        return self.admission.max_turns

    @max_turns.setter
    def max_turns(self, value: int) -> None:
        self.admission.max_turns = value

    def refusal(self) -> BeforeStream | None:
        """The refusal a new turn gets now whatever its conversation: 503 while draining, 429 at
        ``max_turns`` or while the loop runs late (``Admission``); ``None`` when it may start. The
        app asks before it reads a request's body, so that a refusal costs little; ``begin``
        asks again."""
        if self.draining:
            return BeforeStream(
                503, "this instance is shutting down: it starts no new turns", retry_after=RETRY_AFTER, limit="draining"
            )
        return self.admission.refusal(len(self.busy))

    def stop(self, key: str, user: str | None) -> bool:
        """Stop the conversation's running turn (history kept; a durable workflow's too, which ends
        with it); ``False`` when none of ``user``'s runs, or its ending was already taken.

        A cancellable turn (``Calls`` of an async agent) has its task cancelled: what it awaits (the
        model request, a tool) is cancelled now. Any other (a sync turn, a durable workflow) has the
        effect it runs ended through its observer (``until_stopped``: the request's HTTP stream closed,
        a sync tool left behind as ``tool_timeouts`` leaves it) and is asked before its next. Either
        way a ``True`` here always ends the turn stopped (``_ending``): decided on the loop's
        thread, against the play's ending not yet taken, so a turn finishing meanwhile cannot win.
        """
        if key not in self.busy or key in self.taken or self.users.get(key, user) != user:
            return False
        self._halt(key)
        return True

    def _halt(self, key: str) -> None:
        """Stop's mechanism: the play cancelled (a cancellable turn), else the effect it runs ended
        through its observer (a sync turn, a durable workflow), and either way asked before its next effect."""
        self.stopping.add(key)
        play = self.plays.get(key)  # none yet while the history is read: asked before its first effect
        if play is not None and getattr(self.turns, "cancellable", False):
            play.cancel()
        observer = self.observers.get(key)
        if observer is not None:
            observer.halted.set()

    def _lose(self, key: str, error: BaseException) -> None:
        """The store lost the turn's lease: the turn stops before its next effect, ending with
        ``error``. What it awaits now (a tool with effects of its own) is not cancelled: it
        finishes and is recorded, so the saved history (when the store still takes it) holds it."""
        if key in self.busy and key not in self.taken:
            self.lost.setdefault(key, error)  # the first telling of it
            self.stopping.add(key)

    def _stopped(self, key: str) -> bool:
        """Whether the turn stops before its next effect (asked from any thread): Stop, a drain, or
        a lease lost; a store lease that ran out by the store's clock (``lapsed``) stops it too,
        even before the store's renewer tells it, so it never runs past its lease."""
        if key in self.stopping:
            return True
        lapsed = getattr(self.store, "lapsed", None)
        error = None if lapsed is None else lapsed(key)
        if error is not None:
            self._lose(key, error)
        return key in self.stopping

    async def run(
        self, key: str, user: str | None, read: Callable[[dspy.History | None], Call]
    ) -> AsyncIterator[Call | TurnEvent | Ended]:
        """``begin``, then the turn's items; a refusal before the stream (``BeforeStream``) as an ``Ended`` error."""
        try:
            turn = await self.begin(key, user, read)
        except BeforeStream as refused:
            yield Ended(error=refused)
            return
        async for item in turn:
            yield item

    async def begin(self, key: str, user: str | None, read: Callable[[dspy.History | None], Call]) -> Turn:
        """The conversation taken, its history read and its turn started: what a stream then tells.

        The conversation is taken before its history is read, so two requests never both read
        the same history (a twice-sent approval runs the call once; the second is refused "already
        running a turn"). A store shared by several processes (``DatabaseStore``) is asked for
        the conversation's turn lease too, before the read. What goes wrong up to here is told by
        the stream as the run's error (a failed claim, refused input), except what ``BeforeStream``
        raises, which the app answers as an HTTP status with no stream: a draining instance (503),
        a conversation already running a turn here (409) or on another instance (409, the lease's
        remaining seconds), an instance at ``max_turns`` or whose loop runs late (429, ``Admission``),
        each with ``retry_after``; a
        conversation of another user (404, as REST answers it), and what ``read`` refuses so (a
        decision for a conversation that is absent or waits for none of it). A refusal before the
        read changes nothing: a paused turn still waits for the decision it refused.
        """
        if self.draining:
            raise BeforeStream(
                503, "this instance is shutting down: it starts no new turns", retry_after=RETRY_AFTER, limit="draining"
            )
        if key in self.busy:
            raise BeforeStream(409, f"conversation {key!r} is already running a turn", retry_after=RETRY_AFTER)
        refused = self.admission.refusal(len(self.busy))
        if refused is not None:
            raise refused
        self.busy.add(key)  # before the store's lease is asked for: one ask per conversation here
        self.users[key] = user
        try:
            claimed = await self._claim(key)
        except Exception as error:  # the store failed (a dropped connection, a refused id): told, and freed
            self._release(key)
            return Turn.told(error)
        except BaseException:
            self._let_go(key)  # cancelled mid-claim: a lease the claim may have taken is given back
            raise
        if not claimed:
            self._release(key)
            raise BeforeStream(
                409,
                f"conversation {key!r} is already running a turn on another instance",
                retry_after=await self._lease_left(key),
            )
        watch = getattr(self.store, "watch", None)
        if watch is not None:
            watch(key, functools.partial(self._lose, key))
        try:
            stored = await self.store.load(key)
            if stored is not None and stored.owner != user:
                raise BeforeStream(404, f"no conversation {key!r}")  # as absent as a missing one, as REST says
            call = read(stored.history if stored is not None else None)
        except BeforeStream:
            await self._free(key)
            raise
        except Exception as error:  # refused input, or the store failed: told, never a hung stream
            await self._free(key)
            return Turn.told(error)
        except BaseException:
            self._let_go(key)  # cancelled: the store would renew its lease until the process ends
            raise
        queue: asyncio.Queue[TurnEvent | Ended] = asyncio.Queue()
        observe = _Observer(asyncio.get_running_loop(), queue, functools.partial(self._stopped, key), self.slots)
        play = asyncio.create_task(self._play(key, call, observe))
        self.plays[key] = play
        before = stored.turns if stored is not None else ()
        self.observers[key] = observe
        task = asyncio.create_task(self._turn(key, user, play, observe, call, before))  # releases the conversation
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return Turn(call, queue, task)

    def _release(self, key: str) -> None:
        if key in self.busy:
            self.admission.ended_turn()  # its place given back: the rate a refused turn's wait is told from
        self.busy.discard(key)
        self.stopping.discard(key)
        self.taken.discard(key)
        self.plays.pop(key, None)
        self.observers.pop(key, None)
        self.users.pop(key, None)
        self.lost.pop(key, None)
        if not self.busy and self._idle is not None:
            self._idle.set()

    async def _lease_left(self, key: str) -> int:
        """Whole seconds until another instance's lease on ``key`` ends (the store's ``lease_left``,
        rounded up; at least 1), ``RETRY_AFTER`` when the store cannot tell."""
        left = getattr(self.store, "lease_left", None)
        if left is None:
            return RETRY_AFTER
        try:
            seconds = float(await left(key))
        except Exception:  # the store failed now: the retry is the client's to try
            return RETRY_AFTER
        return max(1, math.ceil(seconds))

    async def drain(self, seconds: float) -> None:
        """Shut down gracefully: start no new turn (``BeforeStream`` 503, ``Retry-After``), let the
        running ones end for up to ``seconds``, then stop those left as Stop does (their history
        so far saved; a durable turn's workflow ends with it), and return once every turn has
        ended and given its conversation (and its store lease) back."""
        self.draining = True
        try:
            await asyncio.wait_for(self._until_idle(), seconds)
        except TimeoutError:
            for key in list(self.busy):
                if key not in self.taken:
                    self._halt(key)
            await self._until_idle()

    async def _until_idle(self) -> None:
        while self.busy:
            self._idle = asyncio.Event()
            await self._idle.wait()

    def readiness(self) -> dict[str, Any]:
        """What ``/readyz`` tells of the turns: running, the bounds, the loop's lag (ms over the
        last second, ``None`` when not measured), whether it drains, and ``admitting`` (whether a
        new turn would start now)."""
        lag, bound = self.admission.lag.recent(), self.admission.max_loop_lag
        told = {
            "draining": self.draining,
            "admitting": not self.draining and self.admission.reason(len(self.busy)) is None,
            "running_turns": len(self.busy),
            "max_turns": self.max_turns,
            "loop_lag_ms": None if lag is None else round(lag * 1000, 1),
            "max_loop_lag_ms": None if bound is None else round(bound * 1000, 1),
        }
        slots = self.slots
        return {
            **told,
            "model_requests": self.model_requests,
            "model_requests_in_flight": slots.in_flight if slots is not None else 0,
            "model_requests_waiting": slots.waiting if slots is not None else 0,
        }

    async def _claim(self, key: str) -> bool:
        """The store's turn lease, when it keeps one across processes (``DatabaseStore``)."""
        claim = getattr(self.store, "claim", None)
        return True if claim is None else bool(await claim(key))

    def _let_go(self, key: str) -> None:
        """The conversation given back by a request cancelled in ``begin`` (its client gone, the
        server shutting down). The cancelled request cannot wait for the store, so a task of its own
        releases the store's lease, then the conversation here: a store that renews its leases
        (``DatabaseStore``) would otherwise keep this one, and refuse the conversation everywhere,
        until the process ends. Until the release is done the conversation stays busy here, so no
        new turn's lease is the one released. Releasing a lease the claim never took changes
        nothing (a release is the holder's)."""
        release = getattr(self.store, "release", None)
        if release is None:
            self._release(key)
            return

        async def give_back() -> None:
            try:
                await release(key)
            except Exception as error:  # the lease expires by itself once no longer renewed
                _log.logger.warning("conversation %r: its turn lease was not released: %s", key, error)
            finally:
                self._release(key)

        task = asyncio.get_running_loop().create_task(give_back())
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _free(self, key: str) -> None:
        """The conversation given back: here, and the store's lease."""
        self._release(key)
        release = getattr(self.store, "release", None)
        if release is not None:
            try:
                await release(key)
            except Exception as error:  # the lease expires by itself; the turn's end is still told
                _log.logger.warning("conversation %r: its turn lease was not released: %s", key, error)

    async def _turn(
        self,
        key: str,
        user: str | None,
        play: asyncio.Task[Any],
        observe: _Observer,
        call: Call,
        before: tuple[Mapping[str, Any], ...],
    ) -> Ended:
        started = _log.clock()
        try:
            try:
                await asyncio.wait([play])
            except BaseException:  # this task cancelled (the server shutting down): the play too
                play.cancel()
                raise
            ended, history = self._ending(key, play)  # no await from the wait to here: Stop cannot slip in
            if history is not None:  # with how each turn ended, which the page shows again on a reload
                turns = (*before, told(call, ended, history))[-MAX_TURNS:]
                save = getattr(self.store, "save_and_release", self.store.save)  # the lease given back with it
                try:
                    await save(key, Conversation(history, user, turns))
                except Exception as error:
                    if key not in self.lost:
                        raise
                    _log.logger.warning("conversation %r: the stopped turn's history was not saved: %s", key, error)
        except Exception as error:  # the store failed: told as the run's error, never a hung stream
            ended = Ended(error=error)
        finally:
            await self._free(key)
        _log.log_turn(key, ended, started, waited=observe.waited)
        observe(ended)
        return ended

    async def _play(self, key: str, call: Call, observe: Observer) -> Any:
        """The turn played; the cancellation Stop asked for returned (``_Cancelled``), with the
        history the program attached to it, rather than ending the task cancelled."""
        try:
            # DSPy's history off: it would keep every request's entry (its messages, the response) in
            # the LM's ``history`` and DSPy's global one, 10,000 of each, alive for as long as the
            # process serves: tens of container objects a request, which every full collection of
            # the garbage collector walks again, with the loop waiting. The turn's own usage is read
            # all the same (``_drivers.recorder``).
            with genai.conversation(key), dspy.context(disable_history=True):
                return await self.turns.play(key, dict(call.kwargs), observe, call.tools)
        except asyncio.CancelledError as cancelled:
            if key not in self.stopping:
                raise
            return _Cancelled(cancelled)

    def _ending(self, key: str, play: asyncio.Task[Any]) -> tuple[Ended, dspy.History | None]:
        """The finished play's ending and the history to save, taken once (then Stop is refused).

        A turn Stop was answered for ends stopped (``StreamClosed``) whatever its play did: its
        cancellation or closed stream carries the history so far (``dspy_imp_history``), and an
        answer or a failure that won the race is kept as the stopped turn's history.
        """
        self.taken.add(key)
        error = asyncio.CancelledError() if play.cancelled() else play.exception()  # cancelled unstarted: no history
        if error is None and isinstance(play.result(), _Cancelled):
            error = play.result().error
        if key in self.lost:  # stopped as by Stop; saved only if the store still takes it (no one took over)
            _, history = _stopped(None if error is not None else play.result(), error)
            return Ended(error=self.lost[key]), history
        if key in self.stopping:
            return _stopped(None if error is not None else play.result(), error)
        if error is None:
            prediction = play.result()
            return Ended(prediction), prediction.metadata.history
        if isinstance(error, StepError):
            return Ended(error=error), error.history
        if isinstance(error, StreamClosed):  # the stream closed another way: the history so far is kept
            return Ended(error=error), getattr(error, "dspy_imp_history", None)
        if isinstance(error, Exception):  # refused input, or a bug: told as the run's error, never a hung stream
            return Ended(error=error), None
        raise error  # an interrupt (KeyboardInterrupt, SystemExit) stops the server's task too


@dataclass(frozen=True)
class _Cancelled:
    """A play Stop cancelled: its ``CancelledError``, carrying the history so far."""

    error: asyncio.CancelledError


def _stopped(prediction: Any, error: BaseException | None) -> tuple[Ended, dspy.History | None]:
    """A stopped turn's ending: ``StreamClosed``, with the history it got to."""
    if error is None:
        history = prediction.metadata.history
    elif isinstance(error, StepError):
        history = error.history
    else:
        history = getattr(error, "dspy_imp_history", None)
    stop = error if isinstance(error, StreamClosed) else StreamClosed("the turn was stopped")
    if history is not None:
        stop.dspy_imp_history = history  # type: ignore[attr-defined]
    return Ended(error=stop), history
