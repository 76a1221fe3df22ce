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

A URL elicitation (MCP 2025-11-25, ``mode: "url"``) pauses the same way: the pending call's
``elicitation`` holds ``mode`` ``"url"``, the ``url`` the person is asked to open (untrusted:
shown, never fetched), the ``message`` and the server's ``elicitation_id``, and no schema. It is
answered ``True`` (the person opened it and did what it asks: accept), ``False`` (decline) or
``"cancel"``; a dict is refused, since no content goes back. ``url_problem`` says why a URL may not
be shown (not ``http``/``https``, too long, credentials in it), on the way in and again on resume.

``answer`` checks an answer against the form's schema before anything is sent: the schema passes
the gate for schemas someone else wrote (``_records.untrusted_schema``: the history is data the
caller hands back), and an answer it refuses is a ``ConfigurationError`` naming the field. On
resume the call runs again through its tool's ``answered(elicitation, answer)`` (a tool that
cannot take an answer makes the call an error observation), without its policy asked again, as a
paused sub-agent resumes: it was checked before it started.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from dspy_imp._records.errors import ConfigurationError, brief
from dspy_imp._records.steps import PendingCall

MAX_MESSAGE_CHARS = 8_000
"""The longest message a server's question may have to pause a turn (a longer one is the call's error)."""
MAX_SCHEMA = 16_000
"""The longest form schema (compact JSON) a server's question may have to pause a turn."""
MAX_URL_CHARS = 4_096
"""The longest URL a URL elicitation may carry to be shown."""
URL_SCHEMES = ("http", "https")
"""The schemes a URL elicitation's URL may have (no ``javascript:``, ``data:``, ``file:``)."""


def url_problem(url: Any) -> str | None:
    """Why a URL elicitation's ``url`` may not be shown to a person, or ``None``: it must be an
    absolute ``http``/``https`` URL of at most ``MAX_URL_CHARS`` characters with a host, and no
    spaces, control characters or credentials (``user@``, which can make one host look like another)."""
    if not isinstance(url, str) or not url or len(url) > MAX_URL_CHARS:
        return f"its url is not a text of 1 to {MAX_URL_CHARS} characters"
    if any(ch.isspace() or ord(ch) < 32 or ord(ch) == 127 for ch in url):
        return "its url holds spaces or control characters"
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - a malformed port raises here
    except ValueError:
        return "its url is not a valid URL"
    if parts.scheme.lower() not in URL_SCHEMES:
        return f"its url's scheme must be http or https, got {parts.scheme or 'none'!r}"
    if not parts.hostname:
        return "its url names no host"
    if "@" in parts.netloc:
        return "its url holds credentials (user@host)"
    return None


def url_question_problem(message: Any, url: Any) -> str | None:
    """Why a URL elicitation cannot pause a turn (its message too long, its URL refused), or ``None``."""
    if not isinstance(message, str) or len(message) > MAX_MESSAGE_CHARS:
        return f"its message is not a text of at most {MAX_MESSAGE_CHARS} characters"
    return url_problem(url)


def url_asked(asked: Mapping[str, Any] | None) -> bool:
    """Whether a pending call's question is a URL elicitation (else a form)."""
    return bool(asked) and asked.get("mode") == "url"  # type: ignore[union-attr]


def problem(message: Any, schema: Any) -> str | None:
    """Why a question cannot pause a turn (too long, a schema the gate refuses), or ``None``."""
    if not isinstance(message, str) or len(message) > MAX_MESSAGE_CHARS:
        return f"its message is not a text of at most {MAX_MESSAGE_CHARS} characters"
    from dspy_imp._records.untrusted_schema import UntrustedSchema, gate, sized  # needs RE2 (the mcp extra)

    if not isinstance(schema, Mapping):
        return f"its form schema is not a JSON object of at most {MAX_SCHEMA} characters"
    try:
        sized(schema, "requestedSchema", MAX_SCHEMA)
    except UntrustedSchema:
        return f"its form schema is not a JSON object of at most {MAX_SCHEMA} characters"
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
    if url_asked(asked):
        return _url_answer(pending, verdict, where)
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


def _url_answer(pending: PendingCall, verdict: Any, where: str) -> dict[str, Any]:
    """The answer to a URL elicitation accepted (``True``): no content goes back."""
    asked = pending.elicitation or {}
    if verdict is not True:
        raise ConfigurationError(
            f"`{where}` answers a request to open a URL ({pending.name}): give True (the person opened it), "
            f'False (decline) or "cancel"; got {brief(verdict)}'
        )
    reason = url_question_problem(asked.get("message"), asked.get("url"))
    if reason is not None:
        raise ConfigurationError(f"`{where}`: the history's request to open a URL cannot be answered: {reason}")
    return {"action": "accept"}


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
    """What ``pred.metadata.pending_calls`` shows of an elicitation: who asks, the message, the form
    (or, for a URL elicitation, ``mode`` ``"url"``, the ``url`` and the ``elicitation_id``)."""
    asked = pending.elicitation or {}
    if url_asked(asked):
        return {"server": asked.get("server"), "mode": "url", "message": asked.get("message"),
                "url": asked.get("url"), "elicitation_id": asked.get("elicitation_id")}  # fmt: skip
    return {"server": asked.get("server"), "message": asked.get("message"), "schema": asked.get("schema")}
