"""The benchmark scripts run (tiny sizes, no timing asserted) and their page is built from results."""

from __future__ import annotations

import json

from benchmarks import overhead, report
from benchmarks.compare import request_stats
from benchmarks.server import Script


def test_the_cost_curve_runs_both_loops_and_the_report_reads_only_the_results():
    curve = [{"steps": 2, **overhead.ours(2), **overhead.theirs(2)}]
    results = {
        "machine": {"python": "3", "platform": "test", "cpus": 2},
        "curve": curve,
        "loops": [{"loop": "dspy_imp", "steps": 1, "answered": True, "turn_ms": 1.0, "request_ms": 0.5,
                   "peak_mb": 0.1, "requests": 2, "bytes": 10, "tokens": 3, "prefix_share": 0.5,
                   "min_prefix_share": 0.5}],
        "scenarios": [{"loop": "dspy_imp", "scenario": "step_limit", "applies": True, "requests": 4,
                       "failed_requests": 0, "answered": True}],
        "profile": {"dspy_imp": {"steps": 2, "shares": [["dspy", 0.5], ["other", 0.5]]}},
        "parallel": [{"calls": 2, "mode": "call", "tool_ms": 50.0, "sequential_ms": 100.0, "parallel_ms": 50.0}],
        "elapsed_s": 1.0,
    }
    results["targets"] = report.targets(results)

    page = report.page(results)
    assert set(curve[0]) == {"steps", "ours_ms", "plumbing_ms", "whole_ms", "render_alone_ms", "samples", "dspy_ms"}
    assert curve[0]["samples"] >= overhead.SAMPLES
    assert f"{curve[0]['ours_ms']:,.2f}" in page
    assert "| step limit | 4, answered |" in page
    assert report.chart(curve).startswith("<svg")


def test_the_scripted_server_model_takes_steps_then_answers_as_the_loop_asks():
    script = Script("steps", steps=1)
    tools = [{"type": "function", "function": {"name": n}} for n in ("look", "submit")]
    first = {"messages": [{"role": "user", "content": "q"}], "tools": tools}
    second = {**first, "messages": [*first["messages"], {"role": "tool", "content": "x"}]}

    _, step = script.respond(json.dumps(first).encode())
    _, answer = script.respond(json.dumps(second).encode())

    assert step["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "look"
    assert answer["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "submit"
    stats = request_stats([json.dumps(first), json.dumps(second)])
    assert stats["requests"] == 2 and 0 < stats["prefix_share"] < 1



def test_the_context_benchmark_counts_prefix_breaks_per_tier_change():
    from benchmarks import context_prefix

    result = context_prefix.run(2)
    assert result["requests"] == 8 and result["history_entries"] == 8
    assert result["prefix_breaks"] == sum(result["tier_changes"].values())
    assert "| requests that broke the prefix |" in report.context_table({"context": result})
