"""Two web instances (two uvicorn processes, two ports) on one database: Postgres, and SQLite.

The same conversation sent to both at once runs one turn at a time and loses none (the second is
refused while the first runs, then runs on what the first saved); an approval sent to the other
instance resumes the waiting turn; an instance killed mid-turn leaves the conversation usable, with
what was saved before, once its lease has expired (the test moves the live instance's clock).
The app is ``tests/web_database_app.py``; nothing here waits on the machine's speed: every wait
is for a file or a port, bounded.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from postgres_server import Server
from web_helpers import agui_events
from web_scenarios import run_input

import dspy_imp
import dspy_imp.web

ROOT = Path(__file__).parent.parent
pytestmark = pytest.mark.block_network(allowed_hosts=[r"127\.0\.0\.1$"])


@pytest.fixture(scope="module", params=["postgres", "sqlite"])
def backend(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    """The database URL and the instances' shared folder, one pair per database for the module."""
    folder = tmp_path_factory.mktemp(request.param)
    if request.param == "sqlite":
        return f"sqlite:///{folder / 'conversations.db'}", folder
    return request.getfixturevalue("postgres").database("instances"), folder


class Instance:
    def __init__(self, url: str, folder: Path, lease: str = "30"):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'tests'}"}
        self.process = subprocess.Popen(
            [sys.executable, str(ROOT / "tests" / "web_database_app.py"), url, str(self.port), str(folder), lease],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        self.base = f"http://127.0.0.1:{self.port}"
        end = time.monotonic() + 120
        try:
            while not self._listening():
                if self.process.poll() is not None or time.monotonic() > end:
                    raise AssertionError(f"instance did not start: {self.output()}")
                time.sleep(0.05)
        except BaseException:
            self.stop()  # never left running behind a failed start
            raise

    def _listening(self) -> bool:
        with socket.socket() as s:
            return s.connect_ex(("127.0.0.1", self.port)) == 0

    def output(self) -> str:
        self.stop()
        return (self.process.stdout.read() if self.process.stdout else b"").decode(errors="replace")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
        self.process.wait(30)

    async def post(self, body: dict[str, Any]) -> list[dict[str, Any]]:
        response = await self.answer(body)
        assert response.status_code == 200, response.text
        return agui_events(response.text)

    async def answer(self, body: dict[str, Any]) -> httpx.Response:
        async with httpx.AsyncClient(base_url=self.base, timeout=120) as http:
            return await http.post("/ag-ui", json=body, headers={"accept": "text/event-stream"})


@pytest.fixture(scope="module")
def instances(backend: tuple[str, Path]) -> Iterator[tuple[Instance, Instance]]:
    """Two instances for the module's tests (started once: each start imports DSPy); the test that
    kills one comes last."""
    url, folder = backend
    a = b = None
    try:
        a = Instance(url, folder)
        b = Instance(url, folder)
        yield a, b
    finally:
        for instance in (a, b):
            if instance is not None:
                instance.stop()
                if instance.process.stdout:
                    instance.process.stdout.close()


def started(folder: Path, name: str) -> None:
    end = time.monotonic() + 120
    while not (folder / f"started-{name}").exists():
        assert time.monotonic() < end, f"the turn {name!r} never reached its tool"
        time.sleep(0.02)


async def stored(url: str, key: str) -> list[Any]:
    store = dspy_imp.web.DatabaseStore(url)
    try:
        stored = await store.load(key)
        return [] if stored is None else list(dspy_imp.dump_history(stored.history)["messages"])
    finally:
        store.close()


def told(events: list[dict[str, Any]]) -> str:
    last = events[-1]
    return json.dumps(last.get("result") or last.get("message") or last)


async def test_the_same_conversation_on_both_instances_runs_one_turn_at_a_time(
    instances: tuple[Instance, Instance], backend: tuple[str, Path]
) -> None:
    url, tmp_path = backend
    a, b = instances
    first = asyncio.create_task(a.post(run_input("first", thread="both", run="r1")))
    await asyncio.to_thread(started, tmp_path, "first")
    refused = await b.answer(run_input("second", thread="both", run="r2"))  # at once, to the other instance
    assert refused.status_code == 409 and "already running a turn" in refused.json()["error"]
    assert 1 <= int(refused.headers["retry-after"]) <= 30  # the lease's remaining seconds (a 30 s lease)
    (tmp_path / "release-first").write_text("")
    finished = await first
    assert finished[-1]["type"] == "RUN_FINISHED", told(finished)

    (tmp_path / "release-second").write_text("")
    again = await b.post(run_input("second", thread="both", run="r3"))  # now it runs, on what a saved
    assert again[-1]["type"] == "RUN_FINISHED", told(again)
    messages = await stored(url, "both")
    assert [m.get("message") for m in messages if m.get("message")] == ["first", "second"]  # no turn lost


async def test_an_approval_sent_to_the_other_instance_resumes_the_waiting_turn(
    instances: tuple[Instance, Instance], backend: tuple[str, Path]
) -> None:
    _, tmp_path = backend
    a, b = instances
    paused = await a.post(run_input("refund 42", thread="approve", run="r1"))
    assert paused[-1]["type"] == "RUN_FINISHED" and paused[-1]["outcome"]["type"] == "interrupt", told(paused)
    call_id = paused[-1]["outcome"]["interrupts"][0]["id"]
    resume = [{"interruptId": call_id, "status": "resolved", "payload": {"approved": True}}]
    resumed = await b.post(run_input(thread="approve", run="r2", resume=resume))
    assert resumed[-1]["type"] == "RUN_FINISHED", told(resumed)
    assert (tmp_path / "refunded-42").read_text() == f"{b.port}\n"  # once, by the other instance


async def test_an_instance_killed_mid_turn_frees_the_conversation_after_its_lease(
    instances: tuple[Instance, Instance], backend: tuple[str, Path]
) -> None:
    url, tmp_path = backend
    a, b = instances
    (tmp_path / "release-before").write_text("")
    before = await a.post(run_input("before", thread="killed", run="r1"))
    assert before[-1]["type"] == "RUN_FINISHED", told(before)

    dying = asyncio.create_task(a.post(run_input("dying", thread="killed", run="r2")))
    await asyncio.to_thread(started, tmp_path, "dying")
    a.stop()  # killed mid-turn: its lease stays behind, unreleased
    with pytest.raises(httpx.HTTPError):
        await dying
    held = await b.answer(run_input("after", thread="killed", run="r3"))
    assert held.status_code == 409 and "already running a turn" in held.json()["error"]
    assert 1 <= int(held.headers["retry-after"]) <= 30  # when the dead instance's lease ends

    (tmp_path / "clock").write_text("31")  # the other instance's clock passes the 30 s lease
    (tmp_path / "release-after").write_text("")
    after = await b.post(run_input("after", thread="killed", run="r4"))
    assert after[-1]["type"] == "RUN_FINISHED", told(after)
    messages = await stored(url, "killed")
    assert [m.get("message") for m in messages if m.get("message")] == ["before", "after"]  # what was saved


def test_a_durable_agents_conversations_and_workflows_share_one_postgres(postgres: Server) -> None:
    url = postgres.database("one_database")
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'tests'}"}
    done = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "web_database_durable.py"), url],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {
        "paused": "interrupt",
        "resumed": "finished_by_tool",
        "entries": 2,
    }
    import sqlalchemy as sa

    engine = sa.create_engine(url.replace("postgresql://", "postgresql+psycopg://"))
    with engine.connect() as c:
        tables = {
            (r.table_schema, r.table_name)
            for r in c.execute(sa.text("SELECT table_schema, table_name FROM information_schema.tables"))
        }
    engine.dispose()
    assert ("public", "dspy_imp_web_conversations") in tables
    assert any(schema == "dbos" for schema, _ in tables)  # DBOS's workflows, in the same database
