"""An MCP server's request for input (``elicit="pause"``) in the web app: the paused call reaches
the stream (an AG-UI interrupt, an AI SDK ``data-elicitation`` part), the client's answer resumes
the turn and the server receives exactly it (the form's defaults filled in), a decline and a
cancel are sent as such, and an answer the form refuses is refused naming the field, before
anything is sent, while the turn keeps waiting.

The server is ``tests/mcp_elicit_program.py``'s booking server (in process, a 2026-07-28
session: the resumed call is the round's retry carrying the answer); conversations are kept in
the app's default memory store, and in a ``FileStore`` across a restart. A sub-agent's question is
its segment's interrupt (AG-UI) and answered through its own tool part (AI SDK). Every turn runs
through both drivers (``sync``).
"""

from __future__ import annotations

from typing import Any

import jsonschema
import mcp_elicit_program as served
import pytest
from mcp_elicit_program import agent, answer
from web_helpers import agui_events, vercel_parts, verify_agui, verify_vercel
from web_scenarios import client, run_input, with_lm

import dspy_imp.web
from dspy_imp.testing import call, reply

pytestmark = pytest.mark.parametrize("sync", [False, True], ids=["async", "sync"])

KEY = "mcp_elicit_program:ask_seat"
CALL = {"name": "book", "arguments": {"flight": "LH1"}}
SCHEMA = {
    "properties": {
        "row": {"title": "Row", "type": "integer"},
        "window": {"default": True, "title": "Window", "type": "boolean"},
    },
    "required": ["row"],
    "type": "object",
}
PENDING = {"id": "c1", "name": "book", "args": {"flight": "LH1"}, "kind": "elicitation", "server": "booking",
           "message": "Which row?", "schema": SCHEMA}  # fmt: skip


@pytest.fixture(autouse=True)
def _fresh() -> None:
    served.RECEIVED.clear()
    served.RAN.clear()


def retried(response: dict[str, Any]) -> dict[str, Any]:
    """The resumed call as the server receives it: the round's retry with the answer."""
    return {**CALL, "inputResponses": {KEY: response}, "requestState": "<sealed>"}


def booking_app(sync: bool, *script: Any) -> tuple[Any, Any, Any]:
    program, server = agent("auto")
    lm = with_lm(program, [reply("booking", calls=[call("book", {"flight": "LH1"}, id="c1")]), *script])
    return dspy_imp.web.app(program, sync=sync), server, lm


# -- AG-UI ------------------------------------------------------------------------------------------


async def agui(app: Any, body: dict[str, Any]) -> list[dict[str, Any]]:
    async with client(app) as http:
        response = await http.post("/ag-ui", json=body)
    assert response.status_code == 200, response.text
    return agui_events(response.text)


INTERRUPT = {
    "id": "c1",
    "reason": "elicitation",
    "message": "Which row?",
    "toolCallId": "c1",
    "responseSchema": {
        "type": "object",
        "properties": {"action": {"enum": ["accept", "decline", "cancel"]}, "content": SCHEMA},
        "required": ["action"],
    },
    "metadata": {
        "dspy_imp": {
            "name": "book",
            "args": {"flight": "LH1"},
            "kind": "elicitation",
            "server": "booking",
            "message": "Which row?",
            "schema": SCHEMA,
        }
    },
}


