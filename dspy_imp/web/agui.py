"""AG-UI: a turn as AG-UI events, and AG-UI messages as a conversation's history.

Every event and message is the official ``ag-ui-protocol`` package's own type (``ag_ui.core``);
``ag_ui.encoder.EventEncoder`` writes them as server-sent events. One run is one turn:

    RUN_STARTED
      STEP_STARTED "request 1: step"          one step per model request
        REASONING_START / REASONING_MESSAGE_START / _CONTENT... / _END / REASONING_END
                                              a thought, or the provider's reasoning
        TEXT_MESSAGE_START / _CONTENT... / _END
                                              text that may be the answer (a text-answer turn)
        CUSTOM "dspy_imp.provider_executed", TOOL_CALL_START / _ARGS / _END, TOOL_CALL_RESULT
                                              a call the provider ran (``dspy_imp.hosted``): told
                                              whole, after the reply's text; the page neither runs
                                              nor approves it
        TOOL_CALL_START / TOOL_CALL_ARGS / TOOL_CALL_END, TOOL_CALL_RESULT
          ACTIVITY_SNAPSHOT "tool_progress"    what the call's tool reports while it runs (an MCP
          ACTIVITY_SNAPSHOT "tool_log"         server's progress, its log messages), between
                                              the call's end and its result
          SUBAGENT_STARTED ... SUBAGENT_FINISHED   a sub-agent's call: its turn between the call's
                                              end and its result, each event with its subagentRunId
      STEP_FINISHED
      ...
      TEXT_MESSAGE_*                          the answer, when it was not the streamed text
    MESSAGES_SNAPSHOT                         the whole conversation (``to_messages``)
    RUN_FINISHED                              result, usage; outcome "interrupt" for a pause
    (or RUN_ERROR: a StepError, or input the agent refuses)

A run on a thread of another user, or one resuming a thread that does not exist, is answered
404 before any event; one resuming a thread that waits for none of its decisions (answered
already, in another tab) 409 (``_guard.BeforeStream``).

A paused turn (``needs_approval``, ``external_tools``) ends with the interrupt outcome: one
``Interrupt`` per pending call, ``id`` and ``toolCallId`` the call id, ``reason``
``"tool_approval"`` or ``"external_tool"``; a sub-agent's pending call (``"p1/c1"``) was told in
its segment, which ends suspended, and its interrupt carries the segment's ``subagentRunId``
(``"p1"``). The next run resumes it with ``resume`` entries:
``{"interruptId": id, "status": "resolved", "payload": {"approved": true}}`` (or ``false`` with a
``"reason"`` the model reads; ``"cancelled"`` refuses), ``{"payload": {"result": ...}}`` for an
external call. A call paused on an MCP server's request for input (``elicit="pause"``) is an
interrupt with ``reason`` ``"elicitation"`` (``message`` the server's, ``responseSchema`` MCP's
answer around the form's schema, ``metadata`` naming the kind, server, message and schema), and
is answered ``{"payload": {"action": "accept", "content": {...}}}`` (or ``"decline"``,
``"cancel"``; ``"cancelled"`` cancels), checked against the form by the agent before anything is
sent. A request to open a URL (MCP URL mode) is such an interrupt too, its ``metadata`` holding
``mode`` ``"url"``, the ``url`` (untrusted: a link the person opens) and the ``elicitation_id``, its
``responseSchema`` the ``action`` alone: ``{"payload": {"action": "accept"}}`` says the person opened
it. A client tool (``app(..., client_tools=True)``: the run's ``tools``) is such an
external call: its ``TOOL_CALL_START``/``_ARGS``/``_END`` tell the client to run it, and the next
run answers it with a ``ToolMessage`` (``toolCallId`` the call's id) ending its ``messages``, or
with a ``resume`` entry.

The conversation's history is the one the server holds for the thread: of a run's messages only
the last one is read, and only as a user's text (the new turn's inputs). ``MESSAGES_SNAPSHOT``
writes the history as messages (``web.messages``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import dspy
from ag_ui.core import (
    PROTOCOL_VERSION,
    ActivitySnapshotEvent,
    BaseEvent,
    CustomEvent,
    Interrupt,
    MessagesSnapshotEvent,
    ReasoningEndEvent,
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
    SubagentErrorEvent,
    SubagentFinishedEvent,
    SubagentFinishedSuccessOutcome,
    SubagentFinishedSuspendedOutcome,
    SubagentStartedEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    TokenUsage,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
)
from ag_ui.encoder import EventEncoder

from dspy_imp._records.errors import ConfigurationError
from dspy_imp._turn.elicitation import url_asked, url_problem
from dspy_imp._watch.events import ToolLog, ToolProgress
from dspy_imp.web._client_tools import Offered
from dspy_imp.web._guard import BeforeStream
from dspy_imp.web._inputs import ACTIONS, Call, elicitation_answer, inputs_from_text, paused_calls, summary
from dspy_imp.web._narration import AgentSegmentEnd, MessageKind, as_text, hosted_result_text, owner_of
from dspy_imp.web.messages import from_messages, to_messages

__all__ = ["PROVIDER_EXECUTED", "AGUIEncoder", "EventEncoder", "from_messages", "read_run_input", "to_messages"]

_KEY = "dspy_imp"


class AGUIEncoder:
    """The ``Encoder`` (``_narration``) for one AG-UI run."""

    nests_pauses = True  # an ``Interrupt`` names its sub-agent (``subagentRunId``) and the call in it

    def __init__(self, thread_id: str, run_id: str, signature: type[dspy.Signature]):
        self.thread_id = thread_id
        self.run_id = run_id
        self.signature = signature
        self.logs = 0  # the run's log activities so far (their ids)

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

    def tool_progress(self, event: ToolProgress) -> list[BaseEvent]:
        """The call's progress: one activity per call, each snapshot replacing the last."""
        content = {"toolCallId": event.call_id, "toolName": event.name, "progress": event.progress,
                   "total": event.total, "message": event.message}  # fmt: skip
        message_id = f"{self.run_id}-progress-{event.call_id}"
        return [ActivitySnapshotEvent(message_id=message_id, activity_type="tool_progress", content=content)]

    def tool_log(self, event: ToolLog) -> list[BaseEvent]:
        """One log message of the call's tool: an activity of its own."""
        self.logs += 1
        content = {"toolCallId": event.call_id, "toolName": event.name, "level": event.level,
                   "logger": event.logger, "text": event.text}  # fmt: skip
        message_id = f"{self.run_id}-log-{self.logs}"
        return [ActivitySnapshotEvent(message_id=message_id, activity_type="tool_log", content=content)]

    def hosted_call(self, call: Any, parent_id: str | None) -> list[BaseEvent]:
        """A call the provider ran (a ``HostedToolCall``): first a ``CUSTOM`` event named
        ``PROVIDER_EXECUTED`` saying so (``toolCallId``, ``toolName``, ``provider``, ``error``), then
        the call and its result as any call's, its name the call's (``web_search``, ...)."""
        marker = {"toolCallId": call.call_id, "toolName": call.name, "provider": call.provider, "error": call.error}
        message_id = f"{self.run_id}-result-{call.call_id}"
        return [
            CustomEvent(name=PROVIDER_EXECUTED, value=marker),
            *self.tool_call(call.call_id, call.name or "", call.args, parent_id),
            ToolCallResultEvent(
                message_id=message_id, tool_call_id=call.call_id, content=hosted_result_text(call), role="tool"
            ),
        ]

    def finished(self, prediction: Any, pending: tuple[Mapping[str, Any], ...]) -> list[BaseEvent]:
        metadata = prediction.metadata
        messages = to_messages(metadata.history, self.signature)
        outcome: Any = RunFinishedSuccessOutcome()
        if pending:
            outcome = RunFinishedInterruptOutcome(interrupts=[interrupt(call) for call in pending])
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

    def agent_started(self, agent: str, path: str, message_id: str | None, parent: str | None) -> list[BaseEvent]:
        """A sub-agent call's segment: its ``subagentRunId`` is the call's id path, the same in the
        run that resumes it."""
        name = agent.rsplit("/", 1)[-1]
        return [
            SubagentStartedEvent(
                subagent_run_id=path,
                name=name,
                parent_subagent_run_id=parent,
                parent_tool_call_id=path,
                parent_message_id=message_id,
            )
        ]

    def nested(self, agent: str, path: str, events: list[BaseEvent]) -> list[BaseEvent]:
        return [event.model_copy(update={"subagent_run_id": path}) for event in events]

    def agent_ended(self, agent: str, path: str, ended: AgentSegmentEnd) -> list[BaseEvent]:
        if ended.error is not None:
            return [SubagentErrorEvent(subagent_run_id=path, message=ended.error)]
        if ended.suspended is not None:
            outcome: Any = SubagentFinishedSuspendedOutcome(interrupt_ids=list(ended.suspended))
            return [SubagentFinishedEvent(subagent_run_id=path, outcome=outcome)]
        result = _jsonable(ended.result)
        return [SubagentFinishedEvent(subagent_run_id=path, result=result, outcome=SubagentFinishedSuccessOutcome())]

    def refused(self, message: str, code: str) -> list[BaseEvent]:
        """A run refused before it started (the instance at ``max_turns`` or ``max_loop_lag``), for a
        client that reads only the stream: its error, ``code`` naming the limit."""
        return [RunErrorEvent(message=message, code=code)]

    def failed(self, error: BaseException) -> list[BaseEvent]:
        usage = getattr(error, "usage", None)
        return [
            RunErrorEvent(
                message=f"{type(error).__name__}: {getattr(error, 'reason', error)}",
                code=type(error).__name__,
                usage=[_token_usage(usage)] if usage is not None else None,
            )
        ]


