"""Hosted tools (``dspy_imp.hosted``) on Vertex AI and their refusal on Bedrock, over HTTP, both drivers.

DSPy's default engine sends Vertex AI natively only in lm15's own spelling: ``vertex:gemini-...``
(generateContent at ``/v1/projects/{project}/locations/{location}/publishers/google/models/{model}``,
Google OAuth) and ``vertex-anthropic:claude-...`` (the Messages API at ``:rawPredict``, the model in the
URL, ``anthropic_version`` in the body). LiteLLM's spelling ``vertex_ai/...`` goes to LiteLLM, which
cannot carry the served parts whole, so it is refused, naming the spelling that works.

The replies are the Gemini API and Anthropic recordings the other hosted-tool wire tests use
(``hosted_recordings_gemini``: pydantic-ai's ``test_google`` cassettes; ``hosted_recordings``: its
``test_anthropic`` web search), served here at Vertex AI's URLs: Vertex serves the same parts, the
same grounding metadata and the same Messages content blocks. No public recording of a Vertex AI
built-in tool reply was found (pydantic-ai's stored Vertex cassettes, ``test_google_model_vertex_*``,
hold plain text replies), so the bodies are the Gemini API's. What is checked is what we send: the
whole next request, Vertex's own rules (``provider_rules``: ``vertex_gemini``, ``vertex_anthropic``),
and the refusal of what Vertex does not offer (``FileSearch`` on Gemini; code execution and web fetch
on Claude) and of Bedrock, which offers none of Anthropic's server tools, before any request.
"""

from __future__ import annotations

import json
from typing import Any

import dspy
import pytest
from emulator import Emulator
from hosted_recordings import CITATION, CITED_TEXT, CODE_REPLY_1, SEARCH_RESULT, SERVER_TOOL_USE, USAGE
from hosted_recordings_gemini import body, parts, replies
from provider_rules import assert_accepted
from test_hosted_anthropic import SEARCH_THEN_WEATHER, SUBMIT, TEXT, _reply, _use, get_weather
from test_hosted_gemini import _expected_citations, calculator
from test_hosted_streamed import (
    _anthropic_reply,
    _gemini_parts,
    _gemini_reply,
    _recorded_block,
    _sdk_message,
    _sse,
    _turns,
)

import dspy_imp
from dspy_imp.hosted import CodeExecution, FileSearch, RemoteMCP, WebFetch, WebSearch

pytestmark = pytest.mark.block_network(allowed_hosts=[r"127\.0\.0\.1$"])

PROJECT = "dspy-imp-test"
COMBINED = "function_tools_with_builtin_tools"  # gemini-3-flash-preview: search beside a function
CODE = "code_execution"  # gemini-3-flash-preview
SEARCH = "web_search_tool"  # gemini-2.5-pro, search only
FETCH = "web_fetch_tool"  # gemini-2.5-flash, URL context only
STORE = "fileSearchStores/testfilesearchstore-q7prdj5dqu8p"
CLAUDE = "vertex-anthropic:claude-sonnet-4-5"
SERVED = [SERVER_TOOL_USE, SEARCH_RESULT, CITED_TEXT]


@pytest.fixture(autouse=True)
def _project(monkeypatch: pytest.MonkeyPatch) -> None:
    """lm15's Vertex doors read the project (and location, default ``global``) from the environment."""
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", PROJECT)
    monkeypatch.delenv("GOOGLE_CLOUD_LOCATION", raising=False)


def _lm(emulator: Emulator, model: str, **extra: Any) -> dspy.LM:
    # api_base: the endpoint root; lm15 appends Vertex's path. The key stands for an OAuth access token.
    return dspy.LM(model, api_base=emulator.base_url, api_key="ya29.test", cache=False, num_retries=0, **extra)


def _gemini_path(model: str) -> str:
    return f"/v1/projects/{PROJECT}/locations/global/publishers/google/models/{model}:generateContent"


CLAUDE_PATH = f"/v1/projects/{PROJECT}/locations/global/publishers/anthropic/models/claude-sonnet-4-5:rawPredict"


