"""A ``finish="auto"`` text answer written in DSPy's field markup anyway (``[[ ## answer ## ]]``,
``{"answer": ...}``, fenced JSON): what streams is the answer field, never the markup, however the
provider cuts the reply; plain text streams exactly as it comes. Through ``dspy.streamify``
(``StreamResponse`` chunks) and the observer (``TextDelta``s, what ``dspy_imp.web`` streams), in
both drivers. The web protocols: ``test_web_auto_markers.py``; any chunking:
``test_fuzz_auto_markers.py``.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
from typing import Any

import anyio.to_thread
import dspy
import pytest
from helpers import TA, Look, SubmitSig
from streaming_helpers import chunks, segments, stream_items

import dspy_imp
from dspy_imp import StreamListener
from dspy_imp._watch.events import TextDelta, observing
from dspy_imp.testing import ScriptedLM, call, fail, reply

CHAT = "[[ ## answer ## ]]\nOn the shelf, by the door.\n\n[[ ## completed ## ]]"
SEVERAL = (
    "[[ ## reasoning ## ]]\nThe look said so.\n\n[[ ## answer ## ]]\nOn the shelf.\n\n"
    "[[ ## confidence ## ]]\nhigh\n\n[[ ## completed ## ]]"
)
JSON = '{"reasoning": "It was seen.", "answer": "On the \\"top\\" shelf."}'
FENCED = '```json\n{"answer": "On the shelf."}\n```'

# (reply, how it is cut, the answer): the markers split where a listener must hold them back
MARKED = {
    "chat, the opening marker split": (CHAT, (5, 13, 3, 6), "On the shelf, by the door."),
    "chat, the closing marker split": (CHAT, (19, 26, 2, 1, 3, 2, 4), "On the shelf, by the door."),
    "chat, one character at a time": (CHAT, 1, "On the shelf, by the door."),
    "chat, the whole reply at once": (CHAT, 0, "On the shelf, by the door."),
    "chat, several fields": (SEVERAL, 3, "On the shelf."),
    "chat, after leading blank lines, CRLF": (
        "\r\n\r\n[[ ## answer ## ]]\r\nTwo\r\nlines\r\n\r\n[[ ## completed ## ]]\r\n",
        (1, 1, 1, 20, 1, 3, 1),
        "Two\nlines",
    ),
    "JSON, keys and escapes split": (JSON, (2, 9, 7, 6, 4, 1, 5, 2), 'On the "top" shelf.'),
    "JSON, one character at a time": (JSON, 1, 'On the "top" shelf.'),
    "fenced JSON": (FENCED, (2, 4, 3, 10), "On the shelf."),
    "XML, the tags split": ("<answer>\nOn the shelf.\n</answer>", (2, 5, 4, 9, 3, 2, 3), "On the shelf."),
}
MARKUP = ("[[", "##", "]]", "{", '"answer"', "```", "<", ">")


def watched(agent: dspy.Module, lm: ScriptedLM, how: str, **kwargs: Any) -> tuple[list[Any], list[str]]:
    """What ``dspy.streamify`` hands the consumer (with an answer listener) and, in the same turn,
    the observer's text deltas."""
    deltas: list[str] = []

    def observer(event: Any) -> None:
        if isinstance(event, TextDelta):
            deltas.append(event.text)

    with dspy.context(lm=lm), observing(observer):
        items = stream_items(agent, how, [StreamListener("answer")], **kwargs)
    assert isinstance(items[-1], dspy_imp.Prediction)
    return items, deltas


@pytest.mark.parametrize("name", list(MARKED))
def test_a_marked_text_answer_streams_its_field_only(how: str, name: str) -> None:
    text, cut, answer = MARKED[name]
    lm = ScriptedLM([reply(calls=[call("look", {"where": "shelf"}, id="c1")]), reply(text, chunk=cut)])
    items, deltas = watched(dspy_imp.ReActV2(TA, tools=[Look()]), lm, how, intent="keys?")
    prediction = items[-1]
    assert prediction.answer == answer and prediction.metadata.termination_reason == "answered"
    streamed = chunks(items, "answer")
    assert segments(streamed) == [answer]
    assert "".join(deltas) == answer
    for piece in [*(c.chunk for c in streamed), *deltas]:
        assert not any(mark in piece for mark in MARKUP), piece
    # nothing waits for the end of the reply: the answer is out before its last chunk (an empty one)
    assert "".join(c.chunk for c in streamed if not c.is_last_chunk) == answer
    assert streamed[-1].chunk == ""


def test_several_fields_stream_as_the_answer_the_turn_keeps(how: str) -> None:
    """A reply of several fields streams only the field the turn keeps as the answer (the other
    fields are not outputs of a text-answer signature); a listener for another of them hears nothing."""
    lm = ScriptedLM([reply(SEVERAL, chunk=2)])
    with dspy.context(lm=lm):
        listeners = [StreamListener("answer"), StreamListener("reasoning"), StreamListener("confidence")]
        items = stream_items(dspy_imp.ReActV2(TA, tools=[Look()]), how, listeners, intent="keys?")
    assert items[-1].answer == "On the shelf."
    assert segments(chunks(items, "answer")) == ["On the shelf."]
    assert chunks(items, "reasoning") == [] and chunks(items, "confidence") == []


PLAIN = {
    "prose": ("The keys are on the shelf, by the door.", 7),
    "brackets and hashes": ("See [1] and [[ the notes ]] or #2 ## three.", 4),
    "a code span, a brace and a tag mid-text": ("Use `ls` then {x} and <b>.", 3),
    "a tag that is no field's": ("<b>Bold</b> and <i>this</i> too.", 6),
    "lines": ("One.\nTwo [a]\n\nThree.\n", 5),
}


