"""An MCP server's request to open a URL (URL mode, ``elicit="pause"``) in the web app: the paused
call reaches the stream (an AG-UI interrupt of reason ``"elicitation"`` with ``mode`` ``"url"``, an
AI SDK ``data-elicitation-url`` part), the client's answer resumes the turn (accept: the call is
made again; decline: the call's error), and a URL that may not be shown never reaches the client.

The server is ``tests/mcp_url_program.py``'s drive server (in process), whose ``files`` tool is
refused with ``URLElicitationRequiredError`` (-32042) until the person signed in. Every turn runs
through both drivers (``sync``).
"""

from __future__ import annotations

from typing import Any

import jsonschema
import mcp_url_program as served
import pytest
from mcp_url_program import DRIVE
from web_helpers import agui_events, vercel_parts, verify_agui, verify_vercel
from web_scenarios import client, run_input, with_lm

import dspy_imp.web
from dspy_imp import mcp
from dspy_imp.testing import call, reply

pytestmark = pytest.mark.parametrize("sync", [False, True], ids=["async", "sync"])

FILES = {"name": "files", "arguments": {"folder": "docs"}}
PENDING = {"id": "c1", "name": "files", "args": {"folder": "docs"}, "kind": "elicitation", "server": "drive",
           "mode": "url", "message": "Sign in to Drive", "url": DRIVE, "elicitation_id": "el-1"}  # fmt: skip


@pytest.fixture(autouse=True)
def _fresh() -> None:
    served.clear()


def answer(text: str) -> Any:
    return reply(f"[[ ## answer ## ]]\n{text}\n\n[[ ## completed ## ]]")


def drive_app(sync: bool, *script: Any) -> tuple[Any, mcp.Server]:
    server = mcp.memory(served.drive(), elicit="pause")
    program = dspy_imp.ReActV2("question -> answer", tools=[server])
    with_lm(program, [reply("listing", calls=[call("files", {"folder": "docs"}, id="c1")]), *script])
    return dspy_imp.web.app(program, sync=sync), server


# -- AG-UI ------------------------------------------------------------------------------------------


async def agui(app: Any, body: dict[str, Any]) -> list[dict[str, Any]]:
    async with client(app) as http:
        response = await http.post("/ag-ui", json=body)
    assert response.status_code == 200, response.text
    return agui_events(response.text)


INTERRUPT = {
    "id": "c1",
    "reason": "elicitation",
    "message": "Sign in to Drive",
    "toolCallId": "c1",
    "responseSchema": {
        "type": "object",
        "properties": {"action": {"enum": ["accept", "decline", "cancel"]}},
        "required": ["action"],
    },
    "metadata": {
        "dspy_imp": {
            "name": "files",
            "args": {"folder": "docs"},
            "kind": "elicitation",
            "server": "drive",
            "mode": "url",
            "message": "Sign in to Drive",
            "url": DRIVE,
            "elicitation_id": "el-1",
        }
    },
}


async def test_agui_the_url_is_an_interrupt_and_opening_it_makes_the_call_again(sync: bool) -> None:
    app, server = drive_app(sync, answer("two files"))
    paused = await agui(app, run_input("List my docs"))
    verify_agui(paused)
    assert paused[-1]["outcome"] == {"type": "interrupt", "interrupts": [INTERRUPT]}
    assert paused[-1]["result"]["pending_calls"] == [PENDING]
    async with client(app) as http:  # the page's reopened view asks the same
        reopened = (await http.get("/api/conversations/t1")).json()
    assert reopened["interrupts"] == [INTERRUPT]
    assert served.RECEIVED == [FILES]

    served.SIGNED_IN[0] = True  # the person opened the link and signed in
    resume = [{"interruptId": "c1", "status": "resolved", "payload": {"action": "accept"}}]
    resumed = await agui(app, run_input(run="r2", resume=resume))
    verify_agui(resumed, known_calls={"c1"})
    results = [(e["toolCallId"], e["content"]) for e in resumed if e["type"] == "TOOL_CALL_RESULT"]
    assert results == [("c1", "docs: a.txt, b.txt")]
    assert resumed[-1]["result"]["outputs"] == {"answer": "two files"}
    assert served.RECEIVED == [FILES, FILES]
    async with client(app) as http:
        turns = (await http.get("/api/conversations/t1")).json()["turns"]
    assert [{k: v for k, v in t.items() if k not in ("ending", "messages")} for t in turns] == [
        {},
        {"answers": {"c1": "accept"}},
    ]
    server.close()


