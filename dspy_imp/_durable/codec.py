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
    {"kind": "checked", "value", "usage", "stopped"}   (guardrails: the tripped one, their model calls)

``usage`` is the request's model calls (``RequestUsage`` fields), so a replayed turn reports
what the first run used.

Values and errors inside records are encoded as data by ``_durable.values`` (never pickled).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from dspy_imp._durable.values import RecordedError, decode_error, decode_value, encode_error, encode_value
from dspy_imp._records.outcomes import Checked, Extracted, Failed, Raised, RawCall, Reply, Returned
from dspy_imp._records.usage import RequestUsage

__all__ = [
    "RecordedError",
    "decode_error",
    "decode_outcome",
    "decode_value",
    "encode_error",
    "encode_outcome",
    "encode_value",
]


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
    if isinstance(outcome, Checked):
        usage, stopped = _encode_usage(outcome.usage), outcome.stopped
        return {"kind": "checked", "value": encode_value(outcome.value), "usage": usage, "stopped": stopped}
    if isinstance(outcome, Returned):
        returned = {"kind": "returned", "value": encode_value(outcome.value), "at": outcome.at}
        return {**returned, "usage": _encode_usage(outcome.usage)} if outcome.usage else returned
    if isinstance(outcome, Raised):
        raised = {"kind": "raised", "error": encode_error(outcome.error), "at": outcome.at}
        return {**raised, "usage": _encode_usage(outcome.usage)} if outcome.usage else raised
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
    if kind == "checked":
        return Checked(decode_value(record["value"]), usage=_decode_usage(record["usage"]), stopped=record["stopped"])
    if kind == "returned":
        return Returned(decode_value(record["value"]), record["at"], _decode_usage(record.get("usage", [])))
    if kind == "raised":
        return Raised(decode_error(record["error"]), record["at"], _decode_usage(record.get("usage", [])))
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
