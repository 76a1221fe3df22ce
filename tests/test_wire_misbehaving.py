"""Tools and models that misbehave, over the real HTTP path on both DSPy engines: a provider's 503
falls back to the next LM's server; a timed-out tool and a cut result reach the provider as
ordinary tool messages, paired with their calls."""

from __future__ import annotations

import threading
from typing import Any

import dspy
import pytest
from fake_openai_server import FakeOpenAIServer, HTTPReply, error_body, text_completion, tool_calls_completion

import dspy_imp

pytestmark = pytest.mark.block_network(allowed_hosts=[r"127\.0\.0\.1$"])

RELEASE = threading.Event()


def search(query: str) -> str:
    """Search the web."""
    RELEASE.wait(30)
    return "late"


def fetch(url: str) -> str:
    """Fetch a page."""
    return "x" * 40


def lm_for(server: FakeOpenAIServer, engine: str, model: str = "openai/gpt-4o-mini") -> dspy.LM:
    return dspy.LM(model, api_base=server.base_url, api_key="sk-test", cache=False, num_retries=0, engine=engine)


@pytest.mark.parametrize("engine", ["auto", "litellm"])
def test_a_provider_error_falls_back_to_the_next_server(engine: str, run: Any) -> None:
    overloaded = HTTPReply(error_body("The server is overloaded", "server_error"), status=503)
    with FakeOpenAIServer([overloaded]) as down, FakeOpenAIServer([text_completion("Paris.")]) as up:
        agent = dspy_imp.ReActV2("question -> answer", fallback=[lm_for(up, engine, "openai/gpt-4o")])
        with dspy.context(lm=lm_for(down, engine)):
            pred = run(agent, question="Capital of France?")
        assert pred.answer == "Paris."
        assert down.requests[0].body["messages"] == up.requests[0].body["messages"]
        assert (down.requests[0].body["model"], up.requests[0].body["model"]) == ("gpt-4o-mini", "gpt-4o")
    [hop] = pred.metadata.fallbacks
    assert (hop["model"], hop["next"]) == ("openai/gpt-4o-mini", "openai/gpt-4o")
    assert pred.metadata.usage.requests == {"step": 2}


@pytest.mark.parametrize("engine", ["auto", "litellm"])
def test_a_timed_out_tool_and_a_cut_result_are_tool_messages(engine: str, run: Any) -> None:
    RELEASE.clear()
    script = [
        tool_calls_completion([("c1", "search", {"query": "cats"}), ("c2", "fetch", {"url": "a"})]),
        text_completion("Done."),
    ]
    try:
        with FakeOpenAIServer(script) as server:
            agent = dspy_imp.ReActV2(
                "question -> answer", tools=[search, fetch], tool_timeouts={"search": 0.05}, max_result_chars=8
            )
            with dspy.context(lm=lm_for(server, engine)):
                pred = run(agent, question="Cats?")
            second = server.requests[1].body["messages"]
    finally:
        RELEASE.set()
    assert pred.answer == "Done."
    assert [(m["role"], m["tool_call_id"], m["content"]) for m in second[-2:]] == [
        ("tool", "c1", "Error: search timed out after 0.05 s"),
        ("tool", "c2", "xxxxxxxx[result cut: 8 of 40 characters shown]"),
    ]
