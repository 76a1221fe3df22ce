"""The bench server reports usage as the providers do: Anthropic's breakpoints, OpenAI's and DeepSeek's prefixes."""

from __future__ import annotations

import json
import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import litellm

from benchmarks import caches, costs, messages_api, report_cost
from benchmarks.server import Script, _counter

MARK = {"type": "ephemeral"}
LONG = "where to look next " * 400  # about 1,600 tokens


def _tools(marked: bool = True) -> list[dict]:
    tool = {"name": "look", "description": LONG, "input_schema": {"type": "object"}}
    return [{**tool, "cache_control": MARK} if marked else tool]


def _turn(steps: int) -> list[dict]:
    """A Messages history of ``steps`` tool steps, the last block marked (a breakpoint that moves forward)."""
    messages: list[dict] = [{"role": "user", "content": [{"type": "text", "text": "Where is the thing?"}]}]
    for i in range(steps):
        messages.append(
            {"role": "assistant", "content": [{"type": "tool_use", "id": f"t{i}", "name": "look", "input": {}}]}
        )
        messages.append({"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"t{i}", "content": "no"}]})
    messages[-1]["content"][-1]["cache_control"] = MARK
    return messages


def _body(steps: int, model: str = "claude-sonnet-4-5", **extra) -> dict:
    return {"model": model, "system": "Find the thing.", "tools": _tools(), "messages": _turn(steps), **extra}


def _total(usage: dict) -> int:
    return usage["input_tokens"] + usage["cache_creation_input_tokens"] + usage["cache_read_input_tokens"]


def test_a_breakpoint_writes_its_prefix_and_the_next_request_reads_it():
    cache = caches.AnthropicCache.for_model(_counter(), "claude-sonnet-4-5")
    first, second, third = (cache.usage(_body(n)) for n in (0, 1, 2))

    assert first["cache_read_input_tokens"] == 0 and first["input_tokens"] == 0
    assert first["cache_creation_input_tokens"] == _total(first) > caches.ANTHROPIC_MINIMUM["claude-sonnet-4-5"]
    assert second["cache_read_input_tokens"] == _total(first)  # the first request's whole prefix
    assert second["cache_creation_input_tokens"] == _total(second) - _total(first)
    assert third["cache_read_input_tokens"] == _total(second) and third["input_tokens"] == 0


def test_a_new_tool_choice_or_thinking_setting_rereads_the_messages_but_not_the_tools_and_system():
    steps = {"tool_choice": {"type": "auto"}, "thinking": {"type": "enabled", "budget_tokens": 2048}}
    for forced in ({"tool_choice": {"type": "tool", "name": "submit"}}, {"tool_choice": {"type": "auto"}}):
        cache = caches.AnthropicCache.for_model(_counter(), "claude-sonnet-4-5")
        first = cache.usage(_body(1, **steps))  # the tools (marked) and the first step, written
        tools = caches.AnthropicCache.for_model(_counter(), "claude-sonnet-4-5").usage({"tools": _tools(), **forced})
        again = cache.usage(_body(2, **forced))  # a forced submit (no thinking), or thinking turned off
        assert first["cache_creation_input_tokens"] == _total(first)
        assert again["cache_read_input_tokens"] == _total(tools) < _total(first)
    same = caches.AnthropicCache.for_model(_counter(), "claude-sonnet-4-5")
    first = same.usage(_body(1, **steps))
    assert same.usage(_body(2, **steps))["cache_read_input_tokens"] == _total(first)


def test_a_request_with_tools_pays_anthropics_tool_use_system_prompt_by_its_tool_choice():
    count = _counter()
    bare = {"model": "claude-sonnet-4-5", "messages": _turn(1)}
    bare["messages"][-1]["content"][-1].pop("cache_control")  # no breakpoint: every token is input
    blocks = sum(count(text) for text, _ in caches.anthropic_blocks(bare))
    assert caches.AnthropicCache.for_model(count, "claude-sonnet-4-5").usage(bare)["input_tokens"] == blocks

    tools = _tools(marked=False)
    listed = sum(count(text) for text, _ in caches.anthropic_blocks({**bare, "tools": tools}))
    for choice, extra in ({"type": "auto"}, 346), ({"type": "any"}, 313), ({"type": "tool", "name": "look"}, 313):
        usage = caches.AnthropicCache.for_model(count, "claude-sonnet-4-5").usage(
            {**bare, "tools": tools, "tool_choice": choice}
        )
        assert usage == {"input_tokens": listed + extra, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}


def test_below_the_model_minimum_nothing_is_written_and_haiku_needs_more_than_sonnet():
    small = {"model": "claude-sonnet-4-5", "messages": _turn(1)}
    sonnet = caches.AnthropicCache.for_model(_counter(), "claude-sonnet-4-5")
    assert sonnet.usage(small)["cache_creation_input_tokens"] == 0 and not sonnet.entries

    haiku = caches.AnthropicCache.for_model(_counter(), "claude-haiku-4-5-20251001")
    assert haiku.minimum == 4096
    usage = haiku.usage(_body(0, "claude-haiku-4-5"))  # about 1,600 tokens: enough for Sonnet, not for Haiku
    assert usage["cache_creation_input_tokens"] == 0 and usage["input_tokens"] == _total(usage)


def test_a_read_looks_back_twenty_blocks_from_a_breakpoint_and_no_further():
    near = caches.AnthropicCache.for_model(_counter(), "claude-sonnet-4-5")
    near.usage(_body(0))
    assert near.usage(_body(9))["cache_read_input_tokens"] > 0  # 18 blocks on

    far = caches.AnthropicCache.for_model(_counter(), "claude-sonnet-4-5")
    far.usage({**_body(0), "tools": _tools(marked=False)})  # only the first message's block is marked
    assert far.usage({**_body(11), "tools": _tools(marked=False)})["cache_read_input_tokens"] == 0  # 22 blocks on


def test_a_top_level_cache_control_marks_the_last_block_and_five_breakpoints_are_refused():
    cache = caches.AnthropicCache.for_model(_counter(), "claude-sonnet-4-5")
    body = {"model": "claude-sonnet-4-5", "tools": _tools(marked=False), "messages": _turn(0), "cache_control": MARK}
    body["messages"][-1]["content"][-1].pop("cache_control")
    first = cache.usage(body)
    assert first["cache_creation_input_tokens"] == _total(first) and first["input_tokens"] == 0
    assert cache.usage(body)["cache_read_input_tokens"] == _total(first)

    crowded = _body(4)
    for message in crowded["messages"][1:5]:
        message["content"][-1]["cache_control"] = MARK
    status, reply = Script("steps", steps=9).respond(json.dumps(crowded).encode(), "messages")
    assert status == 400 and reply["type"] == "error" and "cache_control" in reply["error"]["message"]


def test_openai_caches_from_1024_tokens_in_128_token_steps_and_deepseek_in_64_token_units():
    script = Script("steps", steps=3)
    tools = [{"type": "function", "function": {"name": "look"}}]
    messages = [{"role": "user", "content": LONG}]
    usages = []
    for _ in range(3):
        _, reply = script.respond(json.dumps({"model": "gpt-4o-mini", "messages": messages, "tools": tools}).encode())
        usages.append(reply["usage"])
        messages = [*messages, reply["choices"][0]["message"], {"role": "tool", "tool_call_id": "c", "content": "no"}]

    first, second = usages[0], usages[1]
    assert first["prompt_tokens_details"]["cached_tokens"] == 0
    cached = second["prompt_tokens_details"]["cached_tokens"]
    assert cached == first["prompt_tokens"] - (first["prompt_tokens"] - 1024) % 128 and cached >= 1024
    hit = script.deepseek[1]["prompt_cache_hit_tokens"]
    assert hit == first["prompt_tokens"] - first["prompt_tokens"] % 64
    assert script.deepseek[1]["prompt_cache_miss_tokens"] == second["prompt_tokens"] - hit
    assert caches.openai_cache(_counter()).cached(1023) == 0


def test_a_messages_request_is_decided_like_a_chat_one_and_answered_in_messages_blocks():
    body = _body(1, tool_choice={"type": "any"})
    view = messages_api.chat_view(body)
    assert [m["role"] for m in view["messages"]] == ["system", "user", "assistant", "tool"]
    assert view["messages"][2]["tool_calls"][0]["function"]["name"] == "look"
    assert view["tool_choice"] == "required" and view["tools"] == [{"type": "function", "function": {"name": "look"}}]

    status, reply = Script("steps", steps=3).respond(json.dumps(body).encode(), "messages")
    assert status == 200 and reply["stop_reason"] == "tool_use"
    assert reply["content"] == [{"type": "tool_use", "id": "call_1", "name": "look", "input": {"where": "place 1"}}]
    assert set(reply["usage"]) >= {
        "input_tokens",
        "cache_read_input_tokens",
        "cache_creation_input_tokens",
        "output_tokens",
    }

    stream = messages_api.events(reply).decode()
    names = [line.split(": ", 1)[1] for line in stream.splitlines() if line.startswith("event: ")]
    assert names == [
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]


def test_dollars_use_the_price_map_with_and_without_caching():
    stats = {
        "usage": [
            {"input_tokens": 10, "cache_creation_input_tokens": 2000, "cache_read_input_tokens": 0, "output_tokens": 5},
            None,  # a failed request is not billed
            {
                "input_tokens": 10,
                "cache_creation_input_tokens": 50,
                "cache_read_input_tokens": 2000,
                "output_tokens": 5,
            },
        ],
        "deepseek": [None, None, None],
    }
    counts = costs.summed(stats)["anthropic"]
    assert counts == {"input": 20, "write": 2050, "read": 2000, "output": 10}
    price = litellm.model_cost["claude-sonnet-4-5"]
    expected = (
        20 * price["input_cost_per_token"]
        + 2050 * price["cache_creation_input_token_cost"]
        + 2000 * price["cache_read_input_token_cost"]
        + 10 * price["output_cost_per_token"]
    )
    assert costs.dollars(counts, "claude-sonnet-4-5") == expected
    uncached = costs.dollars(counts, "claude-sonnet-4-5", cached=False)
    assert uncached == 4070 * price["input_cost_per_token"] + 10 * price["output_cost_per_token"] > expected


def test_the_cost_targets_compare_ours_with_and_without_caching_and_with_every_peer():
    def loop(cached: float, uncached: float, scenarios: float | None) -> dict:
        turn = {
            "answered": True,
            "requests": 101,
            "cached": cached,
            "uncached": uncached,
            "connections": 1,
            "opened": 1,
        }
        return {"steps:100": turn, "scenarios_cached": scenarios, "scenarios_uncached": scenarios}

    cost = {
        "long": [100],
        "prices": {
            "Claude Sonnet 4.5": {
                "loops": {"dspy_imp": loop(0.2, 1.0, 0.003), "pydantic-ai": loop(0.25, 1.0, 0.004)},
            },
            "OpenAI gpt-4o-mini": {
                "loops": {"dspy_imp": loop(0.1, 0.1, 0.002), "openai-agents": loop(0.1, 0.1, 0.001)}
            },
        },
    }
    targets = report_cost.targets(cost)
    assert targets["saving"]["ratio"] == 0.2 and targets["saving"]["met"]
    assert targets["below_peer"] == {"ours": 0.2, "peer": 0.25, "met": True}
    assert targets["scenarios:Claude Sonnet 4.5"]["met"] and not targets["scenarios:OpenAI gpt-4o-mini"]["met"]


def test_the_later_tool_use_table_bills_496_under_auto_and_588_under_a_forced_choice():
    count = _counter()
    bare = {"model": "claude-sonnet-4-5", "messages": _turn(1), "tools": _tools(marked=False)}
    bare["messages"][-1]["content"][-1].pop("cache_control")
    listed = sum(count(text) for text, _ in caches.anthropic_blocks(bare))
    for choice, first, later in (({"type": "auto"}, 346, 496), ({"type": "any"}, 313, 588)):
        body = {**bare, "tool_choice": choice}
        now = caches.AnthropicCache.for_model(count, "claude-sonnet-4-5").usage(body)
        then = caches.AnthropicCache.for_model(count, "claude-sonnet-4-5", caches.TOOL_USE_SYSTEM_PROMPT_LATER)
        assert now["input_tokens"] == listed + first
        assert then.usage(body)["input_tokens"] == listed + later


def test_output_tokens_count_what_the_model_wrote_not_the_chat_json():
    script = Script("steps", 1)
    call = {"id": "call_0", "type": "function", "function": {"name": "look", "arguments": '{"where":"shelf"}'}}
    reply = {"choices": [{"message": {"role": "assistant", "content": "Let me look.", "tool_calls": [call]}}]}
    wrote = sum(script.count(t) for t in ("Let me look.", "look", '{"where":"shelf"}'))
    assert script._output(reply) == wrote
    assert wrote < script.count(json.dumps(reply["choices"][0]["message"], separators=(",", ":")))
