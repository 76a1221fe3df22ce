"""Prompt caching on the wire: where each route's requests mark the prefix, and what the caches report.

The prompts here are long enough to cache (the emulator's caches, ``prompt_cache.py``, store only a
prefix of at least 1,024 tokens), so the usage each request reports is the cache's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from provider_rules import _marked_blocks
from responses import (
    anthropic,
    chat,
    function_call,
    openai_response,
    openrouter,
    output_message,
    reasoning_item,
    reasoning_text,
)
from turns import EARLIER, PARIS, Body, Outcome, Scenario, answered

from dspy_imp._routes.caching import conversation_key

# About 2,500 tokens of question: past every model's minimum cacheable prefix.
BRIEFING = "Weather and time in Paris? " + " ".join(
    f"Note {i}: the traveller lands at terminal {i}." for i in range(220)
)
# Claude Sonnet 4.5's prices, dollars per million tokens: cache writes 1.25x (5m) or 2x (1h), reads 0.1x.
SONNET_45 = {"input": 3.0, "write_5m": 3.75, "write_1h": 6.0, "read": 0.3, "output": 15.0}
TWO_STEPS = [("get_weather", PARIS), ("get_time", PARIS)]
INSTRUCTIONS = "Given the fields `question`, produce the fields `answer`."


def _anthropic_script() -> list[Any]:
    steps = [anthropic(calls=[(f"toolu_c{i}", name, args)]) for i, (name, args) in enumerate(TWO_STEPS)]
    return [*steps, anthropic(text="Sunny and 14:05.")]


def _chat_script() -> list[Any]:
    steps = [chat(calls=[(f"call_c{i}", name, args)]) for i, (name, args) in enumerate(TWO_STEPS)]
    return [*steps, chat("Sunny and 14:05.")]


def _openrouter_script() -> list[Any]:
    signed = [[reasoning_text(f"Step {i}.", f"EqQBCkYIBxgCKkDorc{i}")] for i in range(3)]
    steps = [
        openrouter(calls=[(f"toolu_orc{i}", name, args)], details=signed[i]) for i, (name, args) in enumerate(TWO_STEPS)
    ]
    return [*steps, openrouter("Sunny and 14:05.", details=signed[2])]


def _anthropic_marks(body: Body) -> list[tuple[str, Any]]:
    return [(where, block["cache_control"]) for where, block in _marked_blocks(body)]


def _moving(count: int) -> list[int]:
    """The moving breakpoints of a request of ``count`` messages ending on a user's: the end of the
    request before (two messages back: the reply and its results came since), and the last."""
    return [count - 3, count - 1] if count >= 3 else [count - 1]


def _expect_breakpoints(mark: dict[str, str]) -> Callable[[list[Body], Outcome], None]:
    """Breakpoints on every request at the end of system + tools, the end of the request before (from
    the second request on) and the end of its last message, the last two moving forward with the
    turn; each request reads what the one before wrote."""

    def expect(bodies: list[Body], outcome: Outcome) -> None:
        answered("Sunny and 14:05.")(outcome)
        assert [_anthropic_marks(b) for b in bodies] == [
            [("system[0]", mark)] + [(f"messages[{i}]", mark) for i in _moving(len(b["messages"]))] for b in bodies
        ]
        assert [len(b["messages"]) for b in bodies] == [1, 3, 5]
        calls = outcome.prediction.metadata.usage.calls
        reads = [c.cached_tokens for c in calls]
        writes = [c.cache_write_tokens for c in calls]
        assert reads[0] == 0 and writes[0] > 2000  # the first request writes the whole prefix
        assert reads[1] == writes[0] and reads[2] == writes[0] + writes[1]  # each later one reads it all back
        assert all(0 < w < 200 for w in writes[1:])  # and writes only what it added
        assert all(c.input_tokens >= c.cached_tokens + c.cache_write_tokens for c in calls)
        write_price = SONNET_45["write_1h" if mark.get("ttl") == "1h" else "write_5m"]
        for call in calls:  # the cost at cache prices, on both engines (LiteLLM's price map; DSPy's)
            fresh = call.input_tokens - call.cached_tokens - call.cache_write_tokens
            dollars = fresh * SONNET_45["input"] + call.cache_write_tokens * write_price
            dollars += call.cached_tokens * SONNET_45["read"] + call.output_tokens * SONNET_45["output"]
            assert abs(call.cost - dollars / 1e6) < 1e-12, (call, dollars / 1e6)

    return expect


def _wide_script(width: int, steps: int = 3) -> list[Any]:
    """``steps`` replies of ``width`` parallel calls each (each a new city: no repeated call), then the answer."""
    replies = [
        anthropic(calls=[(f"toolu_w{s}x{j}", "get_weather", {"city": f"City {s}.{j}"}) for j in range(width)])
        for s in range(steps)
    ]
    return [*replies, anthropic(text="Sunny and 14:05.")]


def _expect_wide_steps(width: int, steps: int = 3) -> Callable[[list[Body], Outcome], None]:
    """A step of ``width`` parallel calls adds ``2 * width`` blocks, past Anthropic's 20-block lookback
    from 11 calls on: the breakpoint on the end of the request before still finds what that request
    wrote, so every request reads the whole prefix the one before wrote and writes only its step."""

    def expect(bodies: list[Body], outcome: Outcome) -> None:
        answered("Sunny and 14:05.")(outcome)
        mark = {"type": "ephemeral"}
        assert [len(b["messages"]) for b in bodies] == [1 + 2 * k for k in range(steps + 1)]
        assert [len(m["content"]) for m in bodies[-1]["messages"][1:]] == [width] * (2 * steps)  # calls, results
        assert [_anthropic_marks(b) for b in bodies] == [
            [("system[0]", mark)] + [(f"messages[{i}]", mark) for i in _moving(len(b["messages"]))] for b in bodies
        ]
        for body in bodies[1:]:  # the middle mark is on the last tool result (or the input) of the request before
            before = body["messages"][len(body["messages"]) - 3]["content"]
            assert "cache_control" in before[-1] and all("cache_control" not in b for b in before[:-1])
        calls = outcome.prediction.metadata.usage.calls
        reads = [c.cached_tokens for c in calls]
        writes = [c.cache_write_tokens for c in calls]
        assert reads[0] == 0 and writes[0] > 2000
        assert reads[1:] == [sum(writes[:k]) for k in range(1, steps + 1)]  # each reads all the one before wrote
        assert all(0 < w < 100 * width for w in writes[1:])

    return expect


def _expect_unmarked(bodies: list[Body], outcome: Outcome) -> None:
    """Off: nothing of the cache is sent (OpenAI still caches by itself; Anthropic then caches nothing)."""
    answered("Sunny and 14:05.")(outcome)
    assert all("cache_control" not in str(b) and not any("prompt_cache" in k for k in b) for b in bodies)
    if "system" in bodies[0]:
        assert all((c.cached_tokens, c.cache_write_tokens) == (0, 0) for c in outcome.prediction.metadata.usage.calls)


def _key_for(question: str, model: str = "openai/gpt-4o") -> str:
    return conversation_key(model, INSTRUCTIONS, {"question": question})


def _expect_key(
    question: str, retention: str | None = None, model: str = "openai/gpt-4o"
) -> Callable[[list[Body], Outcome], None]:
    """One ``prompt_cache_key`` on every request, from the conversation's first question (the same
    on every turn of it); OpenAI's automatic cache reads the prefix back from the second request on."""

    def expect(bodies: list[Body], outcome: Outcome) -> None:
        answered("Sunny and 14:05.")(outcome)
        assert [b.get("prompt_cache_key") for b in bodies] == [_key_for(question, model)] * 3
        assert [b.get("prompt_cache_retention") for b in bodies] == [retention] * 3
        assert all("cache_control" not in str(b) for b in bodies)
        reads = [c.cached_tokens for c in outcome.prediction.metadata.usage.calls]
        assert reads[0] == 0 and 1024 <= reads[1] <= reads[2] and all(r % 128 == 0 for r in reads)

    return expect


