"""Less CPU per web turn, checked by what the work is, never by how long it takes.

A stream writes the events that are ready together in one piece (one ASGI body message), a turn
keeps a DSPy trace of its own instead of appending to the process's one, the turn's observer
queues an event at once when it is called on the loop, and the inputs' text is written with one
pydantic adapter per builtin type instead of a new one per value.
"""

from __future__ import annotations

import asyncio
from typing import Any

import dspy
import dspy.adapters.utils
import pytest
from web_scenarios import run_input, text_agent

import dspy_imp.web
from dspy_imp.testing import ScriptedLM, call, reply
from dspy_imp.web._turns import _Observer


def _script() -> list[Any]:
    return [
        reply("Let me look.", calls=[call("lookup_order", {"order_id": "42"}, id="c1")], usage=(20, 5)),
        reply("It shipped Monday.", usage=(30, 5)),
    ]


async def _bodies(app: Any, path: str, body: bytes) -> list[str]:
    """The ASGI body messages of one request, each as text."""
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"test"), (b"content-type", b"application/json"), (b"accept", b"text/event-stream")],
        "client": ("127.0.0.1", 1),
        "server": ("test", 80),
    }
    sent = [{"type": "http.request", "body": body, "more_body": False}]
    bodies: list[str] = []

    async def receive() -> dict[str, Any]:
        if sent:
            return sent.pop()
        await asyncio.Event().wait()  # the client stays: the stream decides when it ends
        return {}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.body" and message.get("body"):
            bodies.append(message["body"].decode())

    await asyncio.wait_for(app(scope, receive, send), 30)
    return bodies


async def test_the_events_a_moment_of_the_turn_tells_are_written_in_one_piece() -> None:
    import json

    agent = text_agent()
    agent.set_lm(ScriptedLM(_script()))
    app = dspy_imp.web.app(agent)
    bodies = await _bodies(app, "/ag-ui", json.dumps(run_input("Where is 42?")).encode())
    kinds = [[line for line in body.split("\n") if line.startswith("data:")] for body in bodies]
    named = [[json.loads(line[5:])["type"] for line in body] for body in kinds]
    assert ["TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_END"] in [
        [k for k in body if k.startswith("TOOL_CALL_") and k != "TOOL_CALL_RESULT"] for body in named
    ]
    assert {"MESSAGES_SNAPSHOT", "RUN_FINISHED"} <= set(named[-1])
    assert len(bodies) < sum(len(body) for body in named)  # fewer writes than events


async def test_an_ai_sdk_stream_ends_with_done_in_its_last_piece() -> None:
    import json

    agent = text_agent()
    agent.set_lm(ScriptedLM(_script()))
    app = dspy_imp.web.app(agent)
    message = {"id": "u1", "role": "user", "parts": [{"type": "text", "text": "Where is 42?"}]}
    body = {"id": "c1", "trigger": "submit-message", "messages": [message]}
    bodies = await _bodies(app, "/api/chat", json.dumps(body).encode())
    assert bodies[-1].endswith("data: [DONE]\n\n") and '"type":"finish"' in bodies[-1]
    assert "".join(bodies).count("[DONE]") == 1


async def test_a_web_turn_keeps_its_trace_to_itself() -> None:
    import json

    agent = text_agent()
    agent.set_lm(ScriptedLM(_script()))
    app = dspy_imp.web.app(agent)
    trace = dspy.settings.trace
    assert trace is not None
    before = len(trace)
    await _bodies(app, "/ag-ui", json.dumps(run_input("Where is 42?")).encode())
    assert len(trace) == before  # the process's trace holds none of the turn's predictions


async def test_the_turns_observer_queues_an_event_called_on_the_loop_at_once() -> None:
    queue: asyncio.Queue[Any] = asyncio.Queue()
    observe = _Observer(asyncio.get_running_loop(), queue, lambda: False)
    observe("an event")
    assert queue.get_nowait() == "an event"  # not left for a later turn of the loop


def test_the_inputs_text_reuses_one_pydantic_adapter_per_builtin_type(monkeypatch: pytest.MonkeyPatch) -> None:
    import dspy_imp  # noqa: F401  (installs the reuse)

    made: list[Any] = []
    original = dspy.adapters.utils.TypeAdapter

    def recorded(kind: Any) -> Any:
        made.append(kind)
        return original(kind)

    monkeypatch.setattr(dspy.adapters.utils, "TypeAdapter", recorded)
    serialize = dspy.adapters.utils.serialize_for_json
    values = ["a\udc80b", 1, 1.5, float("inf"), True, None, [1, "x"], {"a": [1]}, (1, 2)]
    for value in values * 2:
        assert serialize(value) == serialize.__wrapped__(value)  # the same as DSPy's own
    made.clear()
    for value in values:
        serialize(value)
    assert made == []  # DSPy's own builds one per value


def test_a_value_of_another_type_is_written_as_dspy_writes_it() -> None:
    import dspy_imp  # noqa: F401

    class Order(dspy.Prediction):
        pass

    class Point:
        def __str__(self) -> str:
            return "(1, 2)"

    serialize = dspy.adapters.utils.serialize_for_json
    assert serialize(Point()) == serialize.__wrapped__(Point())
    assert serialize(Order(a=1)) == serialize.__wrapped__(Order(a=1))


async def test_a_ready_database_store_is_checked_without_a_worker_thread(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import anyio.to_thread

    store = dspy_imp.web.DatabaseStore(f"sqlite:///{tmp_path / 'c.db'}")
    try:
        await store.check()  # the schema brought up to date, in a worker thread
        hops: list[Any] = []
        original = anyio.to_thread.run_sync

        async def recorded(function: Any, *args: Any, **options: Any) -> Any:
            hops.append(function)
            return await original(function, *args, **options)

        monkeypatch.setattr(anyio.to_thread, "run_sync", recorded)
        await store.check()
        assert hops == []
        await store.ping()  # /readyz still reaches the database every time
        assert len(hops) == 1
    finally:
        store.close()


async def test_a_database_store_saves_in_one_worker_thread_round_trip(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import anyio.to_thread

    agent = dspy_imp.ReActV2("question -> answer")
    agent.set_lm(ScriptedLM([reply("Hello.")]))
    pred = await agent.acall(question="Hi")
    store = dspy_imp.web.DatabaseStore(f"sqlite:///{tmp_path / 'c.db'}")
    try:
        await store.check()
        hops: list[Any] = []
        original = anyio.to_thread.run_sync

        async def recorded(function: Any, *args: Any, **options: Any) -> Any:
            hops.append(function)
            return await original(function, *args, **options)

        monkeypatch.setattr(anyio.to_thread, "run_sync", recorded)
        await store.save("c", dspy_imp.web.Conversation(pred.metadata.history, "ann"))
        assert len(hops) == 1  # the JSON encoded in the statement's thread, not in one of its own
        loaded = await store.load("c")
    finally:
        store.close()
    assert loaded is not None and loaded.owner == "ann"
    assert dspy_imp.dump_history(loaded.history) == dspy_imp.dump_history(pred.metadata.history)
