"""The benchmark scripts run (tiny sizes, no timing asserted) and their page is built from results."""

from __future__ import annotations

import json

import pytest

from benchmarks import costs, e2e, ledger, overhead, report, report_cost, report_e2e, report_web, web_handover
from benchmarks.compare import ledger_summary, request_stats
from benchmarks.server import Script


def test_the_cost_curve_runs_both_loops_and_the_report_reads_only_the_results():
    curve = [{"steps": 2, **overhead.ours(2), **overhead.theirs(2)}]
    results = {
        "machine": {"python": "3", "platform": "test", "cpus": 2},
        "curve": curve,
        "loops": [
            {
                "loop": "dspy_imp",
                "steps": 1,
                "answered": True,
                "peak_mb": 0.1,
                "requests": 2,
                "bytes": 10,
                "tokens": 3,
                "prefix_share": 0.5,
                "min_prefix_share": 0.5,
                "ledger": _totals(2),
            }
        ],
        "scenarios": [
            {
                "loop": loop,
                "scenario": "step_limit",
                "applies": True,
                "requests": 4,
                "failed_requests": 0,
                "answered": answered,
                "ledger": _totals(4),
            }
            for loop, answered in (("dspy_imp", True), ("pydantic-ai", False))
        ],
        "e2e": {
            "table": [
                {
                    "loop": "dspy_imp",
                    "steps": 2,
                    "answered": True,
                    "requests": 3,
                    "request_ms": e2e.spread([1.0, 2.0, 3.0]),
                    "turn_ms": e2e.spread([5.0]),
                }
            ],
            "ratios": [
                {
                    "what": "request",
                    "steps": 2,
                    "top": "dspy_imp",
                    "bottom": "dspy.ReActV2",
                    "ratio": e2e.spread([0.2, 0.3]),
                },
                {"what": "turn", "steps": 2, "top": "pydantic-ai", "bottom": "dspy_imp", "ratio": e2e.spread([4.0])},
            ],
            "flat": [
                {
                    "loop": "dspy_imp",
                    "short": 2,
                    "long": 5,
                    "short_ms": e2e.spread([1.0]),
                    "long_ms": e2e.spread([2.0]),
                    "ratio": e2e.spread([2.0]),
                    "answered": True,
                }
            ],
        },
        "profile": {"dspy_imp": {"steps": 2, "shares": [["dspy", 0.5], ["other", 0.5]]}},
        "parallel": [{"calls": 2, "mode": "call", "tool_ms": 50.0, "sequential_ms": 100.0, "parallel_ms": 50.0}],
        "elapsed_s": 1.0,
    }
    results["targets"] = report.targets(results)
    results["ledger"] = ledger_summary(results["scenarios"], results["loops"], ("step_limit",))
    results["targets_e2e"] = report_e2e.targets(results)
    results["cost"] = costs.summary(_cost_rows(), ("step_limit",), [2]) | {"rows": _cost_rows()}
    results["targets_cost"] = report_cost.targets(results["cost"])
    results["engines"] = {
        "steps": 2,
        "ratio": e2e.spread([0.7, 0.8]),
        "frozen_ratio": e2e.spread([0.9, 1.0]),
        "answered": True,
    }

    page = report.page(results)
    sections = [line for line in page.splitlines() if line.startswith("## ")]
    assert sections[:4] == [
        "## Summary",
        "## The per-request split at 10, 100 and 1,000 steps",
        "## What you can do today",
        "## What a turn costs",
    ]
    assert "| Claude Sonnet 4.5 | `dspy_imp` | 3,000 (3,000) | 4.5 (4.5) | 1.00 |" in page
    assert '| `engine="lm15"` / the default, per request at 2 steps | 0.75 (0.70–0.80, 2 rounds) | – |' in page
    assert "issue" not in page.lower()
    assert sections[-2:] == [report_web.HEADING, web_handover.HEADING]  # `make bench-web`'s sections, kept
    assert "with the heap frozen before the turn, against none: 0.95 (0.90–1.00, 2 rounds)." in page
    assert set(curve[0]) == {"steps", "ours_ms", "plumbing_ms", "whole_ms", "render_alone_ms", "samples", "dspy_ms"}
    assert curve[0]["samples"] >= overhead.SAMPLES
    assert f"{curve[0]['ours_ms']:,.2f}" in page
    assert "| step limit | 4, answered | 4, no answer |" in page
    assert "| *step limit* | 3 · 3,000 |" in page  # requests · µ$ at Claude Sonnet 4.5's prices
    assert report.chart(curve).startswith("<svg")
    assert "| N=2 | `dspy_imp` | 3 | 2.00 (1.00–3.00) | 5.0 (5.0–5.0) | yes |" in page
    targets = results["targets_e2e"]
    assert targets["request_vs_stock:dspy_imp"]["ratio"] == 0.25 and targets["request_vs_stock:dspy_imp"]["met"]
    assert targets["ahead:pydantic-ai:2"]["met"] and targets["flat:dspy_imp"]["met"]
    # pydantic-ai answered nothing: it has no tokens per answered turn, and ours are compared with the rest.
    assert targets["tokens"] == {"ours": 10.0, "peers": {"pydantic-ai": None}, "met": True}


