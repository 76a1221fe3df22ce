"""``DatabaseStore``: conversations on SQLite (a file) and on a real Postgres, byte for byte; the
schema's own migrations; the turn lease across stores (two processes in effect); owners; retention.

Each test runs on both databases (Postgres from ``postgres_server.py``, which ``.ci/run`` installs).
Time is the store's ``clock``, moved by the test: nothing waits on the wall clock.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from web_scenarios import client, paused_script, run_input, support_agent, with_lm

import dspy_imp
import dspy_imp.web
from dspy_imp.testing import ScriptedLM, call, reply
from dspy_imp.web import Conversation
from dspy_imp.web._database import LeaseLost
from dspy_imp.web._migrations import MIGRATIONS, migrate


@pytest.fixture(params=["sqlite", "postgres"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'conversations.db'}"
    server = request.getfixturevalue("postgres")
    return server.database(f"store_{abs(hash(request.node.name)) % 10**8}")


@pytest.fixture(autouse=True)
def closed_after(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every store a test opens is closed after it (its pooled connections)."""
    opened: list[dspy_imp.web.DatabaseStore] = []
    real = dspy_imp.web.DatabaseStore.__init__

    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        real(self, *args, **kwargs)
        opened.append(self)

    monkeypatch.setattr(dspy_imp.web.DatabaseStore, "__init__", init)
    yield
    for store in opened:
        store.close()


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def lambda_lookup(order: str) -> dict[str, Any]:
    """Look an order up."""
    return {"order": order, "status": "shipped", "note": "naïve café"}


@pytest.mark.parametrize("sync", [True, False], ids=["sync", "async"])
async def test_a_history_round_trips_byte_for_byte_and_the_next_request_is_the_same(url: str, sync: bool) -> None:
    agent = dspy_imp.ReActV2("question -> answer", tools=[lambda_lookup])
    lm = ScriptedLM([reply(calls=[call("lambda_lookup", {"order": "42"}, id="c1")]), reply("It shipped ✓.")] * 2)
    agent.set_lm(lm)
    first = agent(question="Where is 42?") if sync else await agent.acall(question="Where is 42?")
    history = first.metadata.history
    await dspy_imp.web.DatabaseStore(url).save("c", Conversation(history))

    stored = await dspy_imp.web.DatabaseStore(url).load("c")  # another process: a new store, the same rows
    assert stored is not None and stored.owner is None
    loaded = stored.history
    assert json.dumps(dspy_imp.dump_history(loaded)) == json.dumps(dspy_imp.dump_history(history))
    before = len(lm.requests)
    kwargs = {"question": "And 43?"}
    again = agent(history=loaded, **kwargs) if sync else await agent.acall(history=loaded, **kwargs)
    from_memory = ScriptedLM([reply(calls=[call("lambda_lookup", {"order": "42"}, id="c1")]), reply("It shipped ✓.")])
    agent.set_lm(from_memory)
    agent(history=history, **kwargs) if sync else await agent.acall(history=history, **kwargs)
    assert again.metadata.termination_reason == "answered"
    assert lm.requests[before].messages == from_memory.requests[0].messages


async def test_a_stored_history_is_input_and_is_validated(url: str) -> None:
    store = dspy_imp.web.DatabaseStore(url)
    await store.save("c", Conversation(dspy_imp.load_history({"type": "history", "messages": []})))
    with store.engine.begin() as c:
        c.execute(sa.text("UPDATE dspy_imp_web_conversations SET history = :h"), {"h": '{"type": "nope"}'})
    with pytest.raises(dspy_imp.ConfigurationError):
        await store.load("c")


