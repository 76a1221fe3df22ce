"""Durable turns on a real Postgres server (started here, ``postgres_server.py``).

The crash scenario of ``test_durable_crash.py``, and a queue shared by two worker processes
with one turn at a time each: the first worker dies mid-turn, the second recovers the dead
worker's turn and finishes every turn, each tool's effect once. Skipped only when Postgres
cannot be started (``.ci/run`` installs it).
"""

from __future__ import annotations

import signal
import subprocess
import time
from itertools import groupby
from pathlib import Path

from durable_crash import (
    TURNS,
    WAITING,
    check_exactly_once,
    check_same_as_plain,
    crash_and_recover,
    finish,
    lines,
    program,
)
from postgres_server import Server

QUEUED = ["q1", "q2", "q3", "q4"]


def test_a_killed_turn_finishes_in_the_next_process_on_postgres(postgres: Server, tmp_path: Path) -> None:
    crash_and_recover(postgres.database("crash"), tmp_path)
    turns = TURNS
    check_exactly_once(tmp_path, [*turns, WAITING, "plain", "plain-approval"])
    check_same_as_plain(tmp_path, turns)
    check_same_as_plain(tmp_path, [WAITING], reference="plain-approval")


def took_a_turn(process: subprocess.Popen[bytes], folder: Path, worker: str, limit: float = 120) -> None:
    """Wait (bounded) until ``worker`` ran a tool of some turn, or its process ended."""
    end = time.monotonic() + limit
    while not any(w == worker for *_, w in lines(folder, "attempts.log")):
        if process.poll() is not None or time.monotonic() > end:
            code, output = finish(process)
            raise AssertionError(f"worker {worker} ran no tool (exit {code}):\n{output}")
        time.sleep(0.05)


def test_a_dead_workers_turn_is_finished_by_another_worker(postgres: Server, tmp_path: Path) -> None:
    db = postgres.database("queue")
    common = ["--enqueue", ",".join(QUEUED), "--retry-after", "0.1"]
    first = program(db, tmp_path, "--worker", "w1", "--kill-nth-tool", "2", *common)
    # The second worker starts once the first has taken a turn: started together, a second worker
    # that imports faster could take every turn before the first one polls the queue.
    took_a_turn(first, tmp_path, "w1")
    second = program(db, tmp_path, "--worker", "w2", "--dead", "w1", *common)
    code, output = finish(first)
    assert code == -signal.SIGKILL, output
    (tmp_path / "dead").touch()
    code, output = finish(second)
    assert code == 0, output

    check_exactly_once(tmp_path, QUEUED)
    attempts = lines(tmp_path, "attempts.log")
    killed = {turn for turn, _, worker in attempts if worker == "w1"}
    assert len(killed) == 1  # w1 took one turn and died in its second tool
    (turn,) = killed
    assert {worker for t, _, worker in attempts if t == turn} == {"w1", "w2"}
    # one turn at a time per worker: each worker's tool runs come in unbroken runs per turn
    for worker in ("w1", "w2"):
        runs = [t for t, _ in groupby(t for t, _, w in attempts if w == worker)]
        assert len(runs) == len(set(runs)), runs