def _same_bytes(sent: Any, served: Any) -> None:
    assert json.dumps(sent, sort_keys=False) == json.dumps(served, sort_keys=False)


def _accepted(emulator: Emulator, protocol: str) -> None:
    for request in emulator.requests:
        assert_accepted(protocol, request.body, request.path)


# -- Gemini on Vertex AI ---------------------------------------------------------------------------------


def test_gemini_3_on_vertex_searches_beside_a_function_tool_and_sends_the_served_parts_back(run: Any) -> None:
    agent = dspy_imp.ReActV2("question -> answer", tools=[WebSearch(), calculator])
    with Emulator(replies(COMBINED)) as emulator, dspy.context(lm=_lm(emulator, "vertex:gemini-3-flash-preview")):
        pred = run(agent, question="What is 2+2? Also search for the current weather in Tokyo.")
    assert pred.metadata.termination_reason == "answered", pred.metadata.termination_error
    assert [r.path for r in emulator.requests] == [_gemini_path("gemini-3-flash-preview")] * 2
    first, second = (r.body for r in emulator.requests)
    assert first["tools"][1:] == [{"googleSearch": {}}]
    assert first["toolConfig"] == {"functionCallingConfig": {"mode": "AUTO"}, "includeServerSideToolInvocations": True}
    answer = {"functionResponse": {"name": "calculator", "response": {"result": "4"}, "id": "oqeiriep"}}
    served_turn = {"role": "model", "parts": parts(COMBINED, 0)}
    assert second == {**first, "contents": [*first["contents"], served_turn, {"role": "user", "parts": [answer]}]}
    _same_bytes(second["contents"][-2]["parts"], parts(COMBINED, 0))  # functionCall, toolCall, toolResponse, signed
    _accepted(emulator, "vertex_gemini")
    assert list(pred.metadata.citations) == _expected_citations(COMBINED, 1)


def test_a_grounded_gemini_2_5_answer_on_vertex_is_counted_and_goes_back_on_a_later_turn(run: Any) -> None:
    agent = dspy_imp.ReActV2("question -> answer", tools=[WebSearch()])
    with Emulator(replies(SEARCH)) as emulator, dspy.context(lm=_lm(emulator, "vertex:gemini-2.5-pro")):
        first = run(agent, question="What is the weather in San Francisco today?")
        saved = json.loads(json.dumps(dspy_imp.dump_history(first.metadata.history)))  # through JSON, as stored
        later = run(agent, question="how about Mexico City?", history=dspy_imp.load_history(saved))
    assert first.metadata.termination_reason == "answered", first.metadata.termination_error
    assert first.metadata.usage.hosted_calls == {"web_search_requests": 1, "web_fetch_requests": 0}
    assert first.metadata.usage.calls[0].input_tokens == 17 + 119  # promptTokenCount + toolUsePromptTokenCount
    assert list(first.metadata.citations) == _expected_citations(SEARCH, 0)
    assert list(later.metadata.citations) == _expected_citations(SEARCH, 1)
    assert [r.path for r in emulator.requests] == [_gemini_path("gemini-2.5-pro")] * 2
    opening, resumed = (r.body for r in emulator.requests)
    assert opening["tools"] == [{"googleSearch": {}}] and resumed["tools"] == [{"googleSearch": {}}]
    question, turn, follow_up = resumed["contents"]
    assert question == opening["contents"][0]
    assert turn == {"role": "model", "parts": parts(SEARCH, 0)}  # the grounded answer's parts, as served
    assert follow_up["role"] == "user" and "how about Mexico City?" in follow_up["parts"][0]["text"]
    assert {k: v for k, v in resumed.items() if k != "contents"} == {
        k: v for k, v in opening.items() if k != "contents"
    }
    _accepted(emulator, "vertex_gemini")


