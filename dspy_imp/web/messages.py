"""AG-UI messages and a conversation's history, both ways.

``to_messages`` writes a history as AG-UI messages (the ``MESSAGES_SNAPSHOT`` of a run);
``from_messages`` reads a run's messages back as history entries and the new turn's inputs. Each
assistant message carries its history entry under ``metadata["dspy_imp"]`` (AG-UI reserves only
the ``ag-ui`` key), so a message list written here comes back as the same history: call ids,
results, ``returned_at``, reasoning blocks. Messages written elsewhere are read by their roles: a
user message is the inputs, an assistant message a step (its content an answer, or the thought
beside its calls), a tool message a result.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import dspy
from ag_ui.core import AssistantMessage, FunctionCall, ReasoningMessage, ToolCall, ToolMessage, UserMessage

from dspy_imp._records.errors import ConfigurationError, brief
from dspy_imp._records.history import check_depth, dump_history, load_history, repaired
from dspy_imp._routes.hosted import calls_of
from dspy_imp._turn.guardrails import OUTPUT_GUARDRAIL_KIND
from dspy_imp.web._inputs import inputs_from_text, inputs_text
from dspy_imp.web._narration import as_text, hosted_result_text

__all__ = ["from_messages", "to_messages"]

_KEY = "dspy_imp"


def _arguments(args: Any) -> str:
    return args if isinstance(args, str) else json.dumps(args, ensure_ascii=False, default=str)


def to_messages(history: dspy.History, signature: type[dspy.Signature], prefix: str = "h") -> list[Any]:
    """The AG-UI messages of a history: per entry, its inputs as a user message, then its step.

    An answer an output guardrail turned down is left out (the text not sent, a rejected
    ``submit``'s arguments): what a client is shown never holds a blocked answer.

    A step is its reasoning and thought (reasoning messages), an assistant message (the answer
    as content, the calls as ``toolCalls``, the entry itself under ``metadata["dspy_imp"]``) and
    one tool message per result.
    """
    inputs_names = list(signature.input_fields)
    outputs_names = list(signature.output_fields)
    messages: list[Any] = []
    for index, entry in enumerate(_withheld(e) for e in dump_history(history)["messages"]):
        inputs = {name: entry[name] for name in inputs_names if name in entry}
        rest = {key: value for key, value in entry.items() if key not in inputs}
        if inputs:
            text = inputs_text(inputs, inputs_names)
            meta = {"inputs": inputs, **({} if rest else {"alone": True})}
            messages.append(UserMessage(id=f"{prefix}{index}-user", content=text, metadata={_KEY: meta}))
        if rest:
            messages += _step_messages(f"{prefix}{index}", rest, outputs_names)
    return messages


def _withheld(entry: dict[str, Any]) -> dict[str, Any]:
    """The entry as a client may see it: an answer an output guardrail turned down (``retry=True``)
    is not shown, neither the text that was ``not_sent`` nor a rejected ``submit``'s arguments (the
    history keeps both for the model, which reads why they were turned down)."""
    rejected = {r["id"] for r in entry.get("tool_call_results") or [] if r.get("error_kind") == OUTPUT_GUARDRAIL_KIND}
    if "not_sent" not in entry and not rejected:
        return entry
    shown = {key: value for key, value in entry.items() if not ("not_sent" in entry and key == "next_thought")}
    if rejected:
        shown["tool_calls"] = [{**c, "args": {}} if c["id"] in rejected else c for c in entry["tool_calls"]]
    return shown


def _step_messages(message_id: str, entry: dict[str, Any], output_names: Sequence[str]) -> list[Any]:
    outputs = {name: entry[name] for name in output_names if name in entry}
    thought = entry.get("next_thought")
    answer = _outputs_text(outputs) if outputs else None
    messages: list[Any] = []
    if entry.get("reasoning_content"):
        messages.append(ReasoningMessage(id=f"{message_id}-reasoning", content=str(entry["reasoning_content"])))
    if thought and thought != answer:
        messages.append(ReasoningMessage(id=f"{message_id}-thought", content=str(thought)))
    calls = [
        ToolCall(id=call["id"], function=FunctionCall(name=call.get("name") or "", arguments=_arguments(call["args"])))
        for call in entry.get("tool_calls") or []
    ]
    meta: dict[str, Any] = {"entry": entry}
    hosted = calls_of(entry.get("reasoning_details"))
    if hosted:  # the calls the provider ran in this step's reply, as the page shows them (not read back)
        meta["hosted_calls"] = [{**call.as_dict(), "content": hosted_result_text(call)} for call in hosted]
    messages.append(AssistantMessage(id=message_id, content=answer, tool_calls=calls or None, metadata={_KEY: meta}))
    for result in entry.get("tool_call_results") or []:
        content = as_text(result.get("result"))
        messages.append(
            ToolMessage(
                id=f"{message_id}-{result['id']}",
                tool_call_id=result["id"],
                content=content,
                error=content if result.get("error") else None,
            )
        )
    return messages


def _outputs_text(outputs: Mapping[str, Any]) -> str:
    if len(outputs) == 1:
        return as_text(next(iter(outputs.values())))
    return "\n".join(f"{name}: {as_text(value)}" for name, value in outputs.items())


def from_messages(
    messages: Sequence[Any], signature: type[dspy.Signature]
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The history entries of AG-UI messages, and the inputs of a trailing user message (the new turn).

    Messages ``to_messages`` wrote come back as the entries they were made from.

    Raises:
        ConfigurationError: ``messages`` is not a list, or a message is malformed (naming it,
            ``messages[3]``, and the field where it is known, ``messages[3].content``).
    """
    if isinstance(messages, str | bytes | Mapping) or not isinstance(messages, Sequence):
        raise ConfigurationError(f"`messages` must be a list of AG-UI messages, got {type(messages).__name__}")
    reader = _Reader(signature)
    for index, message in enumerate(messages):
        reader.field = ""
        try:
            reader.read(message)
        except ConfigurationError as bad:
            raise ConfigurationError(f"`messages[{index}]{reader.field}`: {bad}") from None
        except (TypeError, KeyError, ValueError, AttributeError, IndexError, RecursionError) as bad:
            raise ConfigurationError(
                f"`messages[{index}]{reader.field}` is malformed ({type(bad).__name__}: {bad}), got {brief(message)}"
            ) from None
    for entry in reader.entries:
        check_depth(entry, "messages")
    check_depth(reader.inputs, "messages")
    return [repaired(entry) for entry in reader.entries], repaired(reader.inputs)


