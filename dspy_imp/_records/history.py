"""Histories as data: lossless JSON dump and load, and a redacted copy for logs.

``dump_history`` turns a history into JSON-safe data that ``load_history`` restores, so a
reloaded history sends byte-identical requests: call ids, parallel calls, results (values
that are not JSON are stored as the text the model was shown), ``returned_at``, provider
reasoning and notes all survive; every dump is strict JSON (no NaN or infinity). Media values
(``dspy.Image``, ``dspy.Audio``, ``dspy.File``) are stored with their fields exactly as held,
URLs and base64 as given, and come back as the same types. A loaded history's lone surrogates
(which JSON's escapes can hold) come back as U+FFFD, the text the model was shown; a NaN or an
infinity as its text, as a dump writes it. ``redact_history`` returns a copy
with credential-shaped values replaced, for logs; never feed it back as the conversation.
"""

from __future__ import annotations

import base64
import json
import math
import re
from collections.abc import Mapping
from typing import Any

import dspy
import pydantic
from dspy.adapters.utils import serialize_for_json

from dspy_imp._records.errors import ConfigurationError, brief
from dspy_imp._records.media import contains_media, dump_media, is_dumped_media, is_media, revive
from dspy_imp._records.redact import REDACTED, is_secret_key, redact_text
from dspy_imp._records.steps import _STEP_KEYS, coerce_history, make_history
from dspy_imp._records.text import result_text

FORMAT = "history"
MAX_DEPTH = 100
"""The deepest a loaded history's values may nest (lists and dicts); a deeper one is refused."""


def dump_history(history: dspy.History | Mapping[str, Any] | list[Any]) -> dict[str, Any]:
    """``{"type": "history", "messages": [...]}``, JSON-safe and lossless for what the model reads.

    Accepts what ``history=`` accepts, including a history recorded by ``dspy.ReActV2``
    (its ``ToolCalls`` become plain dicts, ids kept).
    """
    return {"type": FORMAT, "messages": [_entry(entry) for entry in coerce_history(history)]}


def load_history(data: Mapping[str, Any] | list[Any]) -> dspy.History:
    """The ``dspy.History`` a ``dump_history`` result (or a bare ``{"messages": [...]}``) holds."""
    if isinstance(data, Mapping) and data.get("type", FORMAT) != FORMAT:
        raise ConfigurationError(f"load_history takes a dumped history, got type {brief(data.get('type'))}")
    entries = coerce_history(data)
    for index, entry in enumerate(entries):
        if not isinstance(entry, Mapping):
            raise ConfigurationError(f"history entries must be dicts, got {brief(entry)}")
        check_depth(entry, f"messages[{index}]")
    return make_history([revive(repaired(dict(entry))) for entry in entries])


_SURROGATE = re.compile("[\ud800-\udfff]")


