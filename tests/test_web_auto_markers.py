"""The web protocols stream a ``finish="auto"`` text answer written in DSPy's field markup as the
answer field: AG-UI's ``TEXT_MESSAGE_CONTENT`` and the AI SDK's ``text-delta`` carry the text the
turn keeps (the run's outputs, the snapshot), never a marker, however the reply is cut; the answer
is not told again at the end (it was the streamed text). Through ``dspy.streamify`` and the
observer directly: ``test_streaming_auto_markers.py``.
"""

from __future__ import annotations

from typing import Any

import pytest
from web_helpers import agui_events, vercel_parts, verify_agui, verify_vercel
from web_scenarios import client, run_input, text_agent, with_lm

import dspy_imp.web
from dspy_imp.testing import reply

pytestmark = pytest.mark.parametrize("sync", [False, True], ids=["async", "sync"])

REPLIES = {
    "chat markers, split": ("[[ ## answer ## ]]\nIt is Paris.\n\n[[ ## completed ## ]]", (3, 3, 8, 5, 4, 3, 2, 4)),
    "chat markers, several fields": (
        "[[ ## reasoning ## ]]\nA capital.\n\n[[ ## answer ## ]]\nIt is Paris.\n\n[[ ## completed ## ]]",
        2,
    ),
    "JSON": ('{"answer": "It is Paris."}', (1, 4, 5, 3, 3, 2)),
}
ANSWER = "It is Paris."


async def agui(app: Any) -> list[dict[str, Any]]:
    async with client(app) as http:
        response = await http.post("/ag-ui", json=run_input("Capital?"), headers={"accept": "text/event-stream"})
    assert response.status_code == 200
    return agui_events(response.text)


async def ai_sdk(app: Any) -> list[dict[str, Any]]:
    body = {"id": "chat-1", "messages": [{"id": "u1", "role": "user", "parts": [{"type": "text", "text": "Capital?"}]}]}
    async with client(app) as http:
        response = await http.post("/api/chat", json={**body, "trigger": "submit-message"})
    assert response.status_code == 200
    return vercel_parts(response.text)


def _clean(deltas: list[str]) -> None:
    for delta in deltas:
        assert not any(mark in delta for mark in ("[[", "##", "{", '"answer"')), delta


@pytest.mark.parametrize("name", list(REPLIES))
async def test_agui_streams_the_answer_field(sync: bool, name: str) -> None:
    text, cut = REPLIES[name]
    agent = text_agent()
    with_lm(agent, [reply(text, chunk=cut)])
    events = await agui(dspy_imp.web.app(agent, sync=sync))
    verify_agui(events)
    deltas = [e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT"]
    _clean(deltas)
    assert "".join(deltas) == ANSWER
    assert [e["type"] for e in events if e["type"].startswith("TEXT_MESSAGE_")] == [
        "TEXT_MESSAGE_START",
        *["TEXT_MESSAGE_CONTENT"] * len(deltas),
        "TEXT_MESSAGE_END",
    ]  # one message: the answer is not told again at the end
    snapshot = next(e for e in events if e["type"] == "MESSAGES_SNAPSHOT")["messages"]
    assert snapshot[-1]["content"] == ANSWER
    assert events[-1]["result"]["outputs"] == {"answer": ANSWER}


@pytest.mark.parametrize("name", list(REPLIES))
async def test_ai_sdk_streams_the_answer_field(sync: bool, name: str) -> None:
    text, cut = REPLIES[name]
    agent = text_agent()
    with_lm(agent, [reply(text, chunk=cut)])
    parts = await ai_sdk(dspy_imp.web.app(agent, sync=sync))
    verify_vercel(parts)
    deltas = [p["delta"] for p in parts if p["type"] == "text-delta"]
    _clean(deltas)
    assert "".join(deltas) == ANSWER
    assert [p["type"] for p in parts if p["type"].startswith("text-")] == [
        "text-start",
        *["text-delta"] * len(deltas),
        "text-end",
    ]
    assert parts[-1]["messageMetadata"]["outputs"] == {"answer": ANSWER}


async def test_plain_text_streams_in_the_pieces_it_came_in(sync: bool) -> None:
    agent = text_agent()
    with_lm(agent, [reply("See [1], {x} and [[ this ]].", chunk=4), reply("See [1], {x} and [[ this ]].", chunk=4)])
    app = dspy_imp.web.app(agent, sync=sync)
    pieces = ["See ", "[1],", " {x}", " and", " [[ ", "this", " ]]."]
    events = await agui(app)
    assert [e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT"] == pieces
    parts = await ai_sdk(app)
    assert [p["delta"] for p in parts if p["type"] == "text-delta"] == pieces
