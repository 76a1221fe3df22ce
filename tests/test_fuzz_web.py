"""The web app's request bodies, fuzzed in process (ASGI): AG-UI's ``RunAgentInput`` (``/ag-ui``)
and the AI SDK's ``useChat`` body (``/api/chat``), new turns and resumes of a paused turn, with and
without client tools, and the calls a model makes to a client tool with the arguments it likes.

Each example is a valid body with a few nodes replaced, deleted, inserted or nested (nesting past
the guard's bound, lone surrogates, huge numbers), or any JSON at all, sent as bytes. The
property: a 4xx whose JSON body's ``error`` says what was refused, or a 200 stream every event of
which the protocol's own types accept, ending with its terminal event (a ``RUN_ERROR``/``error`` of
a documented error: the input the agent refused, a result for a call the conversation does not
wait for, or a failed step); never a 5xx, an exception out of the app, or a hang.
"""

from __future__ import annotations

import asyncio
from typing import Any

from fuzz_helpers import JSONABLE, Deep, bounded, budget, encode, mutated
from hypothesis import example, given
from hypothesis import strategies as st
from web_helpers import agui_events, vercel_parts, verify_agui, verify_vercel
from web_scenarios import client, run_input, support_agent, text_agent

import dspy_imp
import dspy_imp.web
from dspy_imp.testing import ScriptedLM, call, reply

JSON_HEADERS = {"content-type": "application/json"}
DOCUMENTED = {"ConfigurationError", "StepError", "Refused"}
"""The errors a stream may end with: input the agent refused, a step that got no model response, a
result for a call the conversation does not wait for (docs/web.md: refused with ``RUN_ERROR``)."""

TIME_TOOL = {
    "name": "browser_time",
    "description": "The time in the browser.",
    "parameters": {"type": "object", "properties": {"zone": {"type": "string"}}, "required": ["zone"]},
}


def checked(response: Any, route: str) -> None:
    """The property of one response (a 4xx naming what was refused, or a whole protocol stream)."""
    assert response.status_code < 500, (response.status_code, response.text[:500])
    if response.status_code >= 400:
        error = response.json()["error"]
        assert isinstance(error, str) and error.strip(), response.text
        return
    assert response.status_code == 200, response.text[:500]
    if route == "/ag-ui":
        events = agui_events(response.text)
        verify_agui(events, known_calls={"c9", "k1"})
        if events[-1]["type"] == "RUN_ERROR":
            assert events[-1]["code"] in DOCUMENTED, events[-1]
        else:
            assert events[-1]["type"] == "RUN_FINISHED", events[-1]
    else:
        parts = vercel_parts(response.text)
        verify_vercel(parts, known_calls={"c9", "k1"})
        if parts[-1]["type"] == "error":
            assert parts[-1]["errorText"].split(":")[0] in DOCUMENTED, parts[-1]


async def exchange(app: Any, requests: list[tuple[str, bytes]]) -> None:
    """Every request in order (the earlier ones build the state the last one is sent to)."""
    async with client(app) as http:
        for route, body in requests:
            checked(await http.post(route, content=body, headers=JSON_HEADERS), route)


def text_app(client_tools: bool = False) -> Any:
    agent = text_agent()
    agent.set_lm(ScriptedLM([reply("Hello.")] * 3))
    return dspy_imp.web.app(agent, client_tools=client_tools)


def paused_app() -> Any:
    """A support agent whose first turn pauses on ``refund`` (call ``c9``) for approval."""
    agent = support_agent()
    script = [
        reply("A refund needs approval.", calls=[call("refund", {"order_id": "42"}, id="c9")]),
        reply(calls=[call("send", {"text": "Refunded."}, id="c10")]),
        reply("Done."),
    ]
    agent.set_lm(ScriptedLM(script))
    return dspy_imp.web.app(agent)


def sent(app: Any, *requests: tuple[str, Any]) -> None:
    bounded(lambda: asyncio.run(exchange(app, [(r, b if isinstance(b, bytes) else encode(b)) for r, b in requests])))


# -- new turns ------------------------------------------------------------------------------------

AGUI_NEW = [
    run_input("Hi"),
    run_input("Hi", tools=[TIME_TOOL], context=[{"description": "tz", "value": "UTC"}], state={}, forwardedProps={}),
    {
        **run_input(),
        "messages": [
            {"id": "s", "role": "system", "content": "Be brief."},
            {"id": "a", "role": "assistant", "content": "Hi", "toolCalls": []},
            {"id": "u", "role": "user", "content": [{"type": "text", "text": "Hi"}]},
        ],
    },
]
CHAT_NEW = [
    {"id": "c1", "messages": [{"id": "u1", "role": "user", "parts": [{"type": "text", "text": "Hi"}]}]},
    {
        "id": "c1",
        "trigger": "submit-message",
        "tools": [{"name": "browser_time", "description": "The time.", "inputSchema": TIME_TOOL["parameters"]}],
        "messages": [
            {"id": "u0", "role": "user", "parts": [{"type": "text", "text": "Before"}]},
            {"id": "a0", "role": "assistant", "parts": [{"type": "text", "text": "Ok"}]},
            {"id": "u1", "role": "user", "parts": [{"type": "text", "text": "Hi"}, {"type": "file", "url": "x"}]},
        ],
    },
]
NEW = st.one_of(
    st.tuples(st.just("/ag-ui"), st.sampled_from(AGUI_NEW).flatmap(lambda b: mutated(b, JSONABLE))),
    st.tuples(st.just("/api/chat"), st.sampled_from(CHAT_NEW).flatmap(lambda b: mutated(b, JSONABLE))),
    st.tuples(st.sampled_from(["/ag-ui", "/api/chat"]), JSONABLE),
)


