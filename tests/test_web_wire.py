"""The web streams over the real HTTP path, on both DSPy engines, native and written calls, sync and
async: a local server streams the model's replies the way OpenAI does (one chunk per word), and
the AG-UI run carries the answer in as many pieces, after the tool calls. Then every finish mode
ends its run with its answer told once."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import dspy
import pytest
from fake_openai_server import FakeOpenAIServer
from test_streaming_wire import ANSWER, lm_for, lookup, text_script, weather
from web_helpers import agui_events, verify_agui
from web_scenarios import client, run_input

import dspy_imp
import dspy_imp.web
from dspy_imp.testing import ScriptedLM, call, reply

pytestmark = pytest.mark.block_network(allowed_hosts=[r"127\.0\.0\.1$"])


@pytest.fixture
def served() -> Iterator[Any]:
    servers: list[FakeOpenAIServer] = []

    def start(script: list[dict[str, Any]]) -> FakeOpenAIServer:
        servers.append(FakeOpenAIServer(script).start())
        return servers[-1]

    yield start
    for server in servers:
        server.stop()


async def run(agent: dspy_imp.ReActV2, sync: bool, text: str) -> list[dict[str, Any]]:
    async with client(dspy_imp.web.app(agent, sync=sync)) as http:
        response = await http.post("/ag-ui", json=run_input(text))
    events = agui_events(response.text)
    verify_agui(events)
    return events


@pytest.mark.parametrize("sync", [False, True], ids=["async", "sync"])
@pytest.mark.parametrize("engine", ["auto", "litellm"])
@pytest.mark.parametrize("mode", ["native", "written"])
async def test_the_answer_streams_in_pieces_after_the_tool_calls(served, engine: str, mode: str, sync: bool) -> None:
    server = served(text_script(mode))
    agent = dspy_imp.ReActV2("city -> answer", tools=[lookup, weather])
    agent.set_lm(lm_for(server, engine, mode))
    events = await run(agent, sync, "Paris")
    assert all(r.body["stream"] is True for r in server.requests)
    pieces = [e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT"]
    assert "".join(pieces) == ANSWER and len(pieces) > 5  # streamed, not handed over whole
    results = [e["content"] for e in events if e["type"] == "TOOL_CALL_RESULT"]
    assert results == ["station-paris", "sunny, 21 degrees at station-paris"]
    kinds = [e["type"] for e in events]
    assert kinds.index("TOOL_CALL_RESULT") < kinds.index("TEXT_MESSAGE_CONTENT")
    assert events[-1]["result"]["outputs"] == {"answer": ANSWER}


FINISHES = {
    "auto, text answer": (
        {"signature": "question -> answer"},
        [reply(calls=[call("look", {"where": "shelf"}, id="c1")]), reply("On the shelf.")],
        "answered",
        "On the shelf.",
    ),
    "auto, submit signature: the forced submit": (
        {"signature": "question -> answer, sure: bool"},
        [reply("It is on the shelf."), reply(calls=[call("submit", {"answer": "Shelf.", "sure": True}, id="s1")])],
        "forced_submit",
        "answer: Shelf.\nsure: true",
    ),
    "submit": (
        {"signature": "question -> answer", "finish": "submit"},
        [
            reply("Looking.", calls=[call("look", {"where": "shelf"}, id="c1")]),
            reply(calls=[call("submit", {"answer": "Shelf."}, id="s1")]),
        ],
        "submit",
        "Shelf.",
    ),
    "submit, extracted": (
        {"signature": "question -> answer", "finish": "submit", "max_iters": 1},
        [
            reply(calls=[call("look", {"where": "shelf"}, id="c1")]),
            reply("I will not call submit."),
            reply("[[ ## reasoning ## ]]\nIt was found.\n\n[[ ## answer ## ]]\nShelf.\n\n[[ ## completed ## ]]"),
        ],
        "extracted",
        "Shelf.",
    ),
    "auto, the last text": (
        {"signature": "question -> answer", "max_iters": 1},
        [reply(calls=[call("look", {"where": "shelf"}, id="c1")]), reply("Probably the shelf.")],
        "last_text",
        "Probably the shelf.",
    ),
    "tools, incomplete": (
        {"signature": "question -> answer", "finish": "tools", "finish_on": {"look": lambda a, r, i: None}},
        [reply("Thinking."), reply("Still thinking.")],
        "incomplete",
        "",
    ),
}


def look(where: str) -> str:
    """Look somewhere."""
    return f"the key is on the {where}"


@pytest.mark.parametrize("sync", [False, True], ids=["async", "sync"])
@pytest.mark.parametrize("name", list(FINISHES))
async def test_every_finish_mode_tells_its_answer_once(name: str, sync: bool) -> None:
    given, script, reason, answer = FINISHES[name]
    options = dict(given)
    agent = dspy_imp.ReActV2(options.pop("signature"), tools=[look], **options)
    with dspy.context(lm=ScriptedLM(script)):  # the extractor reads the configured LM, not agent.set_lm's
        events = await run(agent, sync, "Where is the key?")
    assert events[-1]["result"]["termination_reason"] == reason
    told = [e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT"]
    if reason in ("answered", "last_text"):
        assert told[-1] == answer  # the streamed text was the answer: not told again
    else:
        assert "".join(told[-1:]) == answer
    steps = [e["stepName"] for e in events if e["type"] == "STEP_STARTED"]
    assert len(steps) == len(script)
