"""OpenRouter's web search on a streamed reply over HTTP, on both ``dspy.LM`` engines and both drivers: the web
plugin's annotations kept as the chunks served them, and the server tool's searches counted from the last chunk.

The stream is a third-party recording served byte for byte (``cassettes/hosted/
openrouter_web_search_stream.json``, naming the pydantic-ai cassette it came from): a live streamed
OpenRouter reply for ``deepseek/deepseek-chat`` to a request with ``plugins: [{"id": "web"}]`` and
``web_search_options: {"search_context_size": "medium"}``: OpenRouter's ``: OPENROUTER PROCESSING``
comment lines, five chunks each carrying one ``url_citation`` annotation on a delta with empty content,
the answer's text in pieces, and two finish chunks, the last with the usage (``cost`` 0.0077585, of it
``upstream_inference_cost`` 0.0007585). What the turn must do: record the message the chunks make (its
text joined, the five annotations in the order served), put them in ``pred.metadata.citations``, and
count and price the search as a reply not streamed.

The server tool's stream is a third-party recording served byte for byte too (``cassettes/hosted/
openrouter_web_search_tool_native_stream.json``): ``openai/gpt-4.1-mini`` (OpenAI's native search) to a request
with ``tools: [{"type": "openrouter:web_search", ...}]``, the text in pieces, no annotations, and the usage on the
last chunk (``server_tool_use_details.web_search_requests`` 1; ``cost`` 0.0133176, of it the model's tokens
0.0032696 + 0.000048: the search 0.01).
"""

from __future__ import annotations

import json
from pathlib import Path

import dspy
import pytest
from emulator import Emulator, Scripted
from streaming_helpers import stream_items

import dspy_imp
from dspy_imp.hosted import WebSearch

pytestmark = pytest.mark.block_network(allowed_hosts=[r"127\.0\.0\.1$"])

RECORDED = json.loads(
    (Path(__file__).resolve().parents[2] / "cassettes" / "hosted" / "openrouter_web_search_stream.json").read_text()
)["interactions"][0]
SSE = RECORDED["response"]["sse"]
QUESTION = RECORDED["request"]["messages"][-1]["content"]
CHUNKS = [json.loads(line[len("data: ") :]) for line in SSE.splitlines() if line.startswith("data: {")]
NOTES = [n for c in CHUNKS for n in c["choices"][0]["delta"].get("annotations") or ()]
TEXT = "".join(c["choices"][0]["delta"].get("content") or "" for c in CHUNKS)
USAGE = CHUNKS[-1]["usage"]


NATIVE = json.loads(
    (
        Path(__file__).resolve().parents[2] / "cassettes" / "hosted" / "openrouter_web_search_tool_native_stream.json"
    ).read_text()
)["interactions"][0]
NATIVE_CHUNKS = [
    json.loads(line[len("data: ") :]) for line in NATIVE["response"]["sse"].splitlines() if line.startswith("data: {")
]
NATIVE_USAGE = NATIVE_CHUNKS[-1]["usage"]


def _lm(
    emulator: Emulator, engine: str, model: str = "openrouter/deepseek/deepseek-chat", **options: object
) -> dspy.LM:
    return dspy.LM(
        model,
        api_base=emulator.base_url + "/api/v1",
        api_key="sk-or-test",
        cache=False,
        engine=engine,
        num_retries=0,
        **options,
    )


@pytest.mark.parametrize("engine", ["auto", "litellm"])
def test_a_streamed_web_plugin_reply_keeps_the_annotations_its_chunks_served(how: str, engine: str) -> None:
    assert len(NOTES) == 5 and TEXT == "https://github.com/pydantic/pydantic-ai"  # the recording, as read here
    agent = dspy_imp.ReActV2("question -> answer", tools=[WebSearch(search_context_size="medium")])
    with (
        Emulator([Scripted(200, {}, sse=SSE)]) as emulator,
        dspy.context(lm=_lm(emulator, engine, plugins=[{"id": "web"}])),  # the LM's own web plugin
    ):
        streamed = stream_items(agent, how, [], question=QUESTION)[-1]

    assert isinstance(streamed, dspy_imp.Prediction)
    assert streamed.metadata.termination_reason == "answered", streamed.metadata.termination_error
    (request,) = emulator.requests
    assert request.body["stream"] is True
    assert (request.body["plugins"], request.body["web_search_options"]) == (
        RECORDED["request"]["plugins"],
        RECORDED["request"]["web_search_options"],
    )
    assert streamed.answer == TEXT
    (entry,) = streamed.metadata.history.messages
    (served,) = entry["reasoning_details"]
    assert served["type"] == "openrouter_served"
    (message,) = served["content"]
    # the text joined from its pieces, every chunk's annotation in the order served (no refusal was streamed;
    # LiteLLM's message has its null one)
    assert {k: v for k, v in message.items() if k != "refusal"} == {
        "role": "assistant",
        "content": TEXT,
        "annotations": NOTES,
    }
    assert message.get("refusal") is None
    assert streamed.metadata.citations == tuple({**n, "cited_for": TEXT} for n in NOTES)
    usage = streamed.metadata.usage
    assert usage.hosted_calls == {"web_search_requests": 1}
    fee = USAGE["cost"] - USAGE["cost_details"]["upstream_inference_cost"]
    assert round(fee, 9) == 0.007
    # an LM given its own plugins goes through LiteLLM on either engine (DSPy's choice): OpenRouter's own cost
    assert usage.cost == pytest.approx(USAGE["cost"])


