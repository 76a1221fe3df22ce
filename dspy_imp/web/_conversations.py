"""A user's conversations over HTTP: list, rename, delete (the chat page's sidebar); reading one
back and stopping its turn are the app's own routes (``app``).

    GET    /api/conversations        the user's conversations, newest first
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
from dspy_imp.web._guard import Guard, Refused, conversation_id, read_json
from dspy_imp.web._migrations import SchemaTooNew


class Conversations:
    def __init__(self, runner: Any, guard: Guard, signature: Any):
        self.runner = runner
        self.store = runner.store
        self.guard = guard
        self.turns = runner.turns
        self.signature = signature

    def routes(self) -> list[Route]:
        """The list; renaming and deleting one (``one``) share the app's route of the conversation,
        so that its path answers ``Allow: GET, HEAD, PATCH, DELETE``."""
        return [Route("/api/conversations", self.index, methods=["GET"])]

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
            conversation_id(key, "id")
            user = await self.guard.user(request)
            if request.method == "PATCH":
                return await self._rename(key, user, await read_json(request))
            return await self._delete(key, user)
        except Refused as refused:
            return refused.response()

    async def _rename(self, key: str, user: str | None, body: Any) -> Response:
        title = body.get("title") if isinstance(body, dict) else None
        try:
            renamed = await self._needs("rename")(key, title, user)
        except SchemaTooNew:
            raise  # a database of a newer schema: 503 (the app's handler), as on every route
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