def test_code_execution_and_url_context_on_vertex(run: Any) -> None:
    coder = dspy_imp.ReActV2("question -> answer", tools=[CodeExecution()])
    fetcher = dspy_imp.ReActV2("question -> answer", tools=[WebFetch()])
    with Emulator(replies(CODE)) as emulator, dspy.context(lm=_lm(emulator, "vertex:gemini-3-flash-preview")):
        first = run(coder, question="What day is today in Utrecht?")
        saved = json.loads(json.dumps(dspy_imp.dump_history(first.metadata.history)))
        run(coder, question="What day is tomorrow?", history=dspy_imp.load_history(saved))
    assert first.metadata.termination_reason == "answered", first.metadata.termination_error
    opening, resumed = (r.body for r in emulator.requests)
    assert opening["tools"] == [{"codeExecution": {}}]
    assert resumed["contents"][1] == {"role": "model", "parts": parts(CODE, 0)}  # code, result, signed text
    _accepted(emulator, "vertex_gemini")
    with Emulator(replies(FETCH)) as emulator, dspy.context(lm=_lm(emulator, "vertex:gemini-2.5-flash")):
        fetched = run(fetcher, question="What is the first sentence on the page https://ai.pydantic.dev?")
    assert fetched.metadata.termination_reason == "answered", fetched.metadata.termination_error
    (sent,) = emulator.requests
    assert sent.path == _gemini_path("gemini-2.5-flash") and sent.body["tools"] == [{"urlContext": {}}]
    assert fetched.metadata.usage.hosted_calls == {"web_search_requests": 0, "web_fetch_requests": 1}
    recorded = fetched.metadata.history.messages[0]["reasoning_details"][-1]
    assert recorded["urlContextMetadata"] == body(FETCH, 0)["candidates"][0]["urlContextMetadata"]
    _accepted(emulator, "vertex_gemini")


# -- Claude on Vertex AI ---------------------------------------------------------------------------------


def test_claude_on_vertex_searches_and_sends_the_served_blocks_back_whole(run: Any) -> None:
    agent = dspy_imp.ReActV2("question -> answer", tools=[WebSearch(max_uses=3), get_weather], finish="submit")
    with (
        Emulator([SEARCH_THEN_WEATHER, SUBMIT]) as emulator,
        dspy.context(lm=_lm(emulator, CLAUDE, reasoning_effort=None)),  # the recorded replies hold no thinking
    ):
        pred = run(agent, question="What happened on September 29, and the weather in Geneva?")
    assert pred.metadata.termination_reason == "submit", pred.metadata.termination_error
    assert [r.path for r in emulator.requests] == [CLAUDE_PATH] * 2
    assert [r.beta for r in emulator.requests] == [None, None]  # web_search_20250305 takes no beta
    first, second = (r.body for r in emulator.requests)
    assert "model" not in first and first["anthropic_version"] == "vertex-2023-10-16"
    assert {"type": "web_search_20250305", "name": "web_search", "max_uses": 3} in first["tools"]
    weather = _use("toolu_01Weather", "get_weather", {"city": "Geneva"})
    result = {"type": "tool_result", "tool_use_id": "toolu_01Weather", "content": "Sunny in Geneva."}
    served = {"role": "assistant", "content": [*SERVED, weather]}
    assert second == {**first, "messages": [*first["messages"], served, {"role": "user", "content": [result]}]}
    _same_bytes(second["messages"][1]["content"], [*SERVED, weather])  # encrypted content, citations, in order
    _accepted(emulator, "vertex_anthropic")
    assert pred.metadata.citations == ({**CITATION, "cited_for": CITED_TEXT["text"]},)
    assert pred.metadata.usage.hosted_calls == {"web_search_requests": 1, "web_fetch_requests": 0}
    assert (pred.metadata.usage.calls[0].input_tokens, pred.metadata.usage.calls[0].output_tokens) == (
        USAGE["input_tokens"],
        USAGE["output_tokens"],
    )


