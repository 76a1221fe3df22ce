"""The web app at scale: limits that say "later" (429, 409 with ``Retry-After``) before any event,
instead of stalling or telling the refusal inside a stream.

A turn here holds in its ``hold`` tool until the test sets its event: what runs at once is
decided by the test, never by the machine's speed (``GUARD`` is a hang guard only).
"""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any

import dspy
import pytest
from fake_openai_server import FakeOpenAIServer, HTTPReply, ReceivedRequest, text_completion
from web_helpers import agui_events
from web_scenarios import client, run_input

import dspy_imp
import dspy_imp.web
from dspy_imp._records.errors import ConfigurationError
from dspy_imp.testing import ScriptedLM, call, reply

GUARD = 30  # seconds: a failure guard only, never a timing assertion


class Holds:
    """An agent whose ``hold`` tool waits for ``released``; ``refund`` needs approval."""

    def __init__(self, script: list[Any]) -> None:
        self.holding, self.released = asyncio.Event(), asyncio.Event()
        self.refunded: list[str] = []

        async def hold() -> str:
            """Hold the line."""
            self.holding.set()
            await self.released.wait()
            return "held"

        def refund(order_id: str) -> str:
            """Refund an order."""
            self.refunded.append(order_id)
            return f"order {order_id} refunded"

        self.agent = dspy_imp.ReActV2("question -> answer", tools=[hold, refund], needs_approval=["refund"])
        self.agent.set_lm(ScriptedLM(script))


def chat_body(key: str, text: str) -> dict[str, Any]:
    message = {"id": f"{key}-u", "role": "user", "parts": [{"type": "text", "text": text}]}
    return {"id": key, "messages": [message], "trigger": "submit-message"}


async def test_a_turn_beyond_max_turns_is_refused_429_with_retry_after_before_any_event() -> None:
    holds = Holds([reply(calls=[call("hold", {}, id="h1")]), reply("Held."), reply("Now."), reply("Chat.")])
    app = dspy_imp.web.app(holds.agent, max_turns=1)
    async with client(app) as http:
        running = asyncio.ensure_future(http.post("/ag-ui", json=run_input("Hold", thread="a")))
        await asyncio.wait_for(holds.holding.wait(), GUARD)
        refused = await http.post("/ag-ui", json=run_input("Me too", thread="b"))
        chat = await http.post("/api/chat", json=chat_body("c", "Me too"))
        holds.released.set()
        first = agui_events((await asyncio.wait_for(running, GUARD)).text)
        later = agui_events((await http.post("/ag-ui", json=run_input("Me too", thread="b", run="r2"))).text)
        chat_later = await http.post("/api/chat", json=chat_body("c", "Me too"))
    for answer in (refused, chat):
        assert (answer.status_code, answer.headers["retry-after"]) == (429, "1")
        assert answer.headers["content-type"] == "application/json"  # no stream was started
        body = answer.json()
        assert (body["limit"], body["max_turns"], body["retry_after"]) == ("max_turns", 1, 1)
        assert "max_turns=1" in body["error"]
    assert first[-1]["type"] == "RUN_FINISHED"
    assert later[-1]["type"] == "RUN_FINISHED"  # the slot is free again: the retry runs
    assert chat_later.status_code == 200 and '"type":"finish"' in chat_later.text.replace(" ", "")


