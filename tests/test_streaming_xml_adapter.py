"""A turn under ``dspy.XMLAdapter`` (``dspy.context(adapter=...)``): the reply ``<answer>Paris</answer>``
streams as its field, never a tag, however the provider cuts it. Through ``dspy.streamify``
(``StreamResponse`` chunks), the observer (``TextDelta``s, what ``dspy_imp.web`` streams) and AG-UI's
``TEXT_MESSAGE_CONTENT``, in both drivers.

DSPy's own listener, which read these replies before, holds back at most ten chunks: a closing tag
cut into more pieces leaked (``Paris</final_answer_text>`` at one character per chunk; the tests of
a long field name and of ``next_thought`` fail with it). ``</answer>`` is nine characters, so the
``answer`` cases passed with it too: they guard the reading that replaced it (``_watch.unmarking``'s
``"xml"`` mode).
"""

from __future__ import annotations

from typing import Any

import dspy
import pytest
from helpers import TA, Look
from streaming_helpers import chunks, segments, stream_items
from web_helpers import agui_events, verify_agui
from web_scenarios import client, run_input, text_agent, with_lm

import dspy_imp
import dspy_imp.web
from dspy_imp import StreamListener
from dspy_imp._watch.events import TextDelta, observing
from dspy_imp.testing import ScriptedLM, call, reply

# (reply, how it is cut, the answer): tags split where a listener must hold them back
CUTS = {
    "the whole reply at once": ("<answer>Paris</answer>", 0, "Paris"),
    "one character at a time": ("<answer>Paris</answer>", 1, "Paris"),
    "two characters at a time": ("<answer>Paris</answer>", 2, "Paris"),
    "the closing tag split": ("<answer>Paris</answer>", (8, 5, 2, 3, 1, 2), "Paris"),
    "the opening tag split": ("<answer>Paris</answer>", (1, 3, 2, 2, 3, 11), "Paris"),
    "lines around the value": ("<answer>\nIt is Paris.\n</answer>", (3, 4, 6, 9, 5, 2, 4), "It is Paris."),
    "a '<' in the value": ("<answer>a < b, so Paris</answer>", (9, 1, 3, 4, 5, 2), "a < b, so Paris"),
}
MARKUP = ("<answer", "</", "answer>")


def watched(lm: ScriptedLM, how: str) -> tuple[list[Any], list[str]]:
    deltas: list[str] = []

    def observer(event: Any) -> None:
        if isinstance(event, TextDelta):
            deltas.append(event.text)

    agent = dspy_imp.ReActV2(TA, tools=[Look()], finish="auto")
    with dspy.context(lm=lm, adapter=dspy.XMLAdapter()), observing(observer):
        items = stream_items(agent, how, [StreamListener("answer")], intent="keys?")
    assert isinstance(items[-1], dspy_imp.Prediction)
    return items, deltas


@pytest.mark.parametrize("name", list(CUTS))
def test_an_xml_answer_streams_without_its_tags(how: str, name: str) -> None:
    text, cut, answer = CUTS[name]
    lm = ScriptedLM([reply(calls=[call("look", {"where": "shelf"}, id="c1")]), reply(text, chunk=cut)])
    items, deltas = watched(lm, how)
    prediction = items[-1]
    assert (prediction.answer, prediction.metadata.termination_reason) == (answer, "answered")
    streamed = chunks(items, "answer")
    assert "".join(c.chunk for c in streamed) == answer
    assert "".join(deltas) == answer
    for piece in [*(c.chunk for c in streamed), *deltas]:
        assert not any(mark in piece for mark in MARKUP), piece


@pytest.mark.parametrize("sync", [False, True], ids=["async", "sync"])
@pytest.mark.parametrize("name", ["one character at a time", "the closing tag split", "lines around the value"])
async def test_agui_streams_an_xml_answer_without_its_tags(sync: bool, name: str) -> None:
    text, cut, answer = CUTS[name]
    agent = text_agent()
    with_lm(agent, [reply(text, chunk=cut)])
    with dspy.context(adapter=dspy.XMLAdapter()):  # the app's turns run in the caller's settings
        async with client(dspy_imp.web.app(agent, sync=sync)) as http:
            response = await http.post("/ag-ui", json=run_input("Capital?"), headers={"accept": "text/event-stream"})
    assert response.status_code == 200
    events = agui_events(response.text)
    verify_agui(events)
    deltas = [e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT"]
    assert "".join(deltas) == answer
    assert not any(mark in delta for delta in deltas for mark in MARKUP), deltas
    assert events[-1]["result"]["outputs"] == {"answer": answer}


@pytest.mark.parametrize("cut", [1, (19, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1)])
def test_a_closing_tag_cut_into_more_than_ten_chunks_does_not_stream(how: str, cut: Any) -> None:
    text = "<final_answer_text>\nParis\n</final_answer_text>"
    deltas: list[str] = []
    lm = ScriptedLM([reply(text, chunk=cut)])
    agent = dspy_imp.ReActV2("intent -> final_answer_text", tools=[Look()], finish="auto")
    with (
        dspy.context(lm=lm, adapter=dspy.XMLAdapter()),
        observing(lambda e: deltas.append(e.text) if isinstance(e, TextDelta) else None),
    ):
        items = stream_items(agent, how, [StreamListener("final_answer_text")], intent="capital?")
    assert items[-1].final_answer_text == "Paris"
    assert [c.chunk for c in chunks(items, "final_answer_text")] == ["P", "a", "r", "i", "s", ""]
    assert "".join(deltas) == "Paris"


def test_the_thought_of_a_submit_turn_streams_without_its_tags(how: str) -> None:
    thought = "<next_thought>\nLooking it up.\n</next_thought>"
    lm = ScriptedLM([reply(thought, calls=[call("submit", {"answer": "shelf", "confidence": 0.9}, id="c1")], chunk=1)])
    agent = dspy_imp.ReActV2("intent -> answer, confidence: float", tools=[Look()])
    with dspy.context(lm=lm, adapter=dspy.XMLAdapter()):
        items = stream_items(agent, how, [StreamListener("next_thought")], intent="k")
    assert items[-1].answer == "shelf"
    assert segments(chunks(items, "next_thought")) == ["Looking it up."]
    assert not any(mark in c.chunk for c in chunks(items, "next_thought") for mark in ("<", ">"))
