"""Gemini's built-in tools (``dspy_imp.hosted``) over HTTP, on DSPy's native engine, both drivers.

The replies are third-party recordings (``hosted_recordings_gemini``): a Gemini 3 reply holding a
function call, a Google Search ``toolCall`` and its ``toolResponse`` (each signed), then a grounded
answer; code execution's ``executableCode``/``codeExecutionResult`` parts; grounded Gemini 2.5 answers
(search, URL context). What the turn must do: send the built-in tools (with the tool-combination flag
beside function tools on Gemini 3), carry the served parts back exactly on the next request of the turn
and of a later turn (after ``dump_history``/``load_history`` through JSON), put the grounding in the
citations, count the grounded requests, and refuse what Gemini cannot take before any request.
"""

from __future__ import annotations

import json
from typing import Any

import dspy
import pytest
from emulator import Emulator
from hosted_recordings_gemini import body, parts, replies
from provider_rules import assert_accepted

import dspy_imp
from dspy_imp.hosted import CodeExecution, FileSearch, RemoteMCP, WebFetch, WebSearch

pytestmark = pytest.mark.block_network(allowed_hosts=[r"127\.0\.0\.1$"])

COMBINED = "function_tools_with_builtin_tools"  # gemini-3-flash-preview: search beside a function
CODE = "code_execution"  # gemini-3-flash-preview
SEARCH = "web_search_tool"  # gemini-2.5-pro, search only
FETCH = "web_fetch_tool"  # gemini-2.5-flash, URL context only
FILES = "file_search_tool"  # gemini-2.5-pro, a File Search store
STORE = "fileSearchStores/testfilesearchstore-q7prdj5dqu8p"  # the recording's store


