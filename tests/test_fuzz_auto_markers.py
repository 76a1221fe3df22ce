"""A plain reply written in DSPy's field markup, cut anywhere: what streams is what the turn reads.

The properties, for any chunking of the reply:

- a marker-shaped reply (``[[ ## answer ## ]]`` sections, with other fields around it, repeated
  headers, headers that only look like one, CRLF and the other line breaks ``str.splitlines``
  knows) and a JSON-shaped one (``{"answer": ...}``, indented or not, in a ```` ```json ```` fence
  or not): the streamed pieces join to exactly the field ``Dialect.read`` reads out of the whole
  reply, before the reply ends (``_watch.unmarking``, fed delta by delta); in the ``ChatAdapter``
  format of calls written as text, the field ``ChatAdapter.parse`` reads;
- plain text that holds no markup streams exactly in the pieces it came in; any plain text, with
  whatever it holds back released at its end, is the text;
- through a whole turn under ``dspy.streamify``, in both drivers, the ``StreamResponse`` chunks of
  the answer join to the prediction's answer, and no chunk but the last (an empty one) waits for
  the end of the reply.
"""

from __future__ import annotations

import json
import re
from typing import Any

import dspy
from fuzz_helpers import bounded, budget
from helpers import TA, Look
from hypothesis import assume, example, given
from hypothesis import strategies as st
from streaming_helpers import chunks, stream_items

import dspy_imp
from dspy_imp import StreamListener
from dspy_imp._prompt.dialect import dialect_for
from dspy_imp._prompt.markup import fenced, find_fields
from dspy_imp._watch.unmarking import PlainText
from dspy_imp.testing import ScriptedLM, reply

SIGNATURE = dspy.Signature("question -> answer")
PLAIN = dialect_for(dspy.ChatAdapter(), SIGNATURE, True, True)
assert PLAIN.plain and PLAIN.text_field == "answer"

BREAKS = ["\n", "\r\n", "\r", "\x0b", "\x0c", "\x1c", "\x85", "\u2028"]
TRICKY_LINES = [
    "[[ ## answer ## ]] again",  # a repeated header: its section goes on, this rest is dropped
    "[[ ## other ## ]]",  # another field's section
    "[[ ## next_thought ## ]] a thought",
    "[[ ## not a header",
    "[[ ##",
    "  [[ ## answer ## ]]",
    "[[ ## x ##]]",
    "[1] a note",
    "[[",
    "```",
    "{not json}",
]
WORDS = st.text(alphabet=st.sampled_from(list('ab Z.,:é\t[]#{}"\\`<>/_ ')), max_size=12)
LINES = st.lists(WORDS | st.sampled_from(TRICKY_LINES), max_size=6)
CUTS = st.lists(st.integers(min_value=1, max_value=9), max_size=40)


@st.composite
def marked(draw: Any) -> str:
    """A reply in ``ChatAdapter``'s markup, with the answer's section among others."""
    brk = draw(st.sampled_from(BREAKS))
    fields = []
    if draw(st.booleans()):
        fields.append(("reasoning", draw(LINES)))
    fields.append(("answer", draw(LINES)))
    if draw(st.booleans()):
        fields.append(("confidence", draw(LINES)))
    lead = draw(st.sampled_from(["", "  ", brk, f" {brk}{brk}"]))
    out = []
    for name, lines in fields:
        rest = draw(st.sampled_from(["", " same line", "  "]))
        out.append(f"[[ ## {name} ## ]]{rest}")
        out.extend(lines)
        out.append("")
    out.append("[[ ## completed ## ]]")
    return lead + brk.join(out) + draw(st.sampled_from(["", brk]))


