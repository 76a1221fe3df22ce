"""A blocked answer never leaves the server: with output guardrails (and input guardrails that run
alongside the first request), what may be the answer is held until they pass, in AG-UI, the AI
SDK stream and ``dspy.streamify``; a passing answer still streams."""

from __future__ import annotations

import json
from typing import Any

import dspy
import pytest
from streaming_helpers import chunks, segments, statuses, stream_items
from web_helpers import agui_events, vercel_parts, verify_agui, verify_vercel
from web_scenarios import client, run_input

import dspy_imp
import dspy_imp.web
from dspy_imp import StreamListener
from dspy_imp.testing import ScriptedLM, call, reply

SECRET = "bob@example.com"


def no_email(outputs: dict, inputs: dict) -> str | None:
    return "the answer shows an email address" if "@" in json.dumps(outputs) else None


def no_homework(inputs: dict) -> str | None:
    return "homework is not supported" if "homework" in str(inputs) else None


def text_agent(**options: Any) -> dspy_imp.ReActV2:
    return dspy_imp.ReActV2("question -> answer", **options)


SCENES = {
    "a text answer": (
        lambda: text_agent(output_guardrails=[no_email]),
        [reply(f"Write to {SECRET}.")],
        "blocked",
    ),
    "a submitted answer": (
        lambda: dspy_imp.ReActV2("question -> answer, sure: bool", output_guardrails=[no_email]),
        [reply(f"Thinking of {SECRET}.", calls=[call("submit", {"answer": SECRET, "sure": True}, id="s1")])],
        "blocked",
    ),
    "a text answer turned down, then another": (
        lambda: text_agent(output_guardrails=[dspy_imp.Guardrail(no_email, retry=True)]),
        [reply(f"Write to {SECRET}."), reply("Write to support.")],
        "answered",
    ),
    "a submit turned down, then another": (
        lambda: dspy_imp.ReActV2(
            "question -> answer, sure: bool", output_guardrails=[dspy_imp.Guardrail(no_email, retry=True)]
        ),
        [
            reply(calls=[call("submit", {"answer": SECRET, "sure": True}, id="s1")]),
            reply(calls=[call("submit", {"answer": "support", "sure": True}, id="s2")]),
        ],
        "submit",
    ),
    "an input guardrail alongside the first request": (
        lambda: text_agent(input_guardrails=[dspy_imp.Guardrail(no_homework, run="alongside")]),
        [reply(f"The homework answer: {SECRET}.")],
        "blocked",
    ),
}


def question(name: str) -> str:
    return "Do my homework" if "input" in name else "Who do I write to?"


@pytest.mark.parametrize("sync", [False, True], ids=["async", "sync"])
@pytest.mark.parametrize("name", list(SCENES))
async def test_a_blocked_answer_is_in_no_web_stream(sync: bool, name: str) -> None:
    make, script, reason = SCENES[name]
    agent = make()
    agent.set_lm(ScriptedLM([*script, *script]))
    app = dspy_imp.web.app(agent, sync=sync)
    async with client(app) as http:
        agui = await http.post("/ag-ui", json=run_input(question(name)))
        user = {"id": "u1", "role": "user", "parts": [{"type": "text", "text": question(name)}]}
        chat = await http.post("/api/chat", json={"id": "c1", "messages": [user]})
    events, parts = agui_events(agui.text), vercel_parts(chat.text)
    verify_agui(events)
    verify_vercel(parts)
    assert events[-1]["result"]["termination_reason"] == reason
    assert parts[-1]["messageMetadata"]["termination_reason"] == reason
    assert SECRET not in agui.text and SECRET not in chat.text
    if reason != "blocked":  # the answer that passed is told
        assert "support" in "".join(e.get("delta", "") for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")
        assert "support" in "".join(p.get("delta", "") for p in parts if p["type"] == "text-delta")


@pytest.mark.parametrize("name", list(SCENES))
def test_a_blocked_answer_never_reaches_a_streamify_consumer(how: str, name: str) -> None:
    make, script, reason = SCENES[name]
    agent = make()
    with dspy.context(lm=ScriptedLM(script)):
        items = stream_items(agent, how, [StreamListener("answer")], question=question(name))
    assert items[-1].metadata.termination_reason == reason
    assert not any(SECRET in c.chunk for c in chunks(items, "answer"))
    assert not any(SECRET in line for line in statuses(items))
    if reason != "blocked":
        assert "support" in "".join(segments(chunks(items, "answer")))


@pytest.mark.parametrize("sync", [False, True], ids=["async", "sync"])
async def test_an_answer_that_passes_streams_as_before(sync: bool) -> None:
    agent = text_agent(output_guardrails=[no_email])
    agent.set_lm(ScriptedLM([reply("Write to support.")]))
    async with client(dspy_imp.web.app(agent, sync=sync)) as http:
        events = agui_events((await http.post("/ag-ui", json=run_input("Who do I write to?"))).text)
    verify_agui(events)
    told = [e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT"]
    assert told == ["Write to support."]  # once, as the streamed answer


def test_without_guardrails_nothing_is_held(how: str) -> None:
    with dspy.context(lm=ScriptedLM([reply("On the shelf.")])):
        items = stream_items(text_agent(), how, [StreamListener("answer")], question="Where?")
    kinds = [type(i).__name__ for i in items]
    assert kinds.index("StreamResponse") < kinds.index("StatusMessage")  # the text came before the end line