PROVIDER_EXECUTED = "dspy_imp.provider_executed"
"""The ``CUSTOM`` event's name that marks the next tool call as run by the provider (``dspy_imp.hosted``)."""


def _arguments(args: Any) -> str:
    return args if isinstance(args, str) else json.dumps(args, ensure_ascii=False, default=str)


def _jsonable(value: Any) -> Any:
    try:
        return json.loads(json.dumps(value, ensure_ascii=False))
    except (TypeError, ValueError):
        return as_text(value)


def interrupt(call: Mapping[str, Any]) -> Interrupt:
    """The AG-UI ``Interrupt`` of one pending call (``id`` and ``toolCallId`` the call's id); a
    sub-agent's call (``"p1/c1"``) belongs to its segment (``subagentRunId`` ``"p1"``)."""
    if call["kind"] == "elicitation":
        return _question(call)
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
        subagent_run_id=owner_of(call),
        id=call["id"],
        reason="tool_approval" if approval else "external_tool",
        message=message,
        tool_call_id=call["id"],
        response_schema=schema,
        metadata={_KEY: {"name": call["name"], "args": dict(call.get("args") or {})}},
    )


def _question(call: Mapping[str, Any]) -> Interrupt:
    """The ``Interrupt`` of a call paused on a request for input (``elicit="pause"``): ``reason``
    ``"elicitation"``, ``message`` the server's question (untrusted text), ``responseSchema`` the
    answer's shape, MCP's own (``action``, and ``content`` the server's form schema); ``metadata``
    names the kind, the server, the message and the form too."""
    # ``pending_calls`` shows the question beside the call; the history's entry holds it under
    # ``elicitation`` (with what the tool needs to go on, which is never shown)
    asked = call["elicitation"] if isinstance(call.get("elicitation"), Mapping) else call
    if url_asked(asked):
        return _open_url(call, asked)
    about = {"server": asked.get("server"), "message": asked.get("message"), "schema": asked.get("schema")}
    schema = about["schema"] if isinstance(about["schema"], Mapping) else {"type": "object"}
    response = {
        "type": "object",
        "properties": {"action": {"enum": list(ACTIONS)}, "content": dict(schema)},
        "required": ["action"],
    }
    return Interrupt(
        subagent_run_id=owner_of(call),
        id=call["id"],
        reason="elicitation",
        message=str(about["message"] or ""),
        tool_call_id=call["id"],
        response_schema=response,
        metadata={_KEY: {"name": call["name"], "args": dict(call.get("args") or {}), "kind": "elicitation", **about}},
    )


