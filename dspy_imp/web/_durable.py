"""Conversations on a DBOS durable agent (``dspy_imp.durable.DurableAgent``): each turn a workflow.

A new turn starts a workflow (``astart``, id ``dspy_imp.web:<conversation>:<random>``) and the
request follows it until it ends or pauses. A paused turn keeps waiting in its workflow (DBOS
records it): the request that paused it ends with the pending calls, and the request that answers
them sends the decisions to that workflow (``adecide``), in this process or, after a restart, in
the one DBOS recovered it in (the workflow is found by its exact id: the conversation, then a
random tail). The workflow keeps the
observer it started with, so each request renews the conversation's channel, the observer's
target; a workflow recovered after a restart has no observer, and its resumed part is told at its
end (the answer and the ``MESSAGES_SNAPSHOT``), not as it runs. Stop reaches the workflow through
the same channel: the step running then is ended (its model request's HTTP stream closed, its tool
cancelled), the turn stops there and the workflow ends with the history of its finished steps as
its result (``_durable.driver``), which the app saves like any stopped turn's.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Mapping
from typing import Any

from dbos import DBOS

from dspy_imp._durable.codec import decode_value
from dspy_imp._durable.driver import PENDING_EVENT
from dspy_imp._program.prediction import Metadata, make_prediction
from dspy_imp._records.errors import ConfigurationError
from dspy_imp._watch.events import Observer, TurnEvent, observing
from dspy_imp.durable import DurableAgent, ahandle

PREFIX = "dspy_imp.web:"
_POLL = 0.1  # seconds between looks at a running workflow's pending event


class _Channel:
    """A conversation's observer: events go to the request now following the turn (its ``observe``),
    and ``stopped()`` is that request's (the page's Stop), asked before each of the turn's steps;
    ``until_stopped()`` is that request's too, which ends the step running when Stop is pressed."""

    def __init__(self) -> None:
        self.target: Observer | None = None

    def __call__(self, event: TurnEvent) -> None:
        target = self.target
        if target is not None:
            target(event)

    def stopped(self) -> bool:
        asked = getattr(self.target, "stopped", None)
        return bool(asked is not None and asked())

    async def until_stopped(self) -> None:
        """Returns once the request following the turn asks it to stop (the step running then ends)."""
        until = getattr(self.target, "until_stopped", None)
        if until is None:
            await asyncio.Event().wait()  # a request that cannot stop it: the step runs to its end
        else:
            await until()


class Workflows:
    """A durable agent's turns, each a workflow (the ``Turns`` of ``_turns``' ``Runner``)."""

    def __init__(self, agent: DurableAgent):
        self.agent = agent
        self.channels: dict[str, _Channel] = {}

    async def play(self, key: str, kwargs: dict[str, Any], observe: Observer, tools: Mapping[str, Any]) -> Any:
        if tools:  # ``app`` refuses ``client_tools=True`` for a durable agent: a workflow runs its own program
            raise ConfigurationError("a DurableAgent's turns cannot offer client tools")
        channel = self.channels.setdefault(key, _Channel())
        channel.target = observe
        workflow, decided = await self._start_or_decide(key, kwargs, channel)
        return await self._follow(workflow, decided)

    async def _start_or_decide(self, key: str, kwargs: dict[str, Any], channel: _Channel) -> tuple[str, set[str]]:
        if "approvals" in kwargs or "results" in kwargs:
            workflow = await self._waiting(key)
            approvals, results = kwargs.get("approvals") or {}, kwargs.get("results") or {}
            await self.agent.adecide(workflow, approvals=approvals or None, results=results or None)
            return workflow, {*approvals, *results}
        workflow = f"{PREFIX}{key}:{uuid.uuid4().hex}"
        with observing(channel):  # the workflow's task copies the context: the channel is its observer
            await self.agent.astart(workflow_id=workflow, **kwargs)
        return workflow, set()

    async def forget(self, key: str) -> None:
        """Cancel the conversation's waiting workflows (it is being deleted); their records stay
        DBOS's, marked cancelled, and never resume."""
        found = await DBOS.list_workflows_async(workflow_id_prefix=f"{PREFIX}{key}:", status="PENDING")
        for workflow in found:
            if conversation_of(str(workflow.workflow_id)) == key:
                await DBOS.cancel_workflow_async(str(workflow.workflow_id))
        self.channels.pop(key, None)

    async def _waiting(self, key: str) -> str:
        """The conversation's own waiting workflow, by exact id: the prefix ``dspy_imp.web:alice:`` also
        lists ``alice:work``'s workflows, so only an id whose random tail follows ``key`` itself counts."""
        found = await DBOS.list_workflows_async(workflow_id_prefix=f"{PREFIX}{key}:", status="PENDING")
        own = [str(w.workflow_id) for w in found if conversation_of(str(w.workflow_id)) == key]
        if not own:
            raise ConfigurationError(f"conversation {key!r} has no turn waiting for a decision")
        return own[-1]

    async def _follow(self, workflow: str, decided: set[str]) -> Any:
        """The turn's end: its prediction, or a paused one built from the pending calls it publishes."""
        handle = await ahandle(workflow)
        result = asyncio.ensure_future(handle.aresult(polling_interval_sec=_POLL))
        try:
            while not result.done():
                waiting = await DBOS.get_event_async(workflow, PENDING_EVENT, timeout_seconds=0)
                if _newly_paused(waiting, decided):
                    return _paused(self.agent, waiting)
                await asyncio.wait({result}, timeout=_POLL)
            return result.result()
        finally:
            result.cancel()


def conversation_of(workflow: str) -> str | None:
    """The conversation of a workflow id ``dspy_imp.web:<conversation>:<hex>`` (the tail has no colon)."""
    if not workflow.startswith(PREFIX) or ":" not in workflow[len(PREFIX) :]:
        return None
    return workflow[len(PREFIX) :].rsplit(":", 1)[0]


def _newly_paused(waiting: Any, decided: set[str]) -> bool:
    """A pending event that is not the one just answered (the workflow clears it once it reads them)."""
    if not isinstance(waiting, Mapping):
        return False
    pending = {call["id"] for call in decode_value(waiting["pending_calls"])}
    return bool(pending - decided)


def _paused(agent: DurableAgent, waiting: Mapping[str, Any]) -> Any:
    """The paused turn as a prediction: its history and pending calls (the workflow keeps the rest)."""
    history = decode_value(waiting["history"])
    pending = tuple(decode_value(waiting["pending_calls"]))
    metadata = Metadata(history=history, termination_reason="paused", pending_calls=pending)
    return make_prediction(dict.fromkeys(agent.program.signature.output_fields), metadata)
