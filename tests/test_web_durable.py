"""The web app on a DBOS durable agent: each turn a workflow; a paused turn waits in its workflow,
and the approval sent through AG-UI (or the AI SDK stream) resumes it, from a new app too (as after
a restart: nothing of the first app is kept but DBOS's records and the store's files)."""

from __future__ import annotations

import asyncio
import contextvars
import functools
from collections.abc import Iterator
from typing import Any

import anyio.to_thread
import dspy
import pytest
from dbos import DBOS
from test_web_stop_inflight import hanging_lm
from web_helpers import agui_events, vercel_parts, verify_agui, verify_vercel
from web_scenarios import client, paused_script, run_input, support_agent, tool_script

import dspy_imp.web
from dspy_imp import durable
from dspy_imp._watch.events import observing
from dspy_imp.testing import ScriptedLM, call, reply

GUARD = 30  # seconds: a failure guard only, never a timing assertion
PROGRAM = support_agent()
AGENTS: dict[str, durable.DurableAgent] = {}
GATES: dict[str, asyncio.Event] = {}


async def slow_lookup(order_id: str) -> str:
    """Look up an order (it waits for the test's gate: a lookup that takes its time)."""
    GATES["started"].set()
    await GATES["release"].wait()
    return f"order {order_id} shipped"


SLOW = dspy_imp.ReActV2("message -> reply", tools=[slow_lookup])
STOP_ASKED: list[str] = []


def stopping_lookup(order_id: str) -> str:
    """Look up an order (a sync tool; the person watching presses Stop while it runs)."""
    STOP_ASKED.append(order_id)
    return f"order {order_id} shipped"


STOPPING = dspy_imp.ReActV2("message -> reply", tools=[stopping_lookup])
THINKING = dspy_imp.ReActV2("message -> reply")  # its LM hangs in the request (``hanging_lm``)