def _open_url(call: Mapping[str, Any], asked: Mapping[str, Any]) -> Interrupt:
    """The ``Interrupt`` of a call paused on a request to open a URL (MCP URL mode): ``reason``
    ``"elicitation"``, ``responseSchema`` the ``action`` alone (no content goes back), ``metadata``
    with ``mode`` ``"url"``, the ``url`` (untrusted: to show as a link the person opens, never to
    fetch or open unasked; ``None`` when it is not one ``elicitation.url_problem`` allows) and the
    server's ``elicitation_id``."""
    url = asked.get("url") if url_problem(asked.get("url")) is None else None
    about = {"server": asked.get("server"), "mode": "url", "message": asked.get("message"), "url": url,
             "elicitation_id": asked.get("elicitation_id")}  # fmt: skip
    return Interrupt(
        subagent_run_id=owner_of(call),
        id=call["id"],
        reason="elicitation",
        message=str(about["message"] or ""),
        tool_call_id=call["id"],
        response_schema={"type": "object", "properties": {"action": {"enum": list(ACTIONS)}}, "required": ["action"]},
        metadata={_KEY: {"name": call["name"], "args": dict(call.get("args") or {}), "kind": "elicitation", **about}},
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


def read_run_input(
    run_input: RunAgentInput, signature: type[dspy.Signature], stored: dspy.History | None, offered: Offered
) -> Call:
    """The agent call a run asks for: new inputs (the last user message's text) or the answers of a resume.

    ``stored``: the conversation the server holds for the thread, the only history there is. The
    run's other ``messages`` are never read as history (their entries, calls or results): a client
    could write any step there, a paused call included, and "approve" it. A paused thread is
    answered by ``resume`` entries, or (AG-UI's client tools) by the tool messages ending the run's
    ``messages``, each for a call the server's paused entry waits on. ``offered``: the agent's own
    tool names and the client tools this run declares.
    """
    history = stored if stored is not None else dspy.History(messages=[])
    last = run_input.messages[-1] if run_input.messages else None
    new_text = _text(last) if last is not None and last.role == "user" else None
    answers = _tool_messages(run_input.messages)
    if run_input.resume or answers:
        if stored is None:  # nothing to decide on: as REST answers for it (404)
            raise BeforeStream(404, f"no conversation {run_input.thread_id!r}")
        if not paused_calls(history):  # answered already (another tab, a second click): 409
            raise BeforeStream(
                409, f"conversation {run_input.thread_id!r} has no turn waiting for a decision: it was answered already"
            )
        return _resume(run_input, history, answers, offered)
    if new_text is None:
        raise ConfigurationError("the run has no new user message to answer (the last message is not the user's)")
    return Call(kwargs={**inputs_from_text(signature, new_text), "history": history}, tools=offered.tools)


def _text(message: Any) -> str:
    """A user message's text: its content, or its text parts joined (media parts are not read)."""
    content = message.content
    if isinstance(content, str):
        return content
    return "".join(getattr(part, "text", "") or "" for part in content or [])


def _tool_messages(messages: Any) -> dict[str, Any]:
    """The results the tool messages ending the run's messages carry (after the last other message)."""
    answers: dict[str, Any] = {}
    for message in reversed(messages or []):
        if message.role != "tool":
            break
        error = message.error
        answers[message.tool_call_id] = RuntimeError(error) if error else _text(message)
    return answers


def _resume(run_input: RunAgentInput, history: dspy.History, answers: dict[str, Any], offered: Offered) -> Call:
    pending = {call["id"]: call for call in paused_calls(history)}
    approvals: dict[str, Any] = {}
    answers_form: dict[str, Any] = {}
    results = dict(answers)
    for entry in run_input.resume or ():
        call = pending.get(entry.interrupt_id)
        if call is None and entry.interrupt_id in _recorded(history):  # answered already (another tab): 409
            raise BeforeStream(409, f"interrupt {entry.interrupt_id!r} was answered already")
        if call is None:
            raise ConfigurationError(f"resume entry {entry.interrupt_id!r} answers no pending interrupt")
        payload = entry.payload if isinstance(entry.payload, Mapping) else {}
        if call["kind"] == "external":
            if entry.status != "resolved" or "result" not in payload:
                raise ConfigurationError(f"interrupt {entry.interrupt_id!r} needs payload {{'result': ...}}")
            results[call["id"]] = payload["result"]
            continue
        if call["kind"] == "elicitation":
            where = f"resume entry {entry.interrupt_id!r}"
            cancelled = entry.status == "cancelled"
            answers_form[call["id"]] = elicitation_answer(where, {"action": "cancel"} if cancelled else entry.payload)
            continue
        approvals[call["id"]] = _approval(entry.interrupt_id, entry.status, payload)
    refused = frozenset(k for k, v in approvals.items() if v is not True)
    approvals.update(answers_form)  # answered, not refused: the tool goes on with the answer
    checked = offered.results(pending, results)
    kwargs = {"history": history, "approvals": approvals, "results": checked}
    return Call(kwargs, frozenset(pending), refused, offered.tools)


def _recorded(history: dspy.History) -> set[str]:
    """The ids of the calls the conversation's history records (made, and answered or waiting)."""
    return {c["id"] for entry in history.messages for c in entry.get("tool_calls") or [] if isinstance(c, Mapping)}


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
