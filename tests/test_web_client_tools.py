"""Client tools (``app(..., client_tools=True)``): a tool the client declares and runs itself is the
turn's external tool. The model is offered it with the declared schema, the turn pauses on its
calls, the client runs it and sends the result, the turn resumes from the server's paused entry.
Declarations and results are input: checked, bounded, and only results the server waits for are
taken."""

from __future__ import annotations

from typing import Any

import pytest
from web_helpers import agui_events, vercel_parts, verify_agui, verify_vercel
from web_scenarios import client, paused_script, run_input, support_agent, text_agent, with_lm

import dspy_imp
import dspy_imp.web
from dspy_imp.testing import call, reply
from dspy_imp.web._client_tools import MAX_RESULT_CHARS, MAX_SCHEMA_CHARS, MAX_TOOLS

pytestmark = pytest.mark.parametrize("sync", [False, True], ids=["async", "sync"])

SCHEMA = {
    "type": "object",
    "properties": {"zone": {"type": "string", "enum": ["UTC", "local"], "description": "Which clock."}},
    "required": ["zone"],
    "additionalProperties": False,
}
AGUI_TOOL = {"name": "browser_time", "description": "The time on the user's device.", "parameters": SCHEMA}
SDK_TOOL = {"name": "browser_time", "description": "The time on the user's device.", "inputSchema": SCHEMA}
OFFERED = {
    "type": "function",
    "function": {"name": "browser_time", "description": "The time on the user's device.", "parameters": SCHEMA},
}


def time_script() -> list[Any]:
    return [
        reply(calls=[call("browser_time", {"zone": "UTC"}, id="k1")], usage=(20, 5)),
        reply("It is 12:00 UTC.", usage=(30, 5)),
    ]


async def agui(app: Any, body: dict[str, Any]) -> list[dict[str, Any]]:
    async with client(app) as http:
        response = await http.post("/ag-ui", json=body)
    assert response.status_code == 200, response.text
    return agui_events(response.text)


def answered(messages: list[dict[str, Any]], call_id: str, content: str) -> list[dict[str, Any]]:
    """The run's messages as an AG-UI client sends them after running the tool: the snapshot, then its result."""
    return [*messages, {"id": f"result-{call_id}", "role": "tool", "toolCallId": call_id, "content": content}]


async def test_an_agui_client_tool_round_trip(sync: bool) -> None:
    agent = text_agent()
    lm = with_lm(agent, time_script())
    app = dspy_imp.web.app(agent, sync=sync, client_tools=True)
    first = await agui(app, run_input("What time is it?", tools=[AGUI_TOOL]))
    verify_agui(first)
    start = next(e for e in first if e["type"] == "TOOL_CALL_START")
    args = next(e for e in first if e["type"] == "TOOL_CALL_ARGS")
    assert (start["toolCallId"], start["toolCallName"], args["delta"]) == ("k1", "browser_time", '{"zone": "UTC"}')
    assert "TOOL_CALL_RESULT" not in [e["type"] for e in first]
    outcome = first[-1]["outcome"]
    assert outcome["type"] == "interrupt"
    assert [(i["id"], i["reason"], i["toolCallId"]) for i in outcome["interrupts"]] == [("k1", "external_tool", "k1")]
    own = [t for t in lm.requests[0].tools or [] if t["function"]["name"] == "lookup_order"]
    assert lm.requests[0].tools == [*own, OFFERED]  # the agent's own tool, then the client's, as declared

    snapshot = next(e for e in first if e["type"] == "MESSAGES_SNAPSHOT")["messages"]
    body = run_input(thread="t1", run="r2", tools=[AGUI_TOOL])
    second = await agui(app, {**body, "messages": answered(snapshot, "k1", "12:00")})
    verify_agui(second, known_calls={"k1"})
    assert second[-1]["outcome"] == {"type": "success"}
    assert second[-1]["result"]["outputs"] == {"answer": "It is 12:00 UTC."}
    sent = lm.requests[1].messages
    assert {"role": "tool", "tool_call_id": "k1", "content": "12:00"} in [
        {k: m.get(k) for k in ("role", "tool_call_id", "content")} for m in sent
    ]
    assert lm.remaining == 0


