"""Anthropic's ``pause_turn`` over HTTP, on DSPy's native engine, both drivers.

With server tools Anthropic may end a reply with ``stop_reason: "pause_turn"``: it paused a
long-running turn of its own tool loop. Anthropic's server tools docs: send the response back as the
assistant's message, unchanged, in a request that is otherwise the same, and Claude goes on. No
public recording of a paused reply was found; the paused body here is the recorded web search's
blocks (``hosted_recordings``: pydantic-ai's live ``web_search_20250305`` recording) cut where a
pause falls, after the search result, in the documented shape (``stop_reason: "pause_turn"``), and
the continuation is the rest of that reply.

What the turn must do: send the continuation at once, carrying the paused content byte for byte as
the request's last message; count it as a request (usage, limits, the deadline) but not as a step;
record one step holding every block served, in order, which goes back as one assistant message on
the next request; end ``incomplete`` with a clear cause when the provider pauses past the budget.
"""

from __future__ import annotations

import json
from typing import Any

import dspy
import pytest
from emulator import Emulator, Scripted
from hosted_recordings import CITATION, CITED_TEXT, SEARCH_RESULT, SERVER_TOOL_USE, USAGE
from provider_rules import assert_accepted

import dspy_imp
from dspy_imp.hosted import WebSearch
from dspy_imp.testing import FakeClock

pytestmark = pytest.mark.block_network(allowed_hosts=[r"127\.0\.0\.1$"])

MODEL = "anthropic/claude-sonnet-4-5"
QUESTION = "What happened on September 29, and the weather in Geneva?"
ANSWER = "CERN was founded on September 29, 1954."


def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"Sunny in {city}."


def _use(call_id: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"type": "tool_use", "id": call_id, "name": name, "input": args}


def _body(content: list[dict[str, Any]], stop: str, usage: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "id": "msg_011CfY3xKWz4wdu1A1if4oLf",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5-20250929",
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": usage or {"input_tokens": 120, "output_tokens": 20},
    }


PAUSED_CONTENT = [SERVER_TOOL_USE, SEARCH_RESULT]
PAUSED = Scripted(200, _body(PAUSED_CONTENT, "pause_turn", USAGE))
WEATHER = _use("toolu_01Weather", "get_weather", {"city": "Geneva"})
GONE_ON = Scripted(
    200, _body([CITED_TEXT, WEATHER], "tool_use", {"input_tokens": 10400, "output_tokens": 40, "server_tool_use": {}})
)
SUBMIT = Scripted(200, _body([_use("toolu_02Submit", "submit", {"answer": ANSWER})], "tool_use"))


def _lm(emulator: Emulator) -> dspy.LM:
    return dspy.LM(
        MODEL,
        api_base=emulator.base_url + "/v1",
        api_key="sk-test",
        cache=False,
        num_retries=0,
        reasoning_effort=None,  # the recorded blocks hold no thinking block: a turn without thinking
    )


def _agent(**options: Any) -> dspy_imp.ReActV2:
    options.setdefault("finish", "submit")
    return dspy_imp.ReActV2("question -> answer", tools=[WebSearch(max_uses=3), get_weather], **options)


def _same_bytes(sent: Any, served: Any) -> None:
    assert json.dumps(sent, sort_keys=False) == json.dumps(served, sort_keys=False)


def test_a_paused_reply_goes_back_at_once_and_the_turn_goes_on(run: Any) -> None:
    with Emulator([PAUSED, GONE_ON, SUBMIT]) as emulator, dspy.context(lm=_lm(emulator)):
        pred = run(_agent(max_iters=2), question=QUESTION)
    assert pred.metadata.termination_reason == "submit", pred.metadata.termination_error
    assert pred.answer == ANSWER
    first, continued, third = (r.body for r in emulator.requests)
    # the continuation: the same request, then the paused reply as the assistant's last message, as served
    assert continued == {**first, "messages": [*first["messages"], {"role": "assistant", "content": PAUSED_CONTENT}]}
    _same_bytes(continued["messages"][-1]["content"], PAUSED_CONTENT)
    # one step (max_iters=2 leaves the submit its step): its assistant message holds every block served, in order
    assistant = [m for m in third["messages"] if m["role"] == "assistant"]
    assert len(assistant) == 1
    _same_bytes(assistant[0]["content"], [*PAUSED_CONTENT, CITED_TEXT, WEATHER])
    assert third["messages"][-1]["content"][0]["tool_use_id"] == "toolu_01Weather"
    for request in emulator.requests:
        assert_accepted("anthropic", request.body, request.path)
    recorded = pred.metadata.history.messages[0]
    assert recorded["reasoning_details"] == [
        {
            "type": "anthropic_served",
            "content": [*PAUSED_CONTENT, CITED_TEXT, WEATHER],
            "server_tool_use": USAGE["server_tool_use"],  # the counts of both replies, summed
        }
    ]
    assert pred.metadata.citations == ({**CITATION, "cited_for": CITED_TEXT["text"]},)
    usage = pred.metadata.usage
    assert usage.requests == {"step": 3}
    assert [c.hosted_calls for c in usage.calls] == [USAGE["server_tool_use"], {}, {}]
    assert usage.cost == pytest.approx(0.01)  # the one search, at $10 per 1,000


