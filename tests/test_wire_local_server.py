"""The real HTTP path: ReActV2 against a local OpenAI-compatible server, on both DSPy engines.

DSPy 3.4's default engine (native lm15) speaks raw sockets, so no cassette can replay it;
``engine="litellm"`` goes LiteLLM -> OpenAI SDK -> httpx2. Both send their requests to
``tests/fake_openai_server.py`` on 127.0.0.1, which records them; the test asserts on what
went over the wire. Every other host stays blocked by ``--block-network``.

What differs between the engines on this path (so it is not asserted): the tool-call
``arguments`` string (lm15 re-serializes compactly, ``{"city":"Paris"}``; LiteLLM keeps the
provider's ``{"city": "Paris"}``) and the HTTP headers.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import dspy
import pytest
from fake_openai_server import FakeOpenAIServer, text_completion, tool_calls_completion

import dspy_imp

# The narrowest opening: this module may reach the local server and nothing else.
pytestmark = pytest.mark.block_network(allowed_hosts=[r"127\.0\.0\.1$"])

CALL_ID = "call_weather_1"
ANSWER = "It is sunny and 21°C in Paris."
USER_AGENT = {"auto": "lm15/stdlib", "litellm": "DSPy/"}  # proves which engine actually sent it


def get_weather(city: str) -> str:
    """Get the current weather for a city."""
    return f"sunny, 21°C in {city}"


@pytest.fixture
def server() -> Iterator[FakeOpenAIServer]:
    script = [
        tool_calls_completion([(CALL_ID, "get_weather", {"city": "Paris"})]),
        text_completion(ANSWER),
    ]
    with FakeOpenAIServer(script) as fake:
        yield fake


@pytest.mark.parametrize("engine", ["auto", "litellm"])
def test_a_tool_call_then_a_text_answer_over_http(server: FakeOpenAIServer, engine: str, run: Any) -> None:
    lm = dspy.LM(
        "openai/gpt-4o-mini",
        api_base=server.base_url,
        api_key="sk-test",
        cache=False,
        num_retries=0,
        engine=engine,
    )
    agent = dspy_imp.ReActV2("question -> answer", tools=[get_weather])

    with dspy.context(lm=lm):
        pred = run(agent, question="What is the weather in Paris?")

    assert pred.answer == ANSWER
    assert pred.metadata.termination_reason == "answered"
    assert pred.metadata.termination_cause is None
    assert pred.metadata.finish_reason == "stop"

    assert [r.path for r in server.requests] == ["/v1/chat/completions"] * 2
    assert all(r.headers["user-agent"].startswith(USER_AGENT[engine]) for r in server.requests)
    first, second = (r.body for r in server.requests)
    for body in (first, second):
        assert body["model"] == "gpt-4o-mini"
        assert [t["function"]["name"] for t in body["tools"]] == ["get_weather"]
        assert body["tool_choice"] == "auto"
    assert second["tools"] == first["tools"]

    # The second request is the first one plus the exchange: the call as the server sent it
    # (same id), then its result.
    sent = first["messages"]
    assert [m["role"] for m in sent] == ["system", "user"]
    assert second["messages"][: len(sent)] == sent
    call_message, result_message = second["messages"][len(sent) :]
    assert call_message["role"] == "assistant"
    (tool_call,) = call_message["tool_calls"]
    assert tool_call["id"] == CALL_ID
    assert tool_call["function"]["name"] == "get_weather"
    assert json.loads(tool_call["function"]["arguments"]) == {"city": "Paris"}
    assert result_message["role"] == "tool"
    assert result_message["tool_call_id"] == CALL_ID
    assert result_message["content"] == "sunny, 21°C in Paris"

    # The history the prediction carries pairs the call and its result by that id.
    assert CALL_ID in json.dumps(pred.metadata.history.messages, default=str)


@pytest.mark.parametrize("engine", ["auto", "litellm"])
def test_dspy_works_out_the_lms_capabilities_once_not_per_request(
    server: FakeOpenAIServer, engine: str, run: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 29: DSPy computes an LM's capabilities (engine choice, model catalogue) once per adapter
    call, about 0.4 ms; the loop keeps the answer for the LM's later requests with the same options."""
    import dspy.clients.capabilities as capabilities

    worked_out: list[Any] = []
    original = capabilities._capabilities

    def counted(lm: Any, options: Any = None) -> Any:
        worked_out.append(lm)
        return original(lm, options)

    monkeypatch.setattr(capabilities, "_capabilities", counted)
    lm = dspy.LM(
        "openai/gpt-4o-mini", api_base=server.base_url, api_key="sk-test", cache=False, num_retries=0, engine=engine
    )
    agent = dspy_imp.ReActV2("question -> answer", tools=[get_weather])
    with dspy.context(lm=lm):
        pred = run(agent, question="Weather in Paris?")

    assert pred.answer == ANSWER
    assert len(server.requests) == 2
    assert worked_out == [lm]  # the first request's, reused by the second
    assert [t["function"]["name"] for t in server.requests[1].body["tools"]] == ["get_weather"]