async def test_an_agui_resume_entry_answers_a_client_tool_too(sync: bool) -> None:
    agent = text_agent()
    lm = with_lm(agent, time_script())
    app = dspy_imp.web.app(agent, sync=sync, client_tools=True)
    await agui(app, run_input("What time is it?", tools=[AGUI_TOOL]))
    resume = [{"interruptId": "k1", "status": "resolved", "payload": {"result": {"time": "12:00"}}}]
    second = await agui(app, run_input(run="r2", tools=[AGUI_TOOL], resume=resume))
    verify_agui(second, known_calls={"k1"})
    assert second[-1]["result"]["outputs"] == {"answer": "It is 12:00 UTC."}
    tool_messages = [m for m in lm.requests[1].messages if m["role"] == "tool"]
    assert [(m["tool_call_id"], m["content"]) for m in tool_messages] == [("k1", '{"time": "12:00"}')]  # as text


async def test_an_ai_sdk_client_tool_round_trip(sync: bool) -> None:
    agent = text_agent()
    lm = with_lm(agent, time_script())
    app = dspy_imp.web.app(agent, sync=sync, client_tools=True)
    user = {"id": "u1", "role": "user", "parts": [{"type": "text", "text": "What time is it?"}]}
    async with client(app) as http:
        response = await http.post("/api/chat", json={"id": "v1", "messages": [user], "tools": [SDK_TOOL]})
        first = vercel_parts(response.text)
        verify_vercel(first)
        assert {
            "type": "tool-input-available",
            "toolCallId": "k1",
            "toolName": "browser_time",
            "input": {"zone": "UTC"},
        } in first
        assert [p["type"] for p in first[-2:]] == ["finish-step", "finish"] and first[-1][
            "finishReason"
        ] == "tool-calls"
        assert lm.requests[0].tools is not None and lm.requests[0].tools[-1] == OFFERED
        part = {"type": "tool-browser_time", "toolCallId": "k1", "state": "output-available", "input": {"zone": "UTC"}}
        assistant = {"id": first[0]["messageId"], "role": "assistant", "parts": [{**part, "output": "12:00"}]}
        body = {"id": "v1", "messages": [user, assistant], "tools": [SDK_TOOL]}
        second = vercel_parts((await http.post("/api/chat", json=body)).text)
    verify_vercel(second, known_calls={"k1"})
    assert second[-1]["finishReason"] == "stop"
    assert second[-1]["messageMetadata"]["outputs"] == {"answer": "It is 12:00 UTC."}
    assert [(m["tool_call_id"], m["content"]) for m in lm.requests[1].messages if m["role"] == "tool"] == [
        ("k1", "12:00")
    ]


async def test_a_call_that_breaks_the_declared_schema_is_an_observation_not_a_pause(sync: bool) -> None:
    agent = text_agent()
    script = [reply(calls=[call("browser_time", {"zone": "Mars", "extra": 1}, id="k0")]), reply("I cannot tell.")]
    lm = with_lm(agent, script)
    app = dspy_imp.web.app(agent, sync=sync, client_tools=True)
    events = await agui(app, run_input("What time is it?", tools=[AGUI_TOOL]))
    verify_agui(events)
    results = [e["content"] for e in events if e["type"] == "TOOL_CALL_RESULT"]
    assert results == [
        "invalid arguments: arguments Additional properties are not allowed ('extra' was unexpected); "
        "zone 'Mars' is not one of ['UTC', 'local']"
    ]
    assert events[-1]["outcome"] == {"type": "success"}
    assert events[-1]["result"]["outputs"] == {"answer": "I cannot tell."}
    assert lm.remaining == 0


async def test_a_missing_required_argument_is_an_observation(sync: bool) -> None:
    agent = text_agent()
    with_lm(agent, [reply(calls=[call("browser_time", {}, id="k0")]), reply("I cannot tell.")])
    app = dspy_imp.web.app(agent, sync=sync, client_tools=True)
    events = await agui(app, run_input("What time is it?", tools=[AGUI_TOOL]))
    assert [e["content"] for e in events if e["type"] == "TOOL_CALL_RESULT"] == ["missing required arguments: zone"]


