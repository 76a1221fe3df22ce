"""A process holding a paused durable turn started with sync ``agent.start()`` exits, with
``DBOS.destroy()`` or without it, and the turn stays pending: the next process resumes it.

The scenario is ``durable_exit.py``, in subprocesses (SQLite, embedded). The bound on exiting is
generous (the interpreter's start and DBOS's launch take seconds on a loaded machine); before the
fix the process waited a day in ``DBOS.recv``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

PROGRAM = Path(__file__).with_name("durable_exit.py")
BOUND = 180.0  # seconds for a whole process: start, launch, pause and exit


def run(*args: str) -> tuple[int | None, str]:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent)}
    process = subprocess.Popen(
        [sys.executable, str(PROGRAM), *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    try:
        output, _ = process.communicate(timeout=BOUND)
    except subprocess.TimeoutExpired:
        process.kill()
        output, _ = process.communicate()
        return None, output.decode(errors="replace")  # it did not exit
    return process.returncode, output.decode(errors="replace")


@pytest.mark.parametrize("ending", ["destroy", "return"])
def test_a_process_holding_a_paused_sync_turn_exits_and_the_turn_resumes_in_the_next(
    tmp_path: Path, ending: str
) -> None:
    database = f"sqlite:///{tmp_path}/dspy-imp.sqlite"
    code, output = run(database, "start", ending)
    assert (code, output.splitlines()[-1:]) == (0, ["paused"]), output
    code, output = run(database, "resume")
    assert (code, output.splitlines()[-1:]) == (0, ["answer: on the shelf looked: ['shelf']"]), output
