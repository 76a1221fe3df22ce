"""Values and errors in a durable turn's records: data, never pickles.

A recovering process reads these records back from the DBOS system database, so reading one may
not run code that the record names. A value is one tagged JSON object:

    {"json": v}                 JSON holds it exactly (plain dicts, lists, strings, numbers)
    {"tuple": [...]} / {"list": [...]} / {"dict": {...}}   containers holding other values
    {"history": <dump_history>} a ``dspy.History`` (lossless: the same requests replay)
    {"media": <dump_media>}     ``dspy.Image``/``Audio``/``File`` (revived as ``load_history`` does)
    {"prediction": {...}}       a ``dspy_imp`` prediction: its outputs and metadata, field by field
    {"usage": {...}}            a ``dspy_imp.Usage``
    {"error": {"chain": [...]}} an exception and its cause chain
    {"shown": ...}              anything else: the JSON form the model was shown, the one lossy case

A tool value of your own class comes back on replay as what the model was shown (a dict for a
pydantic model or a dataclass); typed inputs and outputs are revived by the program's signature
(``revive_fields``), whose types are the host's, not the record's.

An error is its cause chain, each link revived without calling its ``__init__`` (many exception
classes cannot be rebuilt from their ``args``), by a class looked up among modules already
imported or under the packages a request or a tool error comes from (``_IMPORTABLE``); any other
class, or one a record names that is not an exception, comes back as a ``RecordedError`` under
the recorded name, with the recorded message. Nothing a record says is imported otherwise.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import sys
from collections.abc import Mapping
from typing import Any

import dspy
import pydantic

from dspy_imp._program.prediction import Metadata, Prediction, make_prediction
from dspy_imp._records.errors import ConfigurationError
from dspy_imp._records.history import _json, dump_history, load_history
from dspy_imp._records.media import dump_media, is_media, revive
from dspy_imp._records.usage import RequestUsage, Usage

_PLAIN = (str, int, float, bool, type(None))
_CHAIN_LIMIT = 16
# Packages whose exceptions a request or a tool may raise, importable when a recovering process has
# not loaded them yet (the machine classifies errors by class, so a replay needs the same class).
_IMPORTABLE = frozenset(
    {"builtins", "asyncio", "concurrent", "json", "socket", "ssl", "dspy", "dspy_imp", "litellm", "openai",
     "anthropic", "httpx", "httpcore", "requests", "urllib3", "aiohttp", "pydantic", "jsonschema"}
)  # fmt: skip


class RecordedError(Exception):
    """Stands for a recorded error whose class cannot be looked up in this process."""


def encode_value(value: Any) -> dict[str, Any]:
    if _is_plain(value):
        return {"json": value}
    if isinstance(value, tuple | list) and type(value) in (tuple, list):
        return {type(value).__name__: [encode_value(item) for item in value]}
    if type(value) is dict and all(type(key) is str for key in value):
        return {"dict": {key: encode_value(item) for key, item in value.items()}}
    if isinstance(value, dspy.History):
        return {"history": dump_history(value)}
    if isinstance(value, Prediction) and "_metadata" in value.__dict__:
        outputs = {key: encode_value(value[key]) for key in value.keys()}  # noqa: SIM118 (a Prediction, not a dict)
        return {"prediction": {"outputs": outputs, "metadata": _encode_fields(value.metadata)}}
    if isinstance(value, Usage):
        return {"usage": _encode_fields(value)}
    if isinstance(value, BaseException):
        return {"error": encode_error(value)}
    if is_media(value):
        return {"media": _json(dump_media(value))}
    return {"shown": _json(value)}


def decode_value(data: Mapping[str, Any]) -> Any:
    if not isinstance(data, Mapping) or len(data) != 1:
        raise ConfigurationError(f"a durable record holds a value that is not one tagged value: {data!r}")
    ((tag, body),) = data.items()
    reader = _READERS.get(tag)
    if reader is None:
        raise ConfigurationError(f"a durable record holds a value tagged {tag!r}, which dspy_imp never writes")
    return reader(body)


def _decode_prediction(body: Mapping[str, Any]) -> Prediction:
    fields = {key: decode_value(item) for key, item in body["metadata"].items()}
    outputs = {key: decode_value(item) for key, item in body["outputs"].items()}
    return make_prediction(outputs, Metadata(**fields))


def _decode_usage(body: Mapping[str, Any]) -> Usage:
    fields = {key: decode_value(item) for key, item in body.items()}
    fields["calls"] = tuple(RequestUsage(**dict(call)) for call in fields.get("calls", ()))
    return Usage(**fields)


def _encode_fields(value: Any) -> dict[str, Any]:
    fields = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    if isinstance(value, Usage):
        fields["calls"] = [dataclasses.asdict(call) for call in value.calls]
    return {name: encode_value(item) for name, item in fields.items()}


_READERS: dict[str, Any] = {
    "json": lambda body: body,
    "shown": lambda body: body,
    "list": lambda body: [decode_value(item) for item in body],
    "tuple": lambda body: tuple(decode_value(item) for item in body),
    "dict": lambda body: {key: decode_value(item) for key, item in body.items()},
    "history": load_history,
    "media": revive,
    "prediction": _decode_prediction,
    "usage": _decode_usage,
    "error": lambda body: decode_error(body),
}


def _is_plain(value: Any) -> bool:
    """JSON holds it exactly: no tuples, no subclasses, string keys only."""
    if type(value) in _PLAIN:
        return True
    if type(value) is list:
        return all(_is_plain(item) for item in value)
    if type(value) is dict:
        return all(type(key) is str and _is_plain(item) for key, item in value.items())
    return False


def revive_fields(values: Mapping[str, Any], fields: Mapping[str, Any]) -> dict[str, Any]:
    """``values`` with each pydantic-typed field rebuilt from its JSON form, by the signature's type."""
    revived = dict(values)
    for name, value in values.items():
        annotation = getattr(fields.get(name), "annotation", None)
        if isinstance(annotation, type) and issubclass(annotation, pydantic.BaseModel) and isinstance(value, dict):
            with contextlib.suppress(pydantic.ValidationError):  # not that model after all: kept as shown
                revived[name] = annotation.model_validate(value)
    return revived


