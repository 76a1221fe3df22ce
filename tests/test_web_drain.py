"""Health and shutdown: ``/healthz`` and ``/readyz`` for a load balancer, and a drain that ends
every running turn (by itself within the bound, else stopped with its history saved), gives its
lease back and refuses new turns (503, ``Retry-After``) meanwhile; under ``python -m
dspy_imp.web``, on SIGTERM.

A turn here holds in a tool until the test releases it: nothing depends on the machine's speed
(``GUARD`` is a hang guard only).
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import httpx
import pytest
from test_web_scale import Holds
from test_web_store_faults import newer_schema
from web_helpers import agui_events
from web_scenarios import client, run_input

import dspy_imp
import dspy_imp.web
from dspy_imp._records.errors import ConfigurationError
from dspy_imp.testing import call, reply

pytestmark = pytest.mark.block_network(allowed_hosts=[r"127\.0\.0\.1$"])  # the CLI server's loopback
GUARD = 60  # seconds: a failure guard only, never a timing assertion
ROOT = Path(__file__).resolve().parent.parent


def held() -> Holds:
    return Holds([reply("Before.", calls=[call("hold", {}, id="h1")]), reply("Held.")])


async def test_healthz_and_readyz_answer_without_auth_but_behind_the_host_check() -> None:
    app = dspy_imp.web.app(held().agent, auth=lambda request: None, max_turns=7)  # every user refused
    async with client(app) as http:
        info = await http.get("/api/info")
        health = await http.get("/healthz")
        ready = await http.get("/readyz")
        foreign = await http.get("/readyz", headers={"host": "evil.example"})
    assert info.status_code == 401
    assert (health.status_code, health.json()) == (200, {"alive": True})
    assert ready.status_code == 200
    assert ready.json() == {
        "ready": True,
        "draining": False,
        "running_turns": 0,
        "max_turns": 7,
        "loop_lag_ms": None,  # not measured: the test client runs no lifespan
        "max_loop_lag_ms": 15.0,
        "model_requests": 1024,
        "model_requests_in_flight": 0,
        "model_requests_waiting": 0,
        "store": "ok",
    }
    assert foreign.status_code == 403


async def test_readyz_is_503_while_the_instance_runs_its_most_turns() -> None:
    holds = held()
    async with client(dspy_imp.web.app(holds.agent, max_turns=1)) as http:
        running = asyncio.ensure_future(http.post("/ag-ui", json=run_input("Hold", thread="a")))
        await asyncio.wait_for(holds.holding.wait(), GUARD)
        full = await http.get("/readyz")
        holds.released.set()
        await asyncio.wait_for(running, GUARD)
        free = await http.get("/readyz")
    assert full.status_code == 503
    assert full.json() == {
        "ready": False,
        "draining": False,
        "running_turns": 1,
        "max_turns": 1,
        "loop_lag_ms": None,  # not measured: the test client runs no lifespan
        "max_loop_lag_ms": 15.0,
        "model_requests": 1024,
        "model_requests_in_flight": 0,
        "model_requests_waiting": 0,
        "store": "ok",
    }
    assert free.status_code == 200 and free.json()["running_turns"] == 0


class Unreachable(dspy_imp.web.MemoryStore):
    async def check(self) -> None:
        raise ConnectionRefusedError("connection refused")


async def test_readyz_is_503_when_the_store_is_unreachable_or_of_a_newer_schema(tmp_path: Path) -> None:
    newer = dspy_imp.web.DatabaseStore(newer_schema(tmp_path))
    try:
        async with client(dspy_imp.web.app(held().agent, store=Unreachable())) as http:
            down = await http.get("/readyz")
        async with client(dspy_imp.web.app(held().agent, store=newer)) as http:
            too_new = await http.get("/readyz")
    finally:
        newer.close()
    assert down.status_code == 503 and down.json()["store"] == "unreachable: ConnectionRefusedError: connection refused"
    assert too_new.status_code == 503 and too_new.json()["store"].startswith("too new: ")
    assert "schema version 99" in too_new.json()["store"]


async def test_readyz_reaches_the_database_every_time(tmp_path: Path) -> None:
    """After the first statement the schema is known: the readiness check still asks the database."""
    path = tmp_path / "gone.db"
    store = dspy_imp.web.DatabaseStore(f"sqlite:///{path}")
    try:
        async with client(dspy_imp.web.app(held().agent, store=store)) as http:
            first = await http.get("/readyz")
            store.close()
            path.unlink()
            path.mkdir()  # the file is now a folder: no database opens there
            gone = await http.get("/readyz")
    finally:
        store.close()
    assert first.status_code == 200
    assert gone.status_code == 503 and gone.json()["store"].startswith("unreachable: OperationalError")


async def test_a_drain_refuses_new_turns_and_lets_the_running_one_finish() -> None:
    holds = held()
    store = dspy_imp.web.MemoryStore()
    app = dspy_imp.web.app(holds.agent, store=store)
    async with client(app) as http:
        running = asyncio.ensure_future(http.post("/ag-ui", json=run_input("Hold", thread="a")))
        await asyncio.wait_for(holds.holding.wait(), GUARD)
        draining = asyncio.ensure_future(app.drain(GUARD))
        while not app.runner.draining:  # a readiness wait, not a timed assertion
            await asyncio.sleep(0)
        refused = await http.post("/ag-ui", json=run_input("New", thread="b"))
        chat = await http.post("/api/chat", json={"id": "c", "messages": [{"id": "u", "role": "user", "parts": []}]})
        ready = await http.get("/readyz")
        assert not draining.done()  # the running turn holds the drain
        holds.released.set()
        await asyncio.wait_for(draining, GUARD)
        finished = agui_events((await asyncio.wait_for(running, GUARD)).text)
    for answer in (refused, chat):
        assert (answer.status_code, answer.headers["retry-after"]) == (503, "1")
        assert answer.json()["limit"] == "draining"
    assert ready.status_code == 503 and ready.json()["draining"] is True and ready.json()["ready"] is False
    assert finished[-1]["type"] == "RUN_FINISHED"  # not cut
    assert (await store.load("a")) is not None and await store.load("b") is None


async def test_a_drain_past_its_bound_stops_the_turns_left_with_their_history_and_leases(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'c.db'}"
    store = dspy_imp.web.DatabaseStore(url)
    other = dspy_imp.web.DatabaseStore(url)
    holds = held()  # never released: only the drain ends it
    app = dspy_imp.web.app(holds.agent, store=store)
    try:
        async with client(app) as http:
            running = asyncio.ensure_future(http.post("/ag-ui", json=run_input("Hold", thread="a")))
            await asyncio.wait_for(holds.holding.wait(), GUARD)
            assert not await other.claim("a")  # the turn's lease is held
            await asyncio.wait_for(app.drain(0), GUARD)
            stopped = agui_events((await asyncio.wait_for(running, GUARD)).text)
        assert stopped[-1]["message"] == "StreamClosed: the turn was stopped"
        kept = await store.load("a")
        assert kept is not None and kept.history.messages[0]["question"] == "Hold"  # its history so far
        assert await other.claim("a")  # the lease was given back
        await other.release("a")
    finally:
        store.close()
        other.close()


async def lifespan(app: Any, shutdown: asyncio.Event) -> list[str]:
    """Drive the ASGI lifespan: start up, then shut down once ``shutdown`` is set; what the app said."""
    said: list[str] = []
    started = asyncio.Event()
    inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    await inbox.put({"type": "lifespan.startup"})

    async def receive() -> dict[str, Any]:
        return await inbox.get()

    async def send(message: dict[str, Any]) -> None:
        said.append(message["type"])
        started.set()

    task = asyncio.ensure_future(app({"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}}, receive, send))
    await asyncio.wait_for(started.wait(), GUARD)
    await shutdown.wait()
    await inbox.put({"type": "lifespan.shutdown"})
    await asyncio.wait_for(task, GUARD)
    return said


async def test_the_lifespans_shutdown_drains() -> None:
    holds = held()
    app = dspy_imp.web.app(holds.agent, drain_seconds=0)
    shutdown = asyncio.Event()
    served = asyncio.ensure_future(lifespan(app, shutdown))
    async with client(app) as http:
        running = asyncio.ensure_future(http.post("/ag-ui", json=run_input("Hold", thread="a")))
        await asyncio.wait_for(holds.holding.wait(), GUARD)
        shutdown.set()
        said = await asyncio.wait_for(served, GUARD)
        stopped = agui_events((await asyncio.wait_for(running, GUARD)).text)
    assert said == ["lifespan.startup.complete", "lifespan.shutdown.complete"]
    assert stopped[-1]["message"] == "StreamClosed: the turn was stopped"
    assert app.runner.draining and not app.runner.busy


@pytest.mark.parametrize("bad", [-1, "30", None, True])
def test_drain_seconds_must_be_seconds(bad: Any) -> None:
    with pytest.raises(ConfigurationError, match="`drain_seconds` must be a number of seconds >= 0"):
        dspy_imp.web.app(dspy_imp.ReActV2("question -> answer"), drain_seconds=bad)


SERVED = '''
    import os, time
    from pathlib import Path
    import dspy_imp
    from dspy_imp.testing import ScriptedLM, call, reply

    FOLDER = Path(os.environ["DRAIN_FOLDER"])

    def wait(name: str) -> str:
        """Wait until the test releases ``name``."""
        (FOLDER / f"started-{name}").write_text("")
        while not (FOLDER / f"release-{name}").exists():
            time.sleep(0.02)
        return f"{name} done"

    agent = dspy_imp.ReActV2("question -> answer", tools=[wait])

    def offline_lm():
        return ScriptedLM([reply(calls=[call("wait", {"name": "first"}, id="c1")]), reply("First done.")])
'''


async def until(condition: Any) -> None:
    while not condition():  # a readiness wait, not a timed assertion
        await asyncio.sleep(0.02)


def served_url(process: subprocess.Popen[str]) -> str:
    assert process.stdout is not None
    for line in process.stdout:
        found = re.search(r"http://127\.0\.0\.1:\d+", line)
        if found:
            return found.group()
    raise AssertionError("no URL printed")


async def test_sigterm_drains_the_cli_server_no_turn_cut_then_it_exits(tmp_path: Path) -> None:
    (tmp_path / "drained.py").write_text(textwrap.dedent(SERVED))
    env = {**os.environ, "DRAIN_FOLDER": str(tmp_path), "PYTHONPATH": str(ROOT)}
    env.pop("DSPY_IMP_MODEL", None)
    process = subprocess.Popen(
        [sys.executable, "-m", "dspy_imp.web", "drained:agent", "--drain-seconds", str(GUARD)],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        base = await asyncio.wait_for(asyncio.to_thread(served_url, process), GUARD)
        async with httpx.AsyncClient(base_url=base, timeout=GUARD) as http:
            running = asyncio.ensure_future(http.post("/ag-ui", json=run_input("Go", thread="a")))
            await asyncio.wait_for(until(lambda: (tmp_path / "started-first").exists() or running.done()), GUARD)
            assert not running.done(), running.result().text
            process.send_signal(signal.SIGTERM)
            while (await http.get("/readyz")).status_code == 200:  # until the drain has begun
                await asyncio.sleep(0.02)
            ready = await http.get("/readyz")
            refused = await http.post("/ag-ui", json=run_input("New", thread="b"))
            (tmp_path / "release-first").write_text("")
            finished = agui_events((await asyncio.wait_for(running, GUARD)).text)
        code = await asyncio.wait_for(asyncio.to_thread(process.wait), GUARD)
    finally:
        if process.poll() is None:
            process.kill()
        printed, logged = process.communicate()
    assert ready.status_code == 503 and ready.json()["draining"] is True
    assert (refused.status_code, refused.headers["retry-after"]) == (503, "1")
    assert finished[-1]["type"] == "RUN_FINISHED", finished[-1]  # not cut
    assert "dspy-imp web: drained, stopping" in printed, logged
    assert code == -signal.SIGTERM, logged  # uvicorn ends as the signal asked, once drained
