"""AG-UI: a turn as AG-UI events, and AG-UI messages as a conversation's history.

Every event and message is the official ``ag-ui-protocol`` package's own type (``ag_ui.core``);
``ag_ui.encoder.EventEncoder`` writes them as server-sent events. One run is one turn:

    RUN_STARTED
      STEP_STARTED "request 1: step"          one step per model request
        REASONING_START / REASONING_MESSAGE_START / _CONTENT... / _END / REASONING_END
                                              a thought, or the provider's reasoning
        TEXT_MESSAGE_START / _CONTENT... / _END
                                              text that may be the answer (a text-answer turn)
        TOOL_CALL_START / TOOL_CALL_ARGS / TOOL_CALL_END, TOOL_CALL_RESULT
      STEP_FINISHED
      ...
      TEXT_MESSAGE_*                          the answer, when it was not the streamed text
    MESSAGES_SNAPSHOT                         the whole conversation (``to_messages``)
    RUN_FINISHED                              result, usage; outcome "interrupt" for a pause
    (or RUN_ERROR: a StepError, or input the agent refuses)

A paused turn (``needs_approval``, ``external_tools``) ends with the interrupt outcome: one
``Interrupt`` per pending call, ``id`` and ``toolCallId`` the call id, ``reason``
``"tool_approval"`` or ``"external_tool"``. The next run resumes it with ``resume`` entries:
``{"interruptId": id, "status": "resolved", "payload": {"approved": true}}`` (or ``false`` with a
``"reason"`` the model reads; ``"cancelled"`` refuses), ``{"payload": {"result": ...}}`` for an
external call.

``to_messages`` and ``from_messages`` map a history to AG-UI messages and back. Each assistant
message carries its history entry under ``metadata["dspy_imp"]``, so a message list this module
wrote comes back as the same history (call ids, results, ``returned_at``, reasoning). Messages
written elsewhere are read by their roles: a user message is the inputs, an assistant message a
step (its content an answer, or the thought beside its calls), a tool message a result.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import dspy
from ag_ui.core import (
    PROTOCOL_VERSION,
    AssistantMessage,
    BaseEvent,
    FunctionCall,
    Interrupt,
    MessagesSnapshotEvent,
    ReasoningEndEvent,
    ReasoningMessage,
    ReasoningMessageContentEvent,
    ReasoningMessageEndEvent,
    ReasoningMessageStartEvent,
    ReasoningStartEvent,
    RunAgentInput,
    RunErrorEvent,
    RunFinishedEvent,
    RunFinishedInterruptOutcome,
    RunFinishedSuccessOutcome,
    RunStartedEvent,
    StepFinishedEvent,
    StepStartedEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    TokenUsage,
    ToolCall,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
    ToolMessage,
    UserMessage,
)
from ag_ui.encoder import EventEncoder

from dspy_imp._records.errors import ConfigurationError
from dspy_imp._records.history import dump_history, load_history
from dspy_imp.web._inputs import Call, inputs_from_text, inputs_text, paused_calls, summary
from dspy_imp.web._narration import MessageKind, as_text

__all__ = ["AGUIEncoder", "EventEncoder", "from_messages", "read_run_input", "to_messages"]

_KEY = "dspy_imp"


class AGUIEncoder:
    """The ``Encoder`` (``_narration``) for one AG-UI run."""

    def __init__(self, thread_id: str, run_id: str, signature: type[dspy.Signature]):
        self.thread_id = thread_id
        self.run_id = run_id
        self.signature = signature

    def run_started(self) -> list[BaseEvent]:
        return [RunStartedEvent(thread_id=self.thread_id, run_id=self.run_id, protocol_version=PROTOCOL_VERSION)]

    def step_started(self, name: str) -> list[BaseEvent]:
        return [StepStartedEvent(step_name=name)]

    def step_finished(self, name: str) -> list[BaseEvent]:
        return [StepFinishedEvent(step_name=name)]

    def message_started(self, message_id: str, kind: MessageKind) -> list[BaseEvent]:
        if kind == "text":
            return [TextMessageStartEvent(message_id=message_id, role="assistant")]
        return [ReasoningStartEvent(message_id=message_id), ReasoningMessageStartEvent(message_id=message_id)]

    def message_delta(self, message_id: str, kind: MessageKind, delta: str) -> list[BaseEvent]:
        if kind == "text":
            return [TextMessageContentEvent(message_id=message_id, delta=delta)]
        return [ReasoningMessageContentEvent(message_id=message_id, delta=delta)]

    def message_ended(self, message_id: str, kind: MessageKind) -> list[BaseEvent]:
        if kind == "text":
            return [TextMessageEndEvent(message_id=message_id)]
        return [ReasoningMessageEndEvent(message_id=message_id), ReasoningEndEvent(message_id=message_id)]

    def tool_call(self, call_id: str, name: str, args: Any, parent_id: str | None) -> list[BaseEvent]:
        return [
            ToolCallStartEvent(tool_call_id=call_id, tool_call_name=name, parent_message_id=parent_id),
            ToolCallArgsEvent(tool_call_id=call_id, delta=_arguments(args)),
            ToolCallEndEvent(tool_call_id=call_id),
        ]

    def tool_result(self, call_id: str, value: Any, error: bool, denied: bool) -> list[BaseEvent]:
        message_id = f"{self.run_id}-result-{call_id}"
        return [ToolCallResultEvent(message_id=message_id, tool_call_id=call_id, content=as_text(value), role="tool")]

    def finished(self, prediction: Any, pending: tuple[Mapping[str, Any], ...]) -> list[BaseEvent]:
        metadata = prediction.metadata
        messages = to_messages(metadata.history, self.signature)
        outcome: Any = RunFinishedSuccessOutcome()
        if pending:
            outcome = RunFinishedInterruptOutcome(interrupts=[_interrupt(call) for call in pending])
        return [
            MessagesSnapshotEvent(messages=messages),
            RunFinishedEvent(
                thread_id=self.thread_id,
                run_id=self.run_id,
                result=summary(prediction),
                outcome=outcome,
                usage=[_token_usage(metadata.usage)],
            ),
        ]

    def failed(self, error: BaseException) -> list[BaseEvent]:
        usage = getattr(error, "usage", None)
        return [
            RunErrorEvent(
                message=f"{type(error).__name__}: {getattr(error, 'reason', error)}",
                code=type(error).__name__,
                usage=[_token_usage(usage)] if usage is not None else None,
            )
        ]


def _arguments(args: Any) -> str:
    return args if isinstance(args, str) else json.dumps(args, ensure_ascii=False, default=str)


def _interrupt(call: Mapping[str, Any]) -> Interrupt:
    approval = call["kind"] == "approval"
    args = _arguments(call.get("args") or {})
    if approval:
        schema = {
            "type": "object",
            "properties": {"approved": {"type": "boolean"}, "reason": {"type": "string"}},
            "required": ["approved"],
        }
        message = f"Approve {call['name']}({args})?"
    else:
        schema = {"type": "object", "properties": {"result": {}}, "required": ["result"]}
        message = f"Run {call['name']}({args}) and send its result."
    return Interrupt(
        id=call["id"],
        reason="tool_approval" if approval else "external_tool",
        message=message,
        tool_call_id=call["id"],
        response_schema=schema,
        metadata={_KEY: {"name": call["name"], "args": dict(call.get("args") or {})}},
    )


def _token_usage(usage: Any) -> TokenUsage:
    return TokenUsage(
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        total_tokens=usage.total_tokens,
        reasoning_tokens=usage.reasoning_tokens or None,
        cached_input_tokens=usage.cached_tokens or None,
    )


# -- reading a run's input ------------------------------------------------------------------------


def read_run_input(run_input: RunAgentInput, signature: type[dspy.Signature], stored: dspy.History | None) -> Call:
    """The agent call a run asks for: new inputs (the last user message) or the decisions of a resume.

    ``stored``: the conversation the server holds for the thread; without one, the history is read
    from the run's messages (``from_messages``).
    """
    entries, new_inputs = from_messages(run_input.messages, signature)
    history = stored if stored is not None else dspy.History(messages=entries)
    if run_input.resume:
        if stored is None and new_inputs:
            raise ConfigurationError("a resumed run takes no new user message")
        return _resume(run_input, history)
    if not new_inputs:
        raise ConfigurationError("the run has no new user message to answer (the last message is not the user's)")
    return Call(kwargs={**new_inputs, "history": history})


def _resume(run_input: RunAgentInput, history: dspy.History) -> Call:
    pending = {call["id"]: call for call in paused_calls(history)}
    approvals: dict[str, bool | str] = {}
    results: dict[str, Any] = {}
    for entry in run_input.resume or ():
        call = pending.get(entry.interrupt_id)
        if call is None:
            raise ConfigurationError(f"resume entry {entry.interrupt_id!r} answers no pending interrupt")
        payload = entry.payload if isinstance(entry.payload, Mapping) else {}
        if call["kind"] == "external":
            if entry.status != "resolved" or "result" not in payload:
                raise ConfigurationError(f"interrupt {entry.interrupt_id!r} needs payload {{'result': ...}}")
            results[call["id"]] = payload["result"]
            continue
        approvals[call["id"]] = _approval(entry.interrupt_id, entry.status, payload)
    refused = frozenset(k for k, v in approvals.items() if v is not True)
    return Call({"history": history, "approvals": approvals, "results": results}, frozenset(pending), refused)


def _approval(interrupt_id: str, status: str, payload: Mapping[str, Any]) -> bool | str:
    if status == "cancelled":
        return False
    approved = payload.get("approved")
    if not isinstance(approved, bool):
        raise ConfigurationError(
            f"interrupt {interrupt_id!r} needs payload {{'approved': true | false}}, got {payload!r}"
        )
    reason = payload.get("reason")
    if not approved and isinstance(reason, str) and reason.strip():
        return reason
    return approved


# -- messages <-> history -------------------------------------------------------------------------


def to_messages(history: dspy.History, signature: type[dspy.Signature], prefix: str = "h") -> list[Any]:
    """The AG-UI messages of a history: per entry, its inputs as a user message, then its step.

    A step is its reasoning and thought (reasoning messages), an assistant message (the answer
    as content, the calls as ``toolCalls``, the entry itself under ``metadata["dspy_imp"]``) and
    one tool message per result.
    """
    inputs_names = list(signature.input_fields)
    outputs_names = list(signature.output_fields)
    messages: list[Any] = []
    for index, entry in enumerate(dump_history(history)["messages"]):
        inputs = {name: entry[name] for name in inputs_names if name in entry}
        rest = {key: value for key, value in entry.items() if key not in inputs}
        if inputs:
            text = inputs_text(inputs, inputs_names)
            meta = {"inputs": inputs, **({} if rest else {"alone": True})}
            messages.append(UserMessage(id=f"{prefix}{index}-user", content=text, metadata={_KEY: meta}))
        if rest:
            messages += _step_messages(f"{prefix}{index}", rest, outputs_names)
    return messages


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
    messages.append(
        AssistantMessage(id=message_id, content=answer, tool_calls=calls or None, metadata={_KEY: {"entry": entry}})
    )
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
    """
    reader = _Reader(signature)
    for message in messages:
        reader.read(message)
    return reader.entries, reader.inputs


