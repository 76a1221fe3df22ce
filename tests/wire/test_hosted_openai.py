"""OpenAI Responses' hosted tools (``dspy_imp.hosted``) over HTTP, on DSPy's native engine, both drivers.

The hosted replies are third-party recordings, served exactly as recorded (``cassettes/hosted/
openai_*.json``, each naming the pydantic-ai cassette it came from): a gpt-5 web search (reasoning
items with encrypted content, six ``web_search_call`` items, a message with three ``url_citation``
annotations), a code interpreter call, a remote MCP call and a file search. The replies around them
(a function call, ``submit``) are ours. What the turn must do: send each tool in its Responses form,
send the served output items back byte for byte as input items on the next request of the turn and
of a later turn (after ``dump_history``/``load_history`` through JSON), put the citations in the
metadata, count and price the hosted calls, and refuse what the route cannot carry before any request.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import dspy
import pytest
from emulator import Emulator, Scripted
from provider_rules import assert_accepted
from responses import function_call, openai_response, output_message, reasoning_item

import dspy_imp
from dspy_imp.hosted import CodeExecution, FileSearch, RemoteMCP, WebFetch, WebSearch

pytestmark = pytest.mark.block_network(allowed_hosts=[r"127\.0\.0\.1$"])

RECORDINGS = Path(__file__).resolve().parents[2] / "cassettes" / "hosted"  # recorded HTTP, shared with examples/


def _recorded(name: str) -> list[dict[str, Any]]:
    """The recorded interactions of a fixture: ``{"request": ..., "response": ...}`` bodies."""
    return list(json.loads((RECORDINGS / f"openai_{name}.json").read_text())["interactions"])


SEARCH = _recorded("web_search")[0]["response"]
SERVED = SEARCH["output"]
MESSAGE = SERVED[-1]["content"][0]  # the output text with its three url_citation annotations
CODE = _recorded("code_interpreter")
MCP = _recorded("mcp")[0]
FILES = _recorded("file_search")[0]

# Ours: a weather call before the search (with a reasoning item, as a gpt-5 call comes), and the submit.
WEATHER = openai_response(
    reasoning_item("rs_01Weather", "gAAAAABoursWeather01"),
    function_call("call_Weather01", "get_weather", {"city": "Geneva"}),
    model="gpt-5-2025-08-07",
)
SUBMIT = openai_response(
    reasoning_item("rs_02Submit", "gAAAAABoursSubmit02"),
    function_call("call_Submit02", "submit", {"answer": "UN backs a two-state roadmap; Nepal; Yemen."}),
    model="gpt-5-2025-08-07",
)


def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"Sunny in {city}."


def _agent(*hosted: Any, finish: str = "auto") -> dspy_imp.ReActV2:
    return dspy_imp.ReActV2("question -> answer", tools=[*(hosted or (WebSearch(),)), get_weather], finish=finish)


def _lm(emulator: Emulator, engine: str = "auto", model: str = "openai/gpt-5", **kwargs: Any) -> dspy.LM:
    return dspy.LM(
        model,
        model_type=kwargs.pop("model_type", "responses"),
        api_base=emulator.base_url + "/v1",
        api_key="sk-test",
        cache=False,
        engine=engine,
        num_retries=0,
        **kwargs,
    )


def _same_bytes(sent: Any, served: Any) -> None:
    assert json.dumps(sent, sort_keys=False) == json.dumps(served, sort_keys=False)


def _slice(body: dict[str, Any], items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The input items of ``body`` from the first of ``items`` on, as many as there are."""
    start = next(i for i, item in enumerate(body["input"]) if item.get("id") == items[0]["id"])
    return list(body["input"][start : start + len(items)])


def _accepted(emulator: Emulator) -> None:
    for sent in emulator.requests:
        assert_accepted("responses", sent.body, sent.path)
        ids = [i["id"] for i in sent.body["input"] if i.get("id")]
        assert len(ids) == len(set(ids)), ids  # a served item goes back once (not again in lm15's own form)


