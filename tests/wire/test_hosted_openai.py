"""OpenAI Responses' hosted tools (``dspy_imp.hosted``) over HTTP, on DSPy's native engine, both drivers.

The first reply carries the output items of ``tests/hosted_recordings/openai_web_search.json`` (a
reasoning item with encrypted content, a ``web_search_call``, a message with a ``url_citation``
annotation, a function call), written from the API reference's shapes. What the turn must do: send
the ``web_search`` tool, carry the served items back byte for byte as input items on the next
request of the turn and of a later turn (after ``dump_history``/``load_history`` through JSON), put
the citations in the metadata, count and price the searches, and refuse a tool the route lacks.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import dspy
import pytest
from emulator import Emulator
from responses import function_call, openai_response, output_message

import dspy_imp
from dspy_imp.hosted import CodeExecution, RemoteMCP, WebFetch, WebSearch

pytestmark = pytest.mark.block_network(allowed_hosts=[r"127\.0\.0\.1$"])

RECORDED = json.loads((Path(__file__).parent.parent / "hosted_recordings" / "openai_web_search.json").read_text())
SERVED = RECORDED["output"]
ANSWER = "CERN was founded on September 29, 1954."
SEARCH_THEN_WEATHER = openai_response(*SERVED)
SUBMIT = openai_response(function_call("call_Submit02", "submit", {"answer": ANSWER}))


def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"Sunny in {city}."


def _agent(*hosted: Any) -> dspy_imp.ReActV2:
    return dspy_imp.ReActV2("question -> answer", tools=[*(hosted or (WebSearch(),)), get_weather], finish="submit")


def _lm(emulator: Emulator) -> dspy.LM:
    return dspy.LM(
        "openai/gpt-5-mini",
        model_type="responses",
        api_base=emulator.base_url + "/v1",
        api_key="sk-test",
        cache=False,
        num_retries=0,
    )


def _served_in(body: dict[str, Any]) -> list[dict[str, Any]]:
    ids = [i.get("id") for i in SERVED]
    found = [i for i in body["input"] if i.get("id") in ids]
    return found


def test_a_hosted_search_a_function_tool_and_submit_carry_the_served_items(run: Any) -> None:
    with Emulator([SEARCH_THEN_WEATHER, SUBMIT]) as emulator, dspy.context(lm=_lm(emulator)):
        pred = run(_agent(), question="When was CERN founded, and the weather in Geneva?")
    assert pred.metadata.termination_reason == "submit", pred.metadata.termination_error
    assert pred.answer == ANSWER
    first, second = (r.body for r in emulator.requests)
    assert {"type": "web_search"} in first["tools"]
    assert any(t.get("name") == "get_weather" for t in first["tools"])
    assert json.dumps(_served_in(second)) == json.dumps(SERVED)  # byte for byte, in order
    start = second["input"].index(_served_in(second)[0])
    assert second["input"][start : start + len(SERVED)] == SERVED
    after = second["input"][start + len(SERVED)]
    assert after["type"] == "function_call_output" and after["call_id"] == "call_Weather01"
    annotation = SERVED[2]["content"][0]["annotations"][0]
    assert pred.metadata.citations == ({**annotation, "cited_for": ANSWER},)
    usage = pred.metadata.usage
    assert usage.calls[0].hosted_calls == {"web_search_call": 1}
    assert usage.total_hosted_calls == 1
    assert usage.calls[0].cost == pytest.approx(0.01)  # $10 per 1,000 web search calls (OpenAI's pricing page)


def test_a_saved_history_sends_the_served_items_back_on_a_later_turn(run: Any) -> None:
    later_answer = openai_response(function_call("call_Submit03", "submit", {"answer": "Still sunny."}))
    with Emulator([SEARCH_THEN_WEATHER, SUBMIT, later_answer]) as emulator, dspy.context(lm=_lm(emulator)):
        first = run(_agent(), question="When was CERN founded?")
        saved = json.loads(json.dumps(first.metadata.history.model_dump()))
        later = run(_agent(), question="And now?", history=dspy.History(**saved))
    assert later.metadata.termination_reason == "submit", later.metadata.termination_error
    resumed = emulator.requests[2].body
    assert json.dumps(_served_in(resumed)) == json.dumps(SERVED)
    assert {"type": "web_search"} in resumed["tools"]


def test_code_interpreter_and_remote_mcp_go_out_as_responses_tools(run: Any) -> None:
    mcp = RemoteMCP(url="https://mcp.example.com/sse", allowed_tools=("lookup",))
    with Emulator([openai_response(output_message(ANSWER))]) as emulator, dspy.context(lm=_lm(emulator)):
        run(_agent(CodeExecution(), mcp), question="Compute it.")
    tools = emulator.requests[0].body["tools"]
    assert {"type": "code_interpreter", "container": {"type": "auto"}} in tools
    assert {
        "type": "mcp",
        "server_label": "mcp_example_com",
        "server_url": "https://mcp.example.com/sse",
        "require_approval": "never",
        "allowed_tools": ["lookup"],
    } in tools


def test_a_tool_the_route_lacks_is_refused_before_any_request(run: Any) -> None:
    with Emulator([]) as emulator, dspy.context(lm=_lm(emulator)):
        with pytest.raises(dspy_imp.ConfigurationError) as raised:
            run(_agent(WebFetch()), question="Fetch it.")
    assert "gpt-5-mini" in str(raised.value) and "fetch" in str(raised.value).lower()
    assert emulator.requests == []