class _Reader:
    def __init__(self, signature: type[dspy.Signature]):
        self.signature = signature
        self.entries: list[dict[str, Any]] = []
        self.inputs: dict[str, Any] = {}
        self.thought: str | None = None
        self.exact: set[str] = set()  # results already inside an entry read from metadata
        self.field = ""  # the part of the message being read, for an error naming it

    def read(self, message: Any) -> None:
        role = getattr(message, "role", None)
        self.field = ".metadata"
        meta = _mapping((getattr(message, "metadata", None) or {}).get(_KEY) or {})
        self.field = ".content"
        if role == "user":
            self._user(message, meta)
        elif role == "reasoning":
            self.thought = _string(message.content) or None
        elif role == "assistant":
            self._assistant(message, meta)
        elif role == "tool":
            self._tool(message)

    def _user(self, message: Any, meta: Mapping[str, Any]) -> None:
        if self.inputs:
            self.entries.append(self.inputs)  # inputs no step answered
        inputs = meta.get("inputs")
        self.inputs = dict(inputs) if isinstance(inputs, Mapping) else inputs_from_text(self.signature, _text(message))
        if meta.get("alone"):  # an entry of inputs alone (a note, the inputs of a turn that failed)
            self.entries.append(self.inputs)
            self.inputs = {}

    def _assistant(self, message: Any, meta: Mapping[str, Any]) -> None:
        entry = meta.get("entry")
        if isinstance(entry, Mapping):
            self.field = ".metadata"
            step = dict(load_history({"messages": [dict(entry)]}).messages[0])
            self.exact |= {r["id"] for r in step.get("tool_call_results") or []}
        else:
            step = self._read_step(message)
        self.entries.append({**self.inputs, **step})
        self.inputs, self.thought = {}, None

    def _read_step(self, message: Any) -> dict[str, Any]:
        self.field = ".tool_calls"
        calls = [
            {"id": c.id, "name": c.function.name, "args": _parsed(c.function.arguments)}
            for c in message.tool_calls or []
        ]
        if not calls:
            output = next(iter(self.signature.output_fields))
            self.field = ".content"
            return {output: _string(message.content)}
        step: dict[str, Any] = {"tool_calls": calls, "tool_call_results": []}
        self.field = ".content"
        thought = _string(message.content) or self.thought
        if thought:
            step["next_thought"] = thought
        return step

    def _tool(self, message: Any) -> None:
        self.field = ".tool_call_id"
        if not isinstance(message.tool_call_id, str):
            raise ConfigurationError(f"must be a string, got {brief(message.tool_call_id)}")
        if message.tool_call_id in self.exact or not self.entries:
            return
        step = self.entries[-1]
        names = {c["id"]: c.get("name") for c in step.get("tool_calls") or []}
        self.field = ".error"
        error = None if message.error is None else _string(message.error)
        self.field = ".content"
        step.setdefault("tool_call_results", []).append(
            {
                "id": message.tool_call_id,
                "name": names.get(message.tool_call_id),
                "result": error or _text(message),
                "error": error is not None,
                "returned_at": "",
            }
        )


def _text(message: Any) -> str:
    content = message.content
    if isinstance(content, str):
        return content
    if content is None:
        return ""
    if not isinstance(content, list):
        raise ConfigurationError(f"must be a string or a list of parts, got {brief(content)}")
    return "".join(_string(getattr(part, "text", "") or "") for part in content)


def _string(value: Any) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ConfigurationError(f"must be a string, got {brief(value)}")
    return value


def _mapping(value: Any) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ConfigurationError(f"must be a mapping, got {brief(value)}")
    return value


def _parsed(arguments: Any) -> Any:
    if not isinstance(arguments, str):
        return arguments if isinstance(arguments, Mapping) else {}
    try:
        return json.loads(arguments)
    except ValueError:
        return {}
