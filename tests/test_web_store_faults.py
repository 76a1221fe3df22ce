"""The web app when its store fails or refuses: a failed lease claim is told and frees the
conversation; ids are bounded before they reach a database; a newer schema is a 503 everywhere;
another user's conversation is a 404 on the streams as on REST; a bodiless DELETE; the CLI's
refusal of what is not an agent; the warning of an app served openly without ``auth``.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from test_web_agui import post
from web_scenarios import client, paused_script, run_input, support_agent, text_script, with_lm

import dspy_imp
import dspy_imp.web
from dspy_imp.testing import call, reply
from dspy_imp.web import Conversation
from dspy_imp.web.__main__ import main
from dspy_imp.web._turns import MemoryStore


class FailingClaims(MemoryStore):
    """A store double whose lease claim raises the first ``failures`` times (a dropped connection)."""

    def __init__(self, failures: int) -> None:
        super().__init__()
        self.failures = failures
        self.released: list[str] = []

    async def claim(self, key: str) -> bool:
        if self.failures:
            self.failures -= 1
            raise sa.exc.OperationalError("INSERT", {}, Exception("server closed the connection"))
        return True

    async def release(self, key: str) -> None:
        self.released.append(key)


def chat_body(key: str, text: str = "hi") -> dict[str, Any]:
    return {"id": key, "messages": [{"id": "m", "role": "user", "parts": [{"type": "text", "text": text}]}]}


async def test_a_failed_claim_is_a_run_error_and_frees_the_conversation() -> None:
    agent = support_agent()
    with_lm(agent, text_script())
    app = dspy_imp.web.app(agent, store=FailingClaims(failures=1))
    failed = await post(app, run_input("Hello"))
    assert failed[-1]["type"] == "RUN_ERROR" and "server closed the connection" in failed[-1]["message"]
    again = await post(app, run_input("Hello", run="r2"))  # not "already running a turn"
    assert again[-1]["type"] == "RUN_FINISHED"


async def test_a_failed_claim_is_an_error_part_on_the_ai_sdk_stream() -> None:
    agent = support_agent()
    with_lm(agent, text_script())
    app = dspy_imp.web.app(agent, store=FailingClaims(failures=1))
    async with client(app) as c:
        failed = await c.post("/api/chat", json=chat_body("c1"))
        again = await c.post("/api/chat", json=chat_body("c1"))
    assert '"type":"error"' in failed.text.replace(" ", "") and "server closed the connection" in failed.text
    assert "already running" not in again.text and '"type":"error"' not in again.text.replace(" ", "")


@pytest.mark.parametrize(
    ("key", "field"),
    [("a\x00b", "threadId"), ("x" * 501, "threadId"), ("line\nbreak", "threadId"), ("", "threadId")],
    ids=["nul", "too-long", "control", "empty"],
)
async def test_a_bad_thread_id_is_refused_before_the_store(tmp_path: Path, key: str, field: str) -> None:
    store = dspy_imp.web.DatabaseStore(f"sqlite:///{tmp_path / 'c.db'}")
    app = dspy_imp.web.app(support_agent(), store=store)
    async with client(app) as c:
        refused = await c.post("/ag-ui", json=run_input("Hello", thread=key))
        chat = await c.post("/api/chat", json=chat_body(key))
    store.close()
    assert refused.status_code == 422 and f"`{field}`" in refused.json()["error"]
    assert chat.status_code == 422 and "`id`" in chat.json()["error"]


async def test_a_bad_id_in_a_path_is_refused() -> None:
    app = dspy_imp.web.app(support_agent())
    async with client(app) as c:
        read = await c.get("/api/conversations/" + "x" * 501)
        deleted = await c.delete("/api/conversations/a%01b")
    assert read.status_code == 422 and "`id`" in read.json()["error"]
    assert deleted.status_code == 422 and "`id`" in deleted.json()["error"]


def newer_schema(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'newer.db'}"
    engine = sa.create_engine(url)
    with engine.begin() as c:
        c.execute(sa.text("CREATE TABLE dspy_imp_web_schema (version INTEGER NOT NULL)"))
        c.execute(sa.text("INSERT INTO dspy_imp_web_schema (version) VALUES (99)"))
    engine.dispose()
    return url


async def test_a_database_of_a_newer_schema_is_a_503_on_every_route(tmp_path: Path) -> None:
    store = dspy_imp.web.DatabaseStore(newer_schema(tmp_path))
    app = dspy_imp.web.app(support_agent(), store=store)
    async with client(app) as c:
        answers = [
            await c.get("/api/info"),
            await c.get("/api/conversations"),
            await c.get("/api/conversations/c1"),
            await c.delete("/api/conversations/c1"),
            await c.post("/ag-ui", json=run_input("Hello", thread="c1")),  # before any event
            await c.post("/api/chat", json=chat_body("c1")),  # before any part
        ]
    store.close()
    for answer in answers:
        assert answer.status_code == 503, answer.text
        assert answer.json()["schema"] == 99 and answer.json()["supported"] == 2
        assert "schema version 99" in answer.json()["error"]


async def test_a_bodiless_delete_is_a_204(tmp_path: Path) -> None:
    store = dspy_imp.web.DatabaseStore(f"sqlite:///{tmp_path / 'c.db'}")
    agent = support_agent()
    with_lm(agent, text_script())
    app = dspy_imp.web.app(agent, store=store)
    await post(app, run_input("Hello", thread="d1"))
    async with client(app) as c:
        deleted = await c.delete("/api/conversations/d1")  # no body, no content type: curl -X DELETE
    assert deleted.status_code == 204
    assert await store.load("d1") is None
    store.close()


def signed_in(request: Any) -> str | None:
    return request.headers.get("x-user")


@pytest.mark.parametrize("sync", [False, True], ids=["async", "sync"])
async def test_another_users_conversation_is_a_404_on_both_streams(sync: bool) -> None:
    """A real HTTP 404 before any event, with REST's body, on both streams: for another user's
    id, and for a resume of an id that does not exist; a new id is still started by a message."""
    agent = support_agent()
    with_lm(agent, paused_script() + text_script())
    store = MemoryStore()
    app = dspy_imp.web.app(agent, store=store, auth=signed_in, sync=sync)
    alice, bob = {"x-user": "alice"}, {"x-user": "bob"}
    resume = [{"interruptId": "c9", "status": "resolved", "payload": {"approved": True}}]
    approved = {"approved": True}
    approval = {"type": "tool-refund", "toolCallId": "c9", "state": "approval-responded", "approval": approved}
    assistant = {"id": "a", "role": "assistant", "parts": [approval]}
    async with client(app) as c:
        await c.post("/ag-ui", json=run_input("Refund order 42", thread="a1"), headers=alice)
        answers = {
            "agui": await c.post("/ag-ui", json=run_input(run="r2", thread="a1", resume=resume), headers=bob),
            "agui message": await c.post("/ag-ui", json=run_input("Hi", run="r3", thread="a1"), headers=bob),
            "chat": await c.post("/api/chat", json=chat_body("a1"), headers=bob),
            "rest": await c.get("/api/conversations/a1", headers=bob),
        }
        missing = {
            "agui": await c.post("/ag-ui", json=run_input(run="r4", thread="nope", resume=resume), headers=alice),
            "chat": await c.post("/api/chat", json={**chat_body("nope"), "messages": [assistant]}, headers=alice),
            "rest": await c.get("/api/conversations/nope", headers=alice),
        }
        created = await c.post("/ag-ui", json=run_input("Hello", run="r5", thread="b1"), headers=bob)
    for name, answer in answers.items():  # told as REST tells it: existence not revealed
        assert (answer.status_code, answer.json()) == (404, {"error": "no conversation 'a1'"}), name
        assert answer.headers["content-type"] == "application/json", name
    for name, answer in missing.items():
        assert (answer.status_code, answer.json()) == (404, {"error": "no conversation 'nope'"}), name
    assert created.status_code == 200 and '"RUN_FINISHED"' in created.text  # a new thread id: created
    stored = await store.load("a1")
    assert stored is not None and stored.owner == "alice" and stored.history.messages[-1]["tool_call_results"] == []
    assert await store.load("nope") is None


def not_an_agent(question: str) -> str:
    return question


@pytest.mark.parametrize("extra", [[], ["--model", "openai/gpt-4o-mini"]], ids=["no-model", "model"])
def test_the_cli_refuses_what_is_not_an_agent_in_one_line(extra: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main([f"{__name__}:not_an_agent", *extra])
    message = str(exited.value.code)
    assert "expected a dspy_imp.ReActV2 or a DurableAgent" in message and "function" in message
    assert "\n" not in message and "serving" not in capsys.readouterr().out


async def test_served_beyond_loopback_without_auth_warns_once(caplog: pytest.LogCaptureFixture) -> None:
    agent = support_agent()
    opened = dspy_imp.web.app(agent)
    transport = dspy_imp_transport(opened, "10.0.0.5")
    with caplog.at_level(logging.WARNING, logger="dspy_imp.web"):
        async with transport as c:
            await c.get("/api/info", headers={"host": "10.0.0.5"})
            await c.get("/api/info", headers={"host": "10.0.0.5"})
    warned = [r for r in caplog.records if "without `auth=`" in r.getMessage()]
    assert len(warned) == 1 and "10.0.0.5" in warned[0].getMessage()
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="dspy_imp.web"):
        async with dspy_imp_transport(dspy_imp.web.app(agent, auth=signed_in), "10.0.0.5") as c:
            await c.get("/api/info", headers={"host": "10.0.0.5", "x-user": "a"})
        async with dspy_imp_transport(dspy_imp.web.app(agent), "127.0.0.1") as c:
            await c.get("/api/info", headers={"host": "127.0.0.1"})
    assert not [r for r in caplog.records if "without `auth=`" in r.getMessage()]


def dspy_imp_transport(app: Any, address: str) -> Any:
    """A client of ``app`` as served on ``address`` (the ASGI scope's ``server``)."""
    import httpx

    async def served(scope: Any, receive: Any, send: Any) -> None:
        await app({**scope, "server": (address, 80)}, receive, send)

    return httpx.AsyncClient(transport=httpx.ASGITransport(app=served), base_url=f"http://{address}")


async def test_a_saved_conversation_survives_a_failed_release(tmp_path: Path) -> None:
    class FailingRelease(MemoryStore):
        async def claim(self, key: str) -> bool:
            return True

        async def release(self, key: str) -> None:
            raise sa.exc.OperationalError("DELETE", {}, Exception("connection lost"))

    agent = support_agent()
    with_lm(agent, text_script() * 2)
    store = FailingRelease()
    app = dspy_imp.web.app(agent, store=store)
    first = await post(app, run_input("Hello"))
    assert first[-1]["type"] == "RUN_FINISHED"  # the end is told though the lease was not given back
    again = await post(app, run_input("Hello", run="r2"))
    assert again[-1]["type"] == "RUN_FINISHED"
    assert isinstance(await store.load("t1"), Conversation)


@pytest.mark.parametrize("sync", [False, True], ids=["async", "sync"])
async def test_an_approval_answered_already_is_a_409_on_both_streams(sync: bool) -> None:
    """A second tab sends the approval the first one gave: 409 before any event, on both streams,
    whether the conversation now waits for nothing or for a later call; nothing runs twice."""
    agent = support_agent()
    twice = [
        reply(calls=[call("refund", {"order_id": "42"}, id="c9")]),
        reply(calls=[call("refund", {"order_id": "43"}, id="c11")]),  # the approved turn pauses again
        reply(calls=[call("send", {"text": "Both refunded."}, id="c12")]),
    ]
    lm = with_lm(agent, twice)
    app = dspy_imp.web.app(agent, sync=sync)
    approve = [{"interruptId": "c9", "status": "resolved", "payload": {"approved": True}}]
    later = [{"interruptId": "c11", "status": "resolved", "payload": {"approved": True}}]
    part = {"type": "tool-refund", "toolCallId": "c9", "state": "approval-responded", "approval": {"approved": True}}
    chat = {"id": "t1", "messages": [{"id": "a", "role": "assistant", "parts": [part]}]}
    async with client(app) as c:
        await c.post("/ag-ui", json=run_input("Refund orders 42 and 43"))
        await c.post("/ag-ui", json=run_input(run="r2", resume=approve))  # the first tab: paused again on c11
        waiting_on_another = await c.post("/ag-ui", json=run_input(run="r3", resume=approve))  # the second tab
        await c.post("/ag-ui", json=run_input(run="r4", resume=later))
        waiting_on_nothing = await c.post("/ag-ui", json=run_input(run="r5", resume=later))
        chat_answer = await c.post("/api/chat", json=chat)
    assert (waiting_on_another.status_code, waiting_on_another.json()) == (
        409,
        {"error": "interrupt 'c9' was answered already"},
    )
    assert (waiting_on_nothing.status_code, waiting_on_nothing.json()) == (
        409,
        {"error": "conversation 't1' has no turn waiting for a decision: it was answered already"},
    )
    assert (chat_answer.status_code, chat_answer.json()) == (
        409,
        {"error": "the conversation is not waiting for any tool decision: it was answered already"},
    )
    assert lm.remaining == 0


@pytest.mark.parametrize("kind", ["files", "database"])
async def test_how_each_turn_ended_survives_a_restart(tmp_path: Path, kind: str) -> None:
    """``Conversation.turns``: a new app on the same store reads back each turn's end and the
    decision it was resumed with (the page shows them again after a reload)."""

    def store() -> Any:
        if kind == "files":
            return dspy_imp.web.FileStore(tmp_path)
        return dspy_imp.web.DatabaseStore(f"sqlite:///{tmp_path / 'c.db'}")

    agent = support_agent()
    with_lm(agent, paused_script())
    first = store()
    app = dspy_imp.web.app(agent, store=first)
    refuse = [{"interruptId": "c9", "status": "resolved", "payload": {"approved": False, "reason": "No receipt."}}]
    async with client(app) as c:
        info = (await c.get("/api/info")).json()
        await c.post("/ag-ui", json=run_input("Refund order 42"))
        await c.post("/ag-ui", json=run_input(run="r2", resume=refuse))
    getattr(first, "close", lambda: None)()
    again = store()
    async with client(dspy_imp.web.app(agent, store=again)) as c:
        read = (await c.get("/api/conversations/t1")).json()
    getattr(again, "close", lambda: None)()
    assert info["lists_conversations"] is (kind == "database")
    turns = read["turns"]
    assert [t["ending"]["termination_reason"] for t in turns] == ["paused", "finished_by_tool"]
    assert [t["messages"] for t in turns] == [4, 6]  # after the refused call's result, then after the send
    assert turns[1]["approvals"] == {"c9": "No receipt."} and turns[1]["ending"]["usage"]["input_tokens"] == 40
    assert read["messages"][3]["toolCallId"] == "c9" and read["messages"][5]["toolCallId"] == "c10"


async def test_close_waits_for_an_abandoned_statement_before_disposing_the_pool(tmp_path: Path) -> None:
    """A statement past its bound is abandoned, its thread still holding a pooled connection; a
    ``close()`` meanwhile waits for it, so the pool it disposes has that connection back (checked
    out while the pool is disposed, it would go back to the old pool and be left open)."""
    store = dspy_imp.web.DatabaseStore(f"sqlite:///{tmp_path}/chat.db", timeout=1)
    await store.check()
    holding, release = threading.Event(), threading.Event()

    def slow_row(key: str) -> Any:
        with store.engine.connect() as c:
            holding.set()
            release.wait(30)  # a hang guard: the test releases it
            return c.execute(sa.text("SELECT 1")).first()

    store._row = slow_row  # type: ignore[method-assign]
    with pytest.raises(TimeoutError, match="did not answer within 1 s"):
        await store.load("k")  # abandoned after 1 s, its thread still in the statement
    assert holding.is_set()
    checked_out: list[int] = []
    dispose = store.engine.dispose

    def counted(*args: Any, **kwargs: Any) -> None:
        checked_out.append(store.engine.pool.checkedout())
        dispose(*args, **kwargs)

    store.engine.dispose = counted  # type: ignore[method-assign]
    closing = threading.Thread(target=store.close)
    closing.start()
    closing.join(0.5)  # without the wait, close() has disposed the pool by now
    release.set()
    closing.join(30)
    assert checked_out == [0]
