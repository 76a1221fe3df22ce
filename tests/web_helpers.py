"""What the web tests share: reading server-sent events, each protocol's rules, a live server.

- ``agui_events``: every event of an AG-UI stream validated by the ``ag-ui-protocol`` package's own
  ``Event`` union, with no field it does not know; ``verify_agui`` checks the order rules of the
  AG-UI 1.0 lifecycle (docs.ag-ui.com/spec/1.0/events/lifecycle; the TypeScript client's
  ``verifyEvents``): RUN_STARTED first, nothing after the terminal event, every message, reasoning
  span, tool call and step opened before it continues and closed before the run ends, a result
  only for a call whose arguments ended.
- ``vercel_parts``: every part of an AI SDK UI message stream checked against the AI SDK's
  ``uiMessageChunkSchema`` (vercel/ai packages/ai/src/ui-message-stream/ui-message-chunks.ts,
  where every part is a ``z.strictObject``: exactly these keys; a data part is any ``data-*`` type
  with ``data`` and an optional ``id`` and ``transient``), the stream closed by
  ``[DONE]``; ``verify_vercel`` checks the order ``processUIMessageStream`` relies on.
- ``LiveServer``: the app under uvicorn on 127.0.0.1 in a thread, for the browser.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Collection
from typing import Any

import pydantic
from ag_ui.core import Event

AGUI = pydantic.TypeAdapter(Event)


def sse_data(text: str) -> list[str]:
    """The ``data`` of each server-sent event, in order."""
    out = []
    for block in text.split("\n\n"):
        lines = [line[5:].lstrip() for line in block.split("\n") if line.startswith("data:")]
        if lines:
            out.append("\n".join(lines))
    return out


def agui_events(text: str) -> list[dict[str, Any]]:
    events = []
    for data in sse_data(text):
        raw = json.loads(data)
        event = AGUI.validate_python(raw)
        assert not event.model_extra, f"fields AG-UI does not define: {event.model_extra}"
        assert event.model_dump(mode="json", by_alias=True) == raw
        events.append(raw)
    return events


def verify_agui(events: list[dict[str, Any]], known_calls: Collection[str] = ()) -> None:
    """AG-UI's order rules over one run (``known_calls``: calls an earlier run of the thread made)."""
    assert events and events[0]["type"] in ("RUN_STARTED", "RUN_ERROR"), events[:1]
    opened: dict[str, set[str]] = {"text": set(), "span": set(), "reasoning": set(), "call": set(), "step": set()}
    used: set[str] = set()
    ended_calls = set(known_calls)
    for index, event in enumerate(events):
        kind = event["type"]
        if kind in ("RUN_FINISHED", "RUN_ERROR"):
            assert index == len(events) - 1, f"{kind} is not the last event"
            if kind == "RUN_FINISHED":
                assert not any(opened.values()), f"left open at RUN_FINISHED: {opened}"
            continue
        assert index == 0 or kind != "RUN_STARTED", "a second RUN_STARTED"
        _check_one(event, opened, used, ended_calls)


_OPENS = {
    "TEXT_MESSAGE_START": ("text", "messageId"),
    "REASONING_START": ("span", "messageId"),
    "REASONING_MESSAGE_START": ("reasoning", "messageId"),
    "TOOL_CALL_START": ("call", "toolCallId"),
    "STEP_STARTED": ("step", "stepName"),
}
_CONTINUES = {
    "TEXT_MESSAGE_CONTENT": ("text", "messageId"),
    "REASONING_MESSAGE_CONTENT": ("reasoning", "messageId"),
    "TOOL_CALL_ARGS": ("call", "toolCallId"),
}
_CLOSES = {
    "TEXT_MESSAGE_END": ("text", "messageId"),
    "REASONING_MESSAGE_END": ("reasoning", "messageId"),
    "REASONING_END": ("span", "messageId"),
    "TOOL_CALL_END": ("call", "toolCallId"),
    "STEP_FINISHED": ("step", "stepName"),
}


def _check_one(event: dict[str, Any], opened: dict[str, set[str]], used: set[str], ended_calls: set[str]) -> None:
    kind = event["type"]
    if kind in _OPENS:
        group, key = _OPENS[kind]
        name = f"{group}:{event[key]}"
        assert event[key] not in opened[group] and name not in used, f"{kind} {event[key]!r} opened twice"
        if group == "reasoning":
            assert event[key] in opened["span"], f"{kind} outside its REASONING_START"
        opened[group].add(event[key])
        used.add(name)
    elif kind in _CONTINUES:
        group, key = _CONTINUES[kind]
        assert event[key] in opened[group], f"{kind} for {event[key]!r}, which is not open"
    elif kind in _CLOSES:
        group, key = _CLOSES[kind]
        assert event[key] in opened[group], f"{kind} for {event[key]!r}, which is not open"
        if group == "span":
            assert event[key] not in opened["reasoning"], "REASONING_END with its message open"
        opened[group].discard(event[key])
        if group == "call":
            ended_calls.add(event[key])
    elif kind == "TOOL_CALL_RESULT":
        assert event["toolCallId"] in ended_calls, f"a result for {event['toolCallId']!r} before its call ended"