def _cost_rows() -> list[dict]:
    usage = {"anthropic": {"input": 1000, "write": 0, "read": 0, "output": 0}}
    return [
        {"loop": "dspy_imp", "model": costs.SONNET, "what": what, "answered": True, "requests": 3, "connections": 1}
        | {
            "opened": 1,
            "usage": usage if what == "step_limit" else {"anthropic": {**usage["anthropic"], "output": 100}},
        }
        for what in ("step_limit", "steps:2")
    ]


def _totals(requests: int) -> dict[str, float]:
    rows = [{"system": 2, "tools": 3, "history": 1, "new": 4, "prompt": 10, "prefix": 0, "output": 1}]
    return {**ledger.totals(rows * requests), "prompt": 10 * requests // 4}


def test_the_ledger_splits_each_request_and_counts_what_a_cache_reuses():
    system = {"role": "system", "content": "be brief"}
    user = {"role": "user", "content": "q"}
    call = {"role": "assistant", "content": None, "tool_calls": [{"id": "c", "function": {"name": "look"}}]}
    tools = [{"type": "function", "function": {"name": "look"}}]
    first = {"messages": [system, user], "tools": tools}
    result = {"role": "tool", "content": " ".join(map(str, range(2000)))}
    second = {"messages": [system, user, call, result], "tools": tools}
    third = {**second, "messages": [*second["messages"], call]}
    rows = ledger.split([json.dumps(first), json.dumps(second), json.dumps(third)], [call, None, {"content": "ok"}])

    count = ledger.tokens
    dumps = ledger._dumps
    assert rows[0]["system"] == count(dumps(system)) and rows[0]["new"] == count(dumps(user))
    assert rows[0]["tools"] == count(dumps(tools)) and rows[0]["prefix"] == 0
    assert rows[1]["history"] == count(dumps(user)) and rows[1]["prefix"] == rows[0]["prompt"]
    assert rows[2]["new"] == count(dumps(call)) and rows[2]["prefix"] == rows[1]["prompt"]
    assert rows[0]["output"] > 0 and rows[1]["output"] == 0
    assert all(r["prompt"] == sum(r[p] for p in ledger.PARTS) for r in rows)
    # OpenAI caches from 1,024 tokens in 128-token steps; Anthropic caches nothing without breakpoints.
    assert ledger.CACHES["openai"].cached(1023) == 0 and ledger.CACHES["openai"].cached(1300) == 1280
    assert ledger.CACHES["deepseek"].cached(130) == 128 and ledger.CACHES["anthropic"].cached(5000) == 0
    totals = ledger.totals(rows)
    assert totals["openai_cached"] == ledger.CACHES["openai"].cached(rows[2]["prefix"]) > 0
    assert totals["anthropic_cached"] == 0 and totals["openai_usd"] < totals["anthropic_usd"]


def test_the_end_to_end_gaps_leave_out_the_server_and_sample_the_long_history():
    times = [[0.0, 1.0], [1.5, 2.0], [4.0, 4.5], [5.0, 6.0]]
    assert e2e.gaps(times) == [0.5, 2.0, 0.5]
    assert e2e.sampled([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0], 10) == [9.0, 10.0]
    assert e2e.spread([3.0, None, 1.0, 2.0]) == {"median": 2.0, "low": 1.0, "high": 3.0, "rounds": 3}


def test_a_chat_adapter_request_gets_its_reply_in_field_markers_and_a_schema_request_no_thought():
    script = Script("thought_then_answer", answer={"answer": "found", "confidence": 0.9})
    asked = (
        "[[ ## question ## ]]\nq\n\nRespond with the corresponding output fields, starting with the field "
        "`[[ ## next_thought ## ]]`, and then ending with the marker for `[[ ## completed ## ]]`."
    )
    stock = {"messages": [{"role": "user", "content": asked}], "tools": [{"function": {"name": "look"}}]}
    _, thought = script.respond(json.dumps(stock).encode())
    assert thought["choices"][0]["message"]["content"] == (
        "[[ ## next_thought ## ]]\nLet me think about where to look.\n\n[[ ## completed ## ]]"
    )
    structured = {
        "messages": [{"role": "user", "content": "q"}],
        "response_format": {"type": "json_schema", "json_schema": {}},
    }
    _, reply = Script("thought_then_answer").respond(json.dumps(structured).encode())
    assert json.loads(reply["choices"][0]["message"]["content"]) == {"answer": "found"}


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


def test_thinking_is_billed_once_per_assistant_turn_without_the_beta_and_per_request_with_it():
    thinking = {"type": "enabled", "budget_tokens": 2048}

    def body(*messages: dict, thinks: bool = True) -> dict:
        return {"messages": list(messages), **({"thinking": thinking} if thinks else {})}

    user = {"role": "user", "content": [{"type": "text", "text": "Where is it?"}]}
    call = {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "look", "input": {}}]}
    result = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "no"}]}
    # one assistant turn of three requests (a tool loop), then the forced submit without thinking
    turn = [body(user), body(user, call, result), body(user, call, result, call, result)]
    bodies = [*turn, body(user, call, result, call, result, thinks=False)]
    counts = costs.thinking_counts(bodies, [None] * 4)
    assert counts == {"turn": 1, "request": 3, "carried_turn": 3, "carried_request": 0 + 1 + 2 + 3}
    beta = "interleaved-thinking-2025-05-14"
    sent = costs.thinking_counts(bodies, [beta] * 4)
    assert (sent["turn"], sent["carried_turn"]) == (3, 6)  # with the beta, as sent: per request
    again = costs.thinking_counts([*bodies, body(user, call, result, call, result, call, result, user)], [None] * 5)
    assert again["turn"] == 2  # a new user message opens a new assistant turn

    key = costs.PRICES["Claude Sonnet 4.5"][2]
    entry = costs.litellm.model_cost[key]
    billed = costs.thinking_dollars(counts, key, "turn", 200)
    assert billed == pytest.approx(200 * (entry["output_cost_per_token"] + 3 * entry["cache_read_input_token_cost"]))


