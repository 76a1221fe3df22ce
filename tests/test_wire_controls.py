"""Production controls over the real HTTP path, on both DSPy engines: a paused turn resumed
after a JSON round trip sends a request the provider accepts, and usage is what the server reported."""

from __future__ import annotations

import json
from typing import Any

import dspy
import pytest
from fake_openai_server import FakeOpenAIServer, text_completion, tool_calls_completion

import dspy_imp

pytestmark = pytest.mark.block_network(allowed_hosts=[r"127\.0\.0\.1$"])

SENT: list[str] = []


def lookup(order: str) -> str:
    """Look an order up."""
    return f"order {order}: paid twice"


def refund(order: str) -> str:
    """Refund an order."""
    SENT.append(order)
    return f"refunded {order}"


def assert_paired(messages: list[dict[str, Any]]) -> None:
    """Issue 8's provider-rules checker is not in yet: the pairing rule, checked locally."""
    for index, message in enumerate(messages):
        if message["role"] == "assistant" and message.get("tool_calls"):
            ids = [c["id"] for c in message["tool_calls"]]
            assert [m.get("tool_call_id") for m in messages[index + 1 : index + 1 + len(ids)]] == ids


@pytest.mark.parametrize("engine", ["auto", "litellm"])
def test_an_approval_pause_resumes_over_http(engine: str, run: Any) -> None:
    SENT.clear()
    script = [
        tool_calls_completion([("c1", "lookup", {"order": "A7"}), ("c2", "refund", {"order": "A7"})]),
        text_completion("Refunded."),
    ]
    with FakeOpenAIServer(script) as server:
        lm = dspy.LM(
            "openai/gpt-4o-mini", api_base=server.base_url, api_key="sk-test", cache=False, num_retries=0, engine=engine
        )
        agent = dspy_imp.ReActV2("ticket -> reply", tools=[lookup, refund], needs_approval=["refund"])
        with dspy.context(lm=lm):
            paused = run(agent, ticket="Charged twice for A7.")
            saved = json.loads(json.dumps(dspy_imp.dump_history(paused.metadata.history)))
            done = run(agent, history=dspy_imp.load_history(saved), approvals={"c2": True})
        first, second = (r.body for r in server.requests)

    assert paused.metadata.termination_reason == "paused" and SENT == ["A7"]
    assert done.reply == "Refunded."
    assert second["messages"][: len(first["messages"])] == first["messages"]
    call_message, *results = second["messages"][len(first["messages"]) :]
    assert [c["id"] for c in call_message["tool_calls"]] == ["c1", "c2"]
    assert [(m["role"], m["tool_call_id"], m["content"]) for m in results] == [
        ("tool", "c1", "order A7: paid twice"),
        ("tool", "c2", "refunded A7"),
    ]
    assert_paired(second["messages"])
    for usage in (paused.metadata.usage, done.metadata.usage):
        assert (usage.requests, usage.input_tokens, usage.output_tokens) == ({"step": 1}, 10, 5)
        assert usage.cost == pytest.approx(GPT_4O_MINI_COST)


# gpt-4o-mini at $0.15 / $0.60 per million input / output tokens, for the server's 10 + 5 tokens.
GPT_4O_MINI_COST = 10 * 0.15e-6 + 5 * 0.6e-6


@pytest.mark.parametrize("engine", ["auto", "litellm"])
def test_a_cost_limit_stops_the_turn_over_http(engine: str, run: Any) -> None:
    with FakeOpenAIServer([tool_calls_completion([("c1", "lookup", {"order": "A7"})])]) as server:
        lm = dspy.LM(
            "openai/gpt-4o-mini", api_base=server.base_url, api_key="sk-test", cache=False, num_retries=0, engine=engine
        )
        agent = dspy_imp.ReActV2("ticket -> reply", tools=[lookup], usage_limits=dspy_imp.UsageLimits(cost=4e-6))
        with dspy.context(lm=lm):
            pred = run(agent, ticket="Charged twice for A7.")
        assert len(server.requests) == 1
    meta = pred.metadata
    assert (meta.termination_reason, meta.termination_cause) == ("incomplete", "usage_limit_exceeded")
    assert meta.usage.cost == pytest.approx(GPT_4O_MINI_COST)
