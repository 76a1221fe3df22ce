"""A durable turn SIGKILLed at each kill point finishes in the next process (SQLite, embedded).

The scenario is ``durable_crash.py``: four turns stopped before a request, after a reply,
mid-tool and during a retry pause (sync and async drivers), killed by one SIGKILL. Each tool's
side effect happened once per turn (the mid-tool kill runs ``charge`` again: its idempotency key
keeps the effect single), each reply was given once, and each recovered turn's history is the
uninterrupted plain run's.
"""

from __future__ import annotations

from pathlib import Path

from durable_crash import TURNS, WAITING, check_exactly_once, check_same_as_plain, crash_and_recover, lines


def test_a_killed_turn_finishes_in_the_next_process_with_each_effect_once(tmp_path: Path) -> None:
    crash_and_recover(f"sqlite:///{tmp_path}/dspy-imp.sqlite", tmp_path)
    turns = TURNS
    check_exactly_once(tmp_path, [*turns, WAITING, "plain", "plain-approval"])
    check_same_as_plain(tmp_path, turns)
    check_same_as_plain(tmp_path, [WAITING], reference="plain-approval")
    attempts = [(turn, tool) for turn, tool, _ in lines(tmp_path, "attempts.log")]
    assert attempts.count(("t3", "charge")) == 2  # killed mid-tool: ran again, acted once
    assert all(attempts.count((turn, "charge")) == 1 for turn in ("t1", "t2", "t4"))
