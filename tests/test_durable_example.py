"""``examples/durable_agent.py`` does what ``docs/durable.md`` says: killed inside its second tool, a
restarted process finishes the turn and the refund is in the ledger once."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).parent.parent / "examples" / "durable_agent.py"


def _example(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(EXAMPLE.parent.parent)}
    env.pop("DBOS_SYSTEM_DATABASE_URL", None)
    command = [sys.executable, str(folder / EXAMPLE.name), *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)


def test_the_example_is_killed_then_resumed_with_one_refund(tmp_path: Path) -> None:
    shutil.copy(EXAMPLE, tmp_path)  # its database and ledger are written next to it
    crashed = _example(tmp_path, "run", "--crash")
    assert crashed.returncode == -signal.SIGKILL, crashed.stdout + crashed.stderr
    assert (tmp_path / "durable_agent.sqlite").exists()
    resumed = _example(tmp_path, "resume")
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout.splitlines() == [
        "reply: Your order A-42 was refunded (19.90).",
        "termination_reason: submit",
        "ledger: refund-42:3 refund A-42 19.9",
    ]