@pytest.mark.parametrize("engine", ["auto", "litellm"])
def test_a_streamed_server_tool_reply_counts_its_searches_from_the_last_chunk(how: str, engine: str) -> None:
    """A native search serves no annotations: nothing is recorded of it, and its search is counted and priced
    from the usage the last chunk carries, as a reply not streamed."""
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in NATIVE_CHUNKS)
    assert text == "https://github.com/pydantic/pydantic-ai "  # the recording, as read here
    agent = dspy_imp.ReActV2("question -> answer", tools=[WebSearch()])
    with (
        Emulator([Scripted(200, {}, sse=NATIVE["response"]["sse"])]) as emulator,
        dspy.context(lm=_lm(emulator, engine, "openrouter/openai/gpt-4.1-mini")),
    ):
        streamed = stream_items(agent, how, [], question=QUESTION)[-1]

    assert isinstance(streamed, dspy_imp.Prediction)
    assert streamed.metadata.termination_reason == "answered", streamed.metadata.termination_error
    (request,) = emulator.requests
    assert (request.body["stream"], request.body["tools"]) == (True, [{"type": "openrouter:web_search"}])
    assert "plugins" not in request.body
    assert streamed.answer == text  # as served, its trailing space too
    (entry,) = streamed.metadata.history.messages
    assert not entry.get("reasoning_details")  # no annotations: no served entry
    assert streamed.metadata.citations == ()
    usage = streamed.metadata.usage
    # LiteLLM's stream builder keeps the last chunk's cost but drops its server_tool_use_details: the search is
    # not counted there (and no annotation stands for it)
    assert usage.hosted_calls == ({"web_search_requests": 1} if engine == "auto" else {})
    spent = NATIVE_USAGE["cost_details"]
    search = (
        NATIVE_USAGE["cost"] - spent["upstream_inference_prompt_cost"] - spent["upstream_inference_completions_cost"]
    )
    assert round(search, 9) == 0.01  # OpenAI's web search call, passed through
    # what OpenRouter charged, tokens and search (natively DSPy prices no tokens beside a builtin tool; LiteLLM's
    # cost is OpenRouter's own)
    assert usage.cost == pytest.approx(NATIVE_USAGE["cost"])


@pytest.mark.parametrize("engine", ["auto", "litellm"])
def test_a_streamed_server_tool_reply_keeps_the_annotations_its_chunks_served(how: str, engine: str) -> None:
    """The server tool's Exa search streams its annotations as the web plugin's do, one to a delta with empty
    content before the text (pydantic-ai's re-recording of the same question with the server tool has this
    shape): the plugin recording's stream, served to a server-tool request, is assembled the same way."""
    agent = dspy_imp.ReActV2("question -> answer", tools=[WebSearch(max_uses=1)])
    with Emulator([Scripted(200, {}, sse=SSE)]) as emulator, dspy.context(lm=_lm(emulator, engine)):
        streamed = stream_items(agent, how, [], question=QUESTION)[-1]

    assert isinstance(streamed, dspy_imp.Prediction)
    assert streamed.metadata.termination_reason == "answered", streamed.metadata.termination_error
    (request,) = emulator.requests
    assert request.body["tools"] == [{"type": "openrouter:web_search", "parameters": {"max_uses": 1}}]
    (entry,) = streamed.metadata.history.messages
    (served,) = entry["reasoning_details"]
    (message,) = served["content"]
    assert (served["type"], message["content"], message["annotations"]) == ("openrouter_served", TEXT, NOTES)
    assert streamed.metadata.citations == tuple({**n, "cited_for": TEXT} for n in NOTES)
    assert streamed.metadata.usage.hosted_calls == {"web_search_requests": 1}  # annotations, no count: one