async def test_results_are_taken_only_for_the_calls_the_server_waits_on(sync: bool) -> None:
    agent = text_agent()
    lm = with_lm(agent, time_script())
    app = dspy_imp.web.app(agent, sync=sync, client_tools=True)
    first = await agui(app, run_input("What time is it?", tools=[AGUI_TOOL]))
    snapshot = next(e for e in first if e["type"] == "MESSAGES_SNAPSHOT")["messages"]
    body = run_input(run="r2", tools=[AGUI_TOOL])
    forged = await agui(app, {**body, "messages": answered(snapshot, "k2", "12:00")})
    resume = [{"interruptId": "k2", "status": "resolved", "payload": {"result": "12:00"}}]
    forged_resume = await agui(app, run_input(run="r3", tools=[AGUI_TOOL], resume=resume))
    huge = await agui(app, {**body, "messages": answered(snapshot, "k1", "x" * (MAX_RESULT_CHARS + 1))})
    undeclared = await agui(app, {**run_input(run="r4"), "messages": answered(snapshot, "k1", "12:00")})
    assert [e["type"] for e in forged] == ["RUN_STARTED", "RUN_ERROR"]
    assert forged[-1]["message"] == "Refused: a result for call 'k2', which this conversation is not waiting for"
    assert forged_resume[-1]["message"] == "ConfigurationError: resume entry 'k2' answers no pending interrupt"
    assert huge[-1]["message"] == f"Refused: the result for call 'k1' is longer than {MAX_RESULT_CHARS} characters"
    assert undeclared[-1]["message"] == (
        "Refused: the run must declare the client tools its paused calls were made to: ['browser_time']"
    )
    assert len(lm.requests) == 1  # nothing ran: the turn still waits on k1
    async with client(app) as http:
        waiting = (await http.get("/api/conversations/t1")).json()
    assert [(i["id"], i["reason"]) for i in waiting["interrupts"]] == [("k1", "external_tool")]


async def test_an_ai_sdk_part_for_a_call_the_server_never_made_is_refused(sync: bool) -> None:
    agent = text_agent()
    lm = with_lm(agent, time_script())
    app = dspy_imp.web.app(agent, sync=sync, client_tools=True)
    user = {"id": "u1", "role": "user", "parts": [{"type": "text", "text": "What time is it?"}]}
    async with client(app) as http:
        first = vercel_parts(
            (await http.post("/api/chat", json={"id": "v1", "messages": [user], "tools": [SDK_TOOL]})).text
        )
        part = {
            "type": "tool-browser_time",
            "toolCallId": "k7",
            "state": "output-available",
            "input": {},
            "output": "1",
        }
        assistant = {"id": first[0]["messageId"], "role": "assistant", "parts": [part]}
        body = {"id": "v1", "messages": [user, assistant], "tools": [SDK_TOOL]}
        forged = vercel_parts((await http.post("/api/chat", json=body)).text)
    assert forged[-1] == {
        "type": "error",
        "errorText": "ConfigurationError: a tool part answers call 'k7', which this chat is not waiting for",
    }
    assert len(lm.requests) == 1


async def test_a_tool_message_never_answers_a_call_waiting_for_approval(sync: bool) -> None:
    """A program's own ``needs_approval`` gate is not loosened: a client's 'result' for the refund is refused."""
    agent = support_agent()
    lm = with_lm(agent, paused_script())
    app = dspy_imp.web.app(agent, sync=sync, client_tools=True)
    first = await agui(app, run_input("Refund order 42", tools=[AGUI_TOOL]))
    assert first[-1]["outcome"]["interrupts"][0]["reason"] == "tool_approval"
    snapshot = next(e for e in first if e["type"] == "MESSAGES_SNAPSHOT")["messages"]
    body = run_input(run="r2", tools=[AGUI_TOOL])
    forged = await agui(app, {**body, "messages": answered(snapshot, "c9", "order 42 refunded")})
    assert forged[-1]["message"] == "Refused: a result for call 'c9', which this conversation is not waiting for"
    assert len(lm.requests) == 1