async def test_a_full_instance_tells_a_stream_reader_429_with_a_run_error_or_an_error_part() -> None:
    """Asked for ``text/event-stream``, the 429 keeps its status and ``Retry-After``, and its body is
    the stream a client that reads only the stream understands: AG-UI ``RUN_STARTED`` then
    ``RUN_ERROR`` (``code`` ``max_turns``); the AI SDK's ``start``, an ``error`` part naming it, ``[DONE]``."""
    holds = Holds([reply(calls=[call("hold", {}, id="h1")]), reply("Held.")])
    app = dspy_imp.web.app(holds.agent, max_turns=1)
    sse = {"accept": "text/event-stream"}
    async with client(app) as http:
        running = asyncio.ensure_future(http.post("/ag-ui", json=run_input("Hold", thread="a")))
        await asyncio.wait_for(holds.holding.wait(), GUARD)
        agui = await http.post("/ag-ui", json=run_input("Me too", thread="b"), headers=sse)
        chat = await http.post("/api/chat", json=chat_body("c", "Me too"), headers=sse)
        holds.released.set()
        await asyncio.wait_for(running, GUARD)
    for answer in (agui, chat):
        assert (answer.status_code, answer.headers["retry-after"]) == (429, "1")
        assert answer.headers["content-type"].startswith("text/event-stream")
    events = agui_events(agui.text)
    assert [e["type"] for e in events] == ["RUN_STARTED", "RUN_ERROR"]
    assert events[1]["code"] == "max_turns" and "max_turns=1" in events[1]["message"]
    parts = [line.removeprefix("data: ") for line in chat.text.splitlines() if line.startswith("data: ")]
    assert parts[-1] == "[DONE]" and chat.headers["x-vercel-ai-ui-message-stream"] == "v1"
    (error,) = [json.loads(p) for p in parts[:-1] if json.loads(p)["type"] == "error"]
    assert error["errorText"].startswith("max_turns: ") and "max_turns=1" in error["errorText"]


async def test_an_approval_refused_for_a_full_instance_is_kept_and_runs_when_sent_again() -> None:
    script = [
        reply(calls=[call("refund", {"order_id": "42"}, id="c9")]),  # p: pauses for approval
        reply(calls=[call("hold", {}, id="h1")]),  # h: fills the instance
        reply("Held."),
        reply("Refunded."),
    ]
    holds = Holds(script)
    resume = run_input(
        thread="p", run="r2", resume=[{"interruptId": "c9", "status": "resolved", "payload": {"approved": True}}]
    )
    app = dspy_imp.web.app(holds.agent, max_turns=1)
    async with client(app) as http:
        paused = agui_events((await http.post("/ag-ui", json=run_input("Refund 42", thread="p"))).text)
        assert paused[-1]["outcome"]["type"] == "interrupt"
        running = asyncio.ensure_future(http.post("/ag-ui", json=run_input("Hold", thread="h")))
        await asyncio.wait_for(holds.holding.wait(), GUARD)
        refused = await http.post("/ag-ui", json=resume)
        kept = (await http.get("/api/conversations/p")).json()
        holds.released.set()
        await asyncio.wait_for(running, GUARD)
        resumed = agui_events((await http.post("/ag-ui", json=resume)).text)
    assert refused.status_code == 429 and refused.headers["retry-after"] == "1"
    assert [i["id"] for i in kept["interrupts"]] == ["c9"]  # the pause still waits for its decision
    assert resumed[-1]["type"] == "RUN_FINISHED" and resumed[-1]["result"]["outputs"] == {"answer": "Refunded."}
    assert holds.refunded == ["42"]  # run once, by the retry


async def test_a_conversation_already_running_here_is_refused_409_with_retry_after() -> None:
    holds = Holds([reply(calls=[call("hold", {}, id="h1")]), reply("Held.")])
    async with client(dspy_imp.web.app(holds.agent)) as http:
        running = asyncio.ensure_future(http.post("/ag-ui", json=run_input("Hold", thread="a")))
        await asyncio.wait_for(holds.holding.wait(), GUARD)
        again = await http.post("/ag-ui", json=run_input("Again", thread="a", run="r2"))
        chat = await http.post("/api/chat", json=chat_body("a", "Again"))
        holds.released.set()
        await asyncio.wait_for(running, GUARD)
    for answer in (again, chat):
        assert (answer.status_code, answer.headers["retry-after"]) == (409, "1")
        assert answer.json()["error"] == "conversation 'a' is already running a turn"


