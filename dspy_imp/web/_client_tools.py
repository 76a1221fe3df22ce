"""Tools a client declares and runs itself (``app(..., client_tools=True)``): AG-UI's
``RunAgentInput.tools``, the AI SDK request's ``tools``.

A declaration is input like any other: checked here before the turn (a name that is an
identifier and no tool of the agent's nor ``submit``, a JSON-object schema of bounded size, a
bounded count), else the request is refused naming the field. The declared tools become the
turn's external tools (``_program.extra_tools``): offered to the model with the declared schema,
each call checked against it in a worker thread, off the event loop, for at most
``untrusted_schema.CHECK_SECONDS`` (a bad call, or one not checked in time, is an observation the
model reads, naming the tool), the turn pausing on the good ones. What the client sends back is
only ever the result of a call the server's paused entry waits on, as text (``result_text``),
bounded.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import dspy
import pydantic

from dspy_imp._records import untrusted_schema
from dspy_imp._records.untrusted_schema import UntrustedSchema, gate, sized
from dspy_imp.web._guard import Refused

MAX_TOOLS = 32
"""The most tools one request may declare."""
MAX_SCHEMA_CHARS = 16_000
"""The longest a declared tool's parameter schema may be, as compact JSON."""
MAX_DESCRIPTION_CHARS = 4_000
"""The longest a declared tool's description may be."""
MAX_RESULT_CHARS = 100_000
"""The longest result a client may send for one call (as text)."""

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")


class ClientTool(dspy.Tool):
    """A tool the client runs: the model is told its declared schema, and its calls are checked
    against all of it (``parameters_schema``) before the turn pauses on them. It never runs here."""

    parameters_schema: dict[str, Any] = pydantic.Field(default_factory=dict)
    parameters_validator: Any = pydantic.Field(default=None, exclude=True)
    """The gate's validator (``_records.untrusted_schema``): RE2 patterns, no ``$ref`` fetched."""
    arguments_bound: float = pydantic.Field(default=untrusted_schema.CHECK_SECONDS, exclude=True)
    """How long a call's check against the schema may take: the driver runs it in a worker thread,
    off the event loop (``CheckArguments``); longer is a bad call the model reads, naming the tool."""

    def __init__(self, name: str, description: str, parameters: dict[str, Any]):
        properties = parameters.get("properties") or {}
        super().__init__(_never_here, name=name, desc=description, args=dict(properties), arg_types={})
        self.parameters_schema = parameters
        self.parameters_validator = gate(parameters, "parameters")
        self.arguments_bound = untrusted_schema.CHECK_SECONDS
        self.has_kwargs = False  # the whole schema decides what is accepted (``_turn.arguments``)

    def format_as_litellm_function_call(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.desc, "parameters": self.parameters_schema},
        }


def _never_here(**kwargs: Any) -> Any:
    raise RuntimeError("a client tool runs in the client, never on the server")


def declared(items: Any, taken: Collection[str], field: str, schema_key: str) -> dict[str, ClientTool]:
    """The tools a request declares (``items``: a list of ``{name, description, <schema_key>}``), checked.

    ``taken``: the agent's own tool names and ``submit``, which no client tool may take. Refused
    (422) with the field at fault: ``tools[2].name``.
    """
    if items is None:
        return {}
    if not isinstance(items, Sequence) or isinstance(items, str):
        raise Refused(422, f"`{field}` must be a list of tools")
    if len(items) > MAX_TOOLS:
        raise Refused(422, f"`{field}` declares {len(items)} tools; at most {MAX_TOOLS} may be declared")
    tools: dict[str, ClientTool] = {}
    for index, item in enumerate(items):
        at = f"{field}[{index}]"
        if not isinstance(item, Mapping):
            raise Refused(422, f"`{at}` must be an object with a `name`")
        name = item.get("name")
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise Refused(422, f"`{at}.name` must be an identifier (letters, digits, _; at most 64), got {name!r}")
        if name in taken:
            raise Refused(422, f"`{at}.name` {name!r} is the name of one of the agent's own tools (or submit)")
        if name in tools:
            raise Refused(422, f"`{at}.name` {name!r} is declared twice")
        description = item.get("description") or ""
        if not isinstance(description, str) or len(description) > MAX_DESCRIPTION_CHARS:
            raise Refused(422, f"`{at}.description` must be text of at most {MAX_DESCRIPTION_CHARS} characters")
        tools[name] = ClientTool(name, description, _schema(item.get(schema_key), f"{at}.{schema_key}"))
    return tools


def _schema(schema: Any, at: str) -> dict[str, Any]:
    if schema is None:
        return {"type": "object", "properties": {}}
    if not isinstance(schema, dict) or schema.get("type", "object") != "object":
        raise Refused(422, f"`{at}` must be a JSON schema of an object (`type: object`)")
    try:
        sized(schema, at, MAX_SCHEMA_CHARS)
    except UntrustedSchema as error:
        raise Refused(422, str(error)) from None
    if not isinstance(schema.get("properties", {}), dict):
        raise Refused(422, f"`{at}.properties` must be an object")
    whole = {"type": "object", **schema}
    try:
        gate(whole, at)
    except UntrustedSchema as error:
        raise Refused(422, str(error)) from None
    except Exception as error:  # a schema the gate could not check at all (a bug's door): refused, named
        raise Refused(422, f"`{at}` could not be checked as a JSON schema: {type(error).__name__}: {error}") from None
    return whole


@dataclass(frozen=True)
class Offered:
    """What a request may answer with: the agent's own tool names (``submit`` among them) and the
    client tools it declares for this turn (none when the app does not honour client tools)."""

    own: frozenset[str]
    tools: Mapping[str, ClientTool] = field(default_factory=dict)

    def results(self, pending: Mapping[str, Mapping[str, Any]], given: Mapping[str, Any]) -> dict[str, Any]:
        """``given`` (call id to the client's value) checked against the paused entry's ``pending``
        calls: each answers an external call it waits on (by exact id); a client tool's value is
        text, every value bounded; a paused call to a client tool this request no longer declares
        is refused (the resumed turn would not know the tool)."""
        lost = sorted({c["name"] for c in pending.values() if _client(c, self.own)} - set(self.tools))
        if lost:
            raise Refused(422, f"the run must declare the client tools its paused calls were made to: {lost!r}")
        results: dict[str, Any] = {}
        for call_id, value in given.items():
            call = pending.get(call_id)
            if call is None or call["kind"] != "external":
                raise Refused(422, f"a result for call {call_id!r}, which this conversation is not waiting for")
            if isinstance(value, BaseException):
                results[call_id] = value
                continue
            text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
            if len(text) > MAX_RESULT_CHARS:
                raise Refused(422, f"the result for call {call_id!r} is longer than {MAX_RESULT_CHARS} characters")
            results[call_id] = text if _client(call, self.own) else value
        return results


def _client(call: Mapping[str, Any], own: Collection[str]) -> bool:
    return call["kind"] == "external" and call.get("name") not in own
