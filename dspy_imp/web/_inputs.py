"""What both protocols read and write the same way: a user's text as the agent's inputs, the calls a
paused conversation waits on, and the summary of how a turn ended."""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import dspy

from dspy_imp._records.errors import ConfigurationError
from dspy_imp._routes.hosted import calls_of
from dspy_imp.web._narration import as_text


@dataclass(frozen=True)
class Call:
    """One agent call a request asks for.

    Attributes:
        kwargs: The agent's keyword arguments (inputs or decisions, and ``history``).
        shown: Call ids the client already shows (the paused step's calls, on a resume).
        refused: Call ids a person refused.
        tools: The client tools this turn offers besides the agent's own (``_client_tools``).
    """

    kwargs: Mapping[str, Any]
    shown: Collection[str] = field(default_factory=frozenset)
    refused: Collection[str] = field(default_factory=frozenset)
    tools: Mapping[str, Any] = field(default_factory=dict)


def inputs_from_text(signature: type[dspy.Signature], text: str) -> dict[str, Any]:
    """A user's message as the agent's inputs: the text itself for one input, else a JSON object of them."""
    names = list(signature.input_fields)
    if len(names) == 1:
        return {names[0]: text}
    try:
        value = json.loads(text)
    except ValueError:
        value = None
    if not isinstance(value, dict) or set(value) != set(names):
        raise ConfigurationError(f"this agent takes the inputs {names!r}: send them as one JSON object, got {text!r}")
    return value


def inputs_text(inputs: Mapping[str, Any], names: Sequence[str]) -> str:
    """How a user message shows inputs: the value of a single input, else the JSON object."""
    if len(names) == 1 and len(inputs) == 1:
        return as_text(next(iter(inputs.values())))
    return json.dumps(dict(inputs), ensure_ascii=False, default=str)


def paused_calls(history: dspy.History) -> list[Mapping[str, Any]]:
    """The pending calls of a paused conversation (its last entry), ``[]`` when it waits for nothing."""
    messages = history.messages
    return list(messages[-1].get("pending_calls") or []) if messages else []


def recorded_calls(entries: Any, prefix: str = "") -> set[str]:
    """The ids of every call the history records, a sub-agent's too by its id path (``"p1/c1"``), and
    the calls the provider ran (``dspy_imp.hosted``, shown as tool parts too): what a client may have
    as a tool part of its messages."""
    ids: set[str] = set()
    for entry in entries:
        ids |= {f"{prefix}{c['id']}" for c in entry.get("tool_calls") or [] if isinstance(c, Mapping)}
        ids |= {f"{prefix}{c.id}" for c in calls_of(entry.get("reasoning_details"))}  # the provider's own
        for call_id, run in (entry.get("agent_runs") or {}).items():
            ids |= recorded_calls(run.get("history") or (), f"{prefix}{call_id}/")
    return ids


def summary(prediction: Any) -> dict[str, Any]:
    """How the turn ended, as JSON: outputs, termination, pending calls and usage."""
    metadata = prediction.metadata
    usage = metadata.usage
    return {
        "outputs": json.loads(json.dumps(dict(prediction.items()), ensure_ascii=False, default=str)),
        "termination_reason": metadata.termination_reason,
        "termination_cause": metadata.termination_cause,
        "finished_by_tool": metadata.finished_by_tool,
        "pending_calls": [dict(call) for call in metadata.pending_calls],
        "usage": {
            "requests": dict(usage.requests),
            "input_tokens": usage.input_tokens,
            "output_tokens": usage.output_tokens,
            "cost": usage.cost,
        },
    }


ACTIONS = ("accept", "decline", "cancel")


def elicitation_answer(where: str, value: Any) -> bool | str | dict[str, Any]:
    """A client's answer to a paused request for input (``{"action": "accept", "content": {...}}``,
    ``{"action": "decline"}``, ``{"action": "cancel"}``, MCP's own shape) as the ``approvals`` entry
    the agent takes: the form's fields, ``False`` or ``"cancel"``. The fields are checked against the
    form's schema by the agent (``_turn.approval.check_resume``), before anything is sent."""
    action = value.get("action") if isinstance(value, Mapping) else None
    if action not in ACTIONS:
        raise ConfigurationError(
            f'{where} answers a request for input: give {{"action": "accept", "content": {{...}}}}, '
            f'{{"action": "decline"}} or {{"action": "cancel"}}; got {value!r}'
        )
    if action == "decline":
        return False
    if action == "cancel":
        return "cancel"
    content = value.get("content", {})
    if content is None:
        content = {}
    if not isinstance(content, Mapping) or not all(isinstance(key, str) for key in content):
        raise ConfigurationError(f"{where} `content` must be an object of the form's fields, got {content!r}")
    return dict(content) if content else True
