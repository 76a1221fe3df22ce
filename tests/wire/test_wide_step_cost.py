"""A 100-step Claude turn of 12 parallel calls a step, billed by the bench's Anthropic emulator.

Each step adds 24 blocks (12 ``tool_use``, 12 ``tool_result``), past Anthropic's 20-block lookback:
with one moving breakpoint no request would find the entry the one before wrote. The requests go
through the real ``dspy.LM`` path (the native engine) to the wire emulator; their bodies are then
billed as ``benchmarks.caches`` bills them (cache reads and writes behind the breakpoints, the
tool-use system prompt) at Claude Sonnet 4.5's prices, cached and with every prompt token at the
input price.
"""

from __future__ import annotations

import dspy
import pytest
from emulator import Emulator
from provider_rules import assert_accepted
from responses import anthropic
from turns import TOOLS

import dspy_imp
from benchmarks import caches, costs
from benchmarks.server import _counter

pytestmark = pytest.mark.block_network(allowed_hosts=[r"127\.0\.0\.1$"])

STEPS, WIDTH = 100, 12
BRIEF = "Weather in these cities? " + " ".join(f"City {i} is on the list." for i in range(150))


def _script() -> list:
    steps = [
        anthropic(calls=[(f"toolu_{s}x{j}", "get_weather", {"city": f"City {s}.{j}"}) for j in range(WIDTH)])
        for s in range(STEPS)
    ]
    return [*steps, anthropic(text="Sunny everywhere.")]


def _billed(bodies: list[dict], outputs: list[int]) -> dict[str, int]:
    cache = caches.AnthropicCache.for_model(_counter(), costs.SONNET)
    total = dict.fromkeys(costs.USAGE_KEYS, 0)
    for body, output in zip(bodies, outputs, strict=True):
        usage = cache.usage(body)
        total["input"] += usage["input_tokens"]
        total["write"] += usage["cache_creation_input_tokens"]
        total["read"] += usage["cache_read_input_tokens"]
        total["output"] += output
    return total


def test_a_wide_hundred_step_turn_costs_at_least_60_percent_less_cached():
    with Emulator(_script()) as emulator:
        lm = dspy.LM(
            "anthropic/claude-sonnet-4-5",
            api_base=emulator.base_url + "/v1",
            api_key="sk-test",
            cache=False,
            reasoning_effort=None,  # no thinking: the scripted replies carry no thinking blocks
        )
        agent = dspy_imp.ReActV2("question -> answer", tools=TOOLS, max_iters=STEPS + 1, repeat_limit=None)
        with dspy.context(lm=lm):
            prediction = agent(question=BRIEF)
    assert prediction.metadata.termination_reason == "answered"
    bodies = [r.body for r in emulator.requests]
    assert len(bodies) == STEPS + 1
    for body in bodies:
        assert_accepted("anthropic", body)
    last = bodies[-1]["messages"]
    assert [len(m["content"]) for m in last[1:3]] == [WIDTH, WIDTH]  # 24 blocks a step
    outputs = [c.output_tokens for c in prediction.metadata.usage.calls]
    usage = _billed(bodies, outputs)
    cached = costs.dollars(usage, "claude-sonnet-4-5")
    uncached = costs.dollars(usage, "claude-sonnet-4-5", cached=False)
    assert usage["read"] > 0.8 * (usage["input"] + usage["write"] + usage["read"])  # almost every prompt token read
    print(f"cached {cached:.4f} $, uncached {uncached:.4f} $: {1 - cached / uncached:.1%} less")
    assert cached <= 0.40 * uncached, (cached, uncached, usage)