@pytest.mark.parametrize(("finish", "script", "ending"), [("auto", [], "answered"), ("submit", [SUBMIT], "submit")])
def test_a_function_tool_a_hosted_search_and_the_answer_carry_the_served_items(
    run: Any, finish: str, script: list[Scripted], ending: str
) -> None:
    with Emulator([WEATHER, Scripted(200, SEARCH), *script]) as emulator, dspy.context(lm=_lm(emulator)):
        pred = run(_agent(finish=finish), question="The weather in Geneva, and the top 3 news in the world today?")
    assert pred.metadata.termination_reason == ending, pred.metadata.termination_error
    first, second, *rest = (r.body for r in emulator.requests)
    assert {"type": "web_search"} in first["tools"] and {"type": "web_search"} in second["tools"]
    assert any(t.get("name") == "get_weather" for t in first["tools"])
    if finish == "auto":
        assert pred.answer == MESSAGE["text"]
        assert rest == []
    else:  # the searched text was a thought: the request after it carries the served items, byte for byte
        (third,) = rest
        _same_bytes(_slice(third, SERVED), SERVED)
        weather = [i for i in third["input"] if i.get("call_id") == "call_Weather01"]
        assert [i["type"] for i in weather] == ["function_call", "function_call_output"]
        assert third["input"].index(weather[-1]) < third["input"].index(SERVED[0])
    _accepted(emulator)
    text = MESSAGE["text"]
    expected = [{**a, "cited_for": text[a["start_index"] : a["end_index"]]} for a in MESSAGE["annotations"]]
    assert list(pred.metadata.citations) == expected
    assert pred.metadata.citations[0]["url"].startswith("https://www.reuters.com/world/middle-east/un-overwhelmingly")


def test_the_hosted_searches_are_counted_and_priced_from_the_served_items(run: Any) -> None:
    with Emulator([WEATHER, Scripted(200, SEARCH)]) as emulator, dspy.context(lm=_lm(emulator)):
        pred = run(_agent(), question="The weather in Geneva, and the top 3 news in the world today?")
    usage = pred.metadata.usage
    assert usage.calls[0].hosted_calls == {}
    assert usage.calls[1].hosted_calls == {"web_search_call": 6}  # the recording's six web_search_call items
    assert usage.hosted_calls == {"web_search_call": 6}
    assert usage.total_hosted_calls == 6
    assert (usage.calls[1].input_tokens, usage.calls[1].output_tokens) == (115886, 1720)  # the recorded usage
    assert usage.calls[0].cost is None  # DSPy's native engine prices no tokens here: the search fee is the cost
    assert usage.calls[1].cost == pytest.approx(0.06)  # $10 per 1,000 web search calls (OpenAI's pricing page)
    assert usage.cost == pytest.approx(0.06)


def test_a_usage_limit_counts_the_served_hosted_calls(run: Any) -> None:
    agent = dspy_imp.ReActV2(
        "question -> answer",
        tools=[WebSearch(), get_weather],
        finish="submit",
        usage_limits=dspy_imp.UsageLimits(hosted_calls=6),
    )
    with Emulator([WEATHER, Scripted(200, SEARCH), SUBMIT]) as emulator, dspy.context(lm=_lm(emulator)):
        pred = run(agent, question="The weather in Geneva, and the top 3 news in the world today?")
    assert len(emulator.requests) == 2  # the six searches used the limit: no request leaves after them
    assert pred.metadata.termination_reason == "incomplete"
    assert pred.metadata.termination_cause == "usage_limit_exceeded"


def test_a_saved_history_sends_the_served_items_back_on_a_later_turn(run: Any) -> None:
    later = openai_response(output_message("Still those three."), model="gpt-5-2025-08-07")
    with Emulator([WEATHER, Scripted(200, SEARCH), later]) as emulator, dspy.context(lm=_lm(emulator)):
        first = run(_agent(), question="The weather in Geneva, and the top 3 news in the world today?")
        saved = json.loads(
            json.dumps(dspy_imp.dump_history(first.metadata.history))
        )  # through JSON, as a store keeps it
        pred = run(_agent(), question="And now?", history=dspy_imp.load_history(saved))
    assert pred.answer == "Still those three.", pred.metadata.termination_error
    resumed = emulator.requests[2].body
    _same_bytes(_slice(resumed, SERVED), SERVED)
    assert resumed["input"][-1]["role"] == "user"  # the new question after them
    assert {"type": "web_search"} in resumed["tools"]
    _accepted(emulator)


