"""OpenAI Responses' code interpreter container, and web search sources, over HTTP, both drivers.

The code interpreter reply is pydantic-ai's recording (``cassettes/hosted/openai_code_interpreter.json``):
its ``code_interpreter_call`` ran in ``cntr_68cdba56...``. What the turn must do: name that container on
the next request of the turn and of a later turn of the same history (OpenAI's code interpreter guide:
a container is reused by passing its id as the tool's ``container``), send a new container when asked to
(``CodeExecution(reuse_container=False)``), and when OpenAI answers that the container has expired
(400, "Container is expired."), send the same request once more with a new container. The web search
request asks for the sources each search read (``include: ["web_search_call.action.sources"]``) and the
displayed call lists them.
"""

from __future__ import annotations

import json
from typing import Any

import dspy
import pytest
from emulator import Emulator, Scripted
from provider_rules import assert_accepted
from responses import function_call, openai_response, reasoning_item
from test_hosted_openai import CODE, SEARCH, _lm, _same_bytes, _slice

import dspy_imp
from dspy_imp.hosted import CodeExecution, WebSearch, calls_in

pytestmark = pytest.mark.block_network(allowed_hosts=[r"127\.0\.0\.1$"])

FIRST, SECOND = CODE
SERVED = FIRST["response"]["output"]
CONTAINER = "cntr_68cdba56addc81918f656db25fd0a6800d6da575ea4fee9b"  # the recorded call's container_id
QUESTION = FIRST["request"]["input"][0]["content"]
SUBMIT = openai_response(
    reasoning_item("rs_02Submit", "gAAAAABoursSubmit02"),
    function_call("call_Submit02", "submit", {"answer": "-428330955.97745"}),
    model="gpt-5-2025-08-07",
)
EXPIRED = {"error": {"message": "Container is expired.", "type": "invalid_request_error", "param": None, "code": None}}