def _expect_openrouter_marks(bodies: list[Body], outcome: Outcome) -> None:
    """OpenRouter's Claude: the marks on content parts (it passes them to Anthropic), no OpenAI key;
    the end of the request before is the last tool result of the step before (or the user's input)."""
    answered("Sunny and 14:05.")(outcome)
    mark = {"type": "ephemeral"}
    for body in bodies:
        messages = body["messages"]
        marked = [i for i, m in enumerate(messages) if "cache_control" in str(m)]
        assert marked == [0, *(1 + i for i in _moving(len(messages) - 1))]  # the system message, then as on Anthropic
        for index in marked:
            content = messages[index]["content"]
            assert isinstance(content, list) and content[-1]["cache_control"] == mark
            assert all("cache_control" not in part for part in content[:-1])
        assert not any("prompt_cache" in k for k in body)


def _expect_forced_submit(keyed: bool) -> Callable[[list[Body], Outcome], None]:
    """The forced submit names ``submit`` in ``tool_choice``: on Claude the cache reads the messages
    again (a bust, ``"tool_choice_changed"``); OpenAI's prefix cache reads the turn back."""

    def expect(bodies: list[Body], outcome: Outcome) -> None:
        meta = outcome.prediction.metadata
        assert (meta.termination_reason, outcome.prediction.answer) == ("forced_submit", "Sunny.")
        calls = meta.usage.calls
        if keyed:
            assert bodies[1]["tool_choice"] == {"type": "tool", "name": "submit"}
            assert meta.cache_busts == ({"request": 1, "kind": "forced_submit", "reason": "tool_choice_changed"},)
            # the tools and system (under the 1,024-token minimum) were never cached; the messages
            # written under "auto" are not read under the named choice, so they are written again
            assert calls[1].cached_tokens == 0 and calls[1].cache_write_tokens > calls[0].cache_write_tokens > 2000
        else:
            assert bodies[1]["tool_choice"] == {"type": "function", "function": {"name": "submit"}}
            assert meta.cache_busts == ()
            assert calls[1].cached_tokens > 2000

    return expect