def test_the_thinking_targets_are_met_only_on_the_rows_that_hold():
    def loop(cost: float, thought: dict | None) -> dict:
        found = {"scenarios_cached": cost, "scenarios_uncached": cost}
        if thought is not None:
            found["scenarios_thinking"] = {"turn": thought, "request": thought}
        return found

    label = "Claude Sonnet 4.5"
    loops = {
        "dspy_imp": loop(0.0010, {"50": 0.0011, "200": 0.0014, "500": 0.0020}),
        costs.OURS_OFF: loop(0.0010, {"50": 0.0010, "200": 0.0010, "500": 0.0010}),
        "pydantic-ai": loop(0.0012, {"50": 0.0012, "200": 0.0012, "500": 0.0012}),
        "dspy.ReActV2": loop(0.0013, {"50": 0.0015, "200": 0.0020, "500": 0.0030}),
    }
    targets = report_cost.targets({"long": [], "prices": {label: {"loops": loops}}})
    assert targets[f"scenarios:{label}"]["met"] and targets[f"scenarios_off:{label}"]["met"]
    assert set(targets[f"scenarios_off:{label}"]["peers"]) == {"pydantic-ai", "dspy.ReActV2"}  # ours is no peer
    assert [targets[f"scenarios_thinking:{label}:{n}"]["met"] for n in (50, 200, 500)] == [True, False, False]
    assert targets[f"scenarios_thinking:{label}:200"]["peers"]["dspy.ReActV2"] == 0.0020  # its own thinking billed
    table = report_cost.targets_table({"targets_cost": targets})
    assert table.count("| yes |") == 3 and table.count("| **no** |") == 2


