"""OpenRouter's web plugin over HTTP: ``WebSearch`` as ``plugins: [{"id": "web"}]`` when the LM was given
OpenRouter's web plugin itself (``dspy.LM(..., plugins=[{"id": "web"}])``) or names an ``:online`` model, on
both ``dspy.LM`` engines and both drivers (without that choice ``WebSearch`` is OpenRouter's server tool:
``test_hosted_openrouter_server_tool``).

The searching reply is a third-party recording served exactly as recorded (``cassettes/hosted/
openrouter_web_search.json``, naming the pydantic-ai cassette it came from): a live OpenRouter reply for
``deepseek/deepseek-chat`` (Exa search: the model has no native one) to a request with ``plugins:
[{"id": "web"}]`` and ``web_search_options: {"search_context_size": "medium"}``, whose message carries
five ``url_citation`` annotations (each with the result's ``content``, spans ``0, 0``) and whose usage
says what OpenRouter charged (``cost`` 0.0077641) and what the model's provider did
(``cost_details.upstream_inference_cost`` 0.0007641): the search's fee is the rest, 0.007, OpenRouter's
documented Exa price per request (its web search guide, Pricing). The turn that calls a function tool
and ``submit`` beside the search is played on replies in OpenRouter's ``chat.completion`` shape
(``responses.openrouter``, a Claude model's tool calls with their ``reasoning_details``) carrying that
recording's annotations and usage, as the plugin serves them on every reply it searched for. The
options' spelling (``include_domains``, ``exclude_domains``) and which engine keeps which filter are
from OpenRouter's web search guide only (no public recording of them was found).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import dspy
import pytest
from emulator import Emulator, Scripted
from provider_rules import assert_accepted, unmarked
from responses import openrouter, reasoning_text

import dspy_imp
from dspy_imp.hosted import CodeExecution, FileSearch, RemoteMCP, WebFetch, WebSearch, calls_in

pytestmark = pytest.mark.block_network(allowed_hosts=[r"127\.0\.0\.1$"])

RECORDINGS = Path(__file__).resolve().parents[2] / "cassettes" / "hosted"
RECORDED = json.loads((RECORDINGS / "openrouter_web_search.json").read_text())["interactions"][0]
SEARCH = RECORDED["response"]
MESSAGE = SEARCH["choices"][0]["message"]
NOTES = MESSAGE["annotations"]
QUESTION = RECORDED["request"]["messages"][-1]["content"]  # "Use web search to find Pydantic AI's GitHub ..."
ENGINES = ["auto", "litellm"]
DEEPSEEK = "openrouter/deepseek/deepseek-chat"
CLAUDE = "openrouter/anthropic/claude-fable-5.1"
SYSTEM = (
    "Given the fields `question`, produce the fields `answer`.\n"
    "When the final answer is ready, reply without calling a tool: that message is `answer`."
)
# DSPy's native engine prices the tokens at its price map's rates for the model; the fee is OpenRouter's
DEEPSEEK_IN, DEEPSEEK_OUT = 2.574e-07, 1.0287e-06
FEE = SEARCH["usage"]["cost"] - SEARCH["usage"]["cost_details"]["upstream_inference_cost"]


def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"Sunny in {city}."


WEB = [{"id": "web"}]  # the LM's own web plugin: the user's choice of it over the server tool


def _lm(emulator: Emulator, engine: str, model: str = DEEPSEEK, **options: Any) -> dspy.LM:
    plugins = options.pop("plugins", WEB)  # None: no plugin of its own (an ``:online`` model's suffix is one)
    return dspy.LM(
        model,
        api_base=emulator.base_url + "/api/v1",
        api_key="sk-or-test",
        cache=False,
        engine=engine,
        num_retries=0,
        **({"plugins": plugins} if plugins else {}),
        **options,
    )


# Claude behind OpenRouter with DSPy's default reasoning_effort goes through LiteLLM on either engine; with
# OpenRouter's own reasoning option it stays native (docs/providers.md, OpenRouter)
NATIVE_CLAUDE = {"reasoning": {"effort": "low"}, "reasoning_effort": None}


def _agent(*tools: Any, finish: str = "auto") -> dspy_imp.ReActV2:
    return dspy_imp.ReActV2(
        "question -> answer", tools=list(tools or (WebSearch(search_context_size="medium"),)), finish=finish
    )


def _cited(text: str, notes: list[dict[str, Any]]) -> tuple[dict[str, Any], ...]:
    """Each annotation as served; one marking no span (Exa's ``0, 0``) grounds the whole answer."""
    return tuple(
        {**n, "cited_for": text[n["url_citation"]["start_index"] : n["url_citation"]["end_index"]] or text}
        for n in notes
    )


@pytest.mark.parametrize("engine", ENGINES)
def test_the_web_plugin_searches_and_its_citations_reach_the_metadata(run: Any, engine: str) -> None:
    with Emulator([Scripted(200, SEARCH)]) as emulator, dspy.context(lm=_lm(emulator, engine)):
        pred = run(_agent(), question=QUESTION)
    assert pred.metadata.termination_reason == "answered", pred.metadata.termination_error
    assert pred.answer == MESSAGE["content"]
    (request,) = emulator.requests
    assert request.path == "/api/v1/chat/completions"
    body = request.body
    # the recorded request's plugin and web_search_options, and the usage accounting LiteLLM asks for too
    searched = {
        "model": "deepseek/deepseek-chat",
        "plugins": RECORDED["request"]["plugins"],
        "web_search_options": RECORDED["request"]["web_search_options"],
        "usage": {"include": True},
    }
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
    assert pred.metadata.citations == _cited(MESSAGE["content"], NOTES)
    assert [c["url_citation"]["url"] for c in pred.metadata.citations][:2] == [
        "https://github.com/pydantic/pydantic-ai",
        "https://github.com/pydantic/pydantic-ai/tree/v1.84.0",
    ]
    usage = pred.metadata.usage
    assert usage.hosted_calls == {"web_search_requests": 1}
    assert [c.hosted_calls for c in usage.calls] == [{"web_search_requests": 1}]
    assert round(FEE, 9) == 0.007  # OpenRouter's documented Exa price per request
    # an LM given its own plugins goes through LiteLLM on either engine (DSPy's choice): LiteLLM's cost is
    # OpenRouter's own, the search's fee in it (natively priced: the :online test below)
    assert usage.cost == pytest.approx(SEARCH["usage"]["cost"])
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
def test_the_domain_filters_go_out_as_the_plugins_include_and_exclude_domains(run: Any, engine: str) -> None:
    search = WebSearch(allowed_domains=["github.com", "*.pydantic.dev"], blocked_domains=["reddit.com"])
    with Emulator([Scripted(200, SEARCH)]) as emulator, dspy.context(lm=_lm(emulator, engine)):
        run(_agent(search), question=QUESTION)
    body = emulator.requests[0].body
    # OpenRouter's web search guide, Domain Filtering: Exa (this model's engine) keeps both at once
    assert body["plugins"] == [
        {"id": "web", "include_domains": ["github.com", "*.pydantic.dev"], "exclude_domains": ["reddit.com"]}
    ]
    assert "web_search_options" not in body  # no search_context_size asked: OpenRouter's default
    assert_accepted("openrouter", body, emulator.requests[0].path)


def _searched(scripted: Scripted) -> Scripted:
    """An OpenRouter reply the web plugin searched for: the recording's annotations and usage on its message."""
    body = json.loads(json.dumps(scripted.body))
    body["choices"][0]["message"]["annotations"] = NOTES
    body["usage"] = SEARCH["usage"]
    return Scripted(200, body)


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize(("finish", "reason"), [("submit", "submit"), ("auto", "answered")])
def test_a_turn_with_the_search_and_a_function_tool_is_answered_with_its_citations(
    run: Any, engine: str, finish: str, reason: str
) -> None:
    """``submit``: the answer comes as the loop's ``submit`` call; ``auto``: as the last reply's text."""
    step = [reasoning_text("Weather first.", "EqQBCkYIBxgCKkDorw1")]
    done = [reasoning_text("Submit.", "EqQBCkYIBxgCKkDors")]
    last = (
        openrouter(calls=[("toolu_or1", "submit", {"answer": "Sunny in Paris."})], details=done)
        if finish == "submit"
        else openrouter("Sunny in Paris.", details=done)
    )
    called = openrouter(calls=[("toolu_or0", "get_weather", {"city": "Paris"})], details=step)
    script = [_searched(called), _searched(last)]
    options = NATIVE_CLAUDE if engine == "auto" else {}
    with Emulator(script) as emulator, dspy.context(lm=_lm(emulator, engine, CLAUDE, **options)):
        pred = run(_agent(WebSearch(), get_weather, finish=finish), question="Weather in Paris?")
    assert pred.metadata.termination_reason == reason, pred.metadata.termination_error
    assert pred.answer == "Sunny in Paris."
    first, second = (r.body for r in emulator.requests)
    for body in (first, second):  # every request of the turn carries the plugin, beside the function tools
        assert body["plugins"] == [{"id": "web"}]
        assert body["usage"] == {"include": True}
        if engine == "auto":  # OpenRouter's reasoning option as given (engine="litellm": reasoning_effort)
            assert (body["reasoning"], "reasoning_effort" in body) == ({"effort": "low"}, False)
        assert {t["function"]["name"] for t in body["tools"]} >= {"get_weather"}
        assert_accepted("openrouter", body, "/api/v1/chat/completions")
    # the searched reply goes back as the call it made, with its reasoning_details, without the annotations
    (turn,) = [m for m in second["messages"] if m["role"] == "assistant"]
    assert "annotations" not in turn
    assert turn["tool_calls"][0]["function"]["name"] == "get_weather"
    assert turn["reasoning_details"] == step
    result = unmarked(second["messages"][-1])  # the prompt cache's mark on Claude, in a text part (natively)
    assert (result["role"], result["tool_call_id"]) == ("tool", "toolu_or0")
    assert result["content"] in ("Sunny in Paris.", [{"type": "text", "text": "Sunny in Paris."}])
    # both replies searched: each one's annotations, once per reply, and both searches counted
    assert [c["url_citation"]["url"] for c in pred.metadata.citations] == [
        n["url_citation"]["url"] for n in NOTES + NOTES
    ]
    usage = pred.metadata.usage
    assert usage.hosted_calls == {"web_search_requests": 2}
    # OpenRouter's cost of each reply, as LiteLLM reads it (an LM given its own plugins goes through LiteLLM)
    assert [c.cost for c in usage.calls] == [pytest.approx(SEARCH["usage"]["cost"])] * 2
    kinds = [
        [d["type"] for d in m.get("reasoning_details") or []]
        for m in pred.metadata.history.messages
        if m.get("reasoning_details")
    ]
    assert kinds == [["reasoning.text", "openrouter_served"], ["reasoning.text", "openrouter_served"]]


@pytest.mark.parametrize("engine", ENGINES)
def test_the_answer_goes_back_as_its_text_on_a_later_turn(run: Any, engine: str) -> None:
    later = {**SEARCH, "choices": [{**SEARCH["choices"][0], "message": {**MESSAGE, "content": "Still there."}}]}
    with (
        Emulator([Scripted(200, SEARCH), Scripted(200, later)]) as emulator,
        dspy.context(lm=_lm(emulator, engine)),
    ):
        first = run(_agent(), question=QUESTION)
        saved = json.loads(json.dumps(first.metadata.history.model_dump()))
        second = run(_agent(), question="And now?", history=dspy.History(**saved))
    assert second.answer == "Still there."
    body = emulator.requests[1].body
    (answer,) = [m for m in body["messages"] if m["role"] == "assistant"]
    if engine == "auto":
        assert answer == {"role": "assistant", "content": MESSAGE["content"]}  # the text as written, nothing else
    else:  # LiteLLM: DSPy's written fields around the same text
        assert set(answer) == {"role", "content"}
        assert f"[[ ## answer ## ]]\n{MESSAGE['content']}\n" in answer["content"]
    assert body["plugins"] == [{"id": "web"}]
    assert_accepted("openrouter", body, emulator.requests[1].path)
    assert second.metadata.citations == _cited("Still there.", NOTES)


REFUSED = [
    (
        WebSearch(max_uses=2),
        DEEPSEEK,
        "WebSearch(max_uses=...) on model 'openrouter/deepseek/deepseek-chat': OpenRouter's web plugin (the LM's "
        "own choice) has no max_uses",
    ),
    (
        WebSearch(user_location={"city": "Utrecht", "country": "NL"}),
        DEEPSEEK,
        "WebSearch(user_location=...) on model 'openrouter/deepseek/deepseek-chat': OpenRouter's web plugin",
    ),
    (
        WebSearch(blocked_domains=["reddit.com"]),
        "openrouter/openai/gpt-4o",
        "WebSearch(blocked_domains=...) on model 'openrouter/openai/gpt-4o': OpenRouter's web plugin sends it as "
        "exclude_domains, which openai's native search ignores",
    ),
    (
        WebSearch(allowed_domains=["github.com"], blocked_domains=["reddit.com"]),
        CLAUDE,
        "anthropic's native search takes include_domains or exclude_domains, not both",
    ),
    (
        WebSearch(allowed_domains=[f"site{n}.com" for n in range(6)]),
        "openrouter/x-ai/grok-4.1-fast",
        "takes at most 5 domains in one filter",
    ),
    # an LM given its own plugins goes through LiteLLM on either engine
    (CodeExecution(), DEEPSEEK, "no hosted CodeExecution on this route (litellm engine, provider 'openrouter')"),
    (WebFetch(), DEEPSEEK, "on OpenRouter only WebSearch is built (its openrouter:web_search server tool, or"),
    (RemoteMCP(url="https://mcp.deepwiki.com/mcp"), DEEPSEEK, "no hosted RemoteMCP"),
    (FileSearch(store_ids=["vs_1"]), DEEPSEEK, "no hosted FileSearch"),
]


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize(("tool", "model", "message"), REFUSED)
def test_what_openrouter_cannot_carry_is_refused_before_any_request(
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


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("tools", [(), (WebSearch(),)], ids=["suffix-alone", "with-WebSearch"])
def test_an_online_model_searches_through_its_suffix_and_its_citations_are_kept(
    run: Any, engine: str, tools: tuple[Any, ...]
) -> None:
    """``:online`` is the web plugin (OpenRouter's web search guide): its replies are read and counted as the
    plugin's, with ``WebSearch`` or without it; with it the request names the plugin too, as the guide's own
    ``"model": "openai/gpt-5.2:online", "plugins": [...]`` example does."""
    with (
        Emulator([Scripted(200, SEARCH)]) as emulator,
        dspy.context(lm=_lm(emulator, engine, DEEPSEEK + ":online", plugins=None)),
    ):
        pred = run(dspy_imp.ReActV2("question -> answer", tools=list(tools)), question=QUESTION)
    assert pred.metadata.termination_reason == "answered", pred.metadata.termination_error
    body = emulator.requests[0].body
    assert body["model"] == "deepseek/deepseek-chat:online"
    assert body.get("plugins") == ([{"id": "web"}] if tools else None)
    assert_accepted("openrouter", body, emulator.requests[0].path)
    assert pred.metadata.citations == _cited(MESSAGE["content"], NOTES)
    assert pred.metadata.usage.hosted_calls == {"web_search_requests": 1}
    if engine == "auto":  # sent natively: the tokens at DSPy's rates, and the search at what OpenRouter charged
        assert pred.metadata.usage.cost == pytest.approx(1829 * DEEPSEEK_IN + 25 * DEEPSEEK_OUT + FEE)
    else:  # LiteLLM's cost is OpenRouter's own, the search's fee in it
        assert pred.metadata.usage.cost == pytest.approx(SEARCH["usage"]["cost"])


FILE_PARSER = {"id": "file-parser", "pdf": {"engine": "pdf-text"}}  # OpenRouter's PDF plugin


@pytest.mark.parametrize("engine", ENGINES)
def test_the_lms_own_plugins_stay_and_its_web_plugin_keeps_its_engine(run: Any, engine: str) -> None:
    """``dspy.LM(..., plugins=[...])``: the other plugins go as given; the web plugin's ``engine`` and
    ``max_results`` stay under the ``WebSearch``'s filters, and the engine decides which filters hold
    (Exa keeps ``exclude_domains``, which OpenAI's native search would drop)."""
    given = [FILE_PARSER, {"id": "web", "engine": "exa", "max_results": 3}]
    search = WebSearch(blocked_domains=["reddit.com"])
    with (
        Emulator([Scripted(200, SEARCH)]) as emulator,
        dspy.context(lm=_lm(emulator, engine, "openrouter/openai/gpt-4o", plugins=given)),
    ):
        pred = run(_agent(search), question=QUESTION)
    assert pred.metadata.termination_reason == "answered", pred.metadata.termination_error
    body = emulator.requests[0].body
    assert body["plugins"] == [
        FILE_PARSER,
        {"id": "web", "engine": "exa", "max_results": 3, "exclude_domains": ["reddit.com"]},
    ]
    assert_accepted("openrouter", body, emulator.requests[0].path)


@pytest.mark.parametrize("engine", ENGINES)
def test_a_filter_the_named_engine_drops_is_refused(run: Any, engine: str) -> None:
    given = [{"id": "web", "engine": "parallel"}]
    with (
        Emulator([]) as emulator,
        dspy.context(lm=_lm(emulator, engine, DEEPSEEK, plugins=given)),
        pytest.raises(dspy_imp.ConfigurationError, match=r"the parallel engine takes include_domains or exclude"),
    ):
        run(_agent(WebSearch(allowed_domains=["arxiv.org"], blocked_domains=["reddit.com"])), question=QUESTION)
    assert emulator.requests == []
