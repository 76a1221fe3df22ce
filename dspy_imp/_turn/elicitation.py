"""A call paused on a person's input, and the caller's answer to it.

A tool may raise ``AsksInput`` while it runs (an MCP server's ``elicitation/create`` under
``elicit="pause"``, ``dspy_imp.mcp``): in an ordinary step its call becomes a pending call of kind
``"elicitation"``, holding the question (``message``, the form's JSON ``schema``, the ``server``
asking) and what the tool needs to finish the call (``resume``). The step pauses like an approval
(the step's other calls keep their results). The caller answers through ``approvals={id: ...}``:

- a dict: accept, with these fields; the schema's defaults fill those it leaves out or gives as
  ``None`` (SEP-1034);
- ``True``: accept with the schema's defaults alone;
- ``False``: decline;
- ``"cancel"``: cancel (the person dismissed the form).

``answer`` checks an answer against the form's schema before anything is sent: the schema passes
the gate for schemas someone else wrote (``_records.untrusted_schema``: the history is data the
caller hands back), and an answer it refuses is a ``ConfigurationError`` naming the field. On
resume the call runs again through its tool's ``answered(elicitation, answer)`` (a tool that
cannot take an answer makes the call an error observation), without its policy asked again, as a
paused sub-agent resumes: it was checked before it started.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from dspy_imp._records.errors import ConfigurationError, brief
from dspy_imp._records.steps import PendingCall

MAX_MESSAGE_CHARS = 8_000
"""The longest message a server's question may have to pause a turn (a longer one is the call's error)."""
MAX_SCHEMA = 16_000
"""The longest form schema (compact JSON) a server's question may have to pause a turn."""


def problem(message: Any, schema: Any) -> str | None:
    """Why a question cannot pause a turn (too long, a schema the gate refuses), or ``None``."""
    if not isinstance(message, str) or len(message) > MAX_MESSAGE_CHARS:
        return f"its message is not a text of at most {MAX_MESSAGE_CHARS} characters"
    if not isinstance(schema, Mapping) or len(json.dumps(schema, separators=(",", ":"), default=str)) > MAX_SCHEMA:
        return f"its form schema is not a JSON object of at most {MAX_SCHEMA} characters"
    from dspy_imp._records.untrusted_schema import UntrustedSchema, gate  # needs RE2 (the mcp extra)

    try:
        gate(dict(schema), "requestedSchema")
    except UntrustedSchema as refused:
        return str(refused)
    return None


def answer(pending: PendingCall, verdict: Any, where: str) -> dict[str, Any]:
    """The answer sent to the server: ``{"action": "accept", "content": {...}}``, ``{"action": "decline"}``
    or ``{"action": "cancel"}``; a refused answer is a ``ConfigurationError`` naming ``where`` and the field."""
    asked = pending.elicitation or {}
    if verdict is False:
        return {"action": "decline"}
    if verdict == "cancel":
        return {"action": "cancel"}
    if verdict is True:
        given: Mapping[str, Any] = {}
    elif isinstance(verdict, Mapping) and all(isinstance(key, str) for key in verdict):
        given = verdict
    else:
        raise ConfigurationError(
            f"`{where}` answers a request for input ({pending.name}): give a dict of the form's fields (accept), "
            f'True (accept its defaults), False (decline) or "cancel"; got {brief(verdict)}'
        )
    schema = asked.get("schema")
    reason = problem(asked.get("message"), schema)
    if reason is not None:
        raise ConfigurationError(f"`{where}`: the history's request for input cannot be answered: {reason}")
    assert isinstance(schema, Mapping)
    content = {**defaults(schema), **{key: value for key, value in given.items() if value is not None}}
    for key, value in content.items():
        if not form_value(value):
            raise ConfigurationError(
                f"`{where}` field `{key}`: a form's field holds a string, number, boolean or list of strings, "
                f"got {brief(value)}"
            )
    from dspy_imp._records.untrusted_schema import gate

    errors = sorted(gate(dict(schema), "requestedSchema").iter_errors(content), key=lambda e: list(e.absolute_path))
    if errors:
        first = errors[0]
        field = ".".join(str(part) for part in first.absolute_path)
        named = f" field `{field}`" if field else ""
        raise ConfigurationError(f"`{where}`{named}: {first.message} (the form of {asked.get('server') or 'the tool'})")
    return {"action": "accept", "content": content}


def defaults(schema: Mapping[str, Any]) -> dict[str, Any]:
    """The defaults a form schema gives its fields (SEP-1034)."""
    properties = schema.get("properties")
    if not isinstance(properties, Mapping):
        return {}
    return {k: v["default"] for k, v in properties.items() if isinstance(v, Mapping) and "default" in v}


def form_value(value: Any) -> bool:
    """Whether ``value`` fits an elicitation form's field: a string, number, boolean or list of strings."""
    if isinstance(value, list):
        return all(isinstance(item, str) for item in value)
    return isinstance(value, str | int | float | bool)


def shown(pending: PendingCall) -> dict[str, Any]:
    """What ``pred.metadata.pending_calls`` shows of an elicitation: who asks, the message, the form."""
    asked = pending.elicitation or {}
    return {"server": asked.get("server"), "message": asked.get("message"), "schema": asked.get("schema")}