class _Reader:
    def __init__(self, signature: type[dspy.Signature]):
        self.signature = signature
        self.entries: list[dict[str, Any]] = []
        self.inputs: dict[str, Any] = {}
        self.thought: str | None = None
        self.exact: set[str] = set()  # results already inside an entry read from metadata

    def read(self, message: Any) -> None:
        role = getattr(message, "role", None)
        meta = (getattr(message, "metadata", None) or {}).get(_KEY) or {}
        if role == "user":
            self._user(message, meta)
        elif role == "reasoning":
            self.thought = message.content
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
            step = dict(load_history({"messages": [dict(entry)]}).messages[0])
            self.exact |= {r["id"] for r in step.get("tool_call_results") or []}
        else:
            step = self._read_step(message)
        self.entries.append({**self.inputs, **step})
        self.inputs, self.thought = {}, None

    def _read_step(self, message: Any) -> dict[str, Any]:
        calls = [
            {"id": c.id, "name": c.function.name, "args": _parsed(c.function.arguments)}
            for c in message.tool_calls or []
        ]
        if not calls:
            output = next(iter(self.signature.output_fields))
            return {output: message.content or ""}
        step: dict[str, Any] = {"tool_calls": calls, "tool_call_results": []}
        thought = message.content or self.thought
        if thought:
            step["next_thought"] = thought
        return step

    def _tool(self, message: Any) -> None:
        if message.tool_call_id in self.exact or not self.entries:
            return
        step = self.entries[-1]
        names = {c["id"]: c.get("name") for c in step.get("tool_calls") or []}
        step.setdefault("tool_call_results", []).append(
            {
                "id": message.tool_call_id,
                "name": names.get(message.tool_call_id),
                "result": message.error or _text(message),
                "error": message.error is not None,
                "returned_at": "",
            }
        )


def _text(message: Any) -> str:
    content = message.content
    if isinstance(content, str):
        return content
    return "".join(getattr(part, "text", "") or "" for part in content or [])


def _parsed(arguments: str) -> Any:
    try:
        return json.loads(arguments)
    except ValueError:
        return {}