def test_claude_on_vertex_sends_the_served_blocks_back_on_a_later_turn(run: Any) -> None:
    agent = dspy_imp.ReActV2("question -> answer", tools=[WebSearch(), get_weather], finish="submit")
    with (
        Emulator([SEARCH_THEN_WEATHER, SUBMIT, SUBMIT]) as emulator,
        dspy.context(lm=_lm(emulator, CLAUDE, reasoning_effort=None)),
    ):
        first = run(agent, question="What happened on September 29?")
        saved = json.loads(json.dumps(dspy_imp.dump_history(first.metadata.history)))
        later = run(agent, question="And on September 30?", history=dspy_imp.load_history(saved))
    assert later.metadata.termination_reason == "submit", later.metadata.termination_error
    opening, resumed = emulator.requests[0].body, emulator.requests[2].body
    assert {k: v for k, v in resumed.items() if k != "messages"} == {
        k: v for k, v in opening.items() if k != "messages"
    }
    assert resumed["messages"][0] == opening["messages"][0]
    replayed = resumed["messages"][1]  # the first turn's first reply, as served
    assert replayed["role"] == "assistant"
    _same_bytes(replayed["content"], [*SERVED, _use("toolu_01Weather", "get_weather", {"city": "Geneva"})])
    _accepted(emulator, "vertex_anthropic")


def test_claude_on_vertex_sends_a_signed_thinking_block_back_before_its_function_call(run: Any) -> None:
    """With thinking on, a reply's function call goes back after its signed thinking block (Anthropic refuses
    a tool_use without it), on Vertex AI as on Anthropic: a step beside a hosted search may have no served
    block of its own."""
    thinking = CODE_REPLY_1["content"][0]  # a signed thinking block, as recorded
    weather = _use("toolu_01Weather", "get_weather", {"city": "Geneva"})
    agent = dspy_imp.ReActV2("question -> answer", tools=[WebSearch(), get_weather])
    with Emulator([_reply([thinking, weather]), TEXT]) as emulator, dspy.context(lm=_lm(emulator, CLAUDE)):
        pred = run(agent, question="The weather in Geneva?")
    assert pred.metadata.termination_reason == "answered", pred.metadata.termination_error
    first, second = (r.body for r in emulator.requests)
    assert first["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    result = {"type": "tool_result", "tool_use_id": "toolu_01Weather", "content": "Sunny in Geneva."}
    replied = {"role": "assistant", "content": [thinking, weather]}
    assert second == {**first, "messages": [*first["messages"], replied, {"role": "user", "content": [result]}]}
    _accepted(emulator, "vertex_anthropic")


# -- Streamed, on Vertex AI ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "model", "tool"),
    [("gemini_web_search", "gemini-2.5-pro", WebSearch()), ("gemini_web_fetch", "gemini-2.5-flash", WebFetch())],
    ids=["google-search", "url-context"],
)
def test_a_streamed_gemini_reply_on_vertex_goes_back_with_every_chunks_parts(
    how: str, name: str, model: str, tool: Any
) -> None:
    agent = dspy_imp.ReActV2("question -> answer", tools=[tool])
    asked = ("What is the capital of France?", "And of Italy?")
    with Emulator([_sse(name), _gemini_reply("Still Paris.")]) as emulator:
        streamed, later = _turns(agent, how, _lm(emulator, f"vertex:{model}"), *asked)
    assert streamed.metadata.termination_reason == "answered", streamed.metadata.termination_error
    assert later.metadata.termination_reason == "answered", later.metadata.termination_error
    first, second = emulator.requests
    path = f"/v1/projects/{PROJECT}/locations/global/publishers/google/models/{model}"
    assert first.path == f"{path}:streamGenerateContent?alt=sse" and second.path == f"{path}:generateContent"
    served = _gemini_parts(name)
    assert _recorded_block(streamed, "gemini_served")["content"] == served
    question, turn, follow_up = second.body["contents"]
    assert question == first.body["contents"][0] and follow_up["role"] == "user"
    _same_bytes(turn, {"role": "model", "parts": served})  # every chunk's parts, each signature where it came
    assert {k: v for k, v in second.body.items() if k != "contents"} == {
        k: v for k, v in first.body.items() if k != "contents"
    }
    _accepted(emulator, "vertex_gemini")