async def test_agui_the_question_is_an_interrupt_and_the_accepted_answer_finishes_the_call(sync: bool) -> None:
    app, server, lm = booking_app(sync, answer("booked"))
    paused = await agui(app, run_input("Book me a seat"))
    verify_agui(paused)
    finished = paused[-1]
    assert finished["outcome"] == {"type": "interrupt", "interrupts": [INTERRUPT]}
    assert finished["result"]["termination_reason"] == "paused"
    assert finished["result"]["pending_calls"] == [PENDING]
    async with client(app) as http:  # the page's reopened view asks the same
        reopened = (await http.get("/api/conversations/t1")).json()
    assert reopened["interrupts"] == [INTERRUPT]
    assert served.RECEIVED == [CALL] and served.RAN == []

    resume = [{"interruptId": "c1", "status": "resolved", "payload": {"action": "accept", "content": {"row": 7}}}]
    resumed = await agui(app, run_input(run="r2", resume=resume))
    verify_agui(resumed, known_calls={"c1"})
    results = [(e["toolCallId"], e["content"]) for e in resumed if e["type"] == "TOOL_CALL_RESULT"]
    assert results == [("c1", "LH1: row 7, window True")]
    assert resumed[-1]["outcome"] == {"type": "success"}
    assert resumed[-1]["result"]["outputs"] == {"answer": "booked"}
    assert [CALL, retried({"action": "accept", "content": {"window": True, "row": 7}})] == served.RECEIVED
    assert served.RAN == ["LH1: row 7, window True"]
    assert lm.remaining == 0
    async with client(app) as http:  # how the page tells the answer after a reload: its action only
        turns = (await http.get("/api/conversations/t1")).json()["turns"]
    assert [{k: v for k, v in t.items() if k not in ("ending", "messages")} for t in turns] == [
        {},
        {"answers": {"c1": "accept"}},
    ]
    server.close()


@pytest.mark.parametrize(
    ("entry", "action"),
    [
        ({"status": "resolved", "payload": {"action": "decline"}}, "decline"),
        ({"status": "resolved", "payload": {"action": "cancel"}}, "cancel"),
        ({"status": "cancelled"}, "cancel"),
    ],
    ids=["declined", "cancelled", "interrupt cancelled"],
)
async def test_agui_a_declined_or_cancelled_question(sync: bool, entry: dict[str, Any], action: str) -> None:
    app, server, _lm = booking_app(sync, answer("not booked"))
    await agui(app, run_input("Book me a seat"))
    resumed = await agui(app, run_input(run="r2", resume=[{"interruptId": "c1", **entry}]))
    verify_agui(resumed, known_calls={"c1"})
    results = [(e["toolCallId"], e["content"]) for e in resumed if e["type"] == "TOOL_CALL_RESULT"]
    assert results == [("c1", f"not booked: {action}")]
    assert [CALL, retried({"action": action})] == served.RECEIVED
    assert [f"LH1: {action}"] == served.RAN
    server.close()


async def test_agui_a_bad_answer_is_refused_naming_the_field_and_the_turn_keeps_waiting(sync: bool) -> None:
    app, server, _lm = booking_app(sync, answer("booked"))
    await agui(app, run_input("Book me a seat"))
    bad = [{"interruptId": "c1", "status": "resolved", "payload": {"action": "accept", "content": {"row": "seven"}}}]
    refused = await agui(app, run_input(run="r2", resume=bad))
    assert [e["type"] for e in refused] == ["RUN_STARTED", "RUN_ERROR"]
    assert refused[-1]["code"] == "ConfigurationError"
    assert refused[-1]["message"] == (
        "ConfigurationError: `approvals['c1']` field `row`: 'seven' is not of type 'integer' (the form of booking)"
    )
    missing = [{"interruptId": "c1", "status": "resolved", "payload": {"action": "accept"}}]
    unanswered = await agui(app, run_input(run="r3", resume=missing))  # `row` is required, with no default
    assert unanswered[-1]["message"] == (
        "ConfigurationError: `approvals['c1']`: 'row' is a required property (the form of booking)"
    )
    shapeless = await agui(app, run_input(run="r4", resume=[{"interruptId": "c1", "status": "resolved"}]))
    assert shapeless[-1]["message"].startswith(
        'ConfigurationError: resume entry \'c1\' answers a request for input: give {"action": "accept"'
    )
    assert served.RECEIVED == [CALL] and served.RAN == []  # nothing was sent
    async with client(app) as http:
        waiting = (await http.get("/api/conversations/t1")).json()
    assert waiting["interrupts"] == [INTERRUPT]  # the turn still waits for its answer
    good = [{"interruptId": "c1", "status": "resolved", "payload": {"action": "accept", "content": {"row": 3}}}]
    resumed = await agui(app, run_input(run="r5", resume=good))
    assert resumed[-1]["result"]["outputs"] == {"answer": "booked"}
    assert [CALL, retried({"action": "accept", "content": {"window": True, "row": 3}})] == served.RECEIVED
    server.close()


# -- the AI SDK's UI message stream -----------------------------------------------------------------


