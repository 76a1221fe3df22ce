"""Reading a step's reply: its calls to and from the dicts of DSPy's step signature, a provider's
tool call as a ``RawCall``, and what only the raw response has (the finish reason of *this*
request, correct under ``dspy.Parallel``, and the provider's reasoning blocks), received by a
recorder standing on DSPy's ``caller_modules`` stack."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

import dspy

from dspy_imp._drivers.exchange import Exchange
from dspy_imp._drivers.recorder import Recorder
from dspy_imp._prompt.dialect import jsonable
from dspy_imp._records.outcomes import RawCall
from dspy_imp._routes import dspy_private
from dspy_imp._routes.hosted import hosted_route, served_blocks
from dspy_imp._routes.nameless import UNNAMED, as_received
from dspy_imp._routes.reasoning import blocks_of
from dspy_imp._turn.paused import PAUSED


@dataclass
class ReplyRecorder(Recorder):
    """Stands on DSPy's ``caller_modules`` stack to receive this request's history entry."""


def call_dict(call: RawCall) -> dict[str, Any]:
    data = {"id": call.id, "name": call.name, "args": call.args}
    if call.received is not None:
        data["received"] = call.received
    return data


def from_call_dict(data: dict[str, Any]) -> RawCall:
    return RawCall(data.get("id"), data.get("name"), data.get("args"), data.get("received"))


def raw_call(provider_call: Any) -> RawCall:
    data = dspy_private.provider_tool_call(provider_call)
    name = data.get("name") if data.get("name") != UNNAMED else None  # lm15 read it nameless (_nameless)
    name = name if isinstance(name, str) and name else None  # a provider's id or name of another type: none
    call_id = data.get("id")
    return RawCall(
        id=call_id if isinstance(call_id, str) and call_id else None,
        name=name,
        args=data.get("args"),
        received=None if name else as_received(jsonable(provider_call)),
    )


_FINISH_SPELLING = {
    "tool_calls": "tool_call",
    "function_call": "tool_call",
    "tool_use": "tool_call",
    "end_turn": "stop",
    "max_tokens": "length",
    "stop_sequence": "stop",
}


@contextlib.contextmanager
def recording(recorder: ReplyRecorder) -> Iterator[None]:
    with dspy.context(caller_modules=[*(dspy.settings.caller_modules or []), recorder]):
        yield


def note_raw_reply(exchange: Exchange, recorder: ReplyRecorder) -> None:
    """What only the raw response has: the finish reason and the provider's reasoning blocks."""
    if exchange.reply is None or not recorder.history:
        return
    response = recorder.history[-1].get("response")
    details = blocks_of(response) or exchange.reply.reasoning_details
    served = hosted_route(exchange.route)
    block = served.served(response) if served is not None else None
    paused = exchange.guidance.paused  # this request went on with a reply the provider paused (``_turn.paused``)
    if served is not None and served.joined is not None and paused is not None:
        earlier = served_blocks(paused.reasoning_details, frozenset({served.kind}))
        block = served.joined(earlier[-1], response) if earlier else block
    if block is not None:  # the provider ran hosted tools in this reply: its blocks, as served
        details = [*(details if isinstance(details, list) else ()), block]
    finish = PAUSED if served is not None and served.paused(response) else finish_reason_of(response)
    exchange.reply = replace(exchange.reply, finish_reason=finish, reasoning_details=details)


def finish_reason_of(response: Any) -> str | None:
    """The finish reason of an lm15 ``Response`` or a LiteLLM ``ModelResponse``, one spelling."""
    if isinstance(response, list | tuple):
        response = response[0] if response else None
    reason = getattr(response, "finish_reason", None)
    if reason is None:
        choices = getattr(response, "choices", None)
        if choices:
            reason = getattr(choices[0], "finish_reason", None)
    if reason is None:
        return None
    reason = str(getattr(reason, "value", reason))
    return _FINISH_SPELLING.get(reason, reason)