@pytest.mark.parametrize(
    "entry",
    [{"status": "resolved", "payload": {"action": "decline"}}, {"status": "cancelled"}],
    ids=["declined", "interrupt cancelled"],
)
async def test_agui_a_declined_url_is_the_calls_error_and_not_called_again(sync: bool, entry: dict[str, Any]) -> None:
    app, server = drive_app(sync, answer("no files"))
    await agui(app, run_input("List my docs"))
    resumed = await agui(app, run_input(run="r2", resume=[{"interruptId": "c1", **entry}]))
    results = [(e["toolCallId"], e["content"]) for e in resumed if e["type"] == "TOOL_CALL_RESULT"]
    assert results == [
        ("c1", "RuntimeError: MCP server 'drive' needs a URL opened to make this call, and the person did not")
    ]
    assert served.RECEIVED == [FILES]
    server.close()


async def test_agui_a_content_answer_to_a_url_is_refused_and_the_turn_keeps_waiting(sync: bool) -> None:
    app, server = drive_app(sync, answer("two files"))
    await agui(app, run_input("List my docs"))
    bad = [{"interruptId": "c1", "status": "resolved", "payload": {"action": "accept", "content": {"pw": "x"}}}]
    refused = await agui(app, run_input(run="r2", resume=bad))
    assert [e["type"] for e in refused] == ["RUN_STARTED", "RUN_ERROR"]
    assert refused[-1]["message"] == (
        "ConfigurationError: `approvals['c1']` answers a request to open a URL (files): give True (the person "
        "opened it), False (decline) or \"cancel\"; got {'pw': 'x'}"
    )
    async with client(app) as http:
        waiting = (await http.get("/api/conversations/t1")).json()
    assert waiting["interrupts"] == [INTERRUPT]
    assert served.RECEIVED == [FILES]
    server.close()


# -- the AI SDK's UI message stream -----------------------------------------------------------------


async def chat(app: Any, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    async with client(app) as http:
        response = await http.post(
            "/api/chat", json={"id": "chat-1", "messages": messages, "trigger": "submit-message"}
        )
    assert response.status_code == 200, response.text
    return vercel_parts(response.text)


USER = {"id": "u1", "role": "user", "parts": [{"type": "text", "text": "List my docs"}]}
QUESTION = {
    "type": "data-elicitation-url",
    "id": "c1",
    "data": {"toolCallId": "c1", "toolName": "files", "server": "drive", "message": "Sign in to Drive", "url": DRIVE,
             "elicitationId": "el-1"},
}  # fmt: skip


def answered(message_id: str, output: Any) -> dict[str, Any]:
    return {
        "id": message_id,
        "role": "assistant",
        "parts": [
            {"type": "step-start"},
            {"type": "tool-files", "toolCallId": "c1", "state": "output-available", "input": {"folder": "docs"},
             "output": output},
        ],
    }  # fmt: skip


async def test_ai_sdk_the_url_is_a_data_part_and_opening_it_a_tool_output(sync: bool) -> None:
    app, server = drive_app(sync, answer("two files"))
    paused = await chat(app, [USER])
    verify_vercel(paused)
    assert paused[-2] == QUESTION
    async with client(app) as http:  # the part as the app's description says it
        document = (await http.get("/openapi.json")).json()
    jsonschema.validate(QUESTION, {**document, "$ref": "#/components/schemas/ChatPart"})
    assert paused[-1]["finishReason"] == "tool-calls"
    assert paused[-1]["messageMetadata"]["pending_calls"] == [PENDING]

    served.SIGNED_IN[0] = True
    resumed = await chat(app, [USER, answered(paused[0]["messageId"], {"action": "accept"})])
    verify_vercel(resumed, known_calls={"c1"})
    assert resumed[1] == {"type": "tool-output-available", "toolCallId": "c1", "output": "docs: a.txt, b.txt"}
    assert resumed[-1]["messageMetadata"]["outputs"] == {"answer": "two files"}
    assert served.RECEIVED == [FILES, FILES]
    server.close()


async def test_ai_sdk_a_declined_url(sync: bool) -> None:
    app, server = drive_app(sync, answer("no files"))
    paused = await chat(app, [USER])
    resumed = await chat(app, [USER, answered(paused[0]["messageId"], {"action": "decline"})])
    assert resumed[1] == {
        "type": "tool-output-error",
        "toolCallId": "c1",
        "errorText": "RuntimeError: MCP server 'drive' needs a URL opened to make this call, and the person did not",
    }
    assert served.RECEIVED == [FILES]
    server.close()


# -- a URL that may not be shown -------------------------------------------------------------------


async def test_a_url_edited_into_a_script_never_reaches_the_client(sync: bool) -> None:
    from dspy_imp.web import agui as agui_module
    from dspy_imp.web import vercel

    edited = {**PENDING, "url": "javascript:alert(document.cookie)"}
    shown = agui_module.interrupt(edited)
    assert shown.metadata is not None and shown.metadata["dspy_imp"]["url"] is None
    assert vercel._question(edited)["data"]["url"] is None
    assert vercel._question(PENDING) == QUESTION