def test_a_turn_paused_for_an_approval_after_a_search_resumes_with_the_served_items(run: Any) -> None:
    agent = dspy_imp.ReActV2(
        "question -> answer", tools=[WebSearch(), get_weather], finish="submit", needs_approval=["get_weather"]
    )
    with Emulator([Scripted(200, SEARCH), WEATHER, SUBMIT]) as emulator, dspy.context(lm=_lm(emulator)):
        paused = run(agent, question="The top 3 news in the world today, and the weather in Geneva?")
        assert paused.metadata.termination_reason == "paused", paused.metadata.termination_error
        saved = json.loads(json.dumps(dspy_imp.dump_history(paused.metadata.history)))
        resumed = run(agent, history=dspy_imp.load_history(saved), approvals={"call_Weather01": True})
    assert resumed.metadata.termination_reason == "submit", resumed.metadata.termination_error
    assert len(emulator.requests) == 3
    for sent in emulator.requests[1:]:  # the request after the search, and the one after the approval
        _same_bytes(_slice(sent.body, SERVED), SERVED)
    outputs = [i for i in emulator.requests[2].body["input"] if i.get("type") == "function_call_output"]
    assert [o["call_id"] for o in outputs] == ["call_Weather01"]
    _accepted(emulator)


def test_a_recorded_code_interpreter_reply_goes_back_whole_on_the_next_turn(run: Any) -> None:
    (one, two) = CODE
    agent = dspy_imp.ReActV2("question -> answer", tools=[CodeExecution()])
    script = [Scripted(200, one["response"]), Scripted(200, two["response"])]
    with Emulator(script) as emulator, dspy.context(lm=_lm(emulator, store=False)):  # nothing kept at OpenAI
        first = run(agent, question=one["request"]["input"][0]["content"])
        saved = json.loads(json.dumps(dspy_imp.dump_history(first.metadata.history)))
        later = run(agent, question="how about 2 to the power of 8?", history=dspy_imp.load_history(saved))
    assert first.metadata.termination_reason == "answered", first.metadata.termination_error
    assert first.answer == one["response"]["output"][-1]["content"][0]["text"]
    assert later.answer == "256"
    assert "-428330955.97745" in json.dumps(first.metadata.history.messages)  # the recorded logs, kept
    sent = emulator.requests[1].body
    assert emulator.requests[0].body["tools"] == [{"type": "code_interpreter", "container": {"type": "auto"}}]
    # the container the recorded call ran in (``test_hosted_openai_container``)
    assert sent["tools"] == [{"type": "code_interpreter", "container": one["response"]["output"][1]["container_id"]}]
    assert sent["store"] is False
    assert sent["include"] == one["request"]["include"]  # encrypted reasoning and the outputs, as recorded
    _same_bytes(_slice(sent, one["response"]["output"]), one["response"]["output"])  # reasoning, call, text
    assert first.metadata.usage.hosted_calls == {"code_interpreter_call": 1}
    assert first.metadata.usage.cost is None  # billed per container, not priced here (nor tokens, natively)
    _accepted(emulator)


def test_a_recorded_remote_mcp_call_goes_back_whole_and_the_tool_goes_out_as_configured(run: Any) -> None:
    recorded_tool = MCP["request"]["tools"][0]
    mcp = RemoteMCP(url=recorded_tool["server_url"], allowed_tools=["ask_question"], headers=recorded_tool["headers"])
    agent = dspy_imp.ReActV2("question -> answer", tools=[mcp])
    later = openai_response(output_message("It is a monorepo."), model="o4-mini-2025-04-16")
    with (
        Emulator([Scripted(200, MCP["response"]), later]) as emulator,
        dspy.context(lm=_lm(emulator, model="openai/o4-mini")),
    ):
        first = run(agent, question="Summarize pydantic/pydantic-ai.")
        saved = json.loads(json.dumps(dspy_imp.dump_history(first.metadata.history)))
        run(agent, question="How is it laid out?", history=dspy_imp.load_history(saved))
    assert first.metadata.termination_reason == "answered", first.metadata.termination_error
    assert emulator.requests[0].body["tools"] == [
        {
            "type": "mcp",
            "server_label": "mcp_deepwiki_com",
            "server_url": "https://mcp.deepwiki.com/mcp",
            "require_approval": "never",
            "allowed_tools": ["ask_question"],
            "headers": {"custom-header-key": "custom-header-value"},
        }
    ]
    served = MCP["response"]["output"]
    _same_bytes(_slice(emulator.requests[1].body, served), served)  # list_tools, reasoning, call, reasoning, text
    assert first.metadata.usage.hosted_calls == {"mcp_call": 1}  # listing the tools is no call
    _accepted(emulator)