async def chat(app: Any, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    async with client(app) as http:
        response = await http.post(
            "/api/chat", json={"id": "chat-1", "messages": messages, "trigger": "submit-message"}
        )
    assert response.status_code == 200, response.text
    return vercel_parts(response.text)


USER = {"id": "u1", "role": "user", "parts": [{"type": "text", "text": "Book me a seat"}]}


def answered(message_id: str, output: Any) -> dict[str, Any]:
    """The assistant message as ``useChat`` sends it back after ``addToolResult`` on the call's part."""
    return {
        "id": message_id,
        "role": "assistant",
        "parts": [
            {"type": "step-start"},
            {"type": "tool-book", "toolCallId": "c1", "state": "output-available", "input": {"flight": "LH1"},
             "output": output},
        ],
    }  # fmt: skip


QUESTION = {
    "type": "data-elicitation",
    "id": "c1",
    "data": {"toolCallId": "c1", "toolName": "book", "server": "booking", "message": "Which row?", "schema": SCHEMA},
}


async def test_ai_sdk_the_question_is_a_data_part_and_the_answer_a_tool_output(sync: bool) -> None:
    app, server, _lm = booking_app(sync, answer("booked"))
    paused = await chat(app, [USER])
    verify_vercel(paused)
    assert {"type": "tool-input-available", "toolCallId": "c1", "toolName": "book", "input": {"flight": "LH1"}} in (
        paused
    )
    assert paused[-2] == QUESTION
    async with client(app) as http:  # the part as the app's description says it
        document = (await http.get("/openapi.json")).json()
    jsonschema.validate(QUESTION, {**document, "$ref": "#/components/schemas/ChatPart"})
    assert paused[-1]["finishReason"] == "tool-calls"
    assert paused[-1]["messageMetadata"]["pending_calls"] == [PENDING]

    output = {"action": "accept", "content": {"row": 12, "window": False}}
    resumed = await chat(app, [USER, answered(paused[0]["messageId"], output)])
    verify_vercel(resumed, known_calls={"c1"})
    assert resumed[1] == {"type": "tool-output-available", "toolCallId": "c1", "output": "LH1: row 12, window False"}
    assert resumed[-1]["messageMetadata"]["outputs"] == {"answer": "booked"}
    assert [CALL, retried(output)] == served.RECEIVED
    assert served.RAN == ["LH1: row 12, window False"]
    server.close()


async def test_ai_sdk_a_declined_question(sync: bool) -> None:
    app, server, _lm = booking_app(sync, answer("not booked"))
    paused = await chat(app, [USER])
    resumed = await chat(app, [USER, answered(paused[0]["messageId"], {"action": "decline"})])
    assert resumed[1] == {"type": "tool-output-available", "toolCallId": "c1", "output": "not booked: decline"}
    assert [CALL, retried({"action": "decline"})] == served.RECEIVED
    server.close()


async def test_ai_sdk_a_bad_answer_is_refused_naming_the_field_and_the_turn_keeps_waiting(sync: bool) -> None:
    app, server, _lm = booking_app(sync, answer("booked"))
    paused = await chat(app, [USER])
    bad = {"action": "accept", "content": {"row": 12, "window": "no"}}
    refused = await chat(app, [USER, answered(paused[0]["messageId"], bad)])
    assert refused == [
        {"type": "start", "messageId": refused[0]["messageId"]},
        {
            "type": "error",
            "errorText": "ConfigurationError: `approvals['c1']` field `window`: 'no' is not of type 'boolean' "
            "(the form of booking)",
        },
    ]
    shapeless = await chat(app, [USER, answered(paused[0]["messageId"], "yes")])
    assert shapeless[-1]["errorText"].startswith(
        "ConfigurationError: the tool part of call 'c1' answers a request for input"
    )
    assert served.RECEIVED == [CALL] and served.RAN == []
    output = {"action": "accept", "content": {"row": 12}}
    resumed = await chat(app, [USER, answered(paused[0]["messageId"], output)])  # it still waits: answered now
    assert resumed[1] == {"type": "tool-output-available", "toolCallId": "c1", "output": "LH1: row 12, window True"}
    assert [CALL, retried({"action": "accept", "content": {"row": 12, "window": True}})] == served.RECEIVED
    server.close()


# -- a sub-agent's question, a restart ---------------------------------------------------------------


def team_app(sync: bool) -> tuple[Any, Any]:
    child, server = agent("auto")
    boss = dspy_imp.ReActV2("request -> answer", tools=[child.as_tool(name="clerk", description="Books seats.")])
    script = [
        reply("asking", calls=[call("clerk", {"question": "Book LH1"}, id="p1")]),
        reply("booking", calls=[call("book", {"flight": "LH1"}, id="c1")]),
        answer("booked"),  # the clerk, resumed
        answer("done"),
    ]
    with_lm(boss, script)  # the clerk's requests too
    return dspy_imp.web.app(boss, sync=sync), server


async def test_agui_a_sub_agents_question_is_its_segments_interrupt(sync: bool) -> None:
    app, server = team_app(sync)
    paused = await agui(app, run_input("A seat on LH1"))
    verify_agui(paused)
    (interrupt,) = paused[-1]["outcome"]["interrupts"]
    assert interrupt == {
        **INTERRUPT,
        "id": "p1/c1",
        "toolCallId": "p1/c1",
        "subagentRunId": "p1",
        "metadata": {"dspy_imp": {**INTERRUPT["metadata"]["dspy_imp"], "name": "clerk/book"}},
    }
    resume = [{"interruptId": "p1/c1", "status": "resolved", "payload": {"action": "accept", "content": {"row": 9}}}]
    resumed = await agui(app, run_input(run="r2", resume=resume))
    verify_agui(resumed, known_calls={"p1", "p1/c1"})
    assert resumed[-1]["result"]["outputs"] == {"answer": "done"}
    assert [CALL, retried({"action": "accept", "content": {"window": True, "row": 9}})] == served.RECEIVED
    server.close()


async def test_ai_sdk_a_sub_agents_question_is_answered_through_its_tool_part(sync: bool) -> None:
    app, server = team_app(sync)
    paused = await chat(app, [USER])
    verify_vercel(paused)
    question = {**QUESTION, "id": "p1/c1"}
    question["data"] = {**QUESTION["data"], "toolCallId": "p1/c1", "toolName": "clerk/book"}
    assert paused[-2] == question
    part = {"type": "tool-clerk/book", "toolCallId": "p1/c1", "state": "output-available", "input": {"flight": "LH1"},
            "output": {"action": "decline"}}  # fmt: skip
    resumed = await chat(app, [USER, {"id": paused[0]["messageId"], "role": "assistant", "parts": [part]}])
    assert resumed[-1]["messageMetadata"]["outputs"] == {"answer": "done"}
    assert [CALL, retried({"action": "decline"})] == served.RECEIVED
    assert served.RAN == ["LH1: decline"]
    server.close()


async def test_a_paused_question_survives_a_restart_in_a_file_store(sync: bool, tmp_path: Any) -> None:
    """The question waits in the saved history; a new app (a new program and MCP session, the same
    files) answers it: the server accepts its sealed state (a key it keeps, ``mcp_elicit_program``)."""
    program, server = agent("auto")
    with_lm(program, [reply("booking", calls=[call("book", {"flight": "LH1"}, id="c1")])])
    before = dspy_imp.web.app(program, sync=sync, store=dspy_imp.web.FileStore(tmp_path))
    paused = await agui(before, run_input("Book me a seat"))
    assert paused[-1]["outcome"] == {"type": "interrupt", "interrupts": [INTERRUPT]}
    server.close()

    program, server = agent("auto")
    with_lm(program, [answer("booked")])
    after = dspy_imp.web.app(program, sync=sync, store=dspy_imp.web.FileStore(tmp_path))
    async with client(after) as http:
        assert (await http.get("/api/conversations/t1")).json()["interrupts"] == [INTERRUPT]
    resume = [{"interruptId": "c1", "status": "resolved", "payload": {"action": "accept", "content": {"row": 2}}}]
    resumed = await agui(after, run_input(run="r2", resume=resume))
    assert resumed[-1]["result"]["outputs"] == {"answer": "booked"}
    assert [CALL, retried({"action": "accept", "content": {"window": True, "row": 2}})] == served.RECEIVED
    assert served.RAN == ["LH1: row 2, window True"]
    server.close()
