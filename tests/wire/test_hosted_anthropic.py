"""Anthropic's server tools (``dspy_imp.hosted``) over HTTP, on DSPy's native engine, both drivers.

The replies carry blocks from a third-party recording (``hosted_recordings``): a web search's
``server_tool_use`` and ``web_search_tool_result`` (encrypted content) and a text block with its
citation. What the turn must do: send the tool with its options, carry the served blocks back byte
for byte on the next request of the turn and of a later turn (after ``dump_history``/``load_history``
through JSON), put the citations in the metadata, count and price the searches, and refuse a route
without the tool before any request.
"""

from __future__ import annotations

import json
from typing import Any

import dspy
import pytest
from emulator import Emulator, Scripted
from hosted_recordings import CITATION, CITED_TEXT, SEARCH_ERROR, SEARCH_RESULT, SERVER_TOOL_USE, USAGE
from provider_rules import assert_accepted

import dspy_imp
from dspy_imp.hosted import CodeExecution, WebFetch, WebSearch

pytestmark = pytest.mark.block_network(allowed_hosts=[r"127\.0\.0\.1$"])

MODEL = "anthropic/claude-sonnet-4-5"
SERVED = [SERVER_TOOL_USE, SEARCH_RESULT, CITED_TEXT]


def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"Sunny in {city}."


def _reply(content: list[dict[str, Any]], usage: dict[str, Any] | None = None) -> Scripted:
    calls = any(b["type"] == "tool_use" for b in content)
    body = {
        "id": "msg_011CfY3xKWz4wdu1A1if4oLf",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5-20250929",
        "content": content,
        "stop_reason": "tool_use" if calls else "end_turn",
        "stop_sequence": None,
        "usage": usage or {"input_tokens": 120, "output_tokens": 20},
    }
    return Scripted(200, body)


def _use(call_id: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"type": "tool_use", "id": call_id, "name": name, "input": args}


SEARCH_THEN_WEATHER = _reply([*SERVED, _use("toolu_01Weather", "get_weather", {"city": "Geneva"})], USAGE)
ANSWER = "CERN was founded on September 29, 1954."
SUBMIT = _reply([_use("toolu_02Submit", "submit", {"answer": ANSWER})])
TEXT = _reply([{"type": "text", "text": ANSWER}])


def _agent(*tools: Any, finish: str = "submit") -> dspy_imp.ReActV2:
    return dspy_imp.ReActV2("question -> answer", tools=[WebSearch(max_uses=3), get_weather, *tools], finish=finish)


def _lm(emulator: Emulator, engine: str = "auto", model: str = MODEL) -> dspy.LM:
    return dspy.LM(
        model,
        api_base=emulator.base_url + "/v1",
        api_key="sk-test",
        cache=False,
        engine=engine,
        num_retries=0,
        reasoning_effort=None,  # the recorded replies hold no thinking block: a turn without thinking
    )


def _assistant(body: dict[str, Any], index: int = 0) -> dict[str, Any]:
    return [m for m in body["messages"] if m["role"] == "assistant"][index]


def _same_bytes(sent: Any, served: Any) -> None:
    assert json.dumps(sent, sort_keys=False) == json.dumps(served, sort_keys=False)


@pytest.mark.parametrize(("finish", "last", "ending"), [("submit", SUBMIT, "submit"), ("auto", TEXT, "answered")])
def test_a_hosted_search_a_function_tool_and_an_answer_carry_the_served_blocks(
    run: Any, finish: str, last: Scripted, ending: str
) -> None:
    with Emulator([SEARCH_THEN_WEATHER, last]) as emulator, dspy.context(lm=_lm(emulator)):
        pred = run(_agent(finish=finish), question="What happened on September 29, and the weather in Geneva?")
    assert pred.metadata.termination_reason == ending, pred.metadata.termination_error
    assert pred.answer == ANSWER
    first, second = (r.body for r in emulator.requests)
    assert {"type": "web_search_20250305", "name": "web_search", "max_uses": 3} in first["tools"]
    assert any(t.get("name") == "get_weather" for t in first["tools"])
    _same_bytes(_assistant(second)["content"], [*SERVED, _use("toolu_01Weather", "get_weather", {"city": "Geneva"})])
    results = second["messages"][-1]["content"]
    assert results[0]["type"] == "tool_result" and results[0]["tool_use_id"] == "toolu_01Weather"
    for path, body in [(r.path, r.body) for r in emulator.requests]:
        assert_accepted("anthropic", body, path)
    assert pred.metadata.citations == ({**CITATION, "cited_for": CITED_TEXT["text"]},)