# -- the AI SDK UI message stream -----------------------------------------------------------------

_META = {"providerMetadata"}
_TOOL = {"providerExecuted", "providerMetadata", "dynamic", "title", "_meta"}
PARTS: dict[str, tuple[set[str], set[str]]] = {  # type -> (required keys, optional keys), besides "type"
    "text-start": ({"id"}, _META),
    "text-delta": ({"id", "delta"}, _META),
    "text-end": ({"id"}, _META),
    "reasoning-start": ({"id"}, _META),
    "reasoning-delta": ({"id", "delta"}, _META),
    "reasoning-end": ({"id"}, _META),
    "error": ({"errorText"}, set()),
    "tool-input-start": ({"toolCallId", "toolName"}, _TOOL),
    "tool-input-delta": ({"toolCallId", "inputTextDelta"}, set()),
    "tool-input-available": ({"toolCallId", "toolName", "input"}, _TOOL),
    "tool-input-error": ({"toolCallId", "toolName", "input", "errorText"}, _TOOL - {"_meta"}),
    "tool-approval-request": ({"approvalId", "toolCallId"}, set()),
    "tool-output-available": ({"toolCallId", "output"}, {"providerExecuted", "dynamic", "preliminary"}),
    "tool-output-error": ({"toolCallId", "errorText"}, {"providerExecuted", "dynamic"}),
    "tool-output-denied": ({"toolCallId"}, set()),
    "start-step": (set(), set()),
    "finish-step": (set(), set()),
    "start": (set(), {"messageId", "messageMetadata"}),
    "finish": (set(), {"finishReason", "messageMetadata"}),
    "abort": (set(), {"reason"}),
    "message-metadata": ({"messageMetadata"}, set()),
}
_STRINGS = {"id", "delta", "errorText", "toolCallId", "toolName", "inputTextDelta", "approvalId", "messageId"}
FINISH_REASONS = {"stop", "length", "content-filter", "tool-calls", "error", "other"}


def vercel_parts(text: str) -> list[dict[str, Any]]:
    data = sse_data(text)
    assert data and data[-1] == "[DONE]", "the stream does not end with [DONE]"
    parts = [json.loads(item) for item in data[:-1]]
    for part in parts:
        if part["type"].startswith("data-"):  # z.strictObject({type: `data-${string}`, id?, data, transient?})
            keys = set(part) - {"type"}
            assert {"data"} <= keys <= {"id", "data", "transient"}, f"{part['type']}: keys {sorted(keys)}"
            assert isinstance(part.get("id", ""), str), part
            continue
        required, optional = PARTS[part["type"]]
        keys = set(part) - {"type"}
        assert required <= keys <= required | optional, f"{part['type']}: keys {sorted(keys)}"
        for key in keys & _STRINGS:
            assert isinstance(part[key], str), (part["type"], key)
        if part["type"] == "finish" and "finishReason" in part:
            assert part["finishReason"] in FINISH_REASONS
    return parts


def verify_vercel(parts: list[dict[str, Any]], known_calls: Collection[str] = ()) -> None:
    assert parts[0]["type"] == "start", parts[:1]
    assert parts[-1]["type"] in ("finish", "error"), parts[-1:]
    text: set[str] = set()
    inputs: set[str] = set(known_calls)
    step = False
    for part in parts[1:-1]:
        kind = part["type"]
        if kind in ("start-step", "finish-step"):
            assert step == (kind == "finish-step"), f"{kind} out of order"
            step = kind == "start-step"
        elif kind.endswith("-start") and kind.split("-")[0] in ("text", "reasoning"):
            assert part["id"] not in text
            text.add(part["id"])
        elif kind.endswith(("-delta", "-end")) and kind.split("-")[0] in ("text", "reasoning"):
            assert part["id"] in text, f"{kind} for {part['id']!r}, not started"
            if kind.endswith("-end"):
                text.discard(part["id"])
        elif kind == "tool-input-available":
            inputs.add(part["toolCallId"])
        elif kind.startswith("tool-output") or kind == "tool-approval-request":
            assert part["toolCallId"] in inputs, f"{kind} for a call whose input is not available"
    assert not step and not text, "left open at the end"


# -- a live server --------------------------------------------------------------------------------


class LiveServer:
    """``app`` under uvicorn on 127.0.0.1 (a free port), in a thread; ``url`` once it listens."""

    def __init__(self, app: Any):
        import uvicorn

        self.socket = socket.socket()
        self.socket.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.socket.getsockname()[1]}/"
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.socket]}, daemon=True)

    def __enter__(self) -> LiveServer:
        self.thread.start()
        while not self.server.started:  # a readiness wait, not a timed assertion
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.should_exit = True
        self.thread.join()
        self.socket.close()