def test_adding_the_longest_turn_for_more_loops_replaces_their_rows_and_recomputes_the_summary(monkeypatch):
    from benchmarks import run

    class Server:
        base_url = "http://bench"

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    built = []
    monkeypatch.setattr(run, "BenchServer", Server)
    monkeypatch.setattr(
        run, "COST_LOOP_MAKERS", {"pydantic-ai": lambda url, kind, steps, model: built.append(steps) or (lambda: True)}
    )
    usage = {"anthropic": {"input": 2000, "write": 0, "read": 0, "output": 10}}
    measured = {"answered": True, "requests": 3, "connections": 1, "opened": 1, "thinking": 0, "usage": usage}
    monkeypatch.setattr(costs, "run_one", lambda server, turn, scenario, steps, answer: dict(measured))
    rows = _cost_rows()
    stale = {**rows[-1], "loop": "pydantic-ai", "requests": 99}  # an earlier steps:2 row of the loop
    cost = costs.summary([*rows, stale], ("step_limit",), [2])
    longest = {"steps": 2, "models": [costs.SONNET], "loops": ["dspy_imp"]}
    results = {"cost": cost | {"rows": [*rows, stale], "longest": longest, "machine": {"elapsed_s": 1.0}}}

    run.add_longest(results, ["pydantic-ai"])

    assert built == [7]  # the longest turn's steps, and five more for the answer
    cost = results["cost"]
    assert cost["longest"]["loops"] == ["dspy_imp", "pydantic-ai"] and cost["machine"]["added"]["loops"] == [
        "pydantic-ai"
    ]
    added = [r for r in cost["rows"] if r["loop"] == "pydantic-ai"]
    assert [(r["what"], r["requests"]) for r in added] == [("steps:2", 3)]
    assert cost["prices"]["Claude Sonnet 4.5"]["loops"]["pydantic-ai"]["steps:2"]["requests"] == 3
    assert results["targets_cost"]["scenarios:Claude Sonnet 4.5"]["met"]  # recomputed with the new rows


def test_the_load_line_says_when_the_end_to_end_part_was_run_again() -> None:
    from benchmarks import report_summary

    results = {
        "machine": {"cpus": 2, "load_before": [0.5, 0.5, 0.5], "load_after": [1.0, 1.0, 1.0]},
        "e2e": {"machine": {"load_before": [0.25, 0.2, 0.2], "load_after": [1.5, 1.0, 1.0], "elapsed_s": 300.0}},
    }
    line = report_summary.load_line(results)
    assert "the end-to-end part was run again afterwards" in line
    assert "in 300 s under 0.25 at the start and 1.50 at the end" in line
    assert "the other parts under 0.50 at the start and 1.00 at the end" in line
    assert "run again" not in report_summary.load_line({"machine": results["machine"], "e2e": {}})