def _interpreter(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [t for t in body["tools"] if t.get("type") == "code_interpreter"]


def _besides_input_and_tools(body: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in body.items() if k not in ("input", "tools")}


def _accepted(emulator: Emulator) -> None:
    for sent in emulator.requests:
        assert_accepted("responses", sent.body, sent.path)


def test_the_next_step_of_the_turn_names_the_container_of_the_last_call(run: Any) -> None:
    agent = dspy_imp.ReActV2("question -> answer", tools=[CodeExecution()], finish="submit")
    with Emulator([Scripted(200, FIRST["response"]), SUBMIT]) as emulator, dspy.context(lm=_lm(emulator)):
        pred = run(agent, question=QUESTION)
    assert pred.metadata.termination_reason == "submit", pred.metadata.termination_error
    first, second = (r.body for r in emulator.requests)
    functions = [t for t in first["tools"] if t.get("type") == "function"]
    assert first["tools"] == [*functions, {"type": "code_interpreter", "container": {"type": "auto"}}]
    assert second["tools"] == [*functions, {"type": "code_interpreter", "container": CONTAINER}]
    assert _besides_input_and_tools(second) == _besides_input_and_tools(first)
    assert second["input"][: len(first["input"])] == first["input"]
    _same_bytes(_slice(second, SERVED), SERVED)  # the served items as served: reasoning, call, reasoning, text
    assert second["input"][len(first["input"]) :][: len(SERVED)] == SERVED
    _accepted(emulator)


def test_a_later_turn_of_the_history_names_the_container_and_an_opt_out_sends_a_new_one(run: Any) -> None:
    later = Scripted(200, SECOND["response"])
    for reuse, container in ((True, CONTAINER), (False, {"type": "auto"})):
        agent = dspy_imp.ReActV2("question -> answer", tools=[CodeExecution(reuse_container=reuse)])
        with (
            Emulator([Scripted(200, FIRST["response"]), later]) as emulator,
            dspy.context(lm=_lm(emulator, store=False)),
        ):
            first = run(agent, question=QUESTION)
            saved = json.loads(json.dumps(dspy_imp.dump_history(first.metadata.history)))
            pred = run(agent, question="how about 2 to the power of 8?", history=dspy_imp.load_history(saved))
        assert pred.answer == "256", pred.metadata.termination_error
        before, after = (r.body for r in emulator.requests)
        assert _interpreter(before) == [{"type": "code_interpreter", "container": {"type": "auto"}}]
        assert after["tools"] == [{"type": "code_interpreter", "container": container}]
        assert _besides_input_and_tools(after) == _besides_input_and_tools(before)
        assert after["include"] == SECOND["request"]["include"]  # encrypted reasoning and the outputs, as recorded
        _same_bytes(_slice(after, SERVED), SERVED)
        _accepted(emulator)


def test_an_expired_container_is_replaced_by_a_new_one_once(run: Any) -> None:
    agent = dspy_imp.ReActV2("question -> answer", tools=[CodeExecution()])
    script = [Scripted(200, FIRST["response"]), Scripted(400, EXPIRED), Scripted(200, SECOND["response"])]
    with Emulator(script) as emulator, dspy.context(lm=_lm(emulator, store=False)):
        first = run(agent, question=QUESTION)
        saved = json.loads(json.dumps(dspy_imp.dump_history(first.metadata.history)))
        pred = run(agent, question="how about 2 to the power of 8?", history=dspy_imp.load_history(saved))
    assert pred.answer == "256", pred.metadata.termination_error
    _, refused, again = (r.body for r in emulator.requests)
    assert refused["tools"] == [{"type": "code_interpreter", "container": CONTAINER}]
    assert again == {**refused, "tools": [{"type": "code_interpreter", "container": {"type": "auto"}}]}
    _accepted(emulator)


def test_a_container_expired_again_fails_the_step_after_one_new_container(run: Any) -> None:
    agent = dspy_imp.ReActV2("question -> answer", tools=[CodeExecution()])
    script = [Scripted(200, FIRST["response"]), *[Scripted(400, EXPIRED)] * 4]
    with Emulator(script) as emulator, dspy.context(lm=_lm(emulator, store=False)):
        first = run(agent, question=QUESTION)
        saved = json.loads(json.dumps(dspy_imp.dump_history(first.metadata.history)))
        with pytest.raises(dspy_imp.StepError, match="Container is expired"):
            run(agent, question="how about 2 to the power of 8?", history=dspy_imp.load_history(saved))
    sent = [r.body["tools"] for r in emulator.requests[1:]]
    # each attempt of the step (DSPy's adapter tries its JSON fallback once): the container, then one new one
    assert (
        sent
        == [
            [{"type": "code_interpreter", "container": CONTAINER}],
            [{"type": "code_interpreter", "container": {"type": "auto"}}],
        ]
        * 2
    )


# OpenAI's web search guide ("Sources"): with ``include: ["web_search_call.action.sources"]`` a search
# action lists every URL it read, ``{"type": "url", "url": ...}``. No public recording of one was found:
# these are the recorded search's items with that field added in the documented shape.
SOURCES = [
    {"type": "url", "url": "https://www.reuters.com/world/"},
    {"type": "url", "url": "https://apnews.com/hub/world-news"},
]


def _with_sources(body: dict[str, Any]) -> dict[str, Any]:
    body = json.loads(json.dumps(body))
    for item in body["output"]:
        if item["type"] == "web_search_call" and item["action"].get("type") == "search":
            item["action"]["sources"] = SOURCES
    return body


def test_a_web_search_asks_for_its_sources_and_the_call_shows_them(run: Any) -> None:
    served = _with_sources(SEARCH)
    agent = dspy_imp.ReActV2("question -> answer", tools=[WebSearch()])
    with Emulator([Scripted(200, served)]) as emulator, dspy.context(lm=_lm(emulator, store=False)):
        pred = run(agent, question="The top 3 news in the world today?")
    assert pred.metadata.termination_reason == "answered", pred.metadata.termination_error
    (sent,) = (r.body for r in emulator.requests)
    assert sent["include"] == ["reasoning.encrypted_content", "web_search_call.action.sources"]
    assert sent["tools"] == [{"type": "web_search"}]
    (entry,) = [m for m in pred.metadata.history.messages if calls_in(m)]
    record = [d for d in entry["reasoning_details"] if d.get("type") == "openai_served"]
    assert record == [{"type": "openai_served", "content": served["output"]}]  # the items as served
    searches = [i for i in served["output"] if i["type"] == "web_search_call"]
    shown = calls_in(entry)
    assert [c.id for c in shown] == [i["id"] for i in searches]
    for call, item in zip(shown, searches, strict=True):
        action = {k: v for k, v in item["action"].items() if k != "sources"}
        listed = [{"title": None, "url": s["url"]} for s in item["action"].get("sources") or ()]
        assert (call.name, dict(call.input), dict(call.result)) == (
            "web_search",
            action,
            {"results": listed} if listed else {},
        )
    assert any(c.result for c in shown)
    _accepted(emulator)


def test_reuse_container_takes_true_or_false() -> None:
    with pytest.raises(dspy_imp.ConfigurationError, match=r"CodeExecution\(reuse_container='no'\)"):
        CodeExecution(reuse_container="no")  # type: ignore[arg-type]