def test_the_continuation_counts_against_the_request_limit(run: Any) -> None:
    agent = _agent(usage_limits=dspy_imp.UsageLimits(requests=1))
    with Emulator([PAUSED, GONE_ON]) as emulator, dspy.context(lm=_lm(emulator)):
        pred = run(agent, question=QUESTION)
    assert len(emulator.requests) == 1  # the limit is reached: the continuation does not leave
    assert pred.metadata.termination_reason == "incomplete"
    assert pred.metadata.termination_cause == "usage_limit_exceeded"
    step = pred.metadata.history.messages[0]  # what the provider served is kept
    assert step["reasoning_details"][-1]["content"] == PAUSED_CONTENT


def test_a_provider_that_pauses_forever_ends_the_turn_once_the_budget_is_spent(run: Any) -> None:
    with Emulator([PAUSED] * 4) as emulator, dspy.context(lm=_lm(emulator)):
        pred = run(_agent(max_iters=2), question=QUESTION)
    assert len(emulator.requests) == 3  # the step, then at most max_iters continuations
    assert pred.metadata.termination_reason == "incomplete"
    assert pred.metadata.termination_cause == "max_iters"
    assert pred.metadata.termination_error == {
        "initial": "PausedTurn: the provider paused its reply 3 times in a row (pause_turn); a step goes on at most "
        "max_iters=2 times"
    }
    last = emulator.requests[-1].body["messages"][-1]
    assert last == {"role": "assistant", "content": PAUSED_CONTENT * 2}  # each pause goes on with all before it
    assert pred.metadata.usage.total_requests == 3
    assert pred.metadata.history.messages[0]["reasoning_details"][-1]["content"] == PAUSED_CONTENT * 3


def test_a_saved_history_sends_the_joined_reply_back_on_a_later_turn(run: Any) -> None:
    later_submit = Scripted(200, _body([_use("toolu_03Submit", "submit", {"answer": "Still sunny."})], "tool_use"))
    with Emulator([PAUSED, GONE_ON, SUBMIT, later_submit]) as emulator, dspy.context(lm=_lm(emulator)):
        first = run(_agent(), question=QUESTION)
        saved = json.loads(json.dumps(first.metadata.history.model_dump()))
        later = run(_agent(), question="And now?", history=dspy.History(**saved))
    assert later.metadata.termination_reason == "submit", later.metadata.termination_error
    resumed = emulator.requests[3].body
    assistant = next(m for m in resumed["messages"] if m["role"] == "assistant")
    _same_bytes(assistant["content"], [*PAUSED_CONTENT, CITED_TEXT, WEATHER])
    assert_accepted("anthropic", resumed, emulator.requests[3].path)


def test_a_deadline_passed_while_the_provider_paused_keeps_the_continuation_from_leaving(run: Any) -> None:
    clock = FakeClock()
    slow_pause = Scripted(200, PAUSED.body, shaped=lambda request: (clock.advance(30), PAUSED.body)[1])
    with (
        Emulator([slow_pause, GONE_ON]) as emulator,
        clock.running(),
        dspy.context(lm=_lm(emulator)),
        dspy_imp.deadline(seconds=10),
    ):
        pred = run(_agent(), question=QUESTION)
    assert len(emulator.requests) == 1  # the paused reply came back past the deadline: nothing more leaves
    assert pred.metadata.termination_reason == "incomplete"
    assert pred.metadata.termination_cause == "deadline_exceeded"
    assert pred.metadata.history.messages[0]["reasoning_details"][-1]["content"] == PAUSED_CONTENT
