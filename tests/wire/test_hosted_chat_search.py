"""OpenAI's search models on Chat Completions over HTTP: ``WebSearch`` as ``web_search_options``,
on both ``dspy.LM`` engines and both drivers.

The reply is a third-party recording served exactly as recorded (``cassettes/hosted/
openai_chat_web_search.json``, naming the pydantic-ai cassette it came from): a live
``gpt-4o-search-preview`` answer to a request with ``web_search_options: {"search_context_size":
"low"}``, whose message carries seven ``url_citation`` annotations. What the turn must do: send
the options as that recorded request did (and ``user_location`` in its approximate form), no
function tool (these models take none, so the program answers in text), put the annotations in
``pred.metadata.citations`` with the text each marks, count the search, and refuse before any
request what the route cannot carry: an option without a field there, a function tool beside the
search (the loop's ``submit`` included), a model that does not search on Chat Completions.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import dspy
import pytest
from emulator import Emulator, Scripted
from provider_rules import assert_accepted

import dspy_imp
from dspy_imp.hosted import CodeExecution, WebSearch

pytestmark = pytest.mark.block_network(allowed_hosts=[r"127\.0\.0\.1$"])

RECORDINGS = Path(__file__).resolve().parents[2] / "cassettes" / "hosted"
RECORDED = json.loads((RECORDINGS / "openai_chat_web_search.json").read_text())["interactions"][0]
SEARCH = RECORDED["response"]
MESSAGE = SEARCH["choices"][0]["message"]
QUESTION = RECORDED["request"]["messages"][-1]["content"]  # "What are the latest news in Iceland?"
ENGINES = ["auto", "litellm"]
SYSTEM = (
    "Given the fields `question`, produce the fields `answer`.\n"
    "When the final answer is ready, reply without calling a tool: that message is `answer`."
)


def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"Sunny in {city}."


def _lm(emulator: Emulator, engine: str, model: str = "openai/gpt-4o-search-preview") -> dspy.LM:
    return dspy.LM(
        model, api_base=emulator.base_url + "/v1", api_key="sk-test", cache=False, engine=engine, num_retries=0
    )


def _agent(*tools: Any, finish: str = "auto") -> dspy_imp.ReActV2:
    return dspy_imp.ReActV2(
        "question -> answer", tools=list(tools or (WebSearch(search_context_size="low"),)), finish=finish
    )


@pytest.mark.parametrize("engine", ENGINES)
def test_a_search_model_searches_and_its_citations_reach_the_metadata(run: Any, engine: str) -> None:
    with Emulator([Scripted(200, SEARCH)]) as emulator, dspy.context(lm=_lm(emulator, engine)):
        pred = run(_agent(), question=QUESTION)
    assert pred.metadata.termination_reason == "answered", pred.metadata.termination_error
    assert pred.answer == MESSAGE["content"]  # the reply as written: the answer, in text
    (request,) = emulator.requests
    assert request.path == "/v1/chat/completions"
    body = request.body
    # the recorded request's web_search_options; no function tool (these models take none), no tool_choice
    assert body == {
        "model": "gpt-4o-search-preview",
        "messages": [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": f"[[ ## question ## ]]\n{QUESTION}"},
        ],
        "prompt_cache_key": body["prompt_cache_key"],  # the conversation's key (docs/prompt-caching.md)
        "web_search_options": RECORDED["request"]["web_search_options"],
    }
    assert body["prompt_cache_key"].startswith("dspy-imp-")
    assert_accepted("openai", body, request.path)
    cited = [
        {
            **note,
            "cited_for": MESSAGE["content"][note["url_citation"]["start_index"] : note["url_citation"]["end_index"]],
        }
        for note in MESSAGE["annotations"]
    ]
    assert pred.metadata.citations == tuple(cited)
    assert cited[0]["cited_for"].startswith("([reuters.com](https://www.reuters.com/business/environment/iceland")
    usage = pred.metadata.usage
    assert usage.hosted_calls == {"web_search_call": 1}
    assert [c.hosted_calls for c in usage.calls] == [{"web_search_call": 1}]
    # the tokens at gpt-4o-search-preview's rates ($2.50 / $10 per million) and the search at $25 per 1,000,
    # the same on both engines (LiteLLM's cost holds the search's fee already)
    assert usage.cost == pytest.approx(14 * 2.5e-6 + 603 * 10e-6 + 0.025)
    recorded = pred.metadata.history.messages[0]["reasoning_details"]
    assert recorded == [
        {
            "type": "openai_chat_served",
            "content": [{k: MESSAGE[k] for k in ("role", "content", "refusal", "annotations")}],
        }
    ]


@pytest.mark.parametrize("engine", ENGINES)
def test_the_user_location_goes_out_in_its_approximate_form(run: Any, engine: str) -> None:
    search = WebSearch(
        search_context_size="medium", user_location={"type": "approximate", "city": "Utrecht", "country": "NL"}
    )
    with Emulator([Scripted(200, SEARCH)]) as emulator, dspy.context(lm=_lm(emulator, engine)):
        run(_agent(search), question="What is the current temperature?")
    # pydantic-ai's recorded request (test_openai_web_search_tool_with_user_location.yaml)
    assert emulator.requests[0].body["web_search_options"] == {
        "search_context_size": "medium",
        "user_location": {"type": "approximate", "approximate": {"city": "Utrecht", "country": "NL"}},
    }


@pytest.mark.parametrize("engine", ENGINES)
def test_the_text_goes_back_without_the_annotations_on_a_later_turn(run: Any, engine: str) -> None:
    later = {
        **SEARCH,
        "choices": [{**SEARCH["choices"][0], "message": {**MESSAGE, "annotations": [], "content": "Calm."}}],
    }
    with Emulator([Scripted(200, SEARCH), Scripted(200, later)]) as emulator, dspy.context(lm=_lm(emulator, engine)):
        first = run(_agent(), question=QUESTION)
        saved = json.loads(json.dumps(first.metadata.history.model_dump()))
        second = run(_agent(), question="And today?", history=dspy.History(**saved))
    assert second.answer == "Calm."
    body = emulator.requests[1].body
    # the earlier answer goes back as its text, as written (the cited links are in it); annotations have no field
    assert body == {
        "model": "gpt-4o-search-preview",
        "messages": [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": f"[[ ## question ## ]]\n{QUESTION}"},
            {"role": "assistant", "content": MESSAGE["content"]},
            {"role": "user", "content": "[[ ## question ## ]]\nAnd today?"},
        ],
        "prompt_cache_key": emulator.requests[0].body["prompt_cache_key"],
        "web_search_options": {"search_context_size": "low"},
    }
    assert_accepted("openai", body, emulator.requests[1].path)
    assert second.metadata.citations == ()


REFUSED = [
    (WebSearch(max_uses=2), "submit", "WebSearch(max_uses=...) on model 'openai/gpt-4o-search-preview'"),
    (WebSearch(allowed_domains=["reuters.com"]), "auto", "WebSearch(allowed_domains=...)"),
    (WebSearch(blocked_domains=["example.com"]), "auto", "WebSearch(blocked_domains=...)"),
    (WebSearch(user_location={"latitude": 52.1}), "auto", "WebSearch(user_location=...)"),
    (WebSearch(), "submit", "takes no function tools (submit)"),
    (CodeExecution(), "auto", "only OpenAI's search models (gpt-4o-search-preview, gpt-4o-mini-search-preview, gpt-5"),
]


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize(("tool", "finish", "message"), REFUSED)
def test_what_the_route_cannot_carry_is_refused_before_any_request(
    run: Any, engine: str, tool: Any, finish: str, message: str
) -> None:
    with (
        Emulator([]) as emulator,
        dspy.context(lm=_lm(emulator, engine)),
        pytest.raises(dspy_imp.ConfigurationError) as raised,
    ):
        run(_agent(tool, finish=finish), question=QUESTION)
    assert message in str(raised.value)
    assert emulator.requests == []


@pytest.mark.parametrize("engine", ENGINES)
def test_a_function_tool_beside_the_search_is_refused(run: Any, engine: str) -> None:
    with (
        Emulator([]) as emulator,
        dspy.context(lm=_lm(emulator, engine)),
        pytest.raises(dspy_imp.ConfigurationError, match=r"takes no function tools \(get_weather"),
    ):
        run(_agent(WebSearch(), get_weather), question=QUESTION)
    assert emulator.requests == []


@pytest.mark.parametrize("engine", ENGINES)
def test_a_model_that_does_not_search_on_chat_completions_is_refused(run: Any, engine: str) -> None:
    with (
        Emulator([]) as emulator,
        dspy.context(lm=_lm(emulator, engine, model="openai/gpt-4o")),
        pytest.raises(dspy_imp.ConfigurationError, match=r"model_type='responses'"),
    ):
        run(_agent(), question=QUESTION)
    assert emulator.requests == []


def test_a_search_context_size_outside_openais_three_is_refused_at_construction() -> None:
    with pytest.raises(dspy_imp.ConfigurationError, match=r"WebSearch\(search_context_size='huge'\): give one of low"):
        WebSearch(search_context_size="huge")


@pytest.mark.parametrize(
    ("model", "message"),
    [
        ("anthropic/claude-sonnet-4-5", "Anthropic's web search tool has no search_context_size"),
        ("gemini/gemini-3-pro-preview", "Gemini's googleSearch tool has no search_context_size"),
    ],
)
def test_a_search_context_size_is_refused_where_the_provider_has_none(run: Any, model: str, message: str) -> None:
    with (
        Emulator([]) as emulator,
        dspy.context(lm=_lm(emulator, "auto", model=model)),
        pytest.raises(dspy_imp.ConfigurationError, match=message),
    ):
        run(_agent(WebSearch(search_context_size="high"), finish="submit"), question=QUESTION)
    assert emulator.requests == []


def test_openais_responses_web_search_takes_the_search_context_size() -> None:
    from dspy_imp._routes.hosted_openai import tool_config

    assert tool_config(WebSearch(search_context_size="high")) == {"type": "web_search", "search_context_size": "high"}
