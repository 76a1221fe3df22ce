"""How a durable turn's recorded results are stored, and read back as the machine first saw them.

A durable engine records what each effect came to and, on replay, sends the machine the
record instead of performing the effect again. The record must therefore come back as what the
machine was sent the first time: the same reply, the same tool value, an error of the same class
with the same message, attributes and cause chain (the machine classifies errors by class and
chain, ``_routes.failures``). Records are JSON-safe dicts, readable in the database::

    {"kind": "reply", "text", "calls": [{"id", "name", "args", "received"}],
     "reasoning_content", "reasoning_details", "finish_reason", "usage"}
    {"kind": "extracted", "outputs", "usage"}    {"kind": "failed", "error", "usage"}
    {"kind": "returned", "value", "at"}          {"kind": "raised", "error", "at"}
    {"kind": "batch", "outcomes": [...]}         (parallel tool calls, in call order)

``usage`` is the request's model calls (``RequestUsage`` fields), so a replayed turn reports
what the first run used.

A value is ``{"json": v}`` when JSON holds it exactly (plain dicts, lists, strings, numbers),
``{"pickle": base64}`` when it pickles and unpickles, else ``{"shown": ...}``: the JSON form the
model was shown (``_records.history``'s reading), the one lossy case. An error is its cause chain, each
link revived without calling its ``__init__`` (many exception classes cannot be rebuilt from
their ``args``, which is how pickle rebuilds them), so no class needs to be picklable.
"""

from __future__ import annotations

import base64
import dataclasses
import importlib
import pickle
from collections.abc import Mapping, Sequence
from typing import Any

from dspy_imp._records.history import _json
from dspy_imp._records.outcomes import Extracted, Failed, Raised, RawCall, Reply, Returned
from dspy_imp._records.usage import RequestUsage

_PLAIN = (str, int, float, bool, type(None))


_CHAIN_LIMIT = 16


class RecordedError(Exception):
    """Stands for a recorded error whose class cannot be imported in this process."""


def encode_outcome(outcome: Any) -> dict[str, Any]:
    """What an effect came to, as a JSON-safe record."""
    if isinstance(outcome, Reply):
        return {
            "kind": "reply",
            "text": outcome.text,
            "calls": [_encode_call(call) for call in outcome.calls],
            "reasoning_content": outcome.reasoning_content,
            "reasoning_details": encode_value(outcome.reasoning_details),
            "finish_reason": outcome.finish_reason,
            "usage": _encode_usage(outcome.usage),
        }
    if isinstance(outcome, Extracted):
        return {
            "kind": "extracted",
            "outputs": encode_value(dict(outcome.outputs)),
            "usage": _encode_usage(outcome.usage),
        }
    if isinstance(outcome, Failed):
        return {"kind": "failed", "error": encode_error(outcome.error), "usage": _encode_usage(outcome.usage)}
    if isinstance(outcome, Returned):
        return {"kind": "returned", "value": encode_value(outcome.value), "at": outcome.at}
    if isinstance(outcome, Raised):
        return {"kind": "raised", "error": encode_error(outcome.error), "at": outcome.at}
    if isinstance(outcome, tuple):
        return {"kind": "batch", "outcomes": [encode_outcome(item) for item in outcome]}
    if outcome is None:
        return {"kind": "none"}
    raise TypeError(f"no record for {outcome!r}")


def decode_outcome(record: Mapping[str, Any]) -> Any:
    kind = record["kind"]
    if kind == "reply":
        return Reply(
            text=record["text"],
            calls=tuple(_decode_call(call) for call in record["calls"]),
            reasoning_content=record["reasoning_content"],
            reasoning_details=decode_value(record["reasoning_details"]),
            finish_reason=record["finish_reason"],
            usage=_decode_usage(record["usage"]),
        )
    if kind == "extracted":
        return Extracted(decode_value(record["outputs"]), _decode_usage(record["usage"]))
    if kind == "failed":
        return Failed(decode_error(record["error"]), _decode_usage(record["usage"]))
    if kind == "returned":
        return Returned(decode_value(record["value"]), record["at"])
    if kind == "raised":
        return Raised(decode_error(record["error"]), record["at"])
    if kind == "batch":
        return tuple(decode_outcome(item) for item in record["outcomes"])
    return None


def _encode_usage(usage: Sequence[RequestUsage]) -> list[dict[str, Any]]:
    return [dataclasses.asdict(call) for call in usage]


def _decode_usage(data: Sequence[Mapping[str, Any]]) -> tuple[RequestUsage, ...]:
    return tuple(RequestUsage(**call) for call in data)


def _encode_call(call: RawCall) -> dict[str, Any]:
    return {"id": call.id, "name": call.name, "args": encode_value(call.args), "received": encode_value(call.received)}


def _decode_call(data: Mapping[str, Any]) -> RawCall:
    return RawCall(data["id"], data["name"], decode_value(data["args"]), decode_value(data["received"]))


def encode_value(value: Any) -> dict[str, Any]:
    if _is_plain(value):
        return {"json": value}
    try:
        data = pickle.dumps(value)
        pickle.loads(data)
    except Exception:  # not picklable, or not unpicklable: keep what the model was shown
        return {"shown": _json(value)}
    return {"pickle": base64.b64encode(data).decode("ascii")}


def decode_value(data: Mapping[str, Any]) -> Any:
    if "pickle" in data:
        return pickle.loads(base64.b64decode(data["pickle"]))
    return data["json"] if "json" in data else data["shown"]


def _is_plain(value: Any) -> bool:
    """JSON holds it exactly: no tuples, no subclasses, string keys only."""
    if type(value) in _PLAIN:
        return True
    if type(value) is list:
        return all(_is_plain(item) for item in value)
    if type(value) is dict:
        return all(type(key) is str and _is_plain(item) for key, item in value.items())
    return False


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
    "dspy_imp._durable_codec:RecordedError": "dspy_imp._durable.codec:RecordedError",
}


def _import(qualified: str) -> type[BaseException] | None:
    module, _, name = _MOVED.get(qualified, qualified).partition(":")
    try:
        found: Any = importlib.import_module(module)
        for part in name.split("."):
            found = getattr(found, part)
    except (ImportError, AttributeError):
        return None
    return found if isinstance(found, type) and issubclass(found, BaseException) else None
