"""The AI SDK UI message stream: each part kind against the AI SDK's own schema, whole-turn golden
streams, and a paused turn resumed the way ``useChat`` (AI SDK 6) answers an approval.

    DSPY_IMP_REGEN_GOLDEN=1 .venv/bin/pytest tests/test_web_vercel.py -k golden   # after a reviewed change
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from web_helpers import vercel_parts, verify_vercel
from web_scenarios import (
    client,
    failed_script,
    normalized,
    paused_script,
    support_agent,
    text_agent,
    text_script,
    tool_script,
    with_lm,
)

import dspy_imp
import dspy_imp.web
from dspy_imp.web import vercel
from dspy_imp.web.vercel import VercelEncoder

GOLDEN = Path(__file__).parent / "golden" / "web_vercel.json"
REGENERATE = os.environ.get("DSPY_IMP_REGEN_GOLDEN") == "1"

pytestmark = pytest.mark.parametrize("sync", [False, True], ids=["async", "sync"])


def user(text: str, message_id: str = "u1") -> dict[str, Any]:
    return {"id": message_id, "role": "user", "parts": [{"type": "text", "text": text}]}


async def post(app: Any, messages: list[dict[str, Any]], chat: str = "chat-1") -> list[dict[str, Any]]:
    async with client(app) as http:
        response = await http.post("/api/chat", json={"id": chat, "messages": messages, "trigger": "submit-message"})
    assert response.status_code == 200
    assert response.headers["x-vercel-ai-ui-message-stream"] == "v1"
    assert response.headers["content-type"].startswith("text/event-stream")
    return vercel_parts(response.text)


def _stream(parts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return vercel_parts("".join(vercel.encode(p) for p in parts) + vercel.DONE)


KINDS = {
    "start": (lambda e: e.run_started(), [{"type": "start", "messageId": "m1"}]),
    "steps": (lambda e: e.step_started("x") + e.step_finished("x"), [{"type": "start-step"}, {"type": "finish-step"}]),
    "text": (
        lambda e: e.message_started("a", "text") + e.message_delta("a", "text", "Hi") + e.message_ended("a", "text"),
        [
            {"type": "text-start", "id": "a"},
            {"type": "text-delta", "id": "a", "delta": "Hi"},
            {"type": "text-end", "id": "a"},
        ],
    ),
    "reasoning": (
        lambda e: (
            e.message_started("t", "thought") + e.message_delta("t", "thought", "Hm") + e.message_ended("t", "thought")
        ),
        [
            {"type": "reasoning-start", "id": "t"},
            {"type": "reasoning-delta", "id": "t", "delta": "Hm"},
            {"type": "reasoning-end", "id": "t"},
        ],
    ),
    "tool input": (
        lambda e: e.tool_call("c1", "lookup", {"city": "Paris"}, None),
        [
            {"type": "tool-input-start", "toolCallId": "c1", "toolName": "lookup"},
            {"type": "tool-input-delta", "toolCallId": "c1", "inputTextDelta": '{"city": "Paris"}'},
            {"type": "tool-input-available", "toolCallId": "c1", "toolName": "lookup", "input": {"city": "Paris"}},
        ],
    ),
    "tool output": (
        lambda e: e.tool_result("c1", {"temp": 21}, False, False),
        [{"type": "tool-output-available", "toolCallId": "c1", "output": {"temp": 21}}],
    ),
    "tool error": (
        lambda e: e.tool_result("c1", "Error: no such city", True, False),
        [{"type": "tool-output-error", "toolCallId": "c1", "errorText": "Error: no such city"}],
    ),
    "tool denied": (
        lambda e: e.tool_result("c1", "Error: refused", True, True),
        [{"type": "tool-output-denied", "toolCallId": "c1"}],
    ),
    "error": (
        lambda e: e.failed(dspy_imp.ConfigurationError("bad input")),
        [{"type": "error", "errorText": "ConfigurationError: bad input"}],
    ),
}


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_each_part_kind_matches_the_ai_sdk_schema(kind: str, sync: bool) -> None:
    make, expected = KINDS[kind]
    assert _stream(make(VercelEncoder("m1"))) == expected


def _golden(name: str, parts: list[dict[str, Any]]) -> None:
    golden = json.loads(GOLDEN.read_text(encoding="utf-8")) if GOLDEN.exists() else {}
    if REGENERATE:
        golden[name] = normalized(parts)
        GOLDEN.write_text(json.dumps(golden, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    assert normalized(parts) == golden[name]


async def test_golden_tool_turn(sync: bool) -> None:
    agent = support_agent()
    with_lm(agent, tool_script())
    parts = await post(dspy_imp.web.app(agent, sync=sync), [user("Where is order 42?")])
    verify_vercel(parts)
    _golden("tool turn", parts)
    assert parts[-1]["finishReason"] == "stop"
    assert parts[-1]["messageMetadata"]["termination_reason"] == "finished_by_tool"


async def test_golden_text_turn(sync: bool) -> None:
    agent = text_agent()
    with_lm(agent, text_script())
    parts = await post(dspy_imp.web.app(agent, sync=sync), [user("Hi")])
    verify_vercel(parts)
    _golden("text turn", parts)


async def test_golden_paused_turn_resumed_by_an_approval(sync: bool) -> None:
    agent = support_agent()
    lm = with_lm(agent, paused_script())
    app = dspy_imp.web.app(agent, sync=sync)
    paused = await post(app, [user("Refund order 42")])
    verify_vercel(paused)
    _golden("paused turn", paused)
    assert paused[-2] == {"type": "tool-approval-request", "approvalId": "c9", "toolCallId": "c9"}
    assert paused[-1]["finishReason"] == "tool-calls"
    answered = {
        "id": paused[0]["messageId"],
        "role": "assistant",
        "parts": [
            {"type": "step-start"},
            {
                "type": "tool-refund",
                "toolCallId": "c9",
                "state": "approval-responded",
                "input": {"order_id": "42"},
                "approval": {"id": "c9", "approved": True},
            },
        ],
    }
    resumed = await post(app, [user("Refund order 42"), answered])
    verify_vercel(resumed, known_calls={"c9"})
    _golden("resumed turn", resumed)
    assert resumed[0] == {"type": "start", "messageId": paused[0]["messageId"]}  # the same message goes on
    assert resumed[1] == {"type": "tool-output-available", "toolCallId": "c9", "output": "order 42 refunded"}
    assert lm.remaining == 0


async def test_a_refused_approval_is_denied_and_the_model_reads_the_reason(sync: bool) -> None:
    agent = support_agent()
    lm = with_lm(agent, paused_script())
    app = dspy_imp.web.app(agent, sync=sync)
    await post(app, [user("Refund order 42")])
    refused = {
        "id": "a1",
        "role": "assistant",
        "parts": [
            {
                "type": "tool-refund",
                "toolCallId": "c9",
                "state": "approval-responded",
                "input": {"order_id": "42"},
                "approval": {"id": "c9", "approved": False, "reason": "Not without a receipt."},
            }
        ],
    }
    resumed = await post(app, [user("Refund order 42"), refused])
    assert resumed[1] == {"type": "tool-output-denied", "toolCallId": "c9"}
    assert "Not without a receipt." in lm.requests[-1].messages[-1]["content"]


async def test_golden_failed_turn(sync: bool) -> None:
    agent = support_agent()
    with_lm(agent, failed_script())
    parts = await post(dspy_imp.web.app(agent, sync=sync), [user("Where is order 42?")])
    verify_vercel(parts)
    _golden("failed turn", parts)
    assert parts[-1] == {"type": "error", "errorText": "StepError: bad key"}


async def test_a_request_without_a_chat_id_is_refused(sync: bool) -> None:
    async with client(dspy_imp.web.app(text_agent(), sync=sync)) as http:
        response = await http.post("/api/chat", json={"messages": [user("Hi")]})
    assert response.status_code == 422 and "id" in response.json()["error"]