@pytest.fixture(scope="module", autouse=True)
def dbos(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    folder = tmp_path_factory.mktemp("dbos")
    DBOS(config=durable.config("dspy-imp-web", system_database_url=f"sqlite:///{folder}/sys.sqlite", log_level="ERROR"))
    AGENTS["support"] = durable.DurableAgent(PROGRAM, name="web-support")
    AGENTS["slow"] = durable.DurableAgent(SLOW, name="web-slow")
    AGENTS["stopping"] = durable.DurableAgent(STOPPING, name="web-stopping")
    AGENTS["thinking"] = durable.DurableAgent(THINKING, name="web-thinking")
    DBOS.launch()
    yield
    DBOS.destroy(destroy_registry=True)


async def agui(app: Any, body: dict[str, Any]) -> list[dict[str, Any]]:
    async with client(app) as http:
        response = await http.post("/ag-ui", json=body)
    return agui_events(response.text)


async def statuses(conversation: str) -> list[str]:
    """The statuses of the conversation's workflows (ids ``dspy_imp.web:<conversation>:<hex>``)."""
    found = await DBOS.list_workflows_async(workflow_id_prefix=f"dspy_imp.web:{conversation}:")
    return [w.status for w in found if w.workflow_id.rsplit(":", 1)[0] == f"dspy_imp.web:{conversation}"]


async def test_a_durable_turn_streams_like_any_turn() -> None:
    lm = ScriptedLM(tool_script())
    PROGRAM.set_lm(lm)
    events = await agui(dspy_imp.web.app(AGENTS["support"]), run_input("Where is order 42?", thread="d1"))
    verify_agui(events)
    kinds = [e["type"] for e in events]
    assert kinds.count("TOOL_CALL_RESULT") == 2 and "REASONING_MESSAGE_CONTENT" in kinds
    assert events[-1]["result"]["termination_reason"] == "finished_by_tool"
    assert await statuses("d1") == ["SUCCESS"]
    assert lm.remaining == 0


async def test_a_paused_durable_turn_is_approved_from_a_new_app(tmp_path: Any) -> None:
    lm = ScriptedLM(paused_script())
    PROGRAM.set_lm(lm)
    store = dspy_imp.web.FileStore(tmp_path)
    paused = await agui(dspy_imp.web.app(AGENTS["support"], store=store), run_input("Refund order 42", thread="d2"))
    verify_agui(paused)
    assert paused[-1]["outcome"]["type"] == "interrupt"
    assert await statuses("d2") == ["PENDING"]

    again = dspy_imp.web.app(AGENTS["support"], store=dspy_imp.web.FileStore(tmp_path))
    resume = [{"interruptId": "c9", "status": "resolved", "payload": {"approved": True}}]
    resumed = await agui(again, run_input(thread="d2", run="r2", resume=resume))
    verify_agui(resumed, known_calls={"c9"})
    assert resumed[-1]["result"]["termination_reason"] == "finished_by_tool"
    assert resumed[-1]["result"]["outputs"] == {"reply": "Order 42 is refunded.", "declined": False}
    assert await statuses("d2") == ["SUCCESS"]
    assert lm.remaining == 0


async def test_the_ai_sdk_stream_resumes_a_durable_turn_too() -> None:
    lm = ScriptedLM(paused_script())
    PROGRAM.set_lm(lm)
    app = dspy_imp.web.app(AGENTS["support"])
    user = {"id": "u1", "role": "user", "parts": [{"type": "text", "text": "Refund order 42"}]}
    async with client(app) as http:
        first = vercel_parts((await http.post("/api/chat", json={"id": "d3", "messages": [user]})).text)
        verify_vercel(first)
        assert first[-2]["type"] == "tool-approval-request"
        part = {"type": "tool-refund", "toolCallId": "c9", "state": "approval-responded", "input": {"order_id": "42"}}
        answered = {
            "id": first[0]["messageId"],
            "role": "assistant",
            "parts": [{**part, "approval": {"id": "c9", "approved": True}}],
        }
        second = vercel_parts((await http.post("/api/chat", json={"id": "d3", "messages": [user, answered]})).text)
    verify_vercel(second, known_calls={"c9"})
    assert second[1] == {"type": "tool-output-available", "toolCallId": "c9", "output": "order 42 refunded"}
    assert second[-1]["messageMetadata"]["termination_reason"] == "finished_by_tool"


async def test_an_approval_resumes_its_own_conversation_never_one_whose_id_it_begins() -> None:
    """``alice`` and ``alice:work`` both wait on a call ``c9``: approving alice's runs alice's refund."""
    refunds = [
        reply("A refund needs approval.", calls=[call("refund", {"order_id": order}, id="c9")], usage=(20, 5))
        for order in ("42", "43")
    ]
    lm = ScriptedLM([*refunds, reply(calls=[call("send", {"text": "Order 42 is refunded."}, id="c10")])])
    PROGRAM.set_lm(lm)
    app = dspy_imp.web.app(AGENTS["support"])
    await agui(app, run_input("Refund order 42", thread="alice"))
    await agui(app, run_input("Refund order 43", thread="alice:work"))
    resume = [{"interruptId": "c9", "status": "resolved", "payload": {"approved": True}}]
    resumed = await agui(app, run_input(thread="alice", run="r2", resume=resume))
    verify_agui(resumed, known_calls={"c9"})
    assert resumed[1]["content"] == "order 42 refunded"
    assert resumed[-1]["result"]["outputs"] == {"reply": "Order 42 is refunded.", "declined": False}
    assert await statuses("alice") == ["SUCCESS"]
    assert await statuses("alice:work") == ["PENDING"]  # its refund of order 43 still waits
    assert lm.remaining == 0


async def test_deleting_a_conversation_cancels_its_waiting_workflow(tmp_path: Any) -> None:
    lm = ScriptedLM(paused_script()[:1] * 2)
    PROGRAM.set_lm(lm)
    store = dspy_imp.web.DatabaseStore(f"sqlite:///{tmp_path}/chat.db")
    app = dspy_imp.web.app(AGENTS["support"], store=store)
    paused = await agui(app, run_input("Refund order 42", thread="gone"))
    assert paused[-1]["outcome"]["type"] == "interrupt"
    await agui(app, run_input("Refund order 42", thread="gone:kept"))  # a conversation whose id extends it
    assert await statuses("gone") == ["PENDING"] and await statuses("gone:kept") == ["PENDING"]
    async with client(app) as http:
        deleted = await http.delete("/api/conversations/gone", headers={"content-type": "application/json"})
    assert deleted.status_code == 204
    assert await statuses("gone") == ["CANCELLED"]
    assert await statuses("gone:kept") == ["PENDING"]  # only the conversation's own workflow
    assert await store.load("gone") is None
    store.close()


async def test_stop_ends_a_durable_turn_in_its_tool_call_and_the_conversation_goes_on() -> None:
    """Stop during an async tool call: the tool is cancelled, no request after it, the workflow
    ends (its result the history of the finished steps, saved by the app: the cut step is not
    one), and the next message continues the same conversation."""
    GATES.update(started=asyncio.Event(), release=asyncio.Event())
    lm = ScriptedLM(
        [
            reply(calls=[call("slow_lookup", {"order_id": "42"}, id="s1")], usage=(20, 5)),
            reply("Never sent.", usage=(1, 1)),
        ]
    )
    SLOW.set_lm(lm)
    app = dspy_imp.web.app(AGENTS["slow"])
    json_body = {"content-type": "application/json"}
    async with client(app) as http:
        running = asyncio.ensure_future(http.post("/ag-ui", json=run_input("Where is 42?", thread="st")))
        await GATES["started"].wait()  # the turn is inside its tool call
        stopped = await http.post("/api/conversations/st/stop", json={}, headers=json_body)
        events = agui_events((await asyncio.wait_for(running, GUARD)).text)  # the tool never released
        GATES["release"].set()
        idle = await http.post("/api/conversations/st/stop", json={}, headers=json_body)
        kept = (await http.get("/api/conversations/st")).json()
        assert (stopped.status_code, stopped.json(), idle.status_code) == (200, {"stopping": "st"}, 409)
        verify_agui(events)
        assert events[-1] == {
            "type": "RUN_ERROR",
            "message": "StreamClosed: the turn was stopped",
            "code": "StreamClosed",
        }
        assert [e["content"] for e in events if e["type"] == "TOOL_CALL_RESULT"] == []  # cancelled
        assert len(lm.requests) == 1  # stopped before its next request
        assert await statuses("st") == ["SUCCESS"]  # the workflow ended, its result the history so far
        assert [m["role"] for m in kept["messages"]] == ["user", "assistant"]  # the question; no step
        assert kept["running"] is False and kept["interrupts"] == []

        lm_next = ScriptedLM([reply("Order 42 shipped; anything else?", usage=(30, 5))])
        SLOW.set_lm(lm_next)
        goes_on = agui_events((await http.post("/ag-ui", json=run_input("Thanks", thread="st", run="r2"))).text)
    verify_agui(goes_on)
    assert goes_on[-1]["result"]["outputs"] == {"reply": "Order 42 shipped; anything else?"}
    sent = lm_next.requests[0].messages
    assert "Where is 42?" in str(sent) and "order 42 shipped" not in str(sent)  # the stopped turn's history went on
    assert await statuses("st") == ["SUCCESS", "SUCCESS"]


@pytest.mark.parametrize("sent", [0, 2], ids=["thinking-before-any-chunk", "mid-stream"])
async def test_stop_ends_a_durable_turns_model_request_in_flight(sent: int) -> None:
    """Stop while the workflow's request waits (before its first chunk or mid-stream): the request
    is cancelled, its step records the stop (a recovered workflow stops there too), the workflow
    ends ``SUCCESS`` with the history of the finished steps (the cut reply is none of them)."""
    lm, engine = hanging_lm([reply("Order 42 shipped on Monday and arrives on Thursday.", chunk=4)], 0, sent)
    THINKING.set_lm(lm)
    json_body = {"content-type": "application/json"}
    async with client(dspy_imp.web.app(AGENTS["thinking"])) as http:
        thread = f"th{sent}"
        running = asyncio.ensure_future(http.post("/ag-ui", json=run_input("Where is 42?", thread=thread)))
        await asyncio.wait_for(engine.waiting.wait(), GUARD)
        stopped = await http.post(f"/api/conversations/{thread}/stop", json={}, headers=json_body)
        events = agui_events((await asyncio.wait_for(running, GUARD)).text)
        kept = (await http.get(f"/api/conversations/{thread}")).json()
    assert stopped.status_code == 200 and engine.cancelled.is_set()
    verify_agui(events)
    assert events[-1]["message"] == "StreamClosed: the turn was stopped"
    assert [m["role"] for m in kept["messages"]] == ["user", "assistant"]
    assert "content" not in kept["messages"][1]  # the cut reply is not kept
    assert await statuses(thread) == ["SUCCESS"]
    (workflow,) = await DBOS.list_workflows_async(workflow_id_prefix=f"dspy_imp.web:{thread}:")
    steps = await DBOS.list_workflow_steps_async(workflow.workflow_id)
    assert [step["function_name"] for step in steps][-1] == "dspy_imp.request.step"
    assert steps[-1]["output"]["stopped"] == "the turn was stopped"  # the cut step recorded as stopped


async def test_a_stopped_durable_turn_keeps_its_history_on_the_stop() -> None:
    """Without the web app: a workflow stopped by its observer's ``stopped()`` ends with the history
    as its result, and ``aresult`` raises the ``StreamClosed`` carrying it."""
    GATES.update(started=asyncio.Event(), release=asyncio.Event())
    lm = ScriptedLM([reply(calls=[call("slow_lookup", {"order_id": "7"}, id="s1")], usage=(20, 5))])
    SLOW.set_lm(lm)

    class Observer:
        def __call__(self, event: Any) -> None:
            pass

        def stopped(self) -> bool:
            return GATES["release"].is_set()

    with observing(Observer()):
        handle = await AGENTS["slow"].astart(workflow_id="direct-stop", message="Where is 7?")
    await GATES["started"].wait()
    GATES["release"].set()
    with pytest.raises(dspy_imp.StreamClosed, match="the turn was stopped") as stopped:
        await handle.aresult(polling_interval_sec=0.01)
    history = stopped.value.dspy_imp_history
    assert isinstance(history, dspy.History)
    assert history.messages[0]["message"] == "Where is 7?"
    assert [r["result"] for r in history.messages[0]["tool_call_results"]] == ["order 7 shipped"]
    assert await handle.astatus() == "SUCCESS" and len(lm.requests) == 1


class StopAfterTheTool:
    """An observer whose ``stopped()`` is true once the tool has run (Stop pressed during it)."""

    def __call__(self, event: Any) -> None:
        pass

    def stopped(self) -> bool:
        return bool(STOP_ASKED)


@pytest.mark.parametrize("sync", [False, True], ids=["async", "sync"])
def test_a_durable_turn_stopped_by_its_observer_ends_with_its_history(sync: bool) -> None:
    """Both drivers of the workflow: stopped before the request after the tool, the workflow ends
    ``SUCCESS`` with the history as its result, and the call raises the ``StreamClosed`` carrying it."""
    STOP_ASKED.clear()
    lm = ScriptedLM([reply(calls=[call("stopping_lookup", {"order_id": "9"}, id="s1")]), reply("Never sent.")])
    STOPPING.set_lm(lm)
    agent, workflow = AGENTS["stopping"], f"stopped-{'sync' if sync else 'async'}"
    with observing(StopAfterTheTool()), pytest.raises(dspy_imp.StreamClosed, match="the turn was stopped") as stop:
        if sync:  # in a worker thread, as the web runner runs a sync turn (its observer reports through anyio)
            call_it = functools.partial(agent, workflow_id=workflow, message="Where is 9?")
            asyncio.run(anyio.to_thread.run_sync(contextvars.copy_context().run, call_it))
        else:
            asyncio.run(agent.acall(workflow_id=workflow, message="Where is 9?"))
    history = stop.value.dspy_imp_history
    assert history.messages == [
        {
            "message": "Where is 9?",
            "tool_calls": [{"id": "s1", "name": "stopping_lookup", "args": {"order_id": "9"}}],
            "tool_call_results": [
                {
                    "id": "s1",
                    "name": "stopping_lookup",
                    "result": "order 9 shipped",
                    "error": False,
                    "returned_at": history.messages[0]["tool_call_results"][0]["returned_at"],
                }
            ],
        }
    ]
    assert len(lm.requests) == 1 and STOP_ASKED == ["9"]
    assert durable.handle(workflow).status() == "SUCCESS"
    with pytest.raises(dspy_imp.StreamClosed):  # the recorded outcome, asked again
        durable.handle(workflow).result(polling_interval_sec=0.01)


def test_a_durable_agent_cannot_offer_client_tools() -> None:
    with pytest.raises(dspy_imp.ConfigurationError, match=r"`client_tools=True` needs a dspy_imp\.ReActV2"):
        dspy_imp.web.app(AGENTS["support"], client_tools=True)
