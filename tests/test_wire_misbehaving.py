"""Tools and models that misbehave, over the real HTTP path on both DSPy engines: a provider's 503
falls back to the next LM's server; a timed-out tool and a cut result reach the provider as
ordinary tool messages, paired with their calls."""

from __future__ import annotations

import threading
from typing import Any

import dspy
import pytest
from fake_openai_server import FakeOpenAIServer, HTTPReply, error_body, text_completion, tool_calls_completion
from wire.provider_rules import assert_accepted

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


def accepted(server: FakeOpenAIServer) -> None:
    """Every request the server received keeps OpenAI's documented rules (``tests/wire/provider_rules``)."""
    for request in server.requests:
        assert_accepted("openai", request.body, request.path)


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
        accepted(down), accepted(up)
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
            accepted(server)
    finally:
        RELEASE.set()
    assert pred.answer == "Done."
    assert [(m["role"], m["tool_call_id"], m["content"]) for m in second[-2:]] == [
        ("tool", "c1", "Error: search timed out after 0.05 s"),
        ("tool", "c2", "xxxxxxxx[result cut: 8 of 40 characters shown]"),
    ]


def status(order: str) -> str:
    """Check an order's status."""
    return "pending"


def book(date: str) -> str:
    """Book a table on a date (YYYY-MM-DD)."""
    if "-" not in date:
        raise dspy_imp.RetryTool("send the date as YYYY-MM-DD")
    return f"booked {date}"


@pytest.mark.parametrize("engine", ["auto", "litellm"])
def test_a_model_looping_on_one_call_ends_through_the_last_request(engine: str, run: Any) -> None:
    looping = [tool_calls_completion([(f"s{i}", "status", {"order": "A7"})]) for i in range(3)]
    with FakeOpenAIServer([*looping, text_completion("Still pending.")]) as server:
        agent = dspy_imp.ReActV2("question -> answer", tools=[status], max_iters=20)
        with dspy.context(lm=lm_for(server, engine)):
            pred = run(agent, question="Is A7 shipped?")
        bodies = [r.body for r in server.requests]
        accepted(server)
    assert (pred.metadata.termination_reason, pred.metadata.termination_cause) == ("last_text", "repeated_calls")
    assert pred.answer == "Still pending." and len(bodies) == 4
    assert bodies[3]["tool_choice"] == "auto" and [t["function"]["name"] for t in bodies[3]["tools"]] == ["status"]


@pytest.mark.parametrize("engine", ["auto", "litellm"])
def test_a_retry_request_reaches_the_model_as_the_tool_message(engine: str, run: Any) -> None:
    script = [
        tool_calls_completion([("b1", "book", {"date": "friday"})]),
        tool_calls_completion([("b2", "book", {"date": "2026-12-04"})]),
        text_completion("Booked."),
    ]
    with FakeOpenAIServer(script) as server:
        agent = dspy_imp.ReActV2("request -> reply", tools=[book])
        with dspy.context(lm=lm_for(server, engine)):
            pred = run(agent, request="Friday, please.")
        second = server.requests[1].body["messages"]
        accepted(server)
    assert pred.reply == "Booked."
    assert second[-1] == {"role": "tool", "tool_call_id": "b1", "content": "Error: send the date as YYYY-MM-DD"}


@pytest.mark.parametrize("engine", ["auto", "litellm"])
def test_a_tripped_input_guardrail_sends_no_request(engine: str, run: Any) -> None:
    with FakeOpenAIServer([]) as server:
        agent = dspy_imp.ReActV2("question -> answer", input_guardrails=[lambda inputs: "no homework"])
        with dspy.context(lm=lm_for(server, engine)):
            pred = run(agent, question="solve x")
        assert server.requests == []
    assert pred.metadata.termination_reason == "blocked"


@pytest.mark.parametrize("engine", ["auto", "litellm"])
def test_an_output_guardrail_retry_is_a_tool_message_the_provider_accepts(engine: str, run: Any) -> None:
    def no_email(outputs: dict, inputs: dict) -> str | None:
        return "do not show email addresses" if "@" in outputs["answer"] else None

    script = [
        tool_calls_completion([("s1", "submit", {"answer": "bob@example.com"})]),
        tool_calls_completion([("s2", "submit", {"answer": "write to support"})]),
    ]
    with FakeOpenAIServer(script) as server:
        agent = dspy_imp.ReActV2(
            "question -> answer", finish="submit", output_guardrails=[dspy_imp.Guardrail(no_email, retry=True)]
        )
        with dspy.context(lm=lm_for(server, engine)):
            pred = run(agent, question="Who do I write to?")
        first, second = (r.body["messages"] for r in server.requests)
        accepted(server)
    assert pred.answer == "write to support"
    assert second[: len(first)] == first  # the retry extends the request, as any step
    assert second[-1] == {"role": "tool", "tool_call_id": "s1", "content": "Error: do not show email addresses"}


@pytest.mark.parametrize("engine", ["auto", "litellm"])
def test_a_text_answer_turned_down_is_a_user_line_the_provider_accepts(engine: str, run: Any) -> None:
    def no_email(outputs: dict, inputs: dict) -> str | None:
        return "do not show email addresses" if "@" in outputs["answer"] else None

    script = [text_completion("bob@example.com"), text_completion("Write to support.")]
    with FakeOpenAIServer(script) as server:
        agent = dspy_imp.ReActV2("question -> answer", output_guardrails=[dspy_imp.Guardrail(no_email, retry=True)])
        with dspy.context(lm=lm_for(server, engine)):
            pred = run(agent, question="Who do I write to?")
        second = server.requests[1].body["messages"]
        accepted(server)
    assert pred.answer == "Write to support."
    assert [(m["role"], m["content"]) for m in second[-2:]] == [
        ("assistant", "bob@example.com"),
        ("user", "Your message above was not sent: do not show email addresses"),
    ]