def test_the_ledger_counts_and_prices_hosted_calls_and_shows_them_only_when_a_loop_made_any():
    from dspy_imp import Usage

    rows = [{"system": 2, "tools": 3, "history": 1, "new": 4, "prompt": 10, "prefix": 0, "output": 1}]
    searched = Usage(hosted_calls={"web_search_requests": 2, "web_fetch_requests": 1})  # Anthropic's counts
    hosted = ledger.hosted(searched, "anthropic/claude-sonnet-4-5")
    assert hosted == {"hosted_calls": 3, "hosted_usd": pytest.approx(0.02)}  # $10 per 1,000 searches, fetches free
    assert ledger.hosted(Usage(hosted_calls={"web_search_call": 1}), "openai/gpt-4o-search-preview") == {
        "hosted_calls": 1,
        "hosted_usd": pytest.approx(0.025),  # Chat Completions' search preview: $25 per 1,000
    }
    assert ledger.hosted(Usage(hosted_calls={"web_search_requests": 2}), "openrouter/deepseek/deepseek-chat") == {
        "hosted_calls": 2,
        "hosted_usd": pytest.approx(0.014),  # OpenRouter's web search with Exa: $7 per 1,000 requests
    }
    assert ledger.hosted(Usage(), "openai/gpt-4o-mini") == {} == ledger.hosted(None)
    with_calls, without = ledger.totals(rows, hosted), ledger.totals(rows, {})
    assert with_calls == {**without, "hosted_calls": 3, "hosted_usd": pytest.approx(0.02)}
    assert "hosted_calls" not in without

    def scenario(loop: str, totals: dict) -> dict:
        return {"loop": loop, "scenario": "step_limit", "answered": True, "ledger": totals}

    def step(loop: str, totals: dict) -> dict:
        return {"loop": loop, "steps": 2, "ledger": totals}

    # ours searched in both scenarios it ran; the peer made no hosted call: its cells read 0
    scenarios = [scenario("dspy_imp", with_calls), scenario("dspy_imp", without), scenario("pydantic-ai", without)]
    summary = ledger_summary(scenarios, [step("dspy_imp", with_calls), step("pydantic-ai", without)], ("step_limit",))
    ours = summary["loops"]["dspy_imp"]
    assert ours["sum"]["hosted_calls"] == 3 and ours["per_answered"]["hosted_calls"] == 1.5
    assert ours["per_answered"]["hosted_usd"] == pytest.approx(0.01)
    assert "hosted_calls" not in summary["loops"]["pydantic-ai"]["per_answered"]
    page = report_e2e.ledger_page({"ledger": summary})
    table, scenario_table, steps_table = (t for t in page.split("\n\n") if t.startswith("| "))
    assert table.splitlines()[0].endswith("| hosted calls/answered | hosted µ$/answered |")
    assert table.splitlines()[2].endswith("| 1.50 | 10,000 |")  # ours: 1.5 calls, $0.01 per answered turn
    assert table.splitlines()[3].endswith("| 0 | 0 |")
    assert scenario_table.splitlines()[0].endswith("| reply | hosted calls |")
    assert [line.rsplit("|", 2)[-2].strip() for line in scenario_table.splitlines()[2:]] == ["3", "0", "0"]
    assert steps_table.splitlines()[0].endswith("| openai µ$/turn | hosted calls | hosted µ$/turn |")
    assert steps_table.splitlines()[2].endswith("| 3 | 20,000 |")

    # no loop made one: no column anywhere
    plain = ledger_summary([scenario("dspy_imp", without)], [step("dspy_imp", without)], ("step_limit",))
    assert "hosted" not in report_e2e.ledger_page({"ledger": plain}).split("made one.", 1)[1]