async def test_the_schema_is_created_and_migrated_forward(url: str) -> None:
    engine = sa.create_engine(url.replace("postgresql://", "postgresql+psycopg://"))
    assert migrate(engine, to=1) == 1  # a database written by the first release
    with engine.begin() as c:
        c.execute(
            sa.text("INSERT INTO dspy_imp_web_conversations (key, history, updated) VALUES ('old', :h, 5.0)"),
            {"h": json.dumps({"type": "history", "messages": [{"question": "hi", "answer": "hello"}]})},
        )
    store = dspy_imp.web.DatabaseStore(url)
    old = await store.load("old")
    assert old is not None and old.history.messages[0]["answer"] == "hello" and old.owner is None
    with engine.begin() as c:
        assert c.execute(sa.text("SELECT version FROM dspy_imp_web_schema")).scalar() == len(MIGRATIONS) == 2
        row = c.execute(sa.text("SELECT owner, title, created FROM dspy_imp_web_conversations")).one()
    assert tuple(row) == (None, None, 5.0)
    assert migrate(engine) == 2  # again: nothing to do
    with engine.begin() as c:
        c.execute(sa.text("UPDATE dspy_imp_web_schema SET version = 99"))
    with pytest.raises(dspy_imp.ConfigurationError, match="schema version 99"):
        migrate(engine)
    engine.dispose()


async def test_one_turn_lease_per_conversation_across_stores_until_it_expires(url: str) -> None:
    clock = Clock()
    first = dspy_imp.web.DatabaseStore(url, lease=30, clock=clock)
    second = dspy_imp.web.DatabaseStore(url, lease=30, clock=clock)
    history = Conversation(dspy_imp.load_history({"type": "history", "messages": []}))
    assert await first.claim("c")
    assert not await first.claim("c")  # the same store (another request in this process) too
    assert not await second.claim("c")  # another process's turn of the same conversation waits
    assert await second.claim("other")  # another conversation does not
    await second.release("other")
    await first.release("c")
    assert await second.claim("c")  # released: the next turn may run
    await second.release("c")

    assert await first.claim("c")  # then its process dies: the lease is never renewed nor released
    clock.now += 29
    assert not await second.claim("c")
    clock.now += 2
    assert await second.claim("c")  # expired: the conversation is usable again
    with pytest.raises(LeaseLost):
        await first.save("c", history)  # the dead turn's late save cannot overwrite the new turn's
    await second.save("c", history)
    await second.release("c")


async def test_a_users_conversations_are_theirs_alone(url: str) -> None:
    clock = Clock()
    store = dspy_imp.web.DatabaseStore(url, clock=clock)
    history = dspy_imp.load_history({"type": "history", "messages": [{"question": "q", "answer": "a"}]})
    await store.save("a1", Conversation(history, "alice"))
    clock.now += 1
    await store.save("a2", Conversation(history, "alice"))
    await store.save("b1", Conversation(history, "bob"))
    with pytest.raises(dspy_imp.ConfigurationError, match="belongs to another user"):
        await store.save("a1", Conversation(history, "bob"))
    assert [c.key for c in await store.conversations("alice")] == ["a2", "a1"]
    assert [c.key for c in await store.conversations("bob")] == ["b1"]
    assert await store.owner("a1") == "alice"
    assert not await store.rename("a1", "stolen", owner="bob")
    assert await store.rename("a1", "Refunds", owner="alice")
    assert not await store.delete("a1", owner="bob")
    assert [c.title for c in await store.conversations("alice")] == [None, "Refunds"]
    assert await store.delete("a1", owner="alice")
    assert await store.load("a1") is None
    assert [c.key for c in await store.conversations("alice")] == ["a2"]


async def test_retention_deletes_what_is_older_than_the_age_with_its_lease(url: str) -> None:
    clock = Clock()
    store = dspy_imp.web.DatabaseStore(url, clock=clock)
    history = Conversation(dspy_imp.load_history({"type": "history", "messages": []}))
    await store.save("old", history)
    clock.now += 100
    await store.save("new", history)
    assert await store.purge(older_than=50) == 1
    assert await store.load("old") is None and await store.load("new") is not None


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"url": "not a url"}, "url"),
        ({"url": "mysql://x/y"}, "sqlite:// and postgresql://"),
        ({"url": 3}, "url"),
        ({"lease": 0}, "lease"),
        ({"lease": True}, "lease"),
    ],
)
def test_bad_options_are_refused_naming_them(kwargs: dict[str, Any], named: str) -> None:
    with pytest.raises(dspy_imp.ConfigurationError, match=named):
        dspy_imp.web.DatabaseStore(**kwargs)