@budget(40)
@given(NEW, st.booleans())
@example(("/ag-ui", {**run_input("Hi"), "messages": Deep(5000, "list")}), False)
@example(("/api/chat", {**CHAT_NEW[0], "messages": [{"role": "user", "parts": Deep(1200, "dict")}]}), False)
def test_a_new_turns_body_is_refused_naming_the_field_or_streams_a_whole_turn(
    case: tuple[str, Any], tools: bool
) -> None:
    route, body = case
    sent(text_app(client_tools=tools), (route, body))


# -- resumes of a paused turn ---------------------------------------------------------------------

REFUSED = {"approved": False, "reason": "No."}
AGUI_RESUME = [
    run_input(run="r2", resume=[{"interruptId": "c9", "status": "resolved", "payload": {"approved": True}}]),
    run_input(run="r2", resume=[{"interruptId": "c9", "status": "resolved", "payload": REFUSED}]),
    run_input(run="r2", resume=[{"interruptId": "c9", "status": "cancelled"}]),
    {**run_input(run="r2"), "messages": [{"id": "t", "role": "tool", "toolCallId": "c9", "content": "done"}]},
]
APPROVED = {
    "id": "a1",
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
USER = {"id": "u1", "role": "user", "parts": [{"type": "text", "text": "Refund order 42"}]}
CHAT_RESUME = [{"id": "c1", "messages": [USER, APPROVED]}]
PAUSING = {"/ag-ui": run_input("Refund order 42"), "/api/chat": {"id": "c1", "messages": [USER]}}
RESUME = st.one_of(
    st.tuples(st.just("/ag-ui"), st.sampled_from(AGUI_RESUME).flatmap(lambda b: mutated(b, JSONABLE))),
    st.tuples(st.just("/api/chat"), st.sampled_from(CHAT_RESUME).flatmap(lambda b: mutated(b, JSONABLE))),
)


@budget(30)
@given(RESUME)
@example(("/ag-ui", AGUI_RESUME[3]))  # a tool message answering a call that waits for approval: RUN_ERROR
@example(("/api/chat", {"id": "c1", "messages": [USER, {**APPROVED, "parts": [{"toolCallId": "x", "state": {}}]}]}))
def test_a_resumes_body_is_refused_naming_the_field_or_streams_the_resumed_turn(case: tuple[str, Any]) -> None:
    route, body = case
    sent(paused_app(), (route, PAUSING[route]), (route, body))


# -- client tools: their declarations, the model's calls to them, and the results sent back ------

SCHEMA = {
    "type": "object",
    "properties": {
        "zone": {"type": "string", "pattern": "^[A-Z][a-z]+/[A-Za-z_]+$"},
        "hours": {"type": "integer", "minimum": 0},
        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 3},
    },
    "required": ["zone"],
    "$defs": {"a": {"type": "string"}},
    "additionalProperties": False,
}


def client_tool_app(args: Any) -> Any:
    agent = text_agent()
    calls = [call("browser_time", args if isinstance(args, dict) else {"value": args}, id="k1")]
    agent.set_lm(ScriptedLM([reply(calls=calls), reply("Thanks."), reply("Thanks.")]))
    return dspy_imp.web.app(agent, client_tools=True)


@budget(30)
@given(
    mutated(SCHEMA, JSONABLE),
    st.dictionaries(st.sampled_from(["zone", "hours", "tags", "x"]), JSONABLE, max_size=3) | JSONABLE,
    JSONABLE,
)
@example({"type": "object", "properties": {"x": {"$ref": "#/$defs/b"}}, "$defs": {"b": {"$ref": "#"}}}, {}, "x")
def test_a_client_tools_declaration_its_calls_and_its_result_never_break_a_turn(
    schema: Any, args: Any, result: Any
) -> None:
    tool = {"name": "browser_time", "description": "The time.", "parameters": schema}
    answer = {"id": "t", "role": "tool", "toolCallId": "k1", "content": encode(result).decode()}
    first = run_input("What time is it?", tools=[tool])
    second = {**run_input(run="r2", tools=[tool]), "messages": [answer]}
    sent(client_tool_app(args), ("/ag-ui", first), ("/ag-ui", second))