def _forced(protocol: str) -> list[Any]:
    if protocol == "anthropic":
        return [anthropic(calls=[("toolu_c0", *TWO_STEPS[0])]), anthropic(calls=[("toolu_s1", "submit", SUNNY)])]
    return [chat(calls=[("call_c0", *TWO_STEPS[0])]), chat(calls=[("call_s1", "submit", SUNNY)])]


def _responses_script() -> list[Any]:
    steps = [
        openai_response(reasoning_item(f"rs_{i}", None), function_call(f"call_c{i}", name, args))
        for i, (name, args) in enumerate(TWO_STEPS)
    ]
    return [*steps, openai_response(reasoning_item("rs_2", None), output_message("Sunny and 14:05."))]


def _expect_responses_cache(bodies: list[Body], outcome: Outcome) -> None:
    """The Responses API: one key on every request, and each later request reads the turn back
    (``usage.input_tokens_details.cached_tokens``), priced at the cache rate."""
    answered("Sunny and 14:05.")(outcome)
    assert {b.get("prompt_cache_key") for b in bodies} == {
        conversation_key("openai/gpt-5-mini", INSTRUCTIONS, {"question": BRIEFING})
    }
    calls = outcome.prediction.metadata.usage.calls
    reads = [c.cached_tokens for c in calls]
    assert reads[0] == 0 and all(r > 2000 and r % 128 == 0 for r in reads[1:])
    assert all(c.input_tokens > c.cached_tokens and c.output_tokens > 0 for c in calls)  # both engines
    assert all(c.reasoning_tokens == 40 for c in calls)
    assert calls[1].cost < calls[0].cost  # gpt-5-mini reads at a tenth of its input price


