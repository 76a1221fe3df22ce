"""The Vercel AI SDK UI message stream: a turn as the parts ``useChat`` reads.

Each part is one server-sent event (``data: {...}``); the stream ends with ``data: [DONE]`` and
the response carries ``x-vercel-ai-ui-message-stream: v1``. Parts carry exactly the keys of the
AI SDK's ``uiMessageChunkSchema`` (every part is a strict object there):

    start {messageId}
      start-step                               one step per model request
        reasoning-start / reasoning-delta / reasoning-end   a thought, or provider reasoning
        text-start / text-delta / text-end                  text that may be the answer
        tool-input-start / tool-input-delta / tool-input-available
          data-tool-progress {id: the call's id}  what the call's tool reports while it runs (an
          data-tool-log (transient)                MCP server's progress, its log messages)
        tool-output-available | tool-output-error | tool-output-denied (a refused call)
        tool-input-start / tool-input-available, tool-output-available | tool-output-error
                                               each with providerExecuted: true: a call the
                                               provider ran (``dspy_imp.hosted``), told whole
          data-agent / data-agent-delta / data-agent-text / data-agent-call / data-agent-result
                                               a sub-agent's call: its turn, between the call's
                                               input and its output (``data.toolCallId`` the call)
      finish-step
      text-*                                   the answer, when it was not the streamed text
      tool-approval-request {approvalId, toolCallId}        a call waiting for a person (a
                                               sub-agent's: a tool part of its own, ``p1/c1``)
      data-elicitation {id, data: {toolCallId, toolName, server, message, schema}}
      data-elicitation-url {id, data: {toolCallId, toolName, server, message, url, elicitationId}}
                                               a call paused on an MCP server's request for input
    finish {finishReason, messageMetadata}     messageMetadata: how the turn ended, usage
    (or error {errorText})

A request is ``useChat``'s body: ``{"id": <chat id>, "messages": [...], "trigger": ...}``. A new
turn's inputs are the last user message's text parts. A resume is a request whose last message
is the assistant's, with its tool parts answered: ``state: "approval-responded"`` and
``approval: {"id", "approved", "reason"?}`` (AI SDK 6's ``addToolApprovalResponse``), or
``state: "output-available"`` for an external call (``addToolResult``). A request for input
(``data-elicitation``, its ``toolCallId`` the paused call's) is answered through the call's tool
part too, ``addToolResult``'s ``output`` the answer in MCP's shape: ``{"action": "accept",
"content": {...}}`` (the form's defaults fill what it leaves out), ``{"action": "decline"}`` or
``{"action": "cancel"}``; the fields are checked against the form before anything is sent. A
request to open a URL (``data-elicitation-url``: MCP URL mode; its ``url`` untrusted, a link the
person opens) is answered the same way, ``{"action": "accept"}`` once the person opened it. The
history is the one the server keeps for the chat id (``dspy_imp.web.app``).

Client tools (``app(..., client_tools=True)``): the request's ``tools``, ``[{"name",
"description", "inputSchema"}]`` (sent with ``useChat``'s transport ``body``), are offered for the
turn. A call of one streams as ``tool-input-available`` and the turn ends ``finishReason:
"tool-calls"``: ``useChat``'s ``onToolCall`` runs it, ``addToolResult`` answers it, and the next
request (its tool part ``output-available``) resumes the turn.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import dspy

from dspy_imp._records.errors import ConfigurationError
from dspy_imp._turn.elicitation import url_asked, url_problem
from dspy_imp._watch.events import ToolLog, ToolProgress
from dspy_imp.web._client_tools import Offered
from dspy_imp.web._guard import BeforeStream, Refused
from dspy_imp.web._inputs import Call, elicitation_answer, inputs_from_text, paused_calls, recorded_calls, summary
from dspy_imp.web._narration import AgentSegmentEnd, MessageKind, as_text

__all__ = ["HEADERS", "VercelEncoder", "checked_request", "encode", "read_request"]

HEADERS = {"x-vercel-ai-ui-message-stream": "v1", "cache-control": "no-cache", "x-accel-buffering": "no"}
DONE = "data: [DONE]\n\n"

_FINISH = {"incomplete": "other", "paused": "tool-calls"}


def encode(part: Mapping[str, Any]) -> str:
    """One part as a server-sent event."""
    return f"data: {json.dumps(part, ensure_ascii=False, separators=(',', ':'), default=str)}\n\n"


class VercelEncoder:
    """The ``Encoder`` (``_narration``) for one AI SDK UI message stream."""

    nests_pauses = False  # an approval request names a tool part of the message

    def __init__(self, message_id: str):
        self.message_id = message_id
        self.texts: dict[str, str] = {}  # a sub-agent's messages so far, by id (told whole when they end)

    def run_started(self) -> list[dict[str, Any]]:
        return [{"type": "start", "messageId": self.message_id}]

    def step_started(self, name: str) -> list[dict[str, Any]]:
        return [{"type": "start-step"}]

    def step_finished(self, name: str) -> list[dict[str, Any]]:
        return [{"type": "finish-step"}]

    def message_started(self, message_id: str, kind: MessageKind) -> list[dict[str, Any]]:
        return [{"type": f"{_part(kind)}-start", "id": message_id}]

    def message_delta(self, message_id: str, kind: MessageKind, delta: str) -> list[dict[str, Any]]:
        return [{"type": f"{_part(kind)}-delta", "id": message_id, "delta": delta}]

    def message_ended(self, message_id: str, kind: MessageKind) -> list[dict[str, Any]]:
        return [{"type": f"{_part(kind)}-end", "id": message_id}]

    def tool_call(self, call_id: str, name: str, args: Any, parent_id: str | None) -> list[dict[str, Any]]:
        return [
            {"type": "tool-input-start", "toolCallId": call_id, "toolName": name},
            {"type": "tool-input-delta", "toolCallId": call_id, "inputTextDelta": as_text(args)},
            {"type": "tool-input-available", "toolCallId": call_id, "toolName": name, "input": args},
        ]

    def tool_result(self, call_id: str, value: Any, error: bool, denied: bool) -> list[dict[str, Any]]:
        if denied:
            return [{"type": "tool-output-denied", "toolCallId": call_id}]
        if error:
            return [{"type": "tool-output-error", "toolCallId": call_id, "errorText": as_text(value)}]
        return [{"type": "tool-output-available", "toolCallId": call_id, "output": _json(value)}]

    def tool_progress(self, event: ToolProgress) -> list[dict[str, Any]]:
        """The call's progress: a data part with the call's id, so ``useChat`` keeps the latest."""
        data = {"toolCallId": event.call_id, "toolName": event.name, "progress": event.progress,
                "total": event.total, "message": event.message}  # fmt: skip
        return [_data("tool-progress", event.call_id, data)]

    def tool_log(self, event: ToolLog) -> list[dict[str, Any]]:
        """One log message of the call's tool: a transient data part (``onData``; never kept in the message)."""
        data = {"toolCallId": event.call_id, "toolName": event.name, "level": event.level,
                "logger": event.logger, "text": event.text}  # fmt: skip
        return [{"type": "data-tool-log", "data": data, "transient": True}]

    def hosted_call(self, call: Any, parent_id: str | None) -> list[dict[str, Any]]:
        """A call the provider ran (a ``HostedToolCall``): its input and its output (or its error), each
        with ``providerExecuted: true``, which tells ``useChat`` that nothing on the client runs it."""
        named = {"toolCallId": call.call_id, "toolName": call.name or ""}
        out: list[dict[str, Any]] = [
            {"type": "tool-input-start", **named, "providerExecuted": True},
            {"type": "tool-input-available", **named, "input": _json(call.args), "providerExecuted": True},
        ]
        if call.error:
            out.append(
                {
                    "type": "tool-output-error",
                    "toolCallId": call.call_id,
                    "errorText": call.error,
                    "providerExecuted": True,
                }
            )
        else:
            out.append(
                {
                    "type": "tool-output-available",
                    "toolCallId": call.call_id,
                    "output": _json(call.result),
                    "providerExecuted": True,
                }
            )
        return out

    def finished(self, prediction: Any, pending: tuple[Mapping[str, Any], ...]) -> list[dict[str, Any]]:
        approvals = [
            {"type": "tool-approval-request", "approvalId": call["id"], "toolCallId": call["id"]}
            for call in pending
            if call["kind"] == "approval"
        ]
        questions = [_question(call) for call in pending if call["kind"] == "elicitation"]
        metadata = prediction.metadata
        reason = _FINISH.get(metadata.termination_reason, "length" if metadata.finish_reason == "length" else "stop")
        return [
            *approvals,
            *questions,
            {"type": "finish", "finishReason": reason, "messageMetadata": summary(prediction)},
        ]

    def agent_started(self, agent: str, path: str, message_id: str | None, parent: str | None) -> list[dict[str, Any]]:
        return [_data("agent", path, {"agent": agent, "toolCallId": path, "state": "running"})]

    def nested(self, agent: str, path: str, parts: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """A sub-agent's parts as data parts (``useChat`` keeps them in the message, by type and id):
        each message once it ended (its deltas as transient parts before), each call when its input
        is known, each result."""
        out: list[dict[str, Any]] = []
        about = {"agent": agent, "toolCallId": path}
        for part in parts:
            kind = part["type"]
            if kind in ("text-start", "reasoning-start"):
                self.texts[part["id"]] = ""
            elif kind in ("text-delta", "reasoning-delta"):  # live, for ``onData``; kept whole at its end
                self.texts[part["id"]] = self.texts.get(part["id"], "") + part["delta"]
                delta = {**about, "messageId": part["id"], "kind": kind.split("-")[0], "delta": part["delta"]}
                out.append({"type": "data-agent-delta", "data": delta, "transient": True})
            elif kind in ("text-end", "reasoning-end"):
                text = self.texts.pop(part["id"], "")
                out.append(_data("agent-text", part["id"], {**about, "kind": kind.split("-")[0], "text": text}))
            elif kind == "tool-input-available":
                call = {"callId": part["toolCallId"], "toolName": part["toolName"], "input": part["input"]}
                out.append(_data("agent-call", part["toolCallId"], {**about, **call}))
            elif kind in ("data-tool-progress", "data-tool-log"):  # as ``data-agent-call`` names it
                data = dict(part["data"])
                out.append({**part, "data": {**about, "callId": data.pop("toolCallId"), **data}})
            elif kind.startswith("tool-output-"):
                result = {k: v for k, v in part.items() if k in ("output", "errorText")}
                state = {"callId": part["toolCallId"], "state": kind[len("tool-") :], **result}
                out.append(_data("agent-result", part["toolCallId"], {**about, **state}))
        return out

    def agent_ended(self, agent: str, path: str, ended: AgentSegmentEnd) -> list[dict[str, Any]]:
        data: dict[str, Any] = {"agent": agent, "toolCallId": path}
        if ended.error is not None:
            data.update(state="failed", errorText=ended.error)
        elif ended.suspended is not None:
            data.update(state="suspended", pending=list(ended.suspended))
        else:
            data.update(state="finished", output=_json(ended.result))
        return [_data("agent", path, data)]

    def refused(self, message: str, code: str) -> list[dict[str, Any]]:
        """A turn refused before it started (the instance at ``max_turns`` or ``max_loop_lag``), for a
        client that reads only the stream: an ``error`` part naming the limit."""
        return [{"type": "error", "errorText": f"{code}: {message}"}]

    def failed(self, error: BaseException) -> list[dict[str, Any]]:
        return [{"type": "error", "errorText": f"{type(error).__name__}: {getattr(error, 'reason', error)}"}]


def _question(call: Mapping[str, Any]) -> dict[str, Any]:
    """The data part of a call paused on a request for input: ``data-elicitation`` (a form), or
    ``data-elicitation-url`` (a URL to open: untrusted, shown as a link, never fetched; ``url``
    ``None`` when it is not one ``elicitation.url_problem`` allows)."""
    about = {"toolCallId": call["id"], "toolName": call["name"]}
    if url_asked(call):
        url = call.get("url") if url_problem(call.get("url")) is None else None
        asked = {"server": call.get("server"), "message": call.get("message"), "url": url,
                 "elicitationId": call.get("elicitation_id")}  # fmt: skip
        return _data("elicitation-url", call["id"], {**about, **asked})
    return _data("elicitation", call["id"], {**about, **{k: call.get(k) for k in ("server", "message", "schema")}})


def _data(name: str, part_id: str, data: dict[str, Any]) -> dict[str, Any]:
    return {"type": f"data-{name}", "id": part_id, "data": data}


def _part(kind: MessageKind) -> str:
    return "text" if kind == "text" else "reasoning"


def _json(value: Any) -> Any:
    """A tool's value as the part's JSON ``output`` (its text when it is not JSON)."""
    try:
        return json.loads(json.dumps(value, ensure_ascii=False))
    except (TypeError, ValueError):
        return as_text(value)


# -- reading a request ----------------------------------------------------------------------------


def checked_request(body: Any) -> dict[str, Any]:
    """``body`` when it has the shape of a ``useChat`` request, else ``Refused`` (422) saying what is wrong.

    Checked: the chat ``id`` (a non-empty string), ``messages`` (a non-empty list of objects, each
    with a string ``role`` and, when present, a list of object ``parts``), and in the last
    message the parts read: text parts' ``text`` a string, tool parts' ``toolCallId`` a string
    and ``approval`` an object.
    """
    if not isinstance(body, dict):
        raise Refused(422, "the request must be a JSON object")
    if not isinstance(body.get("id"), str) or not body["id"]:
        raise Refused(422, "the request needs the chat's `id` (a string)")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
        raise Refused(422, "`messages` must be a non-empty list of objects")
    for message in messages:
        parts = message.get("parts", [])
        if not isinstance(message.get("role"), str) or not isinstance(parts, list):
            raise Refused(422, "each message needs a string `role` and a list of `parts`")
        if not all(isinstance(part, dict) for part in parts):
            raise Refused(422, "each part of a message must be an object")
    for part in messages[-1].get("parts", []):
        if part.get("type") == "text" and not isinstance(part.get("text"), str):
            raise Refused(422, "a text part's `text` must be a string")
        if "toolCallId" in part and not isinstance(part["toolCallId"], str):
            raise Refused(422, "a tool part's `toolCallId` must be a string")
        if "approval" in part and not isinstance(part["approval"], dict):
            raise Refused(422, "a tool part's `approval` must be an object")
    return body


def read_request(
    body: Mapping[str, Any], signature: type[dspy.Signature], stored: dspy.History | None, offered: Offered
) -> Call:
    """The agent call a ``useChat`` request asks for (``stored``: the chat's history on the server).

    ``body`` is one ``checked_request`` let through; ``offered``: the agent's own tool names and the
    client tools the request declares (its ``tools``)."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages or not isinstance(messages[-1], Mapping):
        raise ConfigurationError("the request has no `messages`")
    history = stored if stored is not None else dspy.History(messages=[])
    last = messages[-1]
    if last.get("role") == "assistant":
        if stored is None:  # nothing to decide on: as REST answers for it (404)
            raise BeforeStream(404, f"no conversation {body.get('id')!r}")
        return _resume(last, history, offered)
    if last.get("role") != "user":
        raise ConfigurationError(f"the last message must be the user's or the assistant's, got {last.get('role')!r}")
    text = "".join(
        p.get("text", "") for p in last.get("parts") or [] if isinstance(p, Mapping) and p.get("type") == "text"
    )
    return Call({**inputs_from_text(signature, text), "history": history}, tools=offered.tools)


def _resume(message: Mapping[str, Any], history: dspy.History, offered: Offered) -> Call:
    """The answers in the assistant message's tool parts. A part for a call the server recorded as
    done is the client's copy of it (ignored); one for a call the server never saw is refused."""
    pending = {call["id"]: call for call in paused_calls(history)}
    if not pending:  # answered already (another tab, a second click): 409
        raise BeforeStream(409, "the conversation is not waiting for any tool decision: it was answered already")
    recorded = recorded_calls(history.messages)
    approvals: dict[str, Any] = {}
    answers: dict[str, Any] = {}  # requests for input answered: the form's fields, False or "cancel"
    results: dict[str, Any] = {}
    for part in message.get("parts") or []:
        call_id = part.get("toolCallId") if isinstance(part, Mapping) else None
        state = part.get("state") if isinstance(part, Mapping) else None
        state = state if isinstance(state, str) else None  # a client's `state` of another type answers nothing
        call = pending.get(call_id) if isinstance(call_id, str) else None
        if call is None:
            if state in _ANSWERS and call_id not in recorded:
                raise ConfigurationError(f"a tool part answers call {call_id!r}, which this chat is not waiting for")
            continue
        if call["kind"] == "approval" and state in ("approval-responded", "output-denied"):
            approvals[call["id"]] = _approval(part.get("approval") or {})
        elif call["kind"] == "elicitation" and state == "output-available":
            answers[call["id"]] = elicitation_answer(f"the tool part of call {call['id']!r}", part.get("output"))
        elif call["kind"] == "external" and state == "output-available":
            results[call["id"]] = part.get("output")
        elif call["kind"] == "external" and state == "output-error":
            results[call["id"]] = RuntimeError(str(part.get("errorText") or "the tool failed"))
    refused = frozenset(k for k, v in approvals.items() if v is not True)
    approvals.update(answers)  # answered, not refused: the tool goes on with the answer
    checked = offered.results(pending, results)
    return Call(
        {"history": history, "approvals": approvals, "results": checked}, frozenset(pending), refused, offered.tools
    )


_ANSWERS = frozenset({"output-available", "output-error", "approval-responded", "output-denied"})


def _approval(approval: Mapping[str, Any]) -> bool | str:
    approved = approval.get("approved")
    if not isinstance(approved, bool):
        raise ConfigurationError(f"a tool approval needs `approved: true | false`, got {dict(approval)!r}")
    reason = approval.get("reason")
    if not approved and isinstance(reason, str) and reason.strip():
        return reason
    return approved