@st.composite
def json_shaped(draw: Any) -> str:
    """A reply in ``JSONAdapter``'s shape: one object with the answer, maybe fenced."""
    text = draw(st.text(alphabet=st.sampled_from(list('ab Z.é\n\r\t[]#{}"\\`<>/_:,')), max_size=30))
    value: dict[str, Any] = {"reasoning": draw(WORDS)} if draw(st.booleans()) else {}
    value["answer"] = text
    if draw(st.booleans()):
        value["confidence"] = draw(st.sampled_from([0.5, "high", [1, "a"]]))
    body = json.dumps(value, indent=draw(st.sampled_from([None, 2])), ensure_ascii=draw(st.booleans()))
    if draw(st.booleans()):
        body = f"```json\n{body}\n```"
    return draw(st.sampled_from(["", " ", "\n"])) + body


@st.composite
def xml_shaped(draw: Any) -> str:
    """A reply in ``XMLAdapter``'s shape: a field's tag first, the answer's somewhere."""
    text = draw(st.text(alphabet=st.sampled_from(list("ab Z.é\n\t<>/_:answer")), max_size=30))
    first = draw(st.sampled_from(["<answer>", "<next_thought>x</next_thought>\n", "<tool_calls>[]</tool_calls>"]))
    body = f"<answer>{text}</answer>" if first == "<answer>" else f"{first}<answer>{text}</answer>"
    return draw(st.sampled_from(["", " ", "\n"])) + body + draw(st.sampled_from(["", "\n<other>y</other>", " tail"]))


def pieces(text: str, cuts: list[int]) -> list[str]:
    out, start = [], 0
    for size in cuts:
        if start >= len(text):
            break
        out.append(text[start : start + size])
        start += size
    if start < len(text):
        out.append(text[start:])
    return out


def read(text: str) -> str:
    try:
        value, calls = PLAIN.read(text)
    except ValueError:  # the reply writes no readable field: nothing to compare
        assume(False)
        raise
    assert calls == ()
    return value or ""


def streamed(text: str, cuts: list[int]) -> tuple[list[str], str]:
    reader = PlainText("answer")
    return [reader.feed(piece) for piece in pieces(text, cuts)], reader.end()


@budget(400)
@given(marked() | json_shaped() | xml_shaped(), CUTS)
@example("<answer> Par</answ is </answer>", [1, 7, 3, 4, 2, 1])
@example("[[ ## answer ## ]]\nParis\n\n[[ ## completed ## ]]", [4, 1, 14, 3, 2, 1, 1, 3])
@example('{"answer": "Pa\\"ris\\u00e9"}', [13, 1, 1, 2, 3, 3])
@example("\r\n[[ ## answer ## ]]\r\nA\r\n\r\nB\r\n[[ ## completed ## ]]", [1, 1, 19, 1, 1, 2, 1])
def test_a_marked_reply_streams_exactly_its_field(text: str, cuts: list[int]) -> None:
    out, rest = bounded(lambda: streamed(text, cuts))
    assert "".join(out) == read(text)
    assert rest == ""  # nothing was left to wait for the reply's end


WRITTEN = dialect_for(dspy.ChatAdapter(), SIGNATURE, True, False)  # calls written as text: DSPy's own parse


@budget(300)
@given(marked() | json_shaped() | xml_shaped(), CUTS)
@example("  [[ ## answer ## ]] rest\nA\n[[ ## answer ## ]]\nB\n[[ ## completed ## ]]", [3, 1, 1, 20, 2])
def test_a_reply_in_chat_adapter_format_streams_its_field_as_dspy_parses_it(text: str, cuts: list[int]) -> None:
    """Calls written as text: the reply is read by ``ChatAdapter.parse`` (the first section of a
    name is the field), and streams so (``PlainText(..., "chat")``, as the extractor's reply)."""
    try:
        value, _ = WRITTEN.read(text)
    except ValueError:
        assume(False)
        raise
    reader = PlainText("answer", "chat")
    out = [reader.feed(piece) for piece in pieces(text, cuts)]
    assert "".join(out) == (value or "") and reader.end() == ""


PROSE = st.text(alphabet=st.sampled_from(list('ab Z.,:é\t]#}"\\>/_ \n')), min_size=1, max_size=60)


def _unindented(text: str) -> bool:
    return all(not line[:1].isspace() for line in text.splitlines()) and not text[0].isspace()