@pytest.mark.parametrize("sync", [False, True], ids=["async", "sync"])
async def test_the_app_keeps_its_conversations_in_the_database(url: str, sync: bool) -> None:
    from test_web_agui import post

    agent = support_agent()
    with_lm(agent, paused_script())
    before = dspy_imp.web.app(agent, sync=sync, store=dspy_imp.web.DatabaseStore(url))
    paused = await post(before, run_input("Refund order 42"))
    assert paused[-1]["outcome"]["type"] == "interrupt"
    restarted = support_agent()
    restarted.set_lm(agent.get_lm())
    after = dspy_imp.web.app(restarted, sync=sync, store=dspy_imp.web.DatabaseStore(url))
    resume = [{"interruptId": "c9", "status": "resolved", "payload": {"approved": True}}]
    resumed = await post(after, run_input(run="r2", resume=resume))
    assert resumed[1]["content"] == "order 42 refunded"
    assert resumed[-1]["result"]["termination_reason"] == "finished_by_tool"


def signed_in(request: Any) -> str | None:
    return request.headers.get("x-user")


async def http(app: Any, method: str, path: str, user: str, body: Any = None) -> Any:
    headers = {"x-user": user, "content-type": "application/json"}
    async with client(app) as c:
        return await c.request(method, path, headers=headers, content=None if body is None else json.dumps(body))


@pytest.mark.parametrize("sync", [False, True], ids=["async", "sync"])
async def test_a_user_lists_reads_renames_and_deletes_only_their_own_conversations(url: str, sync: bool) -> None:
    from web_scenarios import text_script as hello

    agent = support_agent()
    with_lm(agent, paused_script() + hello())
    store = dspy_imp.web.DatabaseStore(url)
    app = dspy_imp.web.app(agent, sync=sync, store=store, auth=signed_in)
    async with client(app) as c:
        paused = await c.post("/ag-ui", json=run_input("Refund order 42", thread="a1"), headers={"x-user": "alice"})
    assert '"interrupt"' in paused.text

    assert (await http(app, "GET", "/api/conversations", "bob")).json() == []
    mine = (await http(app, "GET", "/api/conversations", "alice")).json()
    assert [c["id"] for c in mine] == ["a1"] and mine[0]["title"] is None
    assert (await http(app, "GET", "/api/conversations/a1", "bob")).status_code == 404
    read = await http(app, "GET", "/api/conversations/a1", "alice")
    assert read.status_code == 200 and read.json()["messages"][0]["content"] == "Refund order 42"

    resume = [{"interruptId": "c9", "status": "resolved", "payload": {"approved": True}}]
    async with client(app) as c:  # bob cannot approve alice's refund, on either stream
        refused = await c.post(
            "/ag-ui", json=run_input(run="r2", thread="a1", resume=resume), headers={"x-user": "bob"}
        )
        chat = {"id": "a1", "messages": [{"id": "m", "role": "user", "parts": [{"type": "text", "text": "hi"}]}]}
        refused_chat = await c.post("/api/chat", json=chat, headers={"x-user": "bob"})
    assert "no conversation 'a1'" in refused.text and "no conversation 'a1'" in refused_chat.text
    assert "another user" not in refused.text + refused_chat.text
    waiting = (await store.load("a1")).history.messages[-1]
    assert waiting["tool_calls"][0]["id"] == "c9" and waiting["tool_call_results"] == []  # alice's, unanswered

    assert (await http(app, "PATCH", "/api/conversations/a1", "bob", {"title": "mine now"})).status_code == 404
    renamed = await http(app, "PATCH", "/api/conversations/a1", "alice", {"title": "Refund 42"})
    assert renamed.status_code == 200
    assert (await http(app, "PATCH", "/api/conversations/a1", "alice", {"title": 3})).status_code == 422
    assert [c["title"] for c in (await http(app, "GET", "/api/conversations", "alice")).json()] == ["Refund 42"]
    assert (await http(app, "DELETE", "/api/conversations/a1", "bob")).status_code == 404
    assert (await http(app, "DELETE", "/api/conversations/a1", "alice")).status_code == 204
    assert await store.load("a1") is None
    assert (await http(app, "GET", "/api/conversations", "alice")).json() == []


async def test_a_store_that_cannot_list_says_so() -> None:
    app = dspy_imp.web.app(support_agent(), store=dspy_imp.web.MemoryStore())
    listed = await http(app, "GET", "/api/conversations", "alice")
    assert listed.status_code == 501 and "DatabaseStore" in listed.json()["error"]