def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression."""
    return "4" if expression.replace(" ", "") == "2+2" else "?"


def _lm(emulator: Emulator, model: str = "gemini/gemini-3-flash-preview", engine: str = "auto") -> dspy.LM:
    return dspy.LM(
        model,
        api_base=emulator.base_url + "/v1beta",
        api_key="sk-test",
        cache=False,
        engine=engine,
        num_retries=0,
    )


def _model_turns(sent: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for c in sent["contents"] if c["role"] == "model"]


def _same_bytes(sent: Any, served: Any) -> None:
    assert json.dumps(sent, sort_keys=False) == json.dumps(served, sort_keys=False)


def _accepted(emulator: Emulator) -> None:
    for request in emulator.requests:
        assert_accepted("gemini", request.body, request.path)


def _answer(name: str, index: int) -> str:
    return "".join(p.get("text", "") for p in parts(name, index))


def _expected_citations(name: str, index: int) -> list[dict[str, Any]]:
    grounding = body(name, index)["candidates"][0]["groundingMetadata"]
    chunks = grounding["groundingChunks"]
    found = []
    for support in grounding["groundingSupports"]:
        for i in support["groundingChunkIndices"]:
            source = chunks[i].get("web") or chunks[i]["retrievedContext"]
            citation = {
                "type": "grounding_support",
                "url": source.get("uri"),
                "title": source.get("title"),
                "cited_for": support["segment"]["text"],
                "segment": support["segment"],
                "chunk": chunks[i],
            }
            if "text" in source:
                citation["cited_text"] = source["text"]
            found.append(citation)
    return found


def test_a_search_beside_a_function_tool_carries_the_served_parts_and_cites_the_grounding(run: Any) -> None:
    agent = dspy_imp.ReActV2("question -> answer", tools=[WebSearch(), calculator])
    with Emulator(replies(COMBINED)) as emulator, dspy.context(lm=_lm(emulator)):
        pred = run(agent, question="What is 2+2? Also search for the current weather in Tokyo.")
    assert pred.metadata.termination_reason == "answered", pred.metadata.termination_error
    assert pred.answer == _answer(COMBINED, 1)
    first, second = (r.body for r in emulator.requests)
    for sent in (first, second):
        assert {"googleSearch": {}} in sent["tools"]
        assert any(d["name"] == "calculator" for t in sent["tools"] for d in t.get("functionDeclarations", ()))
        assert sent["toolConfig"]["includeServerSideToolInvocations"] is True
    (turn,) = _model_turns(second)
    _same_bytes(turn["parts"], parts(COMBINED, 0))  # functionCall, toolCall, toolResponse: as served, signed
    (answer,) = second["contents"][-1]["parts"]
    assert answer["functionResponse"]["id"] == "oqeiriep" and answer["functionResponse"]["name"] == "calculator"
    _accepted(emulator)
    assert list(pred.metadata.citations) == _expected_citations(COMBINED, 1)
    assert pred.metadata.citations[0]["url"] == "https://www.google.com/search?q=weather+in+Tokyo,+JP"


def test_a_saved_history_sends_the_served_parts_back_on_a_later_turn(run: Any) -> None:
    agent = dspy_imp.ReActV2("question -> answer", tools=[WebSearch(), calculator])
    later_reply = replies(COMBINED)[1]  # any recorded answer: the request is what is checked
    with Emulator([*replies(COMBINED), later_reply]) as emulator, dspy.context(lm=_lm(emulator)):
        first = run(agent, question="What is 2+2? Also search for the current weather in Tokyo.")
        saved = json.loads(json.dumps(dspy_imp.dump_history(first.metadata.history)))  # through JSON, as stored
        later = run(agent, question="And tomorrow?", history=dspy_imp.load_history(saved))
    assert later.metadata.termination_reason == "answered", later.metadata.termination_error
    resumed = emulator.requests[2].body
    call_turn, answer_turn = _model_turns(resumed)
    _same_bytes(call_turn["parts"], parts(COMBINED, 0))
    _same_bytes(answer_turn["parts"], parts(COMBINED, 1))  # the grounded answer's text part, signed
    assert resumed["toolConfig"]["includeServerSideToolInvocations"] is True
    _accepted(emulator)


def test_code_execution_parts_round_trip_to_the_next_turn(run: Any) -> None:
    agent = dspy_imp.ReActV2("question -> answer", tools=[CodeExecution()])
    with Emulator(replies(CODE)) as emulator, dspy.context(lm=_lm(emulator)):
        first = run(agent, question="What day is today in Utrecht?")
        saved = json.loads(json.dumps(dspy_imp.dump_history(first.metadata.history)))
        later = run(agent, question="What day is tomorrow?", history=dspy_imp.load_history(saved))
    assert first.metadata.termination_reason == "answered", first.metadata.termination_error
    assert first.answer == _answer(CODE, 0)
    assert later.answer == _answer(CODE, 1)
    first_sent, second_sent = (r.body for r in emulator.requests)
    assert first_sent["tools"] == [{"codeExecution": {}}]
    assert "includeServerSideToolInvocations" not in first_sent.get("toolConfig", {})  # no function beside it
    (turn,) = _model_turns(second_sent)
    _same_bytes(turn["parts"], parts(CODE, 0))  # code, results and the signed text, in their order
    _accepted(emulator)
    recorded = first.metadata.history.messages[0]["reasoning_details"]
    assert recorded[-1]["type"] == "gemini_served" and recorded[-1]["content"] == parts(CODE, 0)
    assert recorded[-1]["usageMetadata"] == body(CODE, 0)["usageMetadata"]


def test_grounded_requests_are_counted_with_their_tool_use_tokens(run: Any) -> None:
    agent = dspy_imp.ReActV2("question -> answer", tools=[WebSearch()])
    with Emulator(replies(SEARCH)) as emulator, dspy.context(lm=_lm(emulator, "gemini/gemini-2.5-pro")):
        first = run(agent, question="What is the weather in San Francisco today?")
        saved = json.loads(json.dumps(dspy_imp.dump_history(first.metadata.history)))
        later = run(agent, question="how about Mexico City?", history=dspy_imp.load_history(saved))
    assert first.metadata.termination_reason == "answered", first.metadata.termination_error
    assert first.answer == _answer(SEARCH, 0)
    usage = first.metadata.usage
    assert usage.hosted_calls == {"web_search_requests": 1, "web_fetch_requests": 0}
    assert usage.calls[0].input_tokens == 17 + 119  # promptTokenCount + toolUsePromptTokenCount
    assert usage.cost is None  # not priced: Google's grounding fees start after a free allowance
    assert list(first.metadata.citations) == _expected_citations(SEARCH, 0)
    sent = emulator.requests[1].body
    assert sent["tools"] == [{"googleSearch": {}}]
    (turn,) = _model_turns(sent)
    _same_bytes(turn["parts"], parts(SEARCH, 0))
    assert list(later.metadata.citations) == _expected_citations(SEARCH, 1)
    _accepted(emulator)


def test_url_context_is_a_web_fetch(run: Any) -> None:
    agent = dspy_imp.ReActV2("question -> answer", tools=[WebFetch()])
    with Emulator(replies(FETCH)) as emulator, dspy.context(lm=_lm(emulator, "gemini/gemini-2.5-flash")):
        pred = run(agent, question="What is the first sentence on the page https://ai.pydantic.dev?")
    assert pred.metadata.termination_reason == "answered", pred.metadata.termination_error
    assert emulator.requests[0].body["tools"] == [{"urlContext": {}}]
    assert pred.metadata.usage.hosted_calls == {"web_search_requests": 0, "web_fetch_requests": 1}
    assert pred.metadata.usage.calls[0].input_tokens == 32 + 2395
    assert [c["url"] for c in pred.metadata.citations] == ["https://ai.pydantic.dev"]
    recorded = pred.metadata.history.messages[0]["reasoning_details"][-1]
    assert recorded["urlContextMetadata"] == body(FETCH, 0)["candidates"][0]["urlContextMetadata"]
    _accepted(emulator)


def test_a_file_search_names_its_stores_and_cites_what_it_retrieved(run: Any) -> None:
    agent = dspy_imp.ReActV2("question -> answer", tools=[FileSearch(store_ids=[STORE])])
    with Emulator(replies(FILES)) as emulator, dspy.context(lm=_lm(emulator, "gemini/gemini-2.5-pro")):
        first = run(agent, question="What is the capital of France?")
        saved = json.loads(json.dumps(first.metadata.history.model_dump()))
        run(agent, question="And of Germany?", history=dspy.History(**saved))
    assert first.metadata.termination_reason == "answered", first.metadata.termination_error
    assert first.answer == _answer(FILES, 0)
    assert emulator.requests[0].body["tools"] == [{"fileSearch": {"fileSearchStoreNames": [STORE]}}]
    assert list(first.metadata.citations) == _expected_citations(FILES, 0)
    assert first.metadata.citations[0]["cited_text"].startswith("Paris is the capital of France.")
    assert first.metadata.usage.calls[0].input_tokens == 15 + 288  # the retrieved text, billed as input
    (turn,) = _model_turns(emulator.requests[1].body)
    _same_bytes(turn["parts"], parts(FILES, 0))
    _accepted(emulator)


@pytest.mark.parametrize(
    ("tool", "option"),
    [
        (WebSearch(max_uses=3), "max_uses"),
        (WebSearch(allowed_domains=["wikipedia.org"]), "allowed_domains"),
        (WebSearch(blocked_domains=["example.com"]), "blocked_domains"),
        (WebSearch(user_location={"type": "approximate", "country": "NL"}), "user_location"),
        (WebFetch(max_uses=2), "max_uses"),
    ],
)
def test_an_option_gemini_has_no_field_for_is_refused_before_any_request(run: Any, tool: Any, option: str) -> None:
    agent = dspy_imp.ReActV2("question -> answer", tools=[tool])
    with (
        Emulator(replies(SEARCH)) as emulator,
        dspy.context(lm=_lm(emulator)),
        pytest.raises(dspy_imp.ConfigurationError) as raised,
    ):
        run(agent, question="What is the weather in San Francisco today?")
    message = str(raised.value)
    assert option in message and tool.label in message and "gemini/gemini-3-flash-preview" in message
    assert emulator.requests == []


def test_a_model_before_gemini_3_refuses_built_in_tools_beside_function_tools(run: Any) -> None:
    agent = dspy_imp.ReActV2("question -> answer", tools=[WebSearch(), calculator], finish="submit")
    with (
        Emulator(replies(SEARCH)) as emulator,
        dspy.context(lm=_lm(emulator, "gemini/gemini-2.5-pro")),
        pytest.raises(dspy_imp.ConfigurationError) as raised,
    ):
        run(agent, question="What is 2+2?")
    message = str(raised.value)
    assert "gemini/gemini-2.5-pro" in message and "WebSearch" in message
    assert "calculator" in message and "submit" in message and "Gemini 3" in message
    assert emulator.requests == []


@pytest.mark.parametrize(
    ("tool", "engine"),
    [
        (RemoteMCP(url="https://mcp.example.com"), "auto"),
        (FileSearch(), "auto"),
        (WebSearch(), "litellm"),
    ],
    ids=["remote-mcp", "file-search-without-stores", "litellm-route"],
)
def test_what_the_route_cannot_carry_is_refused_before_any_request(run: Any, tool: Any, engine: str) -> None:
    agent = dspy_imp.ReActV2("question -> answer", tools=[tool])
    with (
        Emulator(replies(SEARCH)) as emulator,
        dspy.context(lm=_lm(emulator, engine=engine)),
        pytest.raises(dspy_imp.ConfigurationError) as raised,
    ):
        run(agent, question="What is the weather in San Francisco today?")
    message = str(raised.value)
    assert "gemini/gemini-3-flash-preview" in message and tool.label in message
    if engine == "litellm":
        assert "litellm engine" in message and "executableCode" in message
    elif isinstance(tool, RemoteMCP):
        assert "no remote MCP tool" in message and "dspy_imp.mcp" in message
    else:
        assert "store_ids" in message
    assert emulator.requests == []


def test_another_provider_reads_the_served_parts_as_text(run: Any) -> None:
    from responses import chat

    agent = dspy_imp.ReActV2("question -> answer", tools=[CodeExecution()])
    with Emulator(replies(CODE)[:1]) as emulator, dspy.context(lm=_lm(emulator)):
        first = run(agent, question="What day is today in Utrecht?")
    saved = json.loads(json.dumps(first.metadata.history.model_dump()))
    plain = dspy_imp.ReActV2("question -> answer", tools=[calculator])
    with Emulator([chat("Wednesday.")]) as emulator:
        lm = dspy.LM("openai/gpt-4o", api_base=emulator.base_url + "/v1", api_key="sk-test", cache=False)
        with dspy.context(lm=lm):
            later = run(plain, question="And tomorrow?", history=dspy.History(**saved))
    assert later.answer == "Wednesday.", later.metadata.termination_error
    sent = emulator.requests[0].body
    (assistant,) = [m for m in sent["messages"] if m["role"] == "assistant"]
    assert isinstance(assistant["content"], str)
    assert "[code_execution ran by the provider: from datetime import datetime" in assistant["content"]
    assert "[code_execution_result OUTCOME_OK: Current day in Utrecht: Tuesday, May 05, 2026" in assistant["content"]
    assert "thoughtSignature" not in json.dumps(sent) and "executableCode" not in json.dumps(sent)
    assert_accepted("openai", sent, emulator.requests[0].path)


def test_a_turn_paused_for_an_approval_after_a_search_resumes_with_the_served_parts(run: Any) -> None:
    agent = dspy_imp.ReActV2("question -> answer", tools=[WebSearch(), calculator], needs_approval=["calculator"])
    with Emulator(replies(COMBINED)) as emulator, dspy.context(lm=_lm(emulator)):
        paused = run(agent, question="What is 2+2? Also search for the current weather in Tokyo.")
        assert paused.metadata.termination_reason == "paused", paused.metadata.termination_error
        saved = json.loads(json.dumps(paused.metadata.history.model_dump()))
        resumed = run(agent, history=dspy.History(**saved), approvals={"oqeiriep": True})
    assert resumed.metadata.termination_reason == "answered", resumed.metadata.termination_error
    assert len(emulator.requests) == 2
    sent = emulator.requests[1].body
    (turn,) = _model_turns(sent)
    _same_bytes(turn["parts"], parts(COMBINED, 0))
    assert sent["contents"][-1]["parts"][0]["functionResponse"]["id"] == "oqeiriep"
    _accepted(emulator)