def test_a_streamed_claude_search_on_vertex_with_thinking_goes_back_as_the_sdk_assembles_it(how: str) -> None:
    agent = dspy_imp.ReActV2("question -> answer", tools=[WebSearch()])  # finish="auto": the reply's text answers
    expected = _sdk_message("anthropic_web_search")  # thinking, two searches, citations
    asked = ("What is the weather in San Francisco today?", "And tomorrow?")
    with Emulator([_sse("anthropic_web_search"), _anthropic_reply("Still the same.")]) as emulator:
        streamed, later = _turns(agent, how, _lm(emulator, CLAUDE), *asked)  # thinking on, as recorded
    assert streamed.metadata.termination_reason == "answered", streamed.metadata.termination_error
    assert later.metadata.termination_reason == "answered", later.metadata.termination_error
    first, second = emulator.requests
    assert first.path == CLAUDE_PATH.replace(":rawPredict", ":streamRawPredict") and second.path == CLAUDE_PATH
    assert first.body["stream"] is True and second.body["stream"] is False
    replayed = next(m for m in second.body["messages"] if m["role"] == "assistant")["content"]
    assert replayed == expected["content"]  # every block and field, the thinking signature among them
    assert streamed.metadata.usage.hosted_calls == {"web_search_requests": 2, "web_fetch_requests": 0}
    _accepted(emulator, "vertex_anthropic")


# -- Refused before any request ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "tool", "said"),
    [
        ("vertex:gemini-2.5-pro", FileSearch(store_ids=[STORE]), ["Gemini API's own", "Vertex AI's generateContent"]),
        ("vertex:gemini-2.5-pro", RemoteMCP(url="https://mcp.example.com"), ["no remote MCP tool", "dspy_imp.mcp"]),
        (
            "vertex_ai/gemini-2.5-pro",
            WebSearch(),
            ["litellm engine", "no door for the vertex_ai/ prefix", "executableCode", "'vertex:gemini-2.5-pro'"],
        ),
        (CLAUDE, CodeExecution(), ["web search only", "code execution (code_execution_20250825)"]),
        (CLAUDE, WebFetch(), ["web search only", "web fetch (web_fetch_20250910)"]),
        (
            "vertex_ai/claude-sonnet-4-5@20250929",
            WebSearch(),
            ["litellm engine", "split apart", "'vertex-anthropic:claude-sonnet-4-5@20250929'"],
        ),
        ("bedrock/anthropic.claude-sonnet-4-5-20250929-v1:0", WebSearch(), ["Amazon Bedrock does not offer"]),
        ("bedrock/converse/anthropic.claude-sonnet-4-5-20250929-v1:0", CodeExecution(), ["Amazon Bedrock does not"]),
        ("bedrock-anthropic:anthropic.claude-opus-4-7", WebFetch(), ["Amazon Bedrock does not offer"]),
    ],
    ids=[
        "vertex-gemini-file-search",
        "vertex-gemini-remote-mcp",
        "vertex_ai-gemini-litellm",
        "vertex-claude-code-execution",
        "vertex-claude-web-fetch",
        "vertex_ai-claude-litellm",
        "bedrock-litellm",
        "bedrock-converse-litellm",
        "bedrock-native",
    ],
)
def test_what_vertex_or_bedrock_does_not_offer_is_refused_before_any_request(
    run: Any, model: str, tool: Any, said: list[str]
) -> None:
    agent = dspy_imp.ReActV2("question -> answer", tools=[tool])
    with (
        Emulator(replies(SEARCH)) as emulator,
        dspy.context(lm=_lm(emulator, model)),
        pytest.raises(dspy_imp.ConfigurationError) as raised,
    ):
        run(agent, question="What is the weather in San Francisco today?")
    message = str(raised.value)
    assert repr(model) in message and f"hosted {tool.label} " in message
    for words in said:
        assert words in message
    assert emulator.requests == []
