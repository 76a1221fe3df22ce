"""On the wire, both engines: the adapter's ``parallel_tool_calls`` and DSPy's default ``reasoning_effort``.

The same fake server as ``test_wire_local_server``; the assertions are on the HTTP bodies.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import dspy
import pytest
from fake_openai_server import FakeOpenAIServer, text_completion, tool_calls_completion

import dspy_imp

pytestmark = pytest.mark.block_network(allowed_hosts=[r"127\.0\.0\.1$"])


class Answer(dspy.Signature):
    """Answer with a confidence."""

    question: str = dspy.InputField()
    answer: str = dspy.OutputField()
    confidence: float = dspy.OutputField()


def get_weather(city: str) -> str:
    """Get the current weather for a city."""
    return f"sunny in {city}"


@pytest.fixture
def server() -> Iterator[FakeOpenAIServer]:
    script = [
        text_completion("Let me think."),  # a thought: the forced submit follows
        tool_calls_completion([("call_1", "submit", {"answer": "sunny", "confidence": 0.9})]),
    ]
    with FakeOpenAIServer(script) as fake:
        yield fake


def _lm(server: FakeOpenAIServer, model: str, engine: str, **kwargs: Any) -> dspy.LM:
    return dspy.LM(
        model, api_base=server.base_url, api_key="sk-test", cache=False, num_retries=0, engine=engine, **kwargs
    )


@pytest.mark.parametrize("engine", ["auto", "litellm"])
def test_parallel_tool_calls_from_the_adapter_reach_the_wire(server: FakeOpenAIServer, engine: str, run: Any) -> None:
    adapter = dspy.ChatAdapter(use_native_function_calling=True, parallel_tool_calls=False)
    with dspy.context(lm=_lm(server, "openai/gpt-4o-mini", engine), adapter=adapter):
        pred = run(dspy_imp.ReActV2(Answer, tools=[get_weather]), question="Weather in Paris?")
    assert pred.metadata.termination_reason == "forced_submit"
    step, forced = (r.body for r in server.requests)
    assert (step["parallel_tool_calls"], step["tool_choice"]) == (False, "auto")
    assert forced["parallel_tool_calls"] is False
    assert forced["tool_choice"] == {"type": "function", "function": {"name": "submit"}}


@pytest.mark.parametrize("engine", ["auto", "litellm"])
def test_a_reasoning_model_gets_low_effort_on_steps_and_none_on_the_forced_submit(
    server: FakeOpenAIServer, engine: str, run: Any
) -> None:
    lm = _lm(server, "openai/o4-mini", engine, temperature=1.0, max_tokens=16000)
    with dspy.context(lm=lm):
        pred = run(dspy_imp.ReActV2(Answer, tools=[get_weather]), question="Weather in Paris?")
    assert (pred.answer, pred.metadata.termination_reason) == ("sunny", "forced_submit")
    step, forced = (r.body for r in server.requests)
    assert step["reasoning_effort"] == "low"
    assert "reasoning_effort" not in forced


@pytest.mark.parametrize("engine", ["auto", "litellm"])
@pytest.mark.parametrize("native", [True, False])
def test_a_json_adapter_sends_its_response_format(
    server: FakeOpenAIServer, engine: str, native: bool, run: Any
) -> None:
    adapter = dspy.JSONAdapter(use_native_function_calling=native)
    with dspy.context(lm=_lm(server, "openai/gpt-4o-mini", engine), adapter=adapter):
        run(dspy_imp.ReActV2("question -> answer", tools=[get_weather]), question="Weather in Paris?")
    body = server.requests[0].body
    if native:  # a strict schema of the one field the step writes as text
        schema = body["response_format"]["json_schema"]["schema"]
        assert (list(schema["properties"]), body["tools"][0]["function"]["name"]) == (["answer"], "get_weather")
    else:  # written calls: JSON mode, no tools
        assert body["response_format"] == {"type": "json_object"} and "tools" not in body


@pytest.mark.parametrize("engine", ["auto", "litellm"])
def test_native_calls_false_sends_written_calls_to_a_native_model(engine: str, run: Any) -> None:
    written = '[[ ## answer ## ]]\n\n[[ ## tool_calls ## ]]\n[{"name": "get_weather", "arguments": {"city": "Paris"}}]'
    script = [text_completion(written), text_completion("[[ ## answer ## ]]\nSunny.\n\n[[ ## tool_calls ## ]]\n[]")]
    adapter = dspy_imp.ReActAdapter(dspy.ChatAdapter(), native_calls=False)
    with FakeOpenAIServer(script) as fake, dspy.context(lm=_lm(fake, "openai/gpt-4o-mini", engine), adapter=adapter):
        pred = run(dspy_imp.ReActV2("question -> answer", tools=[get_weather]), question="Weather in Paris?")
    assert pred.answer == "Sunny."
    first, second = (r.body for r in fake.requests)
    assert not {"tools", "tool_choice", "parallel_tool_calls"} & (set(first) | set(second))
    results = {"role": "user", "content": "[[ ## tool_call_results ## ]]\nget_weather (call_0_0): sunny in Paris"}
    assert results in second["messages"]
