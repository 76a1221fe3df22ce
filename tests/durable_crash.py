"""The crash scenario the durable tests run on SQLite and on Postgres.

Two processes of ``durable_program.py`` share one system database. The first starts five turns
(sync and async drivers), each stopping at a different kill point (the fifth paused, waiting for
a person's approval), and SIGKILLs itself once all five are there. The second finds them
recovered at ``DBOS.launch()``, sends the approval, waits for every turn to finish, and runs the
same turns on the plain (non-durable) loop as the reference.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

PROGRAM = Path(__file__).with_name("durable_program.py")
TURNS = ["t1", "t2", "t3", "t4"]  # durable_program.KILLS, of the plain agent
WAITING = "t5"  # the approval turn, waiting for its decision when killed


def program(db: str, folder: Path, *args: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent)}
    command = [sys.executable, str(PROGRAM), "--db", db, "--dir", str(folder), *args]
    return subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def finish(process: subprocess.Popen[bytes], timeout: float = 120) -> tuple[int, str]:
    try:
        output, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        output, _ = process.communicate()
    return process.returncode, output.decode(errors="replace")


def crash_and_recover(db: str, folder: Path) -> None:
    """Run the scenario; asserts the doomed process died by SIGKILL and the next one finished."""
    code, output = finish(program(db, folder, "--doomed"))
    assert code == -signal.SIGKILL, f"the doomed process was to be killed, exit {code}:\n{output}"
    assert not (folder / "results").exists()
    code, output = finish(program(db, folder, "--decide", WAITING, "--wait", ",".join([*TURNS, WAITING]), "--plain"))
    assert code == 0, output


def results(folder: Path) -> dict[str, dict[str, Any]]:
    return {path.stem: json.loads(path.read_text()) for path in (folder / "results").glob("*.json")}


def lines(folder: Path, name: str) -> list[tuple[str, ...]]:
    path = folder / name
    return [tuple(line.split()) for line in path.read_text().splitlines()] if path.exists() else []


def without_times(history: dict[str, Any]) -> dict[str, Any]:
    """The dumped history with each result's ``returned_at`` checked for shape and taken out."""
    messages = json.loads(json.dumps(history["messages"]))
    for message in messages:
        for result in message.get("tool_call_results", []):
            assert result.pop("returned_at").endswith("Z")
    return {**history, "messages": messages}


def check_exactly_once(folder: Path, turns: list[str]) -> None:
    """Each tool's side effect happened once per turn; each reply was given once per turn."""
    effects = Counter((turn, tool) for turn, tool, _ in lines(folder, "effects.log"))
    assert effects == {(turn, tool): 1 for turn in turns for tool in ("charge", "email")}
    replies = Counter(lines(folder, "replies.log"))
    assert replies == {(turn, step): 1 for turn in turns for step in ("0", "1", "rate_limit", "2")}


def check_same_as_plain(folder: Path, turns: list[str], reference: str = "plain") -> None:
    found = results(folder)
    plain = found[reference]
    assert plain["reason"] == "submit" and plain["answer"] == "refunded"
    for turn in turns:
        assert found[turn]["answer"] == plain["answer"]
        assert found[turn]["reason"] == plain["reason"]
        assert without_times(found[turn]["history"]) == without_times(plain["history"])
