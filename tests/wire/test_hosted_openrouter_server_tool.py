"""OpenRouter's web search server tool over HTTP: ``WebSearch`` as ``tools: [{"type": "openrouter:web_search",
"parameters": {...}}]``, OpenRouter's default since its guide deprecated the web plugin, on both ``dspy.LM``
engines and both drivers.

The searching replies are third-party recordings served exactly as recorded (pydantic-ai's OpenRouter
cassettes, each file naming its source):

- ``cassettes/hosted/openrouter_web_search_tool.json``: ``deepseek/deepseek-chat`` (no native search, so
  Exa's) to a request with ``tools: [{"type": "openrouter:web_search", "parameters": {"max_uses": 1,
  "search_context_size": "medium"}}]``: the final message (no call item for the search) carrying five
  ``url_citation`` annotations, spans ``0, 0``, each with the result's ``content``; usage
  ``server_tool_use_details: {tool_calls_executed: 1, tool_calls_requested: 1, web_search_requests: 1}``,
  ``cost`` 0.007637029 of which the model's prompt and completion 0.000595881 + 4.1148e-05 (the search 0.007,
  the guide's Exa price per request);
- ``cassettes/hosted/openrouter_web_search_tool_native.json``: ``openai/gpt-4.1-mini`` (OpenAI's native search)
  to the same request: the answer with no annotations at all, ``server_tool_use_details: {web_search_requests:
  1}``, ``cost`` 0.0133176 of which prompt and completion 0.0032696 + 4.8e-05 (the search 0.01, OpenAI's own
  fee passed through).

The parameters' names (``max_uses``, ``search_context_size``, ``user_location`` with ``type: "approximate"``,
``allowed_domains``, ``excluded_domains``) are the guide's table and OpenRouter's API reference
(``WebSearchServerToolConfig``), as pydantic-ai's recorded full-parameter request sends them; which engine drops
which option is the guide's only (its parameter table, Native Search Providers and Domain Filtering). The turn
that calls a function tool and ``submit`` beside the search is played on replies in OpenRouter's
``chat.completion`` shape (``responses.openrouter``) carrying the Exa recording's annotations and usage on the
reply that searched, as the server tool serves them on the final message of a request.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import dspy
import pytest
from emulator import Emulator, Scripted
from provider_rules import assert_accepted
from responses import openrouter

import dspy_imp
from dspy_imp import ReActAdapter
from dspy_imp.hosted import WebFetch, WebSearch, calls_in

pytestmark = pytest.mark.block_network(allowed_hosts=[r"127\.0\.0\.1$"])

RECORDINGS = Path(__file__).resolve().parents[2] / "cassettes" / "hosted"
EXA = json.loads((RECORDINGS / "openrouter_web_search_tool.json").read_text())["interactions"][0]
NATIVE = json.loads((RECORDINGS / "openrouter_web_search_tool_native.json").read_text())["interactions"][0]
MESSAGE = EXA["response"]["choices"][0]["message"]
NOTES = MESSAGE["annotations"]
QUESTION = EXA["request"]["messages"][-1]["content"]  # "Use web search to find Pydantic AI's GitHub ..."
ENGINES = ["auto", "litellm"]
DEEPSEEK = "openrouter/deepseek/deepseek-chat"
GPT = "openrouter/openai/gpt-4.1-mini"
CLAUDE = "openrouter/anthropic/claude-fable-5.1"
SYSTEM = (
    "Given the fields `question`, produce the fields `answer`.\n"
    "When the final answer is ready, reply without calling a tool: that message is `answer`."
)


def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"Sunny in {city}."


def _lm(emulator: Emulator, engine: str, model: str = DEEPSEEK, **options: Any) -> dspy.LM:
    return dspy.LM(
        model,
        api_base=emulator.base_url + "/api/v1",
        api_key="sk-or-test",
        cache=False,
        engine=engine,
        num_retries=0,
        **options,
    )


def _agent(*tools: Any, finish: str = "auto", **options: Any) -> dspy_imp.ReActV2:
    return dspy_imp.ReActV2("question -> answer", tools=list(tools), finish=finish, **options)


def _fee(usage: dict[str, Any]) -> float:
    spent = usage["cost_details"]
    return float(usage["cost"] - spent["upstream_inference_prompt_cost"] - spent["upstream_inference_completions_cost"])


@pytest.mark.parametrize("engine", ENGINES)
def test_the_server_tool_searches_and_its_citations_reach_the_metadata(run: Any, engine: str) -> None:
    with Emulator([Scripted(200, EXA["response"])]) as emulator, dspy.context(lm=_lm(emulator, engine)):
        pred = run(_agent(WebSearch(max_uses=1, search_context_size="medium")), question=QUESTION)
    assert pred.metadata.termination_reason == "answered", pred.metadata.termination_error
    assert pred.answer == MESSAGE["content"]
    (request,) = emulator.requests
    assert request.path == "/api/v1/chat/completions"
    body = request.body
    # the recorded request's tools, exactly; and the usage accounting LiteLLM asks for too; no plugin
    searched = {"model": "deepseek/deepseek-chat", "tools": EXA["request"]["tools"], "usage": {"include": True}}
    if engine == "auto":
        assert body == {
            **searched,
            "messages": [
                {"role": "system", "content": SYSTEM},
                {"role": "user", "content": f"[[ ## question ## ]]\n{QUESTION}"},
            ],
        }
    else:  # LiteLLM does not know this model calls tools: DSPy writes the answer's fields in the prompt
        assert {k: v for k, v in body.items() if k != "messages"} == searched
        assert [m["role"] for m in body["messages"]] == ["system", "user", "user"]
        assert body["messages"][1] == {"role": "user", "content": f"[[ ## question ## ]]\n{QUESTION}"}
    assert_accepted("openrouter", body, request.path)
    # each annotation as served; one marking no span (Exa's 0, 0) grounds the whole answer
    assert pred.metadata.citations == tuple({**n, "cited_for": MESSAGE["content"]} for n in NOTES)
    usage = pred.metadata.usage
    assert usage.hosted_calls == {"web_search_requests": 1}  # usage.server_tool_use_details, as served
    assert round(_fee(EXA["response"]["usage"]), 9) == 0.007  # the guide's Exa price per request
    # what OpenRouter charged, tokens and search: natively DSPy prices no tokens beside a builtin tool, and
    # LiteLLM's cost is OpenRouter's own
    assert usage.cost == pytest.approx(EXA["response"]["usage"]["cost"])
    entry = pred.metadata.history.messages[0]
    assert entry["reasoning_details"] == [
        {
            "type": "openrouter_served",
            "content": [{k: MESSAGE[k] for k in ("role", "content", "refusal", "annotations")}],
        }
    ]
    (call,) = calls_in(entry)
    assert (call.name, call.input, call.provider) == ("web_search", {}, "openrouter")
    assert call.result == {
        "results": [{"title": n["url_citation"]["title"], "url": n["url_citation"]["url"]} for n in NOTES]
    }


@pytest.mark.parametrize("engine", ENGINES)
def test_a_native_search_without_annotations_is_counted_and_priced_from_the_usage(run: Any, engine: str) -> None:
    """OpenAI's own search (OpenRouter's ``auto`` engine for this model) serves no annotations: nothing is recorded
    of it, and the search is counted from ``server_tool_use_details`` and priced at what OpenRouter charged."""
    reply = NATIVE["response"]
    with Emulator([Scripted(200, reply)]) as emulator, dspy.context(lm=_lm(emulator, engine, GPT)):
        pred = run(_agent(WebSearch()), question=QUESTION)
    assert pred.metadata.termination_reason == "answered", pred.metadata.termination_error
    assert pred.answer == reply["choices"][0]["message"]["content"]
    body = emulator.requests[0].body
    assert body["tools"] == [{"type": "openrouter:web_search"}]  # the guide's Quick Start entry: no options
    assert "plugins" not in body and "web_search_options" not in body
    assert_accepted("openrouter", body, emulator.requests[0].path)
    assert pred.metadata.citations == ()
    assert not pred.metadata.history.messages[0].get("reasoning_details")
    assert pred.metadata.usage.hosted_calls == {"web_search_requests": 1}
    assert round(_fee(reply["usage"]), 9) == 0.01  # OpenAI's web search call, passed through
    assert pred.metadata.usage.cost == pytest.approx(reply["usage"]["cost"])


OPTIONS = [
    (  # Exa keeps every option but the location, both domain filters at once
        DEEPSEEK,
        WebSearch(max_uses=3, search_context_size="high", allowed_domains=["github.com"], blocked_domains=["x.com"]),
        {
            "max_uses": 3,
            "search_context_size": "high",
            "allowed_domains": ["github.com"],
            "excluded_domains": ["x.com"],
        },
    ),
    (  # Anthropic's native search: max_uses forwarded, a location, one filter
        CLAUDE,
        WebSearch(max_uses=2, user_location={"city": "Utrecht", "country": "NL"}, allowed_domains=["rijksoverheid.nl"]),
        {
            "max_uses": 2,
            "user_location": {"type": "approximate", "city": "Utrecht", "country": "NL"},
            "allowed_domains": ["rijksoverheid.nl"],
        },
    ),
    (  # Google with a domain filter: OpenRouter searches with Exa, which keeps both filters and the bounds
        "openrouter/google/gemini-3-flash",
        WebSearch(max_uses=1, search_context_size="low", allowed_domains=["pydantic.dev"], blocked_domains=["a.com"]),
        {
            "max_uses": 1,
            "search_context_size": "low",
            "allowed_domains": ["pydantic.dev"],
            "excluded_domains": ["a.com"],
        },
    ),
]


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize(("model", "search", "parameters"), OPTIONS)
def test_the_options_go_out_as_the_server_tools_parameters(
    run: Any, engine: str, model: str, search: WebSearch, parameters: dict[str, Any]
) -> None:
    with Emulator([Scripted(200, EXA["response"])]) as emulator, dspy.context(lm=_lm(emulator, engine, model)):
        run(_agent(search), question=QUESTION)
    body = emulator.requests[0].body
    assert body["tools"] == [{"type": "openrouter:web_search", "parameters": parameters}]
    assert "plugins" not in body and "web_search_options" not in body
    assert_accepted("openrouter", body, emulator.requests[0].path)


def _searched(scripted: Scripted) -> Scripted:
    """A final message of a request in which the server tool searched (with Exa): the recording's annotations
    and usage on it."""
    body = json.loads(json.dumps(scripted.body))
    body["choices"][0]["message"]["annotations"] = NOTES
    body["usage"] = EXA["response"]["usage"]
    return Scripted(200, body)


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize(("finish", "reason"), [("submit", "submit"), ("auto", "answered")])
def test_a_turn_with_the_search_a_function_tool_and_submit_is_answered_with_its_citations(
    run: Any, engine: str, finish: str, reason: str
) -> None:
    """The model searches (OpenRouter runs it) and calls ``get_weather`` in the first request, and answers
    without searching in the second: every request offers the server tool after the function tools, only the
    searched reply is counted and cited. DeepSeek searches with Exa; the adapter sends its tools natively on
    both engines (LiteLLM does not know it calls tools)."""
    model = "deepseek/deepseek-chat"
    called = openrouter(calls=[("call_or0", "get_weather", {"city": "Paris"})], model=model, provider="DeepInfra")
    last = (
        openrouter(calls=[("call_or1", "submit", {"answer": "Sunny in Paris."})], model=model, provider="DeepInfra")
        if finish == "submit"
        else openrouter("Sunny in Paris.", model=model, provider="DeepInfra")
    )
    agent = _agent(WebSearch(max_uses=2), get_weather, finish=finish)
    with (
        Emulator([_searched(called), last]) as emulator,
        dspy.context(lm=_lm(emulator, engine), adapter=ReActAdapter(native_calls=True)),
    ):
        pred = run(agent, question="Weather in Paris?")
    assert pred.metadata.termination_reason == reason, pred.metadata.termination_error
    assert pred.answer == "Sunny in Paris."
    first, second = (r.body for r in emulator.requests)
    functions = ["get_weather", "submit"] if finish == "submit" else ["get_weather"]
    for body in (first, second):  # the server tool on every request, after the function tools; never a plugin
        assert [t.get("function", {}).get("name") for t in body["tools"][:-1]] == functions
        assert body["tools"][-1] == {"type": "openrouter:web_search", "parameters": {"max_uses": 2}}
        assert (body["usage"], "plugins" in body) == ({"include": True}, False)
        assert_accepted("openrouter", body, "/api/v1/chat/completions")
    # the searched reply goes back as the call it made, without the annotations
    (turn,) = [m for m in second["messages"] if m["role"] == "assistant"]
    assert "annotations" not in turn
    assert [c["function"]["name"] for c in turn["tool_calls"]] == ["get_weather"]
    result = second["messages"][-1]
    assert (result["role"], result["tool_call_id"]) == ("tool", "call_or0")
    assert pred.metadata.citations == tuple({**n, "cited_for": ""} for n in NOTES)  # the reply had no text
    usage = pred.metadata.usage
    assert usage.hosted_calls == {"web_search_requests": 1}
    assert [c.hosted_calls for c in usage.calls] == [{"web_search_requests": 1}, {}]
    # the searched request at what OpenRouter charged (natively DSPy prices no tokens beside a builtin tool)
    assert usage.calls[0].cost == pytest.approx(EXA["response"]["usage"]["cost"])
    kinds = [[d["type"] for d in m.get("reasoning_details") or []] for m in pred.metadata.history.messages]
    assert kinds[0] == ["openrouter_served"] and not any(kinds[1:])


@pytest.mark.parametrize("engine", ENGINES)
def test_the_answer_goes_back_as_its_text_and_the_next_turn_offers_the_tool_again(run: Any, engine: str) -> None:
    reply = EXA["response"]
    later = {**reply, "choices": [{**reply["choices"][0], "message": {**MESSAGE, "content": "Still there."}}]}
    with (
        Emulator([Scripted(200, reply), Scripted(200, later)]) as emulator,
        dspy.context(lm=_lm(emulator, engine)),
    ):
        first = run(_agent(WebSearch()), question=QUESTION)
        saved = json.loads(json.dumps(first.metadata.history.model_dump()))
        second = run(_agent(WebSearch()), question="And now?", history=dspy.History(**saved))
    assert second.answer == "Still there."
    body = emulator.requests[1].body
    (answer,) = [m for m in body["messages"] if m["role"] == "assistant"]
    if engine == "auto":
        assert answer == {"role": "assistant", "content": MESSAGE["content"]}  # the text as written, nothing else
    else:  # LiteLLM: DSPy's written fields around the same text
        assert set(answer) == {"role", "content"}
        assert f"[[ ## answer ## ]]\n{MESSAGE['content']}\n" in answer["content"]
    assert body["tools"] == [{"type": "openrouter:web_search"}]
    assert_accepted("openrouter", body, emulator.requests[1].path)


FILE_PARSER = {"id": "file-parser", "pdf": {"engine": "pdf-text"}}  # OpenRouter's PDF plugin


@pytest.mark.parametrize("engine", ENGINES)
def test_the_lms_other_plugins_go_as_given_beside_the_server_tool(run: Any, engine: str) -> None:
    """An LM given plugins but not the web one searches with the server tool; its plugins go as given."""
    with (
        Emulator([Scripted(200, EXA["response"])]) as emulator,
        dspy.context(lm=_lm(emulator, engine, plugins=[FILE_PARSER])),
    ):
        pred = run(_agent(WebSearch()), question=QUESTION)
    assert pred.metadata.termination_reason == "answered", pred.metadata.termination_error
    body = emulator.requests[0].body
    assert (body["plugins"], body["tools"]) == ([FILE_PARSER], [{"type": "openrouter:web_search"}])
    assert_accepted("openrouter", body, emulator.requests[0].path)
    assert pred.metadata.usage.hosted_calls == {"web_search_requests": 1}


REFUSED = [
    (  # OpenAI's native search: max_uses reaches only Anthropic's
        WebSearch(max_uses=2),
        GPT,
        "WebSearch(max_uses=...) on model 'openrouter/openai/gpt-4.1-mini': OpenRouter's web search server tool "
        "searches with openai's native search, which ignores max_uses",
    ),
    (  # no native search takes it
        WebSearch(search_context_size="low"),
        CLAUDE,
        "WebSearch(search_context_size=...) on model 'openrouter/anthropic/claude-fable-5.1': OpenRouter's web "
        "search server tool searches with anthropic's native search, which ignores search_context_size",
    ),
    (  # Exa has no location
        WebSearch(user_location={"city": "Utrecht", "country": "NL"}),
        DEEPSEEK,
        "WebSearch(user_location=...) on model 'openrouter/deepseek/deepseek-chat': OpenRouter's web search server "
        "tool searches with Exa",
    ),
    (  # Gemini's search has no location
        WebSearch(user_location={"country": "NL"}),
        "openrouter/google/gemini-3-flash",
        "searches with google's native search, which ignores user_location",
    ),
    (
        WebSearch(user_location={"city": "Utrecht", "zip": "3511"}),
        CLAUDE,
        "WebSearch(user_location=...) on model 'openrouter/anthropic/claude-fable-5.1': OpenRouter's web search "
        "server tool takes an approximate location",
    ),
    (
        WebSearch(blocked_domains=["reddit.com"]),
        GPT,
        "WebSearch(blocked_domains=...) on model 'openrouter/openai/gpt-4.1-mini': OpenRouter's web search server "
        "tool sends it as excluded_domains, which openai's native search ignores",
    ),
    (
        WebSearch(allowed_domains=["github.com"], blocked_domains=["reddit.com"]),
        CLAUDE,
        "anthropic's native search takes allowed_domains or excluded_domains, not both",
    ),
    (
        WebSearch(allowed_domains=[f"site{n}.com" for n in range(6)]),
        "openrouter/x-ai/grok-4.1-fast",
        "WebSearch(allowed_domains=...) on model 'openrouter/x-ai/grok-4.1-fast': OpenRouter's web search server "
        "tool searches with x-ai's native search, which takes at most 5 domains in one filter",
    ),
    (WebFetch(), DEEPSEEK, "on OpenRouter only WebSearch is built (its openrouter:web_search server tool, or"),
]


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize(("tool", "model", "message"), REFUSED)
def test_what_the_server_tool_would_drop_is_refused_before_any_request(
    run: Any, engine: str, tool: Any, model: str, message: str
) -> None:
    with (
        Emulator([]) as emulator,
        dspy.context(lm=_lm(emulator, engine, model)),
        pytest.raises(dspy_imp.ConfigurationError) as raised,
    ):
        run(_agent(tool, finish="submit"), question=QUESTION)
    assert message in str(raised.value)
    assert emulator.requests == []
