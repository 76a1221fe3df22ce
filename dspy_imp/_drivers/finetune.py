"""Fine-tuning data: the requests the loop actually sent and the replies that answered them.

``BootstrapFinetune`` turns each traced step into one training example through the
adapter's ``format_finetune_data(signature, demos, inputs, outputs)``. DSPy's ``ChatAdapter``
would re-render the step in its own form (calls written as text, none of the loop's
guidance, later steps without their tool results). The driver pins each step's request on
the prediction it traced (``attach``); ``ReActAdapter.format_finetune_data`` then returns
that request's messages and tools, followed by the reply in the same tool-call format
(native ``tool_calls``, or written), so a model fine-tuned on it learns what the loop asks.
Under another adapter (``BootstrapFinetune(adapter=...)``, ``dspy.settings.adapter`` or DSPy's
default ``ChatAdapter``) ``install`` makes ``BootstrapFinetune`` write the same data.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import dspy

from dspy_imp._prompt.dialect import Dialect
from dspy_imp._records.outcomes import Reply
from dspy_imp._records.text import to_json
from dspy_imp._routes.dspy_private import install_loop_finetune_data

_ATTRIBUTE = "_dspy_imp_request"


@dataclass(frozen=True)
class SentRequest:
    """One step request as sent, and the assistant message that answered it."""

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None
    reply: dict[str, Any]


def attach(
    prediction: Any, messages: list[dict[str, Any]] | None, tools: Any, dialect: Dialect | None, reply: Reply
) -> None:
    """Pin the request on the traced prediction (an attribute, never a field: demos stay as they were)."""
    if not isinstance(prediction, dspy.Prediction) or messages is None or dialect is None:
        return
    # The very list that was sent (built fresh for each request and never changed after it
    # left), not a copy: a copy per request would cost O(history) on every step.
    setattr(prediction, _ATTRIBUTE, SentRequest(messages, tools, reply_message(dialect, reply)))


def sent_request(outputs: Any) -> SentRequest | None:
    return getattr(outputs, _ATTRIBUTE, None)


def install() -> None:
    """``BootstrapFinetune`` under any adapter writes a loop step as ``training_example`` (``dspy_private``)."""
    install_loop_finetune_data(_data_for)


def _data_for(outputs: Any) -> dict[str, Any] | None:
    request = sent_request(outputs)
    return training_example(request) if request is not None else None


def training_example(request: SentRequest) -> dict[str, Any]:
    """OpenAI chat fine-tuning form: ``{"messages": [...], "tools": [...]}`` (no tools when none were sent)."""
    data: dict[str, Any] = {"messages": [*request.messages, request.reply]}
    if request.tools:
        data["tools"] = request.tools
    return data


def reply_message(dialect: Dialect, reply: Reply) -> dict[str, Any]:
    if not dialect.native:
        calls = [{"name": c.name, "arguments": c.args} for c in reply.calls]
        return {"role": "assistant", "content": dialect.assistant(reply.text, calls)}
    message: dict[str, Any] = {"role": "assistant", "content": dialect.assistant(reply.text, None) or None}
    if reply.calls:
        message["tool_calls"] = [
            {
                "id": call.id or f"call_{index}",
                "type": "function",
                "function": {"name": call.name, "arguments": to_json(call.args if call.args is not None else {})},
            }
            for index, call in enumerate(reply.calls)
        ]
    return message