SUNNY = {"answer": "Sunny."}
LONG = {"question": BRIEFING}

CACHE: list[Scenario] = [
    *(
        Scenario(  # wide steps: 12 and 30 parallel calls a reply
            f"anthropic_cache_wide_steps_{width}",
            "anthropic",
            _wide_script(width),
            _expect_wide_steps(width),
            lm={"reasoning_effort": None},
            inputs=LONG,
        )
        for width in (12, 30)
    ),
    Scenario(
        "anthropic_cache_breakpoints_move_forward",
        "anthropic",
        _anthropic_script(),
        _expect_breakpoints({"type": "ephemeral"}),
        lm={"reasoning_effort": None},
        inputs=LONG,
    ),
    Scenario(  # a lifetime asked for per call
        "anthropic_cache_one_hour_per_call",
        "anthropic",
        _anthropic_script(),
        _expect_breakpoints({"type": "ephemeral", "ttl": "1h"}),
        lm={"reasoning_effort": None},
        inputs={**LONG, "prompt_cache": "1h"},
    ),
    Scenario(
        "anthropic_cache_off",
        "anthropic",
        _anthropic_script(),
        _expect_unmarked,
        lm={"reasoning_effort": None},
        agent={"prompt_cache": False},
        inputs=LONG,
    ),
    Scenario(  # the program's off, this call's on
        "anthropic_cache_on_per_call",
        "anthropic",
        _anthropic_script(),
        _expect_breakpoints({"type": "ephemeral"}),
        lm={"reasoning_effort": None},
        agent={"prompt_cache": False},
        inputs={**LONG, "prompt_cache": True},
    ),
    Scenario(  # one step, then the step limit's forced submit
        "anthropic_cache_forced_submit_rereads_messages",
        "anthropic",
        _forced("anthropic"),
        _expect_forced_submit(keyed=True),
        lm={"reasoning_effort": None},
        agent={"finish": "submit", "max_iters": 1},
        inputs=LONG,
    ),
    Scenario(
        "openai_cache_forced_submit_reads_the_turn",
        "openai",
        _forced("openai"),
        _expect_forced_submit(keyed=False),
        agent={"finish": "submit", "max_iters": 1},
        inputs=LONG,
    ),
    Scenario(
        "responses_cache_reads_the_turn",
        "responses",
        _responses_script(),
        _expect_responses_cache,
        lm={"model_type": "responses"},
        inputs=LONG,
    ),
    Scenario("openai_cache_key_stable", "openai", _chat_script(), _expect_key(BRIEFING), inputs=LONG),
    Scenario(
        "openai_cache_extended_retention",
        "openai",
        _chat_script(),
        _expect_key(BRIEFING, "24h", "openai/gpt-4.1"),
        model="openai/gpt-4.1",  # a model that takes it (``model_facts``: gpt-4o refuses it)
        agent={"prompt_cache": "24h"},
        inputs=LONG,
    ),
    Scenario(  # gpt-4o-mini refuses "24h" retention: the key alone goes out
        "openai_cache_no_retention_where_refused",
        "openai",
        _chat_script(),
        _expect_key(BRIEFING, model="openai/gpt-4o-mini"),
        model="openai/gpt-4o-mini",
        agent={"prompt_cache": "24h"},
        inputs=LONG,
    ),
    Scenario(  # a later turn of a conversation: the key of its first question
        "openai_cache_key_across_turns",
        "openai",
        _chat_script(),
        _expect_key(str(EARLIER[0]["question"])),
        inputs={"question": BRIEFING},
        history=EARLIER,
    ),
    Scenario(
        "openai_cache_off_per_call",
        "openai",
        _chat_script(),
        _expect_unmarked,
        inputs={**LONG, "prompt_cache": False},
    ),
    Scenario(
        "openrouter_claude_cache_marks",
        "openrouter",
        _openrouter_script(),
        _expect_openrouter_marks,
        inputs=LONG,
    ),
]
