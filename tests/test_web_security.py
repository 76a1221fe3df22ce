"""The web app tried from outside: only its own page drives it (Host, Origin, content type, CORS),
one turn per conversation even with a store whose load awaits, bad bodies refused and never
fatal, values the streams carry always encodable, and conversations owned by their user."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import dspy
import pytest
from starlette.requests import Request
from web_helpers import agui_events, vercel_parts, verify_agui, verify_vercel
from web_scenarios import client, paused_script, run_input, support_agent, text_agent, with_lm

import dspy_imp
import dspy_imp.web
from dspy_imp.testing import call, reply

pytestmark = pytest.mark.parametrize("sync", [False, True], ids=["async", "sync"])

JSON = {"content-type": "application/json"}


def user_parts(text: str) -> dict[str, Any]:
    return {"id": "u1", "role": "user", "parts": [{"type": "text", "text": text}]}


# -- only its own page drives it ----------------------------------------------------------------


async def test_a_foreign_origin_a_rebinding_host_and_a_form_body_are_refused(sync: bool) -> None:
    agent = text_agent()
    lm = with_lm(agent, [reply("Hi.")])
    app = dspy_imp.web.app(agent, sync=sync)
    body = json.dumps(run_input("Hi"))
    async with client(app) as http:  # served as http://test
        foreign = await http.post("/ag-ui", content=body, headers={**JSON, "origin": "https://evil.example"})
        rebound = await http.post("/ag-ui", content=body, headers={**JSON, "host": "evil.example:8000"})
        page = await http.get("/", headers={"host": "evil.example"})
        info = await http.get("/api/info", headers={"host": "evil.example"})
        form = await http.post("/ag-ui", content=body, headers={"content-type": "text/plain"})
        untyped = await http.post("/api/chat", content=body)
        null_origin = await http.post("/ag-ui", content=body, headers={**JSON, "origin": "null"})
        own = await http.post("/ag-ui", content=body, headers={**JSON, "origin": "http://test"})
    assert [r.status_code for r in (foreign, rebound, page, info, form, untyped, null_origin)] == [
        403,
        403,
        403,
        403,
        415,
        415,
        403,
    ]
    assert foreign.json() == {"error": "requests from the origin 'https://evil.example' are not allowed"}
    assert rebound.json() == {"error": "this server does not answer for the host 'evil.example:8000'"}
    assert form.json() == {"error": "the body must be application/json, got 'text/plain'"}
    assert own.status_code == 200 and agui_events(own.text)[-1]["result"]["outputs"] == {"answer": "Hi."}
    assert len(lm.requests) == 1  # only the page's own request reached the model


async def test_cors_is_off_unless_origins_are_configured(sync: bool) -> None:
    agent = text_agent()
    with_lm(agent, [reply("Hi.")])
    preflight = {"origin": "https://app.example", "access-control-request-method": "POST"}
    async with client(dspy_imp.web.app(agent, sync=sync)) as http:
        closed = await http.options("/ag-ui", headers=preflight)
    assert "access-control-allow-origin" not in closed.headers
    opened = dspy_imp.web.app(agent, sync=sync, origins=["https://app.example"], hosts=["agent.example"])
    async with client(opened) as http:
        allowed = await http.options("/ag-ui", headers=preflight)
        sent = await http.post(
            "/ag-ui",
            json=run_input("Hi"),
            headers={"origin": "https://app.example", "host": "agent.example"},
        )
        other = await http.post("/ag-ui", json=run_input("Hi"), headers={"origin": "https://evil.example"})
    assert allowed.headers["access-control-allow-origin"] == "https://app.example"
    assert sent.status_code == 200 and sent.headers["access-control-allow-origin"] == "https://app.example"
    assert other.status_code == 403


async def test_a_loopback_server_answers_for_each_loopback_name_only(sync: bool) -> None:
    agent = text_agent()
    with_lm(agent, [reply("Hi.")] * 3)
    app = dspy_imp.web.app(agent, sync=sync)
    transport_client = client(app)
    transport_client.base_url = "http://127.0.0.1:8000"  # the address it is served on
    async with transport_client as http:
        named = [await http.get("/api/info", headers={"host": h}) for h in ("localhost:8000", "[::1]:8000")]
        rebound = await http.get("/api/info", headers={"host": "127.0.0.1.evil.example:8000"})
    assert [r.status_code for r in named] == [200, 200] and rebound.status_code == 403


@pytest.mark.parametrize(
    ("option", "value", "names"),
    [("hosts", "agent.example", "`hosts`"), ("origins", [3], "`origins`"), ("auth", "alice", "`auth`")],
)
def test_a_bad_option_is_a_clear_error(sync: bool, option: str, value: Any, names: str) -> None:
    with pytest.raises(dspy_imp.ConfigurationError, match=names):
        dspy_imp.web.app(text_agent(), sync=sync, **{option: value})


# -- one turn at a time, even when loading awaits -----------------------------------------------


class AwaitingStore(dspy_imp.web.MemoryStore):
    """A store whose load awaits I/O: once ``gate`` is cleared, the next load reads the stored value,
    then waits for the gate (a database's round trip), while other requests go on."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = asyncio.Event()
        self.gate.set()
        self.waiting = 0

    async def load(self, key: str) -> Any:
        found = await super().load(key)  # what the database holds when the query runs
        if not self.gate.is_set() and not self.waiting:
            self.waiting += 1
            await self.gate.wait()
        return found


async def until(condition: Any) -> None:
    while not condition():  # a readiness wait, not a timed assertion
        await asyncio.sleep(0)


async def test_an_approval_sent_twice_runs_the_call_once(sync: bool) -> None:
    refunded: list[str] = []

    def refund(order_id: str) -> str:
        """Refund an order."""
        refunded.append(order_id)
        return f"order {order_id} refunded"

    agent = dspy_imp.ReActV2("message -> reply", tools=[refund], needs_approval=["refund"])
    script = [reply(calls=[call("refund", {"order_id": "42"}, id="c9")]), reply("Refunded."), reply("Refunded.")]
    with_lm(agent, script)
    store = AwaitingStore()
    app = dspy_imp.web.app(agent, sync=sync, store=store)
    resume = run_input(run="r2", resume=[{"interruptId": "c9", "status": "resolved", "payload": {"approved": True}}])
    async with client(app) as http:
        await http.post("/ag-ui", json=run_input("Refund order 42"))
        store.gate.clear()
        waiting = asyncio.ensure_future(http.post("/ag-ui", json=resume))  # its load waits
        await until(lambda: store.waiting == 1)
        again = await http.post("/ag-ui", json=resume)  # the same click, sent again
        store.gate.set()
        first = agui_events((await waiting).text)
    assert refunded == ["42"]
    assert first[-1]["result"]["outputs"] == {"reply": "Refunded."}
    assert (again.status_code, again.headers["retry-after"]) == (409, "1")  # refused before any event
    assert "already running a turn" in again.json()["error"]


async def test_two_close_messages_run_one_turn_and_refuse_the_other(sync: bool) -> None:
    agent = text_agent()
    lm = with_lm(agent, [reply("First."), reply("Second.")])
    store = AwaitingStore()
    async with client(dspy_imp.web.app(agent, sync=sync, store=store)) as http:
        store.gate.clear()
        waiting = asyncio.ensure_future(http.post("/ag-ui", json=run_input("One")))
        await until(lambda: store.waiting == 1)
        second = await http.post("/ag-ui", json=run_input("Two", run="r2"))
        store.gate.set()
        first = agui_events((await waiting).text)
    assert first[-1]["result"]["outputs"] == {"answer": "First."}
    assert (second.status_code, second.headers["retry-after"]) == (409, "1")  # told: the client may send it again
    saved = await store.load("t1")
    assert [m.get("question") for m in saved.history.messages] == ["One"]
    assert len(lm.requests) == 1


# -- bad input is refused, never fatal ----------------------------------------------------------

DEEP: Any = "x"
for _ in range(100):
    DEEP = [DEEP]

AGUI_BODIES = {
    "not JSON": (b"{", 400),
    "deeply nested": (json.dumps({**run_input("Hi"), "state": DEEP}).encode(), 422),
    "far too deep for the parser": (b"[" * 200_000 + b"]" * 200_000, 422),
    "messages not a list": (json.dumps({**run_input("Hi"), "messages": "Hi"}).encode(), 422),
    "too large": (json.dumps({**run_input("x" * 1_100_000)}).encode(), 413),
}
CHAT_BODIES = {
    "not an object": ([1, 2], 422),
    "no id": ({"messages": [user_parts("Hi")]}, 422),
    "messages not a list": ({"id": "c", "messages": 5}, 422),
    "a message not an object": ({"id": "c", "messages": ["Hi"]}, 422),
    "a non-string text part": (
        {"id": "c", "messages": [{"role": "user", "parts": [{"type": "text", "text": 5}]}]},
        422,
    ),
    "parts not a list": ({"id": "c", "messages": [{"role": "user", "parts": "Hi"}]}, 422),
    "an approval not an object": (
        {
            "id": "c",
            "messages": [{"role": "assistant", "parts": [{"type": "tool-x", "toolCallId": "c1", "approval": 1}]}],
        },
        422,
    ),
}


@pytest.mark.parametrize("name", list(AGUI_BODIES))
async def test_a_malformed_agui_body_is_a_4xx(sync: bool, name: str) -> None:
    body, status = AGUI_BODIES[name]
    agent = text_agent()
    lm = with_lm(agent, [])
    async with client(dspy_imp.web.app(agent, sync=sync)) as http:
        response = await http.post("/ag-ui", content=body, headers=JSON)
    assert response.status_code == status and "error" in response.json()
    assert lm.requests == []


@pytest.mark.parametrize("name", list(CHAT_BODIES))
async def test_a_malformed_chat_body_is_a_4xx(sync: bool, name: str) -> None:
    body, status = CHAT_BODIES[name]
    agent = text_agent()
    lm = with_lm(agent, [])
    async with client(dspy_imp.web.app(agent, sync=sync)) as http:
        response = await http.post("/api/chat", json=body)
    assert response.status_code == status and "error" in response.json()
    assert lm.requests == []


async def test_lone_surrogates_in_ids_and_tool_results_become_replacement_characters(sync: bool) -> None:
    def listing(folder: str) -> str:
        """List a folder."""
        return "report-\udcff.txt"  # a file name that is not UTF-8, as os.listdir gives it

    script = [reply(calls=[call("listing", {"folder": "/"}, id="c1")]), reply("Found report-\ufffd.txt.")]
    agent = dspy_imp.ReActV2("question -> answer", tools=[listing])
    with_lm(agent, [*script, *script])
    app = dspy_imp.web.app(agent, sync=sync)
    thread = '{"threadId": "t\\ud800", "runId": "r1", "messages": [{"id": "u", "role": "user", "content": "ls"}]}'
    async with client(app) as http:
        agui = await http.post("/ag-ui", content=thread.encode(), headers=JSON)
        chat = await http.post("/api/chat", json={"id": "c", "messages": [user_parts("ls")]})
    events = agui_events(agui.text)
    verify_agui(events)
    assert events[0]["threadId"] == "t\ufffd"
    assert next(e for e in events if e["type"] == "TOOL_CALL_RESULT")["content"] == "report-\ufffd.txt"
    assert events[-1]["type"] == "RUN_FINISHED"
    parts = vercel_parts(chat.text)
    verify_vercel(parts)
    assert next(p for p in parts if p["type"] == "tool-output-available")["output"] == "report-\ufffd.txt"
    assert parts[-1]["type"] == "finish"


# -- auth: conversations owned by their user ----------------------------------------------------


def by_header(request: Request) -> str | None:
    return request.headers.get("x-user")  # what a proxy that signed the user in would send


async def test_auth_names_the_user_and_a_conversation_is_its_starters(sync: bool) -> None:
    agent = support_agent()
    lm = with_lm(agent, paused_script())
    app = dspy_imp.web.app(agent, sync=sync, auth=by_header)
    resume = run_input(run="r2", resume=[{"interruptId": "c9", "status": "resolved", "payload": {"approved": True}}])
    async with client(app) as http:
        anonymous = await http.post("/ag-ui", json=run_input("Refund order 42"))
        info = await http.get("/api/info")
        paused = agui_events((await http.post("/ag-ui", json=run_input("Refund order 42"), headers=ALICE)).text)
        stolen = await http.post("/ag-ui", json=resume, headers={"x-user": "mallory"})
        chat = await http.post("/api/chat", json={"id": "t1", "messages": [user_parts("Hi")]}, headers=MALLORY)
        resumed = agui_events((await http.post("/ag-ui", json=resume, headers=ALICE)).text)
    assert anonymous.status_code == 401 and info.status_code == 401
    assert paused[-1]["outcome"]["type"] == "interrupt"
    assert (stolen.status_code, stolen.json()) == (404, {"error": "no conversation 't1'"})  # as REST answers
    assert (chat.status_code, chat.json()) == (404, {"error": "no conversation 't1'"})
    assert resumed[-1]["result"]["termination_reason"] == "finished_by_tool"
    assert lm.remaining == 0


ALICE = {"x-user": "alice"}
MALLORY = {"x-user": "mallory"}


async def test_an_async_auth_and_the_owner_kept_in_a_file_store(sync: bool, tmp_path: Any) -> None:
    async def signed_in(request: Request) -> str | None:
        return request.headers.get("x-user")

    agent = text_agent()
    with_lm(agent, [reply("Hi.")])
    store = dspy_imp.web.FileStore(tmp_path)
    async with client(dspy_imp.web.app(agent, sync=sync, auth=signed_in, store=store)) as http:
        await http.post("/ag-ui", json=run_input("Hi"), headers=ALICE)
    saved = await dspy_imp.web.FileStore(tmp_path).load("t1")
    assert saved is not None and saved.owner == "alice"
    assert [m["answer"] for m in saved.history.messages] == ["Hi."]


def test_a_file_written_before_owners_loads_as_unowned(sync: bool, tmp_path: Any) -> None:
    store = dspy_imp.web.FileStore(tmp_path)
    history = dspy.History(messages=[{"question": "Hi", "answer": "Hello."}])
    asyncio.run(store.save("t1", dspy_imp.web.Conversation(history)))
    path = next(tmp_path.glob("*.json"))
    path.write_text(json.dumps(json.loads(path.read_text())["history"]))  # the old format: the dump alone
    loaded = asyncio.run(store.load("t1"))
    assert loaded == dspy_imp.web.Conversation(history, None)


async def test_a_conversation_reopens_for_its_owner_only(sync: bool) -> None:
    agent = support_agent()
    with_lm(agent, paused_script())
    app = dspy_imp.web.app(agent, sync=sync, auth=by_header)
    async with client(app) as http:
        await http.post("/ag-ui", json=run_input("Refund order 42", thread="a/b"), headers=ALICE)
        mine = await http.get("/api/conversations/a%2Fb", headers=ALICE)
        theirs = await http.get("/api/conversations/a%2Fb", headers=MALLORY)
        missing = await http.get("/api/conversations/nope", headers=ALICE)
        anonymous = await http.get("/api/conversations/a%2Fb")
    assert mine.status_code == 200
    body = mine.json()
    assert [m["role"] for m in body["messages"]] == ["user", "reasoning", "assistant"]
    assert [(i["id"], i["reason"]) for i in body["interrupts"]] == [("c9", "tool_approval")]
    assert body["running"] is False
    assert (theirs.status_code, missing.status_code, anonymous.status_code) == (404, 404, 401)
    assert theirs.json() == {"error": "no conversation 'a/b'"}


async def test_only_the_user_running_a_turn_may_stop_it(sync: bool) -> None:
    agent = text_agent()
    lm = with_lm(agent, [reply("Never sent.")])
    store = AwaitingStore()
    app = dspy_imp.web.app(agent, sync=sync, store=store, auth=by_header)
    async with client(app) as http:
        store.gate.clear()
        running = asyncio.ensure_future(http.post("/ag-ui", json=run_input("Hi"), headers=ALICE))
        await until(lambda: store.waiting == 1)  # alice's first turn holds the conversation
        theirs = await http.post("/api/conversations/t1/stop", json={}, headers=MALLORY)
        mine = await http.post("/api/conversations/t1/stop", json={}, headers=ALICE)
        store.gate.set()
        events = agui_events((await running).text)
        idle = await http.post("/api/conversations/t1/stop", json={}, headers=ALICE)
    assert (theirs.status_code, mine.status_code, idle.status_code) == (409, 200, 409)
    assert events[-1] == {"type": "RUN_ERROR", "message": "StreamClosed: the turn was stopped", "code": "StreamClosed"}
    assert lm.requests == []  # stopped before its first request
