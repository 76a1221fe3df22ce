"""Saved programs, states, histories, durable records and web conversations work in a fresh interpreter.

Each side runs in its own ``subprocess`` (``tests/fresh_process_program.py``), so nothing the
saving process built (class attributes, caches) is there when the loading process runs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXPECTED = [
    {"order_id": "A-42", "charges": [19.9, 19.9]},
    "refund queued for A-42",
    "Yes: charged twice.",
]


def _run(action: str, path: Path | str, hash_seed: str = "0") -> object:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")]),
        "PYTHONHASHSEED": hash_seed,
    }
    done = subprocess.run(
        [sys.executable, "-m", "fresh_process_program", action, str(path)],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def _normal(results: object) -> object:
    """Results as JSON, a dict result possibly rendered as its JSON text."""
    assert isinstance(results, list)
    return [json.loads(r) if isinstance(r, str) and r.startswith("{") else r for r in results]


@pytest.mark.parametrize(
    ("save", "run", "name"),
    [("save-program", "run-program", "prog"), ("save-state", "run-state", "state.json")],
)
def test_saved_program_runs_its_tools_in_a_fresh_process(tmp_path: Path, save: str, run: str, name: str) -> None:
    path = tmp_path / name
    assert _run(save, path) == "saved"
    out = _run(run, path)
    assert isinstance(out, dict)
    assert _normal(out["sync"]) == EXPECTED
    assert _normal(out["async"]) == EXPECTED


def test_dumped_history_loads_in_a_fresh_process(tmp_path: Path) -> None:
    path = tmp_path / "history.json"
    written = _run("dump-history", path)
    assert _normal(written) == EXPECTED
    assert _run("run-history", path) == written


def test_the_same_compile_in_two_processes_gives_the_same_program() -> None:
    first = _run("compile", "1800000000", hash_seed="1")
    second = _run("compile", "1900000123.456", hash_seed="2")
    assert first == second


def test_durable_records_are_read_and_continued_in_a_fresh_process(tmp_path: Path) -> None:
    # The first process finishes one turn and leaves another waiting for its approval, then exits.
    assert _run("durable-write", tmp_path) == {"finished": "Nothing to refund.", "pending": ["r1"]}
    read = _run("durable-read", tmp_path)  # a new interpreter on the same records
    assert read == {
        "finished": "Nothing to refund.",  # the recorded prediction, no request (this LM would fail one)
        "again": "Nothing to refund.",  # the same workflow id again: recorded
        "pending": ["r1"],  # the waiting turn's pending call, read back
        "resumed": "Done: refunded A-42",  # approved here, the turn goes on from its records
        "refunds": ["A-42"],  # the refund ran once, in this process
        "results": ["refunded A-42"],
    }


def test_a_web_conversation_is_continued_in_a_fresh_process(tmp_path: Path) -> None:
    database = tmp_path / "conversations.db"
    started = _run("web-start", database)  # paused on the refund's approval
    assert isinstance(started, dict)
    assert (started["last"], started["outcome"], started["listed"], started["refunds"]) == (
        "RUN_FINISHED", "interrupt", ["fresh"], [],
    )  # fmt: skip
    approved = _run("web-approve", database)  # another interpreter reads it and approves
    assert isinstance(approved, dict)
    assert (approved["last"], approved["outcome"], approved["refunds"]) == ("RUN_FINISHED", "success", ["A-42"])
    assert approved["messages"][: len(started["messages"]) - 1] == started["messages"][:-1]  # the same conversation
    assert approved["messages"][-1]["content"] == "Done: refunded A-42"
    twice = _run("web-approve", database)  # the same approval again, in a third process: nothing runs
    assert isinstance(twice, dict)
    assert (twice["status"], twice["last"], twice["refunds"]) == (409, None, [])  # answered already: before any event
    assert twice["messages"] == approved["messages"]