@budget(300)
@given(PROSE.filter(_unindented), CUTS)
def test_plain_text_streams_in_the_pieces_it_came_in(text: str, cuts: list[int]) -> None:
    """No line starts with ``[`` (nor with whitespace, which waits for what follows it on its line:
    ``  [[ ## answer ## ]]`` is a header) and the text opens with neither ``{`` nor a fence: each
    piece streams as it came."""
    sent = pieces(text, cuts)
    out, rest = streamed(text, cuts)
    assert out == sent and rest == ""
    assert read(text) == text


ANY = st.text(alphabet=st.sampled_from(list('ab \n\r\t[]#{}"`_')), max_size=60)


@budget(300)
@given(ANY.filter(lambda t: not t.lstrip().startswith(("{", "`"))), CUTS)
def test_any_plain_text_without_a_header_is_the_text(text: str, cuts: list[int]) -> None:
    """What waits (a line that could become a header, leading whitespace) is released as text."""
    assume(not any(line.strip().startswith("[[ ## ") and " ## ]]" in line for line in text.splitlines()))
    out, rest = streamed(text, cuts)
    assert "".join(out) + rest == read(text) == text


@budget(30)
@given(marked() | json_shaped(), CUTS, st.sampled_from(["sync", "async"]))
@example("[[ ## answer ## ]]\nParis\n\n[[ ## completed ## ]]", [4, 1, 14, 3, 2, 1, 1, 3], "sync")
@example('{"answer": "Paris"}', [2, 3, 4, 5], "async")
def test_a_turn_streams_the_answer_it_returns(text: str, cuts: list[int], how: str) -> None:
    answer = read(text)
    assume(answer.strip())
    agent = dspy_imp.ReActV2(TA, tools=[Look()])
    agent.set_lm(ScriptedLM([reply(text, chunk=tuple(cuts))]))
    items = bounded(lambda: stream_items(agent, how, [StreamListener("answer")], intent="k"))
    prediction = items[-1]
    assert isinstance(prediction, dspy_imp.Prediction) and prediction.answer == answer
    streamed_chunks = chunks(items, "answer")
    assert "".join(c.chunk for c in streamed_chunks if not c.is_last_chunk) == answer
    assert streamed_chunks[-1].is_last_chunk and streamed_chunks[-1].chunk == ""


# -- the reader it mirrors reads in one pass ----------------------------------------------------

FENCE = re.compile(r"^```(?:json)?\s*\n(.*?)\n```\s*$", re.DOTALL)  # what ``markup.fenced`` replaced
PIECES = st.sampled_from(["```", "```json", "json", "\n", "\r\n", " ", "\t", "\u2028", "{", "}", "x", '"a"', "`"])
FENCED = st.lists(PIECES, max_size=14).map("".join)


@budget(400)
@given(FENCED)
@example("```json\n\n\n```")
@example("```\n```")
@example("```json \n {}\n```  ")
def test_the_fence_is_read_as_the_pattern_read_it(text: str) -> None:
    text = text.strip()
    match = FENCE.match(text)
    found = fenced(text)
    assert (found is None) == (match is None)
    if match is not None and found is not None:
        assert found.strip() == match.group(1).strip()


TAGGED = st.lists(st.sampled_from(["<answer>", "</answer>", "<answer", "answer>", "x", " ", "\n", "<"]), max_size=12)


@budget(300)
@given(TAGGED.map("".join))
def test_a_tag_is_read_as_the_pattern_read_it(text: str) -> None:
    text = "<" + text
    match = re.search(r"<answer>(.*?)</answer>", text, re.DOTALL)
    assert find_fields(text, ("answer",)) == ({"answer": match.group(1).strip()} if match else None)


def test_a_long_reply_of_blank_lines_or_unclosed_tags_is_read_in_one_pass() -> None:
    """Both were quadratic: a 200 000-character reply took minutes (the bound is a hang guard)."""
    blank = "```json" + "\n" * 200_000 + "x"
    tags = "<answer>" * 25_000
    assert bounded(lambda: (PLAIN.read(blank)[0], PLAIN.read(tags)[0]), seconds=30) == (blank, tags)
