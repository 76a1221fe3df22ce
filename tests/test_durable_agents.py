"""A durable caller whose sub-agent is SIGKILLed mid-turn resumes the sub-agent where it stopped.

The scenario is ``durable_agents_program.py`` (SQLite, embedded DBOS): a turn killed inside the
sub-agent's second tool, and a turn waiting for a decision its sub-agent asked for, both in one
process killed by one SIGKILL. The next process recovers both: the killed turn runs no finished tool
and gives no reply twice (the tool in flight runs again: at least once), the waiting turn takes its
namespaced approval from outside and resumes the sub-agent, and both end as the plain loop's do.
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

PROGRAM = Path(__file__).with_name("durable_agents_program.py")


def start(db: str, folder: Path, *args: str) -> tuple[int, str]:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent)}
    command = [sys.executable, str(PROGRAM), "--db", db, "--dir", str(folder), *args]
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        output, _ = process.communicate(timeout=180)
    except subprocess.TimeoutExpired:
        process.kill()
        output, _ = process.communicate()
    return process.returncode, output.decode(errors="replace")


def lines(folder: Path, name: str) -> list[tuple[str, ...]]:
    return [tuple(line.split()) for line in (folder / name).read_text().splitlines()]


def timeless(history: dict[str, Any]) -> Any:
    """The dumped history with every ``returned_at`` (nested ones too) taken out."""
    if isinstance(history, dict):
        return {k: timeless(v) for k, v in history.items() if k != "returned_at"}
    if isinstance(history, list):
        return [timeless(v) for v in history]
    return history


def test_a_killed_sub_agent_resumes_where_it_stopped_and_a_waiting_one_takes_its_decision(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path}/dspy-imp.sqlite"
    code, output = start(db, tmp_path, "--doomed")
    assert code == -signal.SIGKILL, f"the doomed process was to be killed, exit {code}:\n{output}"
    code, output = start(db, tmp_path, "--recover")
    assert code == 0, output
    attempts = Counter((turn, tool) for turn, tool in lines(tmp_path, "attempts.log"))
    assert attempts == {
        ("kill", "charge"): 1,  # finished and recorded before the kill: not run again
        ("kill", "email"): 2,  # in flight when killed: runs again (at least once)
        ("wait", "charge"): 1,  # approved from the next process
        ("wait", "email"): 1,
        ("plain-kill", "charge"): 1,
        ("plain-kill", "email"): 1,
        ("plain-wait", "charge"): 1,
        ("plain-wait", "email"): 1,
    }
    replies = Counter(lines(tmp_path, "replies.log"))
    for turn in ("kill", "wait", "plain-kill", "plain-wait"):
        given = {(agent, step): n for (t, agent, step), n in replies.items() if t == turn}
        assert given == {("triage", "0"): 1, ("triage", "1"): 1, **{("researcher", s): 1 for s in "012"}}, turn
    assert lines(tmp_path, "pending.log") == [("p1/c1",)]
    results = {path.stem: json.loads(path.read_text()) for path in (tmp_path / "results").glob("*.json")}
    for turn in ("kill", "wait"):
        found, plain = results[turn], results[f"plain-{turn}"]
        assert (found["reply"], found["reason"]) == ("Refunded, receipt sent.", "answered")
        assert timeless(found["history"]) == timeless(plain["history"])
    record = results["kill"]["history"]["messages"][0]["agent_runs"]["p1"]
    assert [r["result"] for e in record["history"] for r in e["tool_call_results"]] == [
        "charged 5",
        "sent to ada@example.com",
    ]