def test_hosted_searches_are_counted_and_priced_from_the_usage_block(run: Any) -> None:
    with Emulator([SEARCH_THEN_WEATHER, SUBMIT]) as emulator, dspy.context(lm=_lm(emulator)):
        pred = run(_agent(), question="What happened on September 29?")
    usage = pred.metadata.usage
    assert usage.hosted_calls == {"web_search_requests": 1, "web_fetch_requests": 0}
    assert usage.calls[0].hosted_calls == {"web_search_requests": 1, "web_fetch_requests": 0}
    assert usage.calls[1].hosted_calls == {}
    assert usage.total_hosted_calls == 1
    assert (usage.calls[0].input_tokens, usage.calls[0].output_tokens) == (10195, 106)  # the recorded usage block
    assert usage.calls[1].cost is None  # DSPy's native engine prices no tokens here: the search fee is the cost
    assert usage.calls[0].cost == pytest.approx(0.01)  # $10 per 1,000 searches (Anthropic's pricing page)
    assert usage.cost == pytest.approx(0.01)


def test_a_usage_limit_counts_hosted_calls(run: Any) -> None:
    agent = dspy_imp.ReActV2(
        "question -> answer",
        tools=[WebSearch(), get_weather],
        finish="submit",
        usage_limits=dspy_imp.UsageLimits(hosted_calls=1),
    )
    with Emulator([SEARCH_THEN_WEATHER, SUBMIT]) as emulator, dspy.context(lm=_lm(emulator)):
        pred = run(agent, question="What happened on September 29?")
    assert len(emulator.requests) == 1  # the search used the one hosted call: no request leaves after it
    assert pred.metadata.termination_reason == "incomplete"
    assert pred.metadata.termination_cause == "usage_limit_exceeded"


def test_a_saved_history_sends_the_served_blocks_back_on_a_later_turn(run: Any) -> None:
    answer = _reply([_use("toolu_03Submit", "submit", {"answer": "Still sunny."})])
    with Emulator([SEARCH_THEN_WEATHER, SUBMIT, answer]) as emulator, dspy.context(lm=_lm(emulator)):
        agent = _agent()
        first = run(agent, question="What happened on September 29?")
        saved = json.loads(json.dumps(first.metadata.history.model_dump()))  # through JSON, as a store keeps it
        later = run(_agent(), question="And now?", history=dspy.History(**saved))
    assert later.metadata.termination_reason in ("answered", "submit"), later.metadata.termination_error
    resumed = emulator.requests[2].body
    _same_bytes(_assistant(resumed)["content"][:3], SERVED)
    assert {"type": "web_search_20250305", "name": "web_search", "max_uses": 3} in resumed["tools"]
    assert_accepted("anthropic", resumed, emulator.requests[2].path)


def test_a_provider_side_tool_error_is_an_observation(run: Any) -> None:
    failed = _reply([{**SERVER_TOOL_USE, "id": SEARCH_ERROR["tool_use_id"]}, SEARCH_ERROR, *SUBMIT.body["content"]])
    with Emulator([failed]) as emulator, dspy.context(lm=_lm(emulator)):
        pred = run(_agent(), question="What happened on September 29?")
    assert pred.metadata.termination_reason == "submit", pred.metadata.termination_error
    recorded = pred.metadata.history.messages[0]["reasoning_details"]
    assert recorded[-1]["content"][1] == SEARCH_ERROR  # kept as served, for the next request


def test_code_execution_and_web_fetch_send_their_versions_and_betas(run: Any) -> None:
    agent = dspy_imp.ReActV2("question -> answer", tools=[CodeExecution(), WebFetch(max_uses=2)], finish="submit")
    with Emulator([SUBMIT]) as emulator, dspy.context(lm=_lm(emulator)):
        run(agent, question="Fetch https://example.com and count its words.")
    sent = emulator.requests[0]
    assert {"type": "code_execution_20250825", "name": "code_execution"} in sent.body["tools"]
    assert {"type": "web_fetch_20250910", "name": "web_fetch", "max_uses": 2} in sent.body["tools"]
    betas = (sent.beta or "").split(",")
    assert "code-execution-2025-08-25" in betas and "web-fetch-2025-09-10" in betas
    assert "code-execution-2025-05-22" not in betas


@pytest.mark.parametrize(
    ("model", "engine"),
    [("openai/gpt-4o", "auto"), (MODEL, "litellm")],
    ids=["model-without-the-tool", "litellm-route"],
)
def test_a_route_without_the_tool_is_refused_before_any_request(run: Any, model: str, engine: str) -> None:
    with (
        Emulator([SUBMIT]) as emulator,
        dspy.context(lm=_lm(emulator, engine, model)),
        pytest.raises(dspy_imp.ConfigurationError) as raised,
    ):
        run(_agent(), question="What happened on September 29?")
    assert model in str(raised.value) and "WebSearch" in str(raised.value)
    assert emulator.requests == []