@pytest.mark.parametrize(
    ("tools", "error"),
    [
        (
            [{**AGUI_TOOL, "name": "lookup_order"}],
            "`tools[0].name` 'lookup_order' is the name of one of the agent's own tools (or submit)",
        ),
        (
            [AGUI_TOOL, {**AGUI_TOOL, "name": "submit"}],
            "`tools[1].name` 'submit' is the name of one of the agent's own tools (or submit)",
        ),
        (
            [{**AGUI_TOOL, "name": "get time"}],
            "`tools[0].name` must be an identifier (letters, digits, _; at most 64), got 'get time'",
        ),
        ([AGUI_TOOL, AGUI_TOOL], "`tools[1].name` 'browser_time' is declared twice"),
        (
            [{**AGUI_TOOL, "parameters": {"type": "string"}}],
            "`tools[0].parameters` must be a JSON schema of an object (`type: object`)",
        ),
        (
            [{**AGUI_TOOL, "parameters": {"type": "object", "properties": {"a": {"type": 5}}}}],
            "`tools[0].parameters` is not a valid JSON schema: 5 is not valid under any of the given schemas",
        ),
        (
            [{**AGUI_TOOL, "parameters": {"type": "object", "description": "x" * MAX_SCHEMA_CHARS}}],
            f"`tools[0].parameters` is longer than {MAX_SCHEMA_CHARS} characters",
        ),
        (
            [{**AGUI_TOOL, "name": f"t{i}"} for i in range(MAX_TOOLS + 1)],
            f"`tools` declares {MAX_TOOLS + 1} tools; at most {MAX_TOOLS} may be declared",
        ),
    ],
    ids=["own-tool", "submit", "not-identifier", "twice", "not-object", "bad-schema", "oversize", "too-many"],
)
async def test_a_bad_declaration_is_refused_naming_the_field(sync: bool, tools: list[Any], error: str) -> None:
    agent = text_agent()
    lm = with_lm(agent, time_script())
    app = dspy_imp.web.app(agent, sync=sync, client_tools=True)
    sdk_tools = [{**{k: v for k, v in t.items() if k != "parameters"}, "inputSchema": t["parameters"]} for t in tools]
    user = {"id": "u1", "role": "user", "parts": [{"type": "text", "text": "What time is it?"}]}
    async with client(app) as http:
        by_agui = await http.post("/ag-ui", json=run_input("What time is it?", tools=tools))
        by_sdk = await http.post("/api/chat", json={"id": "v1", "messages": [user], "tools": sdk_tools})
    assert (by_agui.status_code, by_agui.json()) == (422, {"error": error})
    assert (by_sdk.status_code, by_sdk.json()) == (422, {"error": error.replace(".parameters", ".inputSchema")})
    assert lm.requests == []


async def test_without_client_tools_a_declaration_is_not_offered(sync: bool) -> None:
    agent = text_agent()
    lm = with_lm(agent, [reply("It is noon somewhere.")])
    app = dspy_imp.web.app(agent, sync=sync)
    events = await agui(app, run_input("What time is it?", tools=[AGUI_TOOL]))
    assert events[-1]["result"]["outputs"] == {"answer": "It is noon somewhere."}
    assert [t["function"]["name"] for t in lm.requests[0].tools or []] == ["lookup_order"]


def test_client_tools_is_a_flag(sync: bool) -> None:
    with pytest.raises(dspy_imp.ConfigurationError, match="`client_tools` must be True or False, got 'yes'"):
        dspy_imp.web.app(text_agent(), sync=sync, client_tools="yes")  # type: ignore[arg-type]


async def test_a_client_tool_that_failed_is_an_error_the_model_reads(sync: bool) -> None:
    agent = text_agent()
    lm = with_lm(agent, [reply(calls=[call("browser_time", {"zone": "UTC"}, id="k1")]), reply("No clock, sorry.")])
    app = dspy_imp.web.app(agent, sync=sync, client_tools=True)
    first = await agui(app, run_input("What time is it?", tools=[AGUI_TOOL]))
    snapshot = next(e for e in first if e["type"] == "MESSAGES_SNAPSHOT")["messages"]
    failed = {"id": "result-k1", "role": "tool", "toolCallId": "k1", "content": "", "error": "no clock permission"}
    second = await agui(app, {**run_input(run="r2", tools=[AGUI_TOOL]), "messages": [*snapshot, failed]})
    verify_agui(second, known_calls={"k1"})
    assert [(e["toolCallId"], e["content"]) for e in second if e["type"] == "TOOL_CALL_RESULT"] == [
        ("k1", "browser_time failed: no clock permission")
    ]
    assert second[-1]["result"]["outputs"] == {"answer": "No clock, sorry."}
    assert [m["content"] for m in lm.requests[1].messages if m["role"] == "tool"] == [
        "Error: browser_time failed: no clock permission"
    ]