@pytest.mark.parametrize("name", list(PLAIN))
def test_plain_text_streams_as_it_comes(how: str, name: str) -> None:
    text, size = PLAIN[name]
    lm = ScriptedLM([reply(text, chunk=size)])
    items, deltas = watched(dspy_imp.ReActV2(TA, tools=[Look()]), lm, how, intent="keys?")
    pieces = [text[i : i + size] for i in range(0, len(text), size)]
    assert items[-1].answer == text
    assert [c.chunk for c in chunks(items, "answer")] == [*pieces, ""]
    assert deltas == pieces


def test_a_line_that_only_looks_like_a_marker_is_held_until_it_is_not(how: str) -> None:
    """``[[ ##`` at a line's start waits until the line cannot be a marker any more; then it is text."""
    text = "Notes:\n[[ ## not a marker\nEnd."
    lm = ScriptedLM([reply(text, chunk=(7, 2, 3, 12, 4))])
    items, deltas = watched(dspy_imp.ReActV2(TA, tools=[Look()]), lm, how, intent="keys?")
    assert items[-1].answer == text
    assert deltas == ["Notes:\n", "[[ ## not a marke", "r\nEn", "d."]  # "[[", " ##" waited


def test_the_thought_of_a_submit_turn_streams_without_markers(how: str) -> None:
    """The same holds for ``next_thought``, the text before a step's calls."""
    thought = "[[ ## next_thought ## ]]\nLooking it up.\n\n[[ ## completed ## ]]"
    lm = ScriptedLM(
        [reply(thought, calls=[call("submit", {"answer": "shelf", "confidence": 0.9}, id="c1")], chunk=(4, 9, 5))]
    )
    sig = dspy.Signature("intent -> answer, confidence: float")
    with dspy.context(lm=lm):
        items = stream_items(dspy_imp.ReActV2(sig, tools=[Look()]), how, [StreamListener("next_thought")], intent="k")
    assert segments(chunks(items, "next_thought")) == ["Looking it up."]
    assert items[-1].answer == "shelf"
    assert not any("#" in c.chunk for c in chunks(items, "next_thought"))


def test_the_observer_sees_the_same_without_streamify(how: str) -> None:
    """Observed alone (as ``dspy_imp.web`` observes a turn: a sync one in a worker thread), the
    text deltas are the answer too."""
    deltas: list[str] = []
    agent = dspy_imp.ReActV2(TA, tools=[Look()])
    lm = ScriptedLM([reply(CHAT, chunk=(3, 4, 12, 5))])

    def observer(event: Any) -> None:
        if isinstance(event, TextDelta):
            deltas.append(event.text)

    async def run() -> Any:
        with dspy.context(lm=lm), observing(observer):
            if how == "sync":
                turn = functools.partial(agent, intent="keys?")
                return await anyio.to_thread.run_sync(contextvars.copy_context().run, turn)
            return await agent.acall(intent="keys?")

    prediction = asyncio.run(run())
    assert prediction.answer == "On the shelf, by the door."
    assert deltas == ["On th", "e shelf, by the door."]  # the marker waited, the text did not


WRITTEN = "[[ ## answer ## ]]\nOn the shelf.\n\n[[ ## tool_calls ## ]]\n[]\n\n[[ ## completed ## ]]"
EXTRACTED = (
    "[[ ## reasoning ## ]]\nIt was seen.\n\n[[ ## answer ## ]]\nOn the shelf.\n\n"
    "[[ ## confidence ## ]]\n0.5\n\n[[ ## completed ## ]]"
)


@pytest.mark.parametrize("cut", [1, 2, (3, 1, 17, 1, 1, 1)])
def test_calls_written_as_text_stream_the_answer_without_markers(how: str, cut: Any) -> None:
    """Without native calls the reply is in ``ChatAdapter``'s format by design; its markers, cut
    into more pieces than DSPy's listener holds back (ten), stream no more than a plain reply's."""
    lm = ScriptedLM([reply(WRITTEN, chunk=cut)], native=False)
    items, deltas = watched(dspy_imp.ReActV2(TA, tools=[Look()]), lm, how, intent="keys?")
    assert items[-1].answer == "On the shelf."
    streamed = chunks(items, "answer")
    assert "".join(c.chunk for c in streamed if not c.is_last_chunk) == "On the shelf."
    assert segments(streamed) == ["On the shelf."] and "".join(deltas) == "On the shelf."
    for piece in [*(c.chunk for c in streamed), *deltas]:
        assert not any(mark in piece for mark in MARKUP), piece


def test_the_extractor_streams_its_output_without_markers(how: str) -> None:
    look = reply(calls=[call("look", {"where": "shelf"}, id="c1")])
    lm = ScriptedLM([look, fail.tool_choice_refused(), reply("no submit"), reply(EXTRACTED, chunk=1)])
    with dspy.context(lm=lm):
        agent = dspy_imp.ReActV2(SubmitSig, tools=[Look()], max_iters=1)
        items = stream_items(agent, how, [StreamListener("answer")], intent="k")
    assert items[-1].answer == "On the shelf." and items[-1].metadata.termination_reason == "extracted"
    streamed = chunks(items, "answer")
    assert "".join(c.chunk for c in streamed if not c.is_last_chunk) == "On the shelf."
    assert {c.predict_name for c in streamed} == {"extract"}