# -- errors ---------------------------------------------------------------------------------------


def encode_error(error: BaseException) -> dict[str, Any]:
    """The error and its cause chain (``__cause__``, else ``__context__``), each link by class and state."""
    links: list[dict[str, Any]] = []
    seen: set[int] = set()
    current: BaseException | None = error
    explicit = False
    while current is not None and id(current) not in seen and len(links) < _CHAIN_LIMIT:
        seen.add(id(current))
        links.append(_encode_link(current, explicit))
        explicit = current.__cause__ is not None
        current = current.__cause__ or current.__context__
    return {"chain": links}


def decode_error(data: Mapping[str, Any]) -> BaseException:
    links = [_revive(link) for link in data["chain"]]
    for error, cause, link in zip(links, links[1:], data["chain"][1:], strict=False):
        if link["explicit"]:
            error.__cause__ = cause
        else:
            error.__context__ = cause
    return links[0]


def _encode_link(error: BaseException, explicit: bool) -> dict[str, Any]:
    cls = type(error)
    return {
        "type": f"{cls.__module__}:{cls.__qualname__}",
        "args": encode_value(list(error.args)),
        "state": {str(key): encode_value(value) for key, value in vars(error).items()},
        "text": str(error),
        "explicit": explicit,
    }


def _revive(link: Mapping[str, Any]) -> BaseException:
    cls = _import(link["type"])
    if cls is None:
        return _stand_in(link)
    try:
        error = cls.__new__(cls)
        error.args = tuple(decode_value(link["args"]))
        for key, value in link["state"].items():
            setattr(error, key, decode_value(value))
        str(error)
    except Exception:  # the class cannot hold its recorded state here
        return _stand_in(link)
    return error


def _stand_in(link: Mapping[str, Any]) -> BaseException:
    """A ``RecordedError`` under the recorded class's name, with its recorded message."""
    name = link["type"].rpartition(":")[2].rpartition(".")[2]
    return type(name, (RecordedError,), {})(link["text"])


# Errors recorded before the package took its floors (0.1: one flat folder) name their old homes.
_MOVED = {
    "dspy_imp._errors:ConfigurationError": "dspy_imp._records.errors:ConfigurationError",
    "dspy_imp._errors:ToolCallRejected": "dspy_imp._records.errors:ToolCallRejected",
    "dspy_imp._errors:StepError": "dspy_imp._records.step_error:StepError",
    "dspy_imp._deadline:DeadlinePassed": "dspy_imp._records.clock:DeadlinePassed",
    "dspy_imp._failures:ContentFiltered": "dspy_imp._routes.failures:ContentFiltered",
    "dspy_imp._durable_codec:RecordedError": "dspy_imp._durable.values:RecordedError",
    "dspy_imp._durable.codec:RecordedError": "dspy_imp._durable.values:RecordedError",
}


def _import(qualified: str) -> type[BaseException] | None:
    """The exception class a record names: from a module already imported, or under ``_IMPORTABLE``."""
    module, _, name = _MOVED.get(qualified, qualified).partition(":")
    try:
        found: Any = sys.modules.get(module)
        if found is None and module.partition(".")[0] in _IMPORTABLE:
            found = importlib.import_module(module)
        if found is None:
            return None
        for part in name.split("."):
            found = getattr(found, part)
    except (ImportError, AttributeError):
        return None
    return found if isinstance(found, type) and issubclass(found, BaseException) else None
