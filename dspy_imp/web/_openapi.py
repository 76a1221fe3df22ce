"""The OpenAPI 3.1 description of the app's HTTP API, served at ``GET /openapi.json``.

Built from what the routes themselves use, so it cannot drift from them: the ``ag-ui-protocol``
package's pydantic models (``RunAgentInput`` in; its ``Event`` union, messages and ``Interrupt``
out), the bounds of ``_guard`` (``MAX_ID``, ``MAX_BODY``, ``MAX_DEPTH``) and ``_client_tools``
(``MAX_TOOLS``, the name pattern, ``MAX_DESCRIPTION_CHARS``), and the app's configuration: with
``auth`` every guarded operation names the security scheme and answers 401; with a store that
cannot list, rename or delete, those operations answer 501; with ``client_tools`` the streams'
``tools`` are described as the declarations that are read.

It names nothing of the agent (no tool, no signature): ``GET /api/info`` does, behind ``auth``.
So the description is served to anyone the ``Host`` check lets in, like the page itself.
``tests/test_web_openapi.py`` checks that it describes every route of the app's route table
and nothing else, and keeps ``docs/openapi.json`` (the description of a full configuration) in
sync; ``tests/test_web_schemathesis.py`` runs Schemathesis against the app with it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Literal

import pydantic
from ag_ui.core import Event, Interrupt, Message, RunAgentInput
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from dspy_imp import __version__
from dspy_imp._records.errors import ConfigurationError
from dspy_imp.web import _client_tools, _guard

PATH = "/openapi.json"

SECURITY_TYPES = frozenset({"apiKey", "http", "mutualTLS", "oauth2", "openIdConnect"})

DEFAULT_SCHEME: dict[str, Any] = {
    "type": "http",
    "scheme": "bearer",
    "description": "The credentials the app's `auth=` function reads from the request (describe them exactly "
    "with `auth_scheme=`); a request it names no user for is refused (401).",
}

ID_PATTERN = "^[^\\u0000-\\u001f\\u007f]*$"
"""No NUL or other control character (``_guard.conversation_id``)."""

_JSON = "application/json"
_SSE = "text/event-stream"


def checked_scheme(auth: Any, auth_scheme: Any) -> dict[str, Any] | None:
    """The security scheme the description names: ``auth_scheme`` checked, the default with ``auth``."""
    if auth_scheme is None:
        return dict(DEFAULT_SCHEME) if auth is not None else None
    if auth is None:
        raise ConfigurationError("`auth_scheme` describes what `auth` reads: pass `auth=` too")
    if not isinstance(auth_scheme, Mapping) or auth_scheme.get("type") not in SECURITY_TYPES:
        raise ConfigurationError(
            f"`auth_scheme` must be an OpenAPI security scheme object, its `type` one of "
            f"{sorted(SECURITY_TYPES)}, got {auth_scheme!r}"
        )
    try:
        return json.loads(json.dumps(dict(auth_scheme)))
    except (TypeError, ValueError) as error:
        raise ConfigurationError(f"`auth_scheme` must be JSON, got {auth_scheme!r}: {error}") from None


def route(scheme: dict[str, Any] | None, store: Any, client_tools: bool) -> Route:
    """The ``GET /openapi.json`` route: the description of this configuration, built once."""
    body = json.dumps(description(scheme, store, client_tools), ensure_ascii=False).encode()

    async def openapi(request: Request) -> Response:
        return Response(body, media_type=_JSON)

    return Route(PATH, openapi, methods=["GET"])


def description(scheme: Mapping[str, Any] | None, store: Any, client_tools: bool) -> dict[str, Any]:
    """The OpenAPI 3.1 document of an app with this security scheme (``None``: no ``auth``),
    store (what it can do: ``conversations``, ``rename``, ``delete``) and ``client_tools``."""
    schemas = _components(client_tools)
    lists, renames, deletes = (callable(getattr(store, name, None)) for name in ("conversations", "rename", "delete"))

    op = _Operations(scheme is not None, callable(getattr(store, "check", None)))

    run_links = {
        "ReadConversation": {"operationId": "readConversation", "parameters": {"path.id": "$request.body#/threadId"}},
        "StopTurn": {"operationId": "stopTurn", "parameters": {"path.id": "$request.body#/threadId"}},
    }
    read_links = {
        "Approve": {
            "operationId": "runAgUi",
            "requestBody": {
                "threadId": "$request.path.id",
                "runId": "approve",
                "messages": [],
                "resume": [
                    {
                        "interruptId": "$response.body#/interrupts/0/id",
                        "status": "resolved",
                        "payload": {"approved": True},
                    }
                ],
            },
        },
        "Rename": {"operationId": "renameConversation", "parameters": {"path.id": "$request.path.id"}},
        "Delete": {"operationId": "deleteConversation", "parameters": {"path.id": "$request.path.id"}},
    }
    free = {"type": "object", "additionalProperties": True}
    paths: dict[str, Any] = {
        "/healthz": {
            "get": op(
                "Alive: the process serves requests (no `auth`, for a load balancer).",
                {"200": {"description": "Alive.", "content": {_JSON: {"schema": free}}}},
                guarded=False,
                store_read=False,
                operation_id="healthz",
            )
        },
        "/readyz": {
            "get": op(
                "Ready for turns, or not: draining, at `max_turns` or `max_loop_lag`, or the store unreachable or "
                "of a newer schema; the body tells which, with the running turns, the loop's lag and the limits "
                "(no `auth`).",
                {
                    "200": {"description": "Ready.", "content": {_JSON: {"schema": free}}},
                    "503": {"description": "Not ready; the body says why.", "content": {_JSON: {"schema": free}}},
                },
                guarded=False,
                store_read=False,
                operation_id="readyz",
            )
        },
        "/": {
            "get": op(
                "The chat page (static HTML).",
                {"200": {"description": "The page.", "content": {"text/html": {"schema": {"type": "string"}}}}},
                guarded=False,
                store_read=False,
                operation_id="page",
            )
        },
        "/static/{path}": {
            "get": op(
                "The chat page's script, style and vendored libraries.",
                {
                    "200": {"description": "The file.", "content": {"*/*": {"schema": {"type": "string"}}}},
                    "404": {"description": "No such file.", "content": {"text/plain": {"schema": {"type": "string"}}}},
                },
                guarded=False,
                store_read=False,
                operation_id="staticFile",
            )
            | {"parameters": [{"name": "path", "in": "path", "required": True, "schema": {"type": "string"}}]}
        },
        PATH: {
            "get": op(
                "This description.",
                {"200": _response("The OpenAPI 3.1 document.", None)},
                guarded=False,
                store_read=False,
                operation_id="openapi",
            )
        },
        "/api/info": {
            "get": op(
                "The agent: its title, signature, inputs, outputs and tools.",
                {"200": _response("The agent.", "Info")},
                operation_id="info",
            )
        },
        "/api/conversations": {
            "get": op(
                "The user's conversations, newest first.",
                {"200": _response("The conversations.", "ConversationList")},
                needs=lists,
                operation_id="listConversations",
            )
        },
        "/api/conversations/{id}": {
            "get": op(
                "A conversation as AG-UI messages, the interrupts it waits on, and whether a turn runs.",
                {
                    "200": _response("The conversation.", "Conversation"),
                    "404": _error("No conversation of this user has the id."),
                },
                path_id=True,
                links=read_links,
                operation_id="readConversation",
            ),
            "patch": op(
                "Rename the conversation.",
                {
                    "200": _response("Renamed.", "Renamed"),
                    "404": _error("No conversation of this user has the id."),
                    "422": _error(
                        "The id is not a conversation id, or the title is not a string of at most "
                        "200 characters; the error names the field."
                    ),
                },
                path_id=True,
                body=_json_body("Rename"),
                needs=renames,
                operation_id="renameConversation",
            ),
            "delete": op(
                "Delete the conversation with everything it holds (a durable agent's waiting workflow is "
                "cancelled first). No body (or a JSON one, ignored).",
                {"204": {"description": "Deleted."}, "404": _error("No conversation of this user has the id.")},
                path_id=True,
                body={**_json_body("Anything"), "required": False},
                reads=False,
                needs=deletes,
                operation_id="deleteConversation",
            ),
        },
        "/api/conversations/{id}/stop": {
            "post": op(
                "Stop the conversation's running turn, cancelling what it waits for; its history is kept.",
                {
                    "200": _response("The turn stops.", "Stopping"),
                    "404": _error("The conversation is another user's."),
                    "409": _error("No turn of this user's runs on the conversation (or its ending was already taken)."),
                },
                path_id=True,
                body={**_json_body("Anything"), "description": "Any JSON (the page sends `{}`); not read."},
                reads=False,
                operation_id="stopTurn",
            )
        },
        "/ag-ui": {
            "post": op(
                "AG-UI: one run, one turn. A `RunAgentInput` in, AG-UI events out. Another user's thread, or a "
                "decision for a thread that does not exist, is a 404 and a decision answered already a 409, before "
                "any event; a refusal found once the run has started (a busy conversation, a resume for a call never "
                "made) is a `RUN_ERROR`.",
                {
                    "200": _stream(
                        "The run's AG-UI events (`RUN_STARTED` ... `RUN_FINISHED` or `RUN_ERROR`), each "
                        "`data` one event as JSON.",
                        {"$ref": "#/components/schemas/Event"},
                    ),
                    "404": _error("The thread is another user's, or a decision names a thread that does not exist."),
                    "409": _error(
                        "The decision was answered already (in another tab, or a second click), or the conversation "
                        "runs a turn already (here, or on another instance: `Retry-After` says when its lease ends)."
                    ),
                    "429": _full(
                        "This instance runs `max_turns` turns already, or its event loop runs late (`max_loop_lag`); "
                        "`Retry-After` says when to try again. Asked for `text/event-stream`, the body is the stream "
                        "a client reading only the stream understands: `RUN_STARTED`, then `RUN_ERROR` with `code` "
                        "the limit (`max_turns`, `max_loop_lag`); else the JSON error.",
                        {"$ref": "#/components/schemas/Event"},
                    ),
                },
                body=_json_body("RunAgentInput"),
                links=run_links,
                operation_id="runAgUi",
            )
        },
        "/api/chat": {
            "post": op(
                "The AI SDK UI message stream for `useChat`: one turn. Another user's chat, or a decision for a chat "
                "that does not exist, is a 404 and a decision answered already a 409, before any part; a refusal "
                "found once the stream has started is an `error` part.",
                {
                    "200": _stream(
                        "The turn's UI message stream parts, each `data` one part as JSON, the last `[DONE]`; "
                        "the header `x-vercel-ai-ui-message-stream: v1`.",
                        {"$ref": "#/components/schemas/ChatPart"},
                        done=True,
                        headers={"x-vercel-ai-ui-message-stream": {"schema": {"const": "v1"}}},
                    ),
                    "404": _error("The chat is another user's, or a decision names a chat that does not exist."),
                    "409": _error(
                        "The decision was answered already (in another tab, or a second click), or the conversation "
                        "runs a turn already (here, or on another instance: `Retry-After` says when its lease ends)."
                    ),
                    "429": _full(
                        "This instance runs `max_turns` turns already, or its event loop runs late (`max_loop_lag`); "
                        "`Retry-After` says when to try again. Asked for `text/event-stream`, the body is the stream "
                        "a client reading only the stream understands: `start`, an `error` part whose `errorText` "
                        "begins with the limit (`max_turns: `, `max_loop_lag: `), then `[DONE]`; else the JSON error.",
                        {"$ref": "#/components/schemas/ChatPart"},
                        done=True,
                    ),
                },
                body=_json_body("ChatRequest"),
                links={
                    "ReadConversation": {
                        "operationId": "readConversation",
                        "parameters": {"path.id": "$request.body#/id"},
                    }
                },
                operation_id="runChat",
            )
        },
    }
    document: dict[str, Any] = {
        "openapi": "3.1.0",
        "jsonSchemaDialect": "https://json-schema.org/draft/2020-12/schema",
        "info": {
            "title": "dspy-imp web app",
            "version": __version__,
            "description": "The HTTP API of `dspy_imp.web.app`: the chat page, AG-UI, the AI SDK UI message stream "
            "and a user's conversations. Every request's `Host` must name the server (403); a POST, PATCH or "
            "DELETE's `Origin`, when sent, must be the page's own or a configured one (403), and its body "
            "`application/json` (415; a DELETE may have none). `HEAD` is answered wherever `GET` is.",
        },
        "paths": paths,
        "components": {
            "schemas": schemas,
            "parameters": {
                "ConversationId": {
                    "name": "id",
                    "in": "path",
                    "required": True,
                    "description": "The conversation id (AG-UI's `threadId`, the AI SDK's chat `id`).",
                    "schema": {"$ref": "#/components/schemas/ConversationId"},
                }
            },
        },
    }
    if scheme is not None:
        document["components"]["securitySchemes"] = {"auth": dict(scheme)}
    return document


class _Operations:
    """Writes each operation with the answers every one of its kind has: 403 (``Host``), 401 with
    ``auth``, 422 for a path id, 400/413/415/422 for a body read, 501 for a store that cannot do
    it, 503 for a database of a newer schema."""

    def __init__(self, authed: bool, checks_store: bool):
        self.authed = authed
        self.checks_store = checks_store

    def __call__(
        self,
        summary: str,
        responses: dict[str, Any],
        *,
        guarded: bool = True,
        body: dict[str, Any] | None = None,
        reads: bool = True,
        path_id: bool = False,
        store_read: bool = True,
        needs: bool = True,
        links: dict[str, Any] | None = None,
        operation_id: str,
    ) -> dict[str, Any]:
        answers = dict(responses)
        if links:
            first = next(iter(answers))
            answers[first] = {**answers[first], "links": links}
        answers["403"] = _error(
            "The `Host` names another server (or, on a POST, PATCH or DELETE, the `Origin` is another site's page)."
        )
        if guarded and self.authed:
            answers["401"] = _error("`auth` named no user for the request.")
        if path_id:
            answers["422"] = _error(
                "The id is not a conversation id (1 to MAX_ID characters, no control character); "
                "the error names the field.".replace("MAX_ID", str(_guard.MAX_ID))
            )
        if body is not None:
            answers["415"] = _error("The body is not `application/json`.")
        if body is not None and reads:
            answers["400"] = _error("The body is not JSON.")
            answers["413"] = _error(f"The body is larger than {_guard.MAX_BODY} bytes.")
            answers.setdefault(
                "422",
                _error(
                    f"The body is not of this shape, or nests deeper than {_guard.MAX_DEPTH} "
                    "levels; the error names the field."
                ),
            )
        if not needs:
            answers["501"] = _error("This conversation store cannot do it (use `DatabaseStore`).")
        if store_read and self.checks_store:
            answers["503"] = _response(
                "The conversation database was written by a newer dspy-imp (a higher schema "
                "version): every route that reads it answers so until this one is upgraded.",
                "SchemaTooNew",
            )
        operation: dict[str, Any] = {"operationId": operation_id, "summary": summary, "responses": answers}
        if path_id:
            operation["parameters"] = [{"$ref": "#/components/parameters/ConversationId"}]
        if body is not None:
            operation["requestBody"] = body
        if guarded:
            operation["security"] = [{"auth": []}] if self.authed else []
        return operation


def _components(client_tools: bool) -> dict[str, Any]:
    """The schemas: AG-UI's pydantic models (in and out) and the app's own bodies."""
    adapters: list[tuple[str, Literal["validation", "serialization"], pydantic.TypeAdapter[Any]]] = [
        ("in", "validation", pydantic.TypeAdapter(RunAgentInput)),
        ("event", "serialization", pydantic.TypeAdapter(Event)),
        ("messages", "serialization", pydantic.TypeAdapter(list[Message])),
        ("interrupt", "serialization", pydantic.TypeAdapter(Interrupt)),
    ]
    refs, definitions = pydantic.TypeAdapter.json_schemas(
        adapters, by_alias=True, ref_template="#/components/schemas/{model}"
    )
    schemas: dict[str, Any] = json.loads(json.dumps(definitions["$defs"]))
    _require_tags(schemas)
    schemas["Event"] = refs[("event", "serialization")]
    schemas["Messages"] = refs[("messages", "serialization")]
    run_input = schemas["RunAgentInput"]
    run_input["properties"]["threadId"] = {"$ref": "#/components/schemas/ConversationId"}
    tools = _client_tool_list("parameters")
    if client_tools:
        run_input["properties"]["tools"] = {"anyOf": [tools, {"type": "null"}]}
    else:
        run_input["properties"]["tools"]["description"] = "Not read: the app does not honour client tools."
    error = {"type": "object", "properties": {"error": {"type": "string"}}, "required": ["error"]}
    schemas.update(
        {
            "ConversationId": {
                "type": "string",
                "minLength": 1,
                "maxLength": _guard.MAX_ID,
                "pattern": ID_PATTERN,
                "description": "A conversation id: 1 to MAX_ID characters, no NUL or other control character.".replace(
                    "MAX_ID", str(_guard.MAX_ID)
                ),
            },
            "Error": error,
            "SchemaTooNew": {
                "type": "object",
                "properties": {
                    "error": {"type": "string"},
                    "schema": {"type": "integer"},
                    "supported": {"type": "integer"},
                },
                "required": ["error", "schema", "supported"],
            },
            "Anything": {},
            "Info": {
                "type": "object",
                "properties": {
                    "title": {"type": "string"},
                    "signature": {"type": "string"},
                    "instructions": {"type": "string"},
                    "inputs": {"type": "array", "items": {"type": "string"}},
                    "outputs": {"type": "array", "items": {"type": "string"}},
                    "output_types": {"type": "object", "additionalProperties": {"type": "string"}},
                    "tools": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "properties": {"name": {"type": "string"}, "description": {"type": ["string", "null"]}},
                            "required": ["name", "description"],
                        },
                    },
                },
                "required": ["title", "signature", "instructions", "inputs", "outputs", "output_types", "tools"],
            },
            "Conversation": {
                "type": "object",
                "properties": {
                    "messages": {"$ref": "#/components/schemas/Messages"},
                    "interrupts": {"type": "array", "items": {"$ref": "#/components/schemas/Interrupt"}},
                    "running": {"type": "boolean"},
                },
                "required": ["messages", "interrupts", "running"],
            },
            "ConversationList": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "id": {"type": "string"},
                        "title": {"type": ["string", "null"]},
                        "created": {"type": "number"},
                        "updated": {"type": "number"},
                    },
                    "required": ["id", "title", "created", "updated"],
                },
            },
            "Rename": {
                "type": "object",
                "properties": {"title": {"type": "string", "maxLength": 200}},
                "required": ["title"],
            },
            "Renamed": {
                "type": "object",
                "properties": {"id": {"type": "string"}, "title": {"type": "string"}},
                "required": ["id", "title"],
            },
            "Stopping": {"type": "object", "properties": {"stopping": {"type": "string"}}, "required": ["stopping"]},
            "ChatRequest": _chat_request(tools if client_tools else None),
            "ChatPart": {"oneOf": [_part(kind, keys) for kind, keys in CHAT_PARTS.items()]},
        }
    )
    return schemas


CHAT_PARTS: dict[str, dict[str, Any]] = {
    "start": {"messageId": {"type": "string"}},
    "start-step": {},
    "finish-step": {},
    **{
        f"{kind}-{end}": {"id": {"type": "string"}, **({"delta": {"type": "string"}} if end == "delta" else {})}
        for kind in ("text", "reasoning")
        for end in ("start", "delta", "end")
    },
    "tool-input-start": {"toolCallId": {"type": "string"}, "toolName": {"type": "string"}},
    "tool-input-delta": {"toolCallId": {"type": "string"}, "inputTextDelta": {"type": "string"}},
    "tool-input-available": {"toolCallId": {"type": "string"}, "toolName": {"type": "string"}, "input": {}},
    "tool-output-available": {"toolCallId": {"type": "string"}, "output": {}},
    "tool-output-error": {"toolCallId": {"type": "string"}, "errorText": {"type": "string"}},
    "tool-output-denied": {"toolCallId": {"type": "string"}},
    "tool-approval-request": {"approvalId": {"type": "string"}, "toolCallId": {"type": "string"}},
    "data-elicitation": {
        "id": {"type": "string"},
        "data": {
            "type": "object",
            "description": "A call paused on an MCP server's request for input: answered by the call's tool "
            'part, `output-available` with `output` `{"action": "accept", "content": {...}}`, '
            '`{"action": "decline"}` or `{"action": "cancel"}`.',
            "properties": {
                "toolCallId": {"type": "string"},
                "toolName": {"type": "string"},
                "server": {"type": ["string", "null"]},
                "message": {"type": "string"},
                "schema": {"type": "object", "description": "The form's JSON schema (the server's: untrusted)."},
            },
            "required": ["toolCallId", "toolName", "server", "message", "schema"],
        },
    },
    "data-elicitation-url": {
        "id": {"type": "string"},
        "data": {
            "type": "object",
            "description": "A call paused on an MCP server's request to open a URL (URL mode): answered by the "
            'call\'s tool part, `output-available` with `output` `{"action": "accept"}` (the person opened it), '
            '`{"action": "decline"}` or `{"action": "cancel"}`.',
            "properties": {
                "toolCallId": {"type": "string"},
                "toolName": {"type": "string"},
                "server": {"type": ["string", "null"]},
                "message": {"type": "string"},
                "url": {
                    "type": ["string", "null"],
                    "description": "The http(s) URL to show as a link the person opens (the server's: untrusted; "
                    "never fetched); null when it was not one that may be shown.",
                },
                "elicitationId": {"type": ["string", "null"]},
            },
            "required": ["toolCallId", "toolName", "server", "message", "url", "elicitationId"],
        },
    },
    "finish": {
        "finishReason": {"enum": ["stop", "length", "content-filter", "tool-calls", "error", "other"]},
        "messageMetadata": {"type": "object", "description": "How the turn ended: outputs, termination, usage."},
    },
    "error": {"errorText": {"type": "string"}},
}
"""The parts the app writes, each with exactly its keys (the AI SDK's ``uiMessageChunkSchema``
makes every part a strict object)."""


def _part(kind: str, keys: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {"type": {"const": kind}, **keys},
        "required": ["type", *keys],
        "additionalProperties": False,
    }


def _require_tags(schemas: dict[str, Any]) -> None:
    """Each member of a discriminated union made to carry its tag: pydantic's schema lets a member
    with a default tag (``TextPart``'s ``type``) leave it out, but its validator needs it."""

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            tag = (node.get("discriminator") or {}).get("propertyName")
            for member in node.get("oneOf") or [] if tag else []:
                target = schemas.get(str(member.get("$ref", "")).rsplit("/", 1)[-1])
                if target is not None and tag not in target.setdefault("required", []):
                    target["required"].append(tag)
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(schemas)


def _client_tool_list(schema_key: str) -> dict[str, Any]:
    """The declarations ``_client_tools.declared`` reads; a name taken by the agent's own tools (or
    ``submit``), or a schema that is no valid JSON schema of an object, is refused too (422)."""
    return {
        "type": "array",
        "maxItems": _client_tools.MAX_TOOLS,
        "items": {
            "type": "object",
            "properties": {
                "name": {"type": "string", "pattern": f"^{_client_tools._NAME.pattern}$"},
                "description": {"type": "string", "maxLength": _client_tools.MAX_DESCRIPTION_CHARS},
                schema_key: {
                    "type": "object",
                    "description": "A JSON schema of an object, at most "
                    f"{_client_tools.MAX_SCHEMA_CHARS} characters as compact JSON.",
                },
            },
            "required": ["name", schema_key],
        },
    }


def _chat_request(tools: dict[str, Any] | None) -> dict[str, Any]:
    """``useChat``'s request as ``vercel.checked_request`` reads it."""
    part = {
        "type": "object",
        "properties": {"toolCallId": {"type": "string"}, "approval": {"type": "object"}},
        "anyOf": [
            {"properties": {"type": {"not": {"const": "text"}}}},
            {"properties": {"text": {"type": "string"}}, "required": ["text"]},
        ],
    }
    message = {
        "type": "object",
        "properties": {"role": {"type": "string"}, "parts": {"type": "array", "items": part}},
        "required": ["role"],
    }
    properties: dict[str, Any] = {
        "id": {"$ref": "#/components/schemas/ConversationId"},
        "messages": {"type": "array", "minItems": 1, "items": message},
    }
    if tools is not None:
        properties["tools"] = {"anyOf": [tools, {"type": "null"}]}
    return {
        "type": "object",
        "description": "The last message is the new turn's (the user's text parts) or answers the paused one (the "
        "assistant's tool parts: `approval-responded`, `output-available`; a request for input's answer is an "
        "`output-available` part's `output`).",
        "properties": properties,
        "required": ["id", "messages"],
    }


def _json_body(schema: str) -> dict[str, Any]:
    return {"required": True, "content": {_JSON: {"schema": {"$ref": f"#/components/schemas/{schema}"}}}}


def _response(text: str, schema: str | None) -> dict[str, Any]:
    body: dict[str, Any] = {"$ref": f"#/components/schemas/{schema}"} if schema else {"type": "object"}
    return {"description": text, "content": {_JSON: {"schema": body}}}


def _error(text: str) -> dict[str, Any]:
    return _response(text, "Error")


def _full(text: str, item: dict[str, Any], done: bool = False) -> dict[str, Any]:
    """A full instance's 429: the JSON error, or (asked for ``text/event-stream``) the stream's error."""
    answer = _error(text)
    answer["content"].update(_stream(text, item, done=done)["content"])
    answer["headers"] = {"Retry-After": {"description": "Seconds to wait.", "schema": {"type": "integer"}}}
    return answer


def _stream(
    text: str, item: dict[str, Any], headers: dict[str, Any] | None = None, done: bool = False
) -> dict[str, Any]:
    data: dict[str, Any] = {"type": "string", "contentMediaType": _JSON, "contentSchema": item}
    if done:
        data = {"anyOf": [{"const": "[DONE]"}, data]}
    event = {"type": "object", "properties": {"data": data}, "required": ["data"]}
    answer: dict[str, Any] = {"description": text, "content": {_SSE: {"schema": event}}}
    if headers:
        answer["headers"] = headers
    return answer
