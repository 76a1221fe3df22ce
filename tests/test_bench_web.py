"""The web load benchmark's harness (``benchmarks/web_load.py``) at a toy size.

The loopback model, one instance on the memory store and a Locust run of 3 conversations that
stops once their 9 turns have ended (nothing waits on the machine's speed: the run's time is only
a hang guard), then the results read back and rendered. The pure parts (what the model answers,
how refusals are counted, the targets' verdicts, the docs section's place) are checked alone.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import pytest

from benchmarks import report_web, web_load, web_model
from benchmarks.web_counts import error_kind, regrouped

pytestmark = pytest.mark.block_network(allowed_hosts=[r"127\.0\.0\.1$"])


def test_the_model_calls_the_tool_then_answers() -> None:
    tools = [{"type": "function", "function": {"name": "look"}}]
    first = web_model.decide({"messages": [{"role": "user", "content": "hi"}], "tools": tools})
    assert first[:2] == ("call", "look")
    after = {"messages": [{"role": "user", "content": "hi"}, {"role": "tool", "content": "x"}], "tools": tools}
    kind, _, text = web_model.decide(after)
    assert kind == "text" and len(text.split()) == web_model.TOKENS
    answered = web_model.decide(
        {**after, "tools": [*tools, {"type": "function", "function": {"name": "final_result"}}]}
    )
    assert answered[:2] == ("call", "final_result")


def test_a_refusal_is_counted_by_status_retry_after_and_message() -> None:
    body = json.dumps({"detail": "over 512 running turns: retry in 3 s"})
    assert error_kind(429, body, "3") == "429 Retry-After: over N running turns: retry in N s"
    assert error_kind(409, "busy", None) == "409: busy"


def test_a_refusal_answered_as_a_stream_is_one_kind_whichever_conversation_it_hit() -> None:
    def agui(thread: str) -> str:
        events = [
            {"type": "RUN_STARTED", "threadId": thread, "runId": f"{thread}-r1"},
            {"type": "RUN_ERROR", "message": "over 400 running turns: retry in 2 s", "code": "busy"},
        ]
        return "".join(f"data: {json.dumps(e)}\n\n" for e in events)

    aisdk = (
        'data: {"type":"start","messageId":"m-9"}\n\n'
        'data: {"type":"error","errorText":"over 400 running turns: retry in 2 s"}\n\n'
    )
    kinds = {error_kind(429, agui("abc123"), "2"), error_kind(429, agui("zz9"), "2"), error_kind(429, aisdk, "2")}
    assert kinds == {"429 Retry-After: over N running turns: retry in N s"}
    lost = {error_kind(200, f"LeaseLost: conversation '{c}': its turn lease expired", None) for c in ("a1", "b22")}
    assert lost == {"200: LeaseLost: conversation '…': its turn lease expired"}


def test_counts_saved_by_an_earlier_run_are_regrouped_when_rendered() -> None:
    saved = {
        '429 Retry-After: data: {"type":"RUN_STARTED","threadId":"eNbaeNd","runId":"eNb': 13,
        '429 Retry-After: data: {"type":"start","messageId":"NfNfNc-N"} data: {"type":"error': 7,
        "RUN_ERROR: LeaseLost: conversation 'NdNdNf': its turn lease expired unrenewed;": 1,
        "RUN_ERROR: LeaseLost: conversation 'NacdNcNdbcNfNeNbNfNcNe': its turn lease expired unrenewed;": 2,
        "RUN_ERROR: LeaseLost: conversation 'cut before its clos": 1,
    }
    assert regrouped(saved) == {
        "429 Retry-After: refused as an error event in the stream": 20,
        "RUN_ERROR: LeaseLost: conversation '…': its turn lease expired…": 3,
        "RUN_ERROR: LeaseLost: conversation '…'": 1,
    }


def _results(level: int, **measured: Any) -> dict[str, Any]:
    m = {
        "level": level,
        "turns_per_s": 90.0,
        "model_max_in_flight": 300,
        "refused_429_retry_after": 0,
        "lag_ms": {"p99": 10.0},
        **measured,
    }
    return {"targets": [{"kind": "dspy-imp", "instances": 1, "store": "memory", "levels": [m]}]}


def test_the_targets_are_marked_from_the_measurement() -> None:
    met = {g["goal"]: g["status"] for g in report_web.goals(_results(500))}
    assert met["at 500 conversations one instance answers >= 80 turns/s"] == "met"
    slow = {g["goal"]: g["status"] for g in report_web.goals(_results(500, turns_per_s=43.0, model_max_in_flight=100))}
    assert slow["at 500 conversations one instance answers >= 80 turns/s"] == "not met"
    assert slow["at 500 conversations one instance sends more than 100 model requests at once"] == "not met"
    lag = {g["goal"]: g["status"] for g in report_web.goals(_results(200))}
    assert lag["at 200 conversations, event-loop lag p99 <= 50 ms on every store"] == "not measured on every store"
    assert lag["at 500 conversations one instance answers >= 80 turns/s"] == "not measured"
    unrefused = {g["goal"]: g["status"] for g in report_web.goals(_results(1000))}
    assert unrefused[next(g for g in unrefused if g.startswith("at 1,000"))] == "not met"


def test_the_section_replaces_its_old_self_in_the_page(tmp_path: Path) -> None:
    page = tmp_path / "performance.md"
    page.write_text("# Performance\n\n## Web under load\n\nold numbers\n\n## Later\n\nkept\n")
    results = {
        "machine": {"cpus": 2, "python": "3.11"},
        "elapsed_s": 1.0,
        "load_at_start": [1.0],
        "load_at_end": [1.0],
        "settings": {
            "levels": [3],
            "duration_s": 1,
            "ramp_s": 1,
            "turns": 3,
            "tokens": 20,
            "token_delay_ms": 50,
            "protocol": "mixed",
        },
        "targets": [],
        "goals": report_web.goals({"targets": []}),
    }
    report_web.write_section(page, results)
    text = page.read_text()
    assert "old numbers" not in text and text.count("## Web under load") == 1
    assert text.startswith("# Performance\n") and text.endswith("## Later\n\nkept\n")


@pytest.mark.slow  # an instance and Locust start, then 3 turns of about 2 s each
def test_three_conversations_on_one_instance_are_measured_to_the_end() -> None:
    target = web_load.Target("dspy-imp memory x1", "dspy-imp", "memory", 1, "mixed")
    with tempfile.TemporaryDirectory() as folder, web_model.ModelServer() as model:
        logs = Path(folder)
        web_load.start(target, model.base_url, "memory", None, logs)
        try:
            measured = web_load.run_level(target, model, 3, duration=300, ramp=1, logs=logs, stop_after=9)
        finally:
            web_load.stop(target)
    assert measured["errors"] == {}
    assert measured["turns_all"] >= 9  # 3 conversations of 3 turns, read to their last event
    assert set(measured["turns_by_protocol"]) <= {"agui", "aisdk"}
    assert measured["conversations_started"] >= 3
    assert measured["model_requests"] is not None and measured["model_max_in_flight"] >= 1
    assert measured["lag_ms"]["p99"] is not None and measured["server_cpu_ms_per_turn"] > 0
    results = {
        "targets": [
            {
                "name": target.name,
                "kind": "dspy-imp",
                "store": "memory",
                "instances": 1,
                "protocol": "mixed",
                "levels": [measured],
            }
        ]
    }
    assert "dspy-imp memory x1 | 3 |" in report_web.levels_table(results)