def test_a_recorded_file_search_is_priced_and_its_file_citation_kept(run: Any) -> None:
    store = FILES["request"]["tools"][0]["vector_store_ids"]
    agent = dspy_imp.ReActV2("question -> answer", tools=[FileSearch(store_ids=store)])
    with (
        Emulator([Scripted(200, FILES["response"])]) as emulator,
        dspy.context(lm=_lm(emulator, model="openai/gpt-4o")),
    ):
        pred = run(agent, question="What is the capital of France?")
    assert pred.answer == "The capital of France is Paris.", pred.metadata.termination_error
    assert emulator.requests[0].body["tools"] == [{"type": "file_search", "vector_store_ids": store}]
    assert emulator.requests[0].body["include"] == FILES["request"]["include"] == ["file_search_call.results"]
    note = FILES["response"]["output"][1]["content"][0]["annotations"][0]
    assert pred.metadata.citations == ({**note, "cited_for": "The capital of France is Paris."},)
    assert pred.metadata.usage.hosted_calls == {"file_search_call": 1}
    assert pred.metadata.usage.cost == pytest.approx(0.0025)  # $2.50 per 1,000 calls (OpenAI's pricing page)


def test_web_search_options_go_out_in_the_responses_form(run: Any) -> None:
    tool = WebSearch(allowed_domains=["reuters.com"], user_location={"country": "US", "city": "Boston"})
    with Emulator([openai_response(output_message("Done."))]) as emulator, dspy.context(lm=_lm(emulator)):
        run(_agent(tool), question="News?")
    assert {
        "type": "web_search",
        "filters": {"allowed_domains": ["reuters.com"]},
        "user_location": {"type": "approximate", "country": "US", "city": "Boston"},
    } in emulator.requests[0].body["tools"]


@pytest.mark.parametrize(
    ("tools", "model_type", "engine", "named"),
    [
        ([WebSearch(), WebFetch()], "responses", "auto", ["WebFetch", "no tool that fetches a URL"]),
        ([WebSearch()], "responses", "litellm", ["WebSearch", "LiteLLM", "web_search_call"]),
        ([CodeExecution()], "chat", "auto", ["CodeExecution", "model_type='responses'"]),
        ([WebSearch(max_uses=3)], "responses", "auto", ["max_uses"]),
        ([WebSearch(blocked_domains=["example.com"])], "responses", "auto", ["blocked_domains"]),
    ],
    ids=["web-fetch", "litellm-route", "chat-completions", "max-uses", "blocked-domains"],
)
def test_what_the_route_cannot_carry_is_refused_before_any_request(
    run: Any, tools: list[Any], model_type: str, engine: str, named: list[str]
) -> None:
    with (
        Emulator([]) as emulator,
        dspy.context(lm=_lm(emulator, engine, model_type=model_type)),
        pytest.raises(dspy_imp.ConfigurationError) as raised,
    ):
        run(_agent(*tools), question="Fetch https://example.com.")
    for word in ["openai/gpt-5", *named]:
        assert word in str(raised.value)
    assert emulator.requests == []


def test_another_provider_reads_the_served_items_as_text(run: Any) -> None:
    from responses import chat

    with Emulator([WEATHER, Scripted(200, SEARCH)]) as emulator, dspy.context(lm=_lm(emulator)):
        first = run(_agent(), question="The weather in Geneva, and the top 3 news in the world today?")
    saved = json.loads(json.dumps(dspy_imp.dump_history(first.metadata.history)))
    agent = dspy_imp.ReActV2("question -> answer", tools=[get_weather])  # no hosted tool: any model
    with (
        Emulator([chat("Still those.")]) as emulator,
        dspy.context(lm=_lm(emulator, model="openai/gpt-4o", model_type="chat")),
    ):
        later = run(agent, question="And what else?", history=dspy_imp.load_history(saved))
    assert later.answer == "Still those.", later.metadata.termination_error
    sent = emulator.requests[0].body
    written = [m["content"] for m in sent["messages"] if m["role"] == "assistant" and isinstance(m["content"], str)]
    assert any("web_search ran by the provider" in c and "Nepal protests" in c for c in written)
    assert any("apnews.com/article/aad7af5ddfb56b7484fa9db591297c9e" in c for c in written)
    assert "encrypted_content" not in json.dumps(sent) and "web_search_call" not in json.dumps(sent)
    assert_accepted("openai", sent, emulator.requests[0].path)