async def test_a_conversation_another_instance_runs_is_refused_409_with_its_leases_remaining_seconds(
    tmp_path: Any,
) -> None:
    url = f"sqlite:///{tmp_path / 'conversations.db'}"
    other = dspy_imp.web.DatabaseStore(url, lease=30, clock=lambda: 1000.0)  # another instance's store
    here = dspy_imp.web.DatabaseStore(url, lease=30, clock=lambda: 1012.5)
    holds = Holds([reply("Never asked.")])
    try:
        assert await other.claim("x")  # its lease ends at 1030: 17.5 s from here's clock
        async with client(dspy_imp.web.app(holds.agent, store=here)) as http:
            refused = await http.post("/ag-ui", json=run_input("Mine now?", thread="x"))
            chat = await http.post("/api/chat", json=chat_body("x", "Mine now?"))
        for answer in (refused, chat):
            assert (answer.status_code, answer.headers["retry-after"]) == (409, "18")  # rounded up
            assert answer.json()["error"] == "conversation 'x' is already running a turn on another instance"
        assert await here.load("x") is None  # nothing was read or written for the refused turn
    finally:
        await other.release("x")
        other.close()
        here.close()


@pytest.mark.parametrize("bad", [0, -3, 2.5, True, "10"])
def test_max_turns_must_be_a_whole_number_of_turns(bad: Any) -> None:
    with pytest.raises(ConfigurationError, match="`max_turns` must be a whole number"):
        dspy_imp.web.app(dspy_imp.ReActV2("question -> answer"), max_turns=bad)


class Counting(FakeOpenAIServer):
    """A model server that holds every request until ``target`` are in flight at once (or, on a
    ceiling that never lets that many through, until the hang guard), counting the most it saw."""

    def __init__(self, target: int) -> None:
        super().__init__([])
        self.target, self.waiting, self.most = target, 0, 0
        self.all_in = threading.Event()
        self._httpd.socket.listen(1024)  # room for every connection at once (the default backlog is 5)

    def _next(self, request: ReceivedRequest) -> HTTPReply:
        with self._lock:
            self.requests.append(request)
            self.waiting += 1
            self.most = max(self.most, self.waiting)
            if self.waiting >= self.target:
                self.all_in.set()
        self.all_in.wait(GUARD)  # a hang guard: on a ceiling below the target it ends the test
        with self._lock:
            self.waiting -= 1
        return HTTPReply(text_completion("Done."))


@pytest.mark.block_network(allowed_hosts=[r"127\.0\.0\.1$"])
async def test_the_native_engine_keeps_more_than_100_model_requests_in_flight() -> None:
    turns = 150
    server = Counting(turns).start()
    try:
        agent = dspy_imp.ReActV2("question -> answer")
        lm = dspy.LM("openai/gpt-4o-mini", api_base=server.base_url, api_key="sk-test", cache=False, num_retries=0)
        agent.set_lm(lm)
        async with client(dspy_imp.web.app(agent, model_requests=turns, max_turns=turns)) as http:
            answers = await asyncio.gather(
                *(http.post("/ag-ui", json=run_input("Go", thread=f"t{n}")) for n in range(turns))
            )
        # The 150 pooled connections closed on this loop: left to the pool's finalizers, they are
        # closed whenever they are collected, on a loaded machine inside some later test.
        await lm.aclose()
    finally:
        server.stop()
    assert server.most == turns  # every turn's request at once: DSPy alone stops at 100
    assert all(agui_events(a.text)[-1]["type"] == "RUN_FINISHED" for a in answers)


@pytest.mark.parametrize("bad", [0, 1.5, False, "1024"])
def test_model_requests_must_be_a_whole_number_of_requests(bad: Any) -> None:
    with pytest.raises(ConfigurationError, match="`model_requests` must be a whole number"):
        dspy_imp.web.app(dspy_imp.ReActV2("question -> answer"), model_requests=bad)