def repaired(value: Any) -> Any:
    """``value`` with each lone surrogate in its text (and keys) made U+FFFD, as the loop shows a
    tool's such text: JSON's ``\\udcff`` escape holds one, and no provider can receive it. A NaN or
    an infinity becomes its text, as a dump writes it (Python's ``json`` reads ``NaN``).
    Containers walked (nesting already bounded by ``check_depth``); nothing else changed."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return _SURROGATE.sub("\ufffd", value)
        return value
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)  # as ``dump_history`` writes it: a request can hold no NaN or infinity
    if isinstance(value, list):
        return [repaired(v) for v in value]
    if isinstance(value, Mapping):
        return {repaired(k): repaired(v) for k, v in value.items()}
    return value


def check_depth(value: Any, where: str, limit: int = MAX_DEPTH) -> None:
    """Refuse ``value`` (``ConfigurationError`` naming the path) when its lists and dicts nest deeper
    than ``limit``: every walker of a history (media, JSON, the prompt) recurses. Walks iteratively."""
    stack: list[tuple[Any, str, int]] = [(value, where, 0)]
    while stack:
        item, path, depth = stack.pop()
        if isinstance(item, Mapping):
            children = [(v, f"{path}.{brief(k) if not isinstance(k, str) else k}") for k, v in item.items()]
        elif isinstance(item, list | tuple):
            children = [(v, f"{path}[{i}]") for i, v in enumerate(item)]
        else:
            continue
        if depth >= limit:
            raise ConfigurationError(f"`{path}` nests deeper than {limit} levels of lists and dicts; refusing to load")
        stack += [(child, at, depth + 1) for child, at in children]


def redact_history(history: dspy.History | Mapping[str, Any] | list[Any]) -> dspy.History:
    """A copy for logs: credential-shaped text and values under secret-sounding keys hidden.

    The original is not touched (it keeps what the conversation needs to continue).
    """
    return make_history([_redact(_entry(entry)) for entry in coerce_history(history)])


def _entry(entry: Any, key: str = "") -> Any:
    if isinstance(entry, dspy.ToolCalls):
        return {
            "tool_calls": [{"id": c.id, "name": c.name, "args": _json(c.args)} for c in entry.tool_calls],
            "tool_call_results": _results(entry.tool_call_results),
        }
    if key == "tool_call_results":
        return _results(entry)
    if key == "agent_runs" and isinstance(entry, Mapping):
        return {_key(k): _agent_run(v) for k, v in entry.items()}
    if isinstance(entry, Mapping):
        return {_key(k): (_entry(v, k) if k in _STEP_KEYS else _json(v)) for k, v in entry.items()}
    return _json(entry)


def _agent_run(run: Any) -> Any:
    """A sub-agent's record: its history dumped by the same rules as the caller's."""
    if not isinstance(run, Mapping):
        return _json(run)
    return {
        _key(k): ([_entry(e) for e in v] if k == "history" and isinstance(v, list) else _json(v))
        for k, v in run.items()
    }


def _results(results: Any) -> Any:
    if not isinstance(results, list | tuple):
        return _json(results)
    return [_result(r) if isinstance(r, Mapping) else _json(r) for r in results]


def _result(result: Mapping[str, Any]) -> dict[str, Any]:
    return {_key(k): (_shown(v) if k == "result" else _json(v)) for k, v in result.items()}


def _shown(value: Any) -> Any:
    """A tool result as data when that renders to the same text, else the text the model was shown.

    Non-UTF-8 bytes, tuple keys and non-finite floats have no JSON form that renders the same,
    so they are stored as their text: the reloaded history sends the same bytes. Media are
    stored as themselves (they are not shown as text).
    """
    if contains_media(value):
        return _json(value)
    try:
        shown = result_text(value)
    except (Exception, RecursionError):  # a result recorded outside the loop that cannot be rendered
        return _json(repr_of(value))
    try:
        data = _json(value)
        json.dumps(data, allow_nan=False)
        if result_text(data) == shown:
            return data
    except (ValueError, TypeError, RecursionError):
        pass
    return shown


def repr_of(value: Any) -> str:
    try:
        return repr(value)
    except Exception:
        return f"<unprintable {type(value).__name__}>"


def _key(key: Any) -> str:
    """A dict key as DSPy's serializer writes it for the model (a tuple ``(1, 2)`` is ``"1,2"``)."""
    if isinstance(key, str):
        return key
    serialized = serialize_for_json({key: None})
    return next(iter(serialized)) if isinstance(serialized, dict) and len(serialized) == 1 else str(key)


def _json(value: Any) -> Any:
    """JSON-safe: containers walked, bytes marked, anything else as DSPy serializes it for the model.

    Non-finite floats become their text (``"nan"``, ``"inf"``): a dump is always strict JSON.
    """
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if value is None or isinstance(value, str | bool | int | float):
        return value
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            return {"__imp_type__": "binary", "bytes": len(value), "base64": base64.b64encode(value).decode()}
    if isinstance(value, Mapping):
        return {_key(k): _json(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_json(v) for v in value]
    if is_media(value):
        return dump_media(value)
    if isinstance(value, pydantic.BaseModel) and contains_media(value):  # its media dumped as media, not marker text
        return {k: _json(getattr(value, k)) for k in type(value).model_fields}
    serialized = serialize_for_json(value)
    if serialized is value:
        return str(value)
    return _json(serialized)


def _redact(value: Any, key: str = "") -> Any:
    if key and is_secret_key(key) and value not in (None, "", [], {}):
        return REDACTED
    if isinstance(value, str):
        return redact_text(value)
    if is_dumped_media(value):
        return value  # kept whole: base64 is not text to scan, and a URL is the media itself
    if isinstance(value, Mapping):
        return {k: _redact(v, k) for k, v in value.items()}
    if isinstance(value, list):
        return [_redact(v) for v in value]
    return value
