"""A user's conversations over HTTP: list, read, rename, delete (the chat page's sidebar API).

    GET    /api/conversations        the user's conversations, newest first
    GET    /api/conversations/{id}   one of them: its AG-UI messages and waiting calls (interrupts)
    POST   /api/conversations/{id}/stop  stop its running turn (what it did is kept)
    PATCH  /api/conversations/{id}   {"title": "..."}: rename it
    DELETE /api/conversations/{id}   delete it with everything it holds

The user is the one ``auth`` names (``None`` without ``auth``: the conversations nobody owns). A
conversation of another user is answered exactly as one that does not exist (404), so ids leak
nothing. Listing and renaming need a store that keeps them (``DatabaseStore``); with another
store those answer 501. Deleting a durable agent's conversation also cancels its waiting workflow.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from dspy_imp._records.errors import ConfigurationError
from dspy_imp._records.steps import from_entry
from dspy_imp._turn.approval import pending_metadata
from dspy_imp.web import agui
from dspy_imp.web._guard import Guard, Refused, read_json
from dspy_imp.web.messages import to_messages


class Conversations:
    def __init__(self, runner: Any, guard: Guard, signature: Any):
        self.runner = runner
        self.store = runner.store
        self.guard = guard
        self.turns = runner.turns
        self.signature = signature

    def routes(self) -> list[Route]:
        return [
            Route("/api/conversations", self.index, methods=["GET"]),
            Route("/api/conversations/{key:path}/stop", self.stop, methods=["POST"]),
            Route("/api/conversations/{key:path}", self.one, methods=["GET", "PATCH", "DELETE"]),
        ]

    async def index(self, request: Request) -> Response:
        try:
            user = await self.guard.user(request)
            listed = await self._needs("conversations")(user)
        except Refused as refused:
            return refused.response()
        return JSONResponse(
            [{"id": c.key, "title": c.title, "created": c.created, "updated": c.updated} for c in listed]
        )

    async def one(self, request: Request) -> Response:
        key = request.path_params["key"]
        try:
            user = await self.guard.user(request)
            if request.method == "GET":
                return await self._read(key, user)
            if request.method == "PATCH":
                return await self._rename(key, user, await read_json(request))
            return await self._delete(key, user)
        except Refused as refused:
            return refused.response()

    async def stop(self, request: Request) -> Response:
        """Stop the conversation's running turn: what it did so far is kept (its history saved)."""
        key = request.path_params["key"]
        try:
            user = await self.guard.user(request)
            await read_json(request)
            stopped = await self.runner.stop(key, user)
        except Refused as refused:
            return refused.response()
        if not stopped:
            raise_ = Refused(409, "no turn of this conversation is running here")
            return raise_.response()
        return JSONResponse({"id": key, "stopped": True})

    async def _read(self, key: str, user: str | None) -> Response:
        stored = await self.store.load(key)
        if stored is None or stored.owner != user:
            raise _NOT_FOUND
        messages = to_messages(stored.history, self.signature)
        return JSONResponse(
            {
                "id": key,
                "messages": [m.model_dump(mode="json", by_alias=True) for m in messages],
                "interrupts": _interrupts(stored.history, self.signature),
            }
        )

    async def _rename(self, key: str, user: str | None, body: Any) -> Response:
        title = body.get("title") if isinstance(body, dict) else None
        try:
            renamed = await self._needs("rename")(key, title, user)
        except ConfigurationError as error:
            raise Refused(422, str(error)) from None
        if not renamed:
            raise _NOT_FOUND
        return JSONResponse({"id": key, "title": title})

    async def _delete(self, key: str, user: str | None) -> Response:
        stored = await self.store.load(key)
        if stored is None or stored.owner != user:
            raise _NOT_FOUND
        forget = getattr(self.turns, "forget", None)
        if forget is not None:
            await forget(key)  # a durable turn waiting for an approval: cancelled first
        delete = getattr(self.store, "delete", None)
        if delete is None:
            raise Refused(501, "this conversation store cannot delete conversations (use DatabaseStore)")
        await delete(key, user)
        return Response(status_code=204)

    def _needs(self, name: str) -> Any:
        method = getattr(self.store, name, None)
        if method is None:
            raise Refused(
                501, f"this conversation store cannot {name.replace('conversations', 'list')} (use DatabaseStore)"
            )
        return method


_NOT_FOUND = Refused(404, "no such conversation")


def _interrupts(history: Any, signature: Any) -> list[dict[str, Any]]:
    """The waiting calls of a paused conversation, as the AG-UI interrupts its turn ended with."""
    entries = list(history.messages)
    if not entries:
        return []
    last = from_entry(entries[-1], list(signature.input_fields), list(signature.output_fields), len(entries) - 1)
    pending = pending_metadata(last.pending)
    return [agui.interrupt(call).model_dump(mode="json", by_alias=True) for call in pending]