def test_another_provider_reads_the_served_blocks_as_text(run: Any) -> None:
    from responses import chat

    with Emulator([SEARCH_THEN_WEATHER, SUBMIT]) as emulator, dspy.context(lm=_lm(emulator)):
        first = run(_agent(), question="What happened on September 29?")
    saved = json.loads(json.dumps(first.metadata.history.model_dump()))
    agent = dspy_imp.ReActV2("question -> answer", tools=[get_weather])  # no hosted tool: any model
    with Emulator([chat("Still CERN.")]) as emulator, dspy.context(lm=_lm(emulator, model="openai/gpt-4o")):
        later = run(agent, question="And what else?", history=dspy.History(**saved))
    assert later.answer == "Still CERN.", later.metadata.termination_error
    sent = emulator.requests[0].body
    assistant = _assistant(sent)
    assert isinstance(assistant["content"], str)  # no Anthropic block reaches OpenAI
    assert "web_search ran by the provider" in assistant["content"]
    assert "https://www.timeanddate.com/on-this-day/september/29" in assistant["content"]
    assert "encrypted_content" not in json.dumps(sent)
    assert_accepted("openai", sent, emulator.requests[0].path)


def test_each_hosted_tool_is_given_once() -> None:
    with pytest.raises(dspy_imp.ConfigurationError, match="two hosted web_search tools"):
        dspy_imp.ReActV2("question -> answer", tools=[WebSearch(), WebSearch(max_uses=1)])
    agent = dspy_imp.ReActV2("question -> answer", tools=[WebSearch(), get_weather])
    assert list(agent.tools) == ["get_weather"]  # the hosted tool is no function tool of the program
    assert agent.hosted_tools == (WebSearch(),)


def test_recorded_code_execution_with_thinking_goes_back_whole_on_the_next_turn(run: Any) -> None:
    from hosted_recordings import CODE_REPLY_1

    agent = dspy_imp.ReActV2("question -> answer", tools=[CodeExecution()])
    second = _reply([{"type": "text", "text": "4 * 12390 = 49560"}])
    with Emulator([Scripted(200, CODE_REPLY_1), second]) as emulator:
        lm = dspy.LM(MODEL, api_base=emulator.base_url + "/v1", api_key="sk-test", cache=False, num_retries=0)
        with dspy.context(lm=lm):  # thinking on, as recorded
            first = run(agent, question="How much is 3 * 12390?")
            saved = json.loads(json.dumps(first.metadata.history.model_dump()))
            later = run(agent, question="How about 4 * 12390?", history=dspy.History(**saved))
    assert first.metadata.termination_reason == "answered", first.metadata.termination_error
    assert first.answer == "3 * 12390 = 37170"
    assert later.answer == "4 * 12390 = 49560"
    sent = emulator.requests[1].body
    assert sent["thinking"]["type"] == "enabled"
    _same_bytes(_assistant(sent)["content"], CODE_REPLY_1["content"])  # thinking, call, result, text: as served
    assert {"type": "code_execution_20250825", "name": "code_execution"} in sent["tools"]
    assert_accepted("anthropic", sent, emulator.requests[1].path)
    assert first.metadata.usage.hosted_calls == {"web_fetch_requests": 0, "web_search_requests": 0}
    assert first.metadata.usage.cost is None  # no search: no fee (and the engine prices no tokens here)


def test_a_turn_paused_for_an_approval_after_a_search_resumes_with_the_served_blocks(run: Any) -> None:
    agent = dspy_imp.ReActV2(
        "question -> answer",
        tools=[WebSearch(max_uses=3), get_weather],
        finish="submit",
        needs_approval=["get_weather"],
    )
    with Emulator([SEARCH_THEN_WEATHER, SUBMIT]) as emulator, dspy.context(lm=_lm(emulator)):
        paused = run(agent, question="What happened on September 29, and the weather in Geneva?")
        assert paused.metadata.termination_reason == "paused", paused.metadata.termination_error
        saved = json.loads(json.dumps(paused.metadata.history.model_dump()))
        resumed = run(agent, history=dspy.History(**saved), approvals={"toolu_01Weather": True})
    assert resumed.metadata.termination_reason == "submit", resumed.metadata.termination_error
    assert len(emulator.requests) == 2
    sent = emulator.requests[1].body
    _same_bytes(_assistant(sent)["content"], [*SERVED, _use("toolu_01Weather", "get_weather", {"city": "Geneva"})])
    assert sent["messages"][-1]["content"][0]["tool_use_id"] == "toolu_01Weather"
    assert_accepted("anthropic", sent, emulator.requests[1].path)
