"""The hand-over benchmark (``benchmarks.web_handover``): how a client turn is read and classified,
and how the page marks the targets. The measurement itself runs in ``make bench-web``."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx

import dspy_imp
import dspy_imp.web
from benchmarks import report_web, web_handover
from benchmarks.web_handover import Conversation, Tally
from dspy_imp.testing import ScriptedLM, reply


def run(signal: str, moved: int, waits: list[float], cut: dict[str, int], left: int) -> dict[str, Any]:
    return {
        "signal": signal,
        "conversations": moved * 2,
        "moved": moved,
        "accepted": len(waits),
        "within_3s": sum(w <= 3.0 for w in waits),
        "accepted_p50_s": sorted(waits)[len(waits) // 2] if waits else None,
        "accepted_max_s": max(waits) if waits else None,
        "after_move_p50_s": 0.1,
        "after_move_max_s": 0.2,
        "retry_after_max_s": 3.0,
        "started": 10,
        "finished": 10,
        "cut": cut,
        "refused": {},
        "exit_code": 0,
        "exited_after_s": 1.5,
        "leases_before": 10,
        "leases_left_by_stopped": left,
        "load_before": [0.5, 0.5, 0.5],
        "load_after": [1.0, 1.0, 1.0],
    }


def results(*runs: dict[str, Any]) -> dict[str, Any]:
    return {"conversations": 100, "warmup_s": 8.0, "after_s": 12.0, "runs": list(runs)}


def test_the_kill_target_holds_only_when_every_moved_conversation_was_accepted_within_3_s() -> None:
    met = web_handover.goals_of(results(run("SIGKILL", 3, [2.6, 2.7, 2.9], {"connection: ReadError": 3}, 3)))
    assert [g["met"] for g in met] == [True]
    late = web_handover.goals_of(results(run("SIGKILL", 3, [2.6, 2.7, 3.2], {}, 3)))
    assert [g["met"] for g in late] == [False] and "2 of 3 within 3 s (max 3.2 s)" in late[0]["measured"]
    lost = web_handover.goals_of(results(run("SIGKILL", 3, [2.6, 2.7], {}, 3)))  # one never accepted
    assert [g["met"] for g in lost] == [False]


def test_the_term_target_needs_no_cut_turn_and_no_lease_left() -> None:
    clean = run("SIGTERM", 3, [3.5, 3.6, 3.7], {}, 0)
    assert [g["met"] for g in web_handover.goals_of(results(clean))] == [True]
    cut = run("SIGTERM", 3, [3.5, 3.6, 3.7], {"RUN_ERROR: LeaseLost": 1}, 0)
    assert [g["met"] for g in web_handover.goals_of(results(cut))] == [False]
    left = run("SIGTERM", 3, [3.5, 3.6, 3.7], {}, 2)
    assert [g["met"] for g in web_handover.goals_of(results(left))] == [False]


def test_its_section_replaces_only_its_own_in_the_page(tmp_path: Path) -> None:
    page = tmp_path / "performance.md"
    page.write_text("# Performance\n\n## Web under load\n\nthe load section\n\n## Hand-over under load\n\nold\n")
    new = web_handover.section(results(run("SIGKILL", 3, [2.6, 2.7, 2.9], {}, 3)))
    report_web.write_section(page, {}, web_handover.HEADING, new)
    text = page.read_text()
    assert "the load section" in text and "old" not in text
    assert "| SIGKILL | 3 | 3 | 3 | 2.7 / 2.9 | 0.1 / 0.2 | 3.0 | 0 | 3 | 1.5 | 0.5 → 1.0 |" in text
    assert "| one of two instances SIGKILLed under load: every conversation usable on the other within 3 s" in text


def answered() -> dspy_imp.ReActV2:
    agent = dspy_imp.ReActV2("question -> answer")
    agent.set_lm(ScriptedLM([reply("yes")]))
    return agent


def test_a_turn_is_read_to_its_end_and_its_reply_carried_in_the_history() -> None:
    async def go() -> tuple[str, Conversation, Tally]:
        transport = httpx.ASGITransport(app=dspy_imp.web.app(answered()))
        conversation, tally = Conversation("k1", 0, 0), Tally()
        async with httpx.AsyncClient(transport=transport) as http:
            outcome = await web_handover.one_turn(http, "http://localhost", conversation, tally)
        return outcome, conversation, tally

    outcome, conversation, tally = asyncio.run(go())
    assert outcome == "ok" and (tally.started, tally.finished, tally.cut) == (1, 1, {})
    assert conversation.turns == 1
    assert [m["role"] for m in conversation.history] == ["user", "assistant"]
    assert conversation.history[1]["content"] == "yes"


def test_a_409_is_asked_again_a_503_moves_and_a_cut_stream_counts_as_cut() -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        status = {"/busy/ag-ui": 409, "/draining/ag-ui": 503}.get(request.url.path)
        if status is not None:
            return httpx.Response(status, headers={"retry-after": "2"}, json={"detail": "later"})
        events = 'data: {"type":"RUN_STARTED"}\n\ndata: {"type":"RUN_ERROR","message":"LeaseLost: gone"}\n\n'
        return httpx.Response(200, text=events, headers={"content-type": "text/event-stream"})

    async def go() -> tuple[list[str], Tally, Conversation]:
        conversation, tally = Conversation("k1", 0, 0), Tally()
        async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as http:
            outcomes = [
                await web_handover.one_turn(http, f"http://localhost/{where}", conversation, tally)
                for where in ("busy", "draining", "cut")
            ]
        return outcomes, tally, conversation

    outcomes, tally, conversation = asyncio.run(go())
    assert outcomes == ["again", "moved", "again"]
    assert tally.refused == {"409": 1, "503": 1} and tally.retry_after == [2.0, 2.0]
    assert tally.cut == {"RUN_ERROR: LeaseLost: gone": 1} and conversation.turns == 0


def test_the_median_wait_is_the_middle_one_not_the_longest() -> None:
    waits = [2.1, 2.2, 2.4, 3.1, 3.25]
    assert web_handover.median_and_max("accepted", waits) == {"accepted_p50_s": 2.4, "accepted_max_s": 3.25}
    assert web_handover.median_and_max("after_move", []) == {"after_move_p50_s": None, "after_move_max_s": None}
