"""Every example runs offline (its default) and tells the story it is there for."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"

EXPECTED = {
    "quickstart.py": [
        "tool call: get_weather",
        "termination_reason: answered",
        "thought (not sent; the loop continued)",
        "termination_reason: submit",
    ],
    "support_agent.py": ["thought: I'll check the order first.", "termination_reason: finished_by_tool"],
    "research_agent.py": ["termination_reason: submit", "confidence is a float: 0.9"],
    "router.py": ["'team': 'billing'", "termination_reason: forced_submit (cause: empty_tool_calls)"],
    "long_conversation.py": ["context_projection:", "termination_reason: last_text (cause: max_iters)"],
    "deadline_agent.py": ["termination_reason: incomplete (cause: deadline_exceeded)", "the third was never sent"],
    "multimodal_agent.py": [
        "tool call: zoom({'quarter': 'top-left'}) -> an image",
        "  user: '[[ ## picture ## ]] ' + image_url + '  [[ ## question ## ]] What is'",
        "  tool: '[image 1]'",
        "  user: 'Media returned by the tools ab' + '[image 1]' + image_url",
        "termination_reason: answered",
        "the history dumps with its images: dspy.Image",
    ],
    "mcp_tools.py": [
        "tools from the MCP servers: ['check_stock', 'reorder', 'clock_get_current_time', 'clock_convert_time']",
        "  tool call: reorder({'item': 'gadget', 'quantity': 20}) -> 'ordered 20 gadget(s); arriving in 3 days'",
        "  outputs: {'answer': 'Gadgets were out of stock, so I ordered 20; they arrive in 3 days.'}",
        "async request: the supplier's call",
        "'target': {'timezone': 'Asia/Tokyo', 'datetime': '",
        "T18:00:00+09:00'",
        "  outputs: {'answer': \"The supplier's 09:00 UTC call is at 18:00 in Tokyo.\"}",
        "sessions opened: inventory 1, time 1",
    ],
    "durable_agent.py": [
        "send_email: killing this process (SIGKILL) before the email goes out",
        "(the process was killed: the turn is half done)",
        "reply: Your order A-42 was refunded (19.90).",
        "ledger: refund-42:3 refund A-42 19.9",
    ],
    "triage_agents.py": [
        "termination_reason: paused",
        "  first call's requests: 5 (triage 2, researcher 2, billing 1)",
        "  pending: t2/b1 billing/refund {'order_id': 'A-42', 'amount': 19.9}",
        "reply: You were charged twice for order A-42; we refunded the duplicate 19.90.",
        "ledger: ['refund A-42 19.9']",
        "  resumed call's requests: 2 (triage 1, billing 1)",
        "  t1: researcher ended answered, 2 steps kept",
    ],
    "customer_service.py": [
        "the team's predictors: ['react', 'researcher.react']",
        "before compiling: held-out conversations score 33%\n"
        "  0 of 3 conversations succeeded: the score is the turns-taken third alone",
        "    Call `refund(order_id='D-44', amount=14.5)`: argument `amount` was 14.5, expected 7.25.",
        "GEPA taught the team:\n"
        "  react: instruction 'Look the order up with the researcher before any refund, "
        "and refund only the duplicate charge.'\n"
        "  researcher.react: instruction 'Look the order up with `lookup_order` before you answer, "
        "and report its duplicate charge.'",
        "BootstrapFewShot taught the team:\n  react: 1 demo(s)\n  researcher.react: 1 demo(s)",
        "  0.00 with no agent taught\n  0.33 with react taught\n  1.00 with react and researcher.react taught",
        "after GEPA: held-out conversations score 100%",
        "after BootstrapFewShot: held-out conversations score 100%",
        "pass^3 over 3 trials: 0.00 before, 1.00 after GEPA, 1.00 after BootstrapFewShot",
    ],
    "compiled_team.py": [
        "the program's predictors: ['react', 'researcher.react']",
        "before compiling: dev score 0%",
        "the optimizer put 2 demo(s) on react",
        "the optimizer put 2 demo(s) on researcher.react",
        "after compiling:  dev score 100%",
        "reloaded: dev score 100%",
    ],
    "hosted_tools.py": [
        "== anthropic (recorded replies over loopback HTTP) ==",
        "  tool call: get_weather({'city': 'Geneva'}) -> 'Sunny in Geneva.'",
        "  termination_reason: submit\n  hosted_calls: {'web_search_requests': 1, 'web_fetch_requests': 0}\n"
        "  first citation: https://www.timeanddate.com/on-this-day/september/29 for 'On September 29, 1954, CERN",
        "  requests: 2; the last sent back the 2 provider items served before it\n\n== openai (recorded replies",
        "  termination_reason: submit\n  hosted_calls: {'web_search_call': 6}\n"
        "  first citation: https://www.reuters.com/world/middle-east/un-overwhelmingly-endorses-two-state",
        "  requests: 3; the last sent back the 6 provider items served before it",
        "  termination_reason: answered\n  hosted_calls: {'code_interpreter_call': 1}",
        "-428,330,955.97745",
        "== gemini (recorded replies over loopback HTTP) ==",
        "  tool call: calculator({'expression': '2+2'}) -> '4'",
        "  termination_reason: answered\n  hosted_calls: {'web_search_requests': 2, 'web_fetch_requests': 0}\n"
        "  first citation: https://www.google.com/search?q=weather+in+Tokyo,+JP",
        "  requests: 2; the last sent back the 2 provider items served before it\n",
    ],
    "optimized_agent.py": [
        "before compiling: dev score 0%",
        "after compiling:  dev score 100%",
        "reloaded: dev score 100%",
    ],
}


def test_every_example_is_listed() -> None:
    scripts = {path.name for path in EXAMPLES.glob("*.py") if not path.name.startswith("_")}
    assert scripts - {"mcp_server.py"} == set(EXPECTED)


# Three Python processes (the story, the run that is killed, the one that recovers), each importing
# DSPy and DBOS: over 10 s on a quiet 2-core machine, so in the slow set `make test` (and CI) runs.
SLOW = {"durable_agent.py"}


@pytest.mark.parametrize(
    "script", [pytest.param(name, marks=pytest.mark.slow) if name in SLOW else name for name in sorted(EXPECTED)]
)
def test_the_example_runs_offline(script: str) -> None:
    env = {key: value for key, value in os.environ.items() if key != "DSPY_IMP_MODEL"}
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / script)], capture_output=True, text=True, env=env, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert "model: scripted" in done.stdout
    missing = [line for line in EXPECTED[script] if line not in done.stdout]
    assert not missing, f"{script} printed:\n{done.stdout}"


def test_live_mode_needs_a_model() -> None:
    env = {key: value for key, value in os.environ.items() if key != "DSPY_IMP_MODEL"}
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / "router.py"), "--live"], capture_output=True, text=True, env=env, check=False
    )
    assert done.returncode != 0
    assert "--live needs DSPY_IMP_MODEL" in done.stderr


@pytest.mark.parametrize("script", ["quickstart.py", "support_agent.py"])
def test_a_live_run_without_the_key_says_so_in_one_line(script: str) -> None:
    env = {key: value for key, value in os.environ.items() if not key.endswith("_API_KEY")}
    env["DSPY_IMP_MODEL"] = "openai/gpt-4o-mini"
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / script), "--live"], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        "--live: openai/gpt-4o-mini needs OPENAI_API_KEY in the environment (offline: drop --live, or run `make demo`)"
    ]
