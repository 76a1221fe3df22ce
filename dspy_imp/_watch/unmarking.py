"""A plain reply's text as it streams, without the field markup a model may write in it anyway.

In plain native mode (native tool calls with a Chat-style adapter) no format is asked for, but a
model shown DSPy prompts often answers in one regardless: ``[[ ## answer ## ]]\\nParis\\n\\n[[ ##
completed ## ]]`` (``ChatAdapter``), ``{"answer": "Paris"}`` (``JSONAdapter``), the same JSON in a
```` ```json ```` fence. ``Dialect.read`` (``_prompt.dialect``, through ``_prompt.markup``) reads
the field out of such a reply once it is complete; ``PlainText`` is its streaming counterpart for
one field: fed the reply's content deltas, it returns the part of the field's text each one
makes certain, so the streamed pieces join to what ``Dialect.read`` will make of the whole reply
and no marker is ever streamed.

It follows the same rules as the reader it mirrors:

- *markers*: a line that, stripped, starts with ``[[ ## name ## ]]`` (DSPy's own
  ``field_header_pattern``) opens the section ``name``; the field is its section's lines, joined
  by ``"\\n"`` and stripped (a header's rest of line is the section's first line, stripped; a
  repeated header continues its section and drops its rest). Lines before the first header are
  not the field.
- *JSON*: a reply that, stripped, opens with ``{`` (or a ```` ```json ```` fence whose content
  does) is one object; the field is its string value as it grows (partial JSON, read by jiter).
- *XML*: a reply that, stripped, opens with a field's tag (``<answer>``, ``<next_thought>``,
  ``<tool_calls>``) holds the field between the first ``<answer>`` and the first ``</answer>``
  after it, stripped.
- *anything else* is plain text and streams exactly as it comes.

What is held back, and only while it is undecided: the reply's leading whitespace; the start of a
line while it could still become a header (``[``, ``[[ #``, ``[[ ## answ``, ...); inside the
field, whitespace until text follows it (the field is stripped); the first line of a reply that
opens with a fence (```` ``` ```` or ```` ```json ````), or with ``<`` while it could be a field's
tag; in a tag, what could start its closing tag. Ordinary text is returned at once.

What cannot be mirrored without holding the whole reply: prose *before* a header in the middle
of a reply (``"Here it is:\n[[ ## answer ## ]]\nParis"``) has streamed by the time the header
arrives, while the parsed field holds only ``Paris``; the markers themselves still never stream.
A JSON reply streams as jiter reads it: one that must be repaired (``json_repair``), or a fence
that is never closed, may be read differently at the end, and so may a tag that is never
closed. A reply that opens with another tag (``<p>``) is text, even where a field's tag follows.
The reader's ``close`` (``_watch.reading``) sends the rest of the field's value when it continues
what streamed (and the whole value when nothing did).

Why not DSPy's ``StreamListener``, which strips its adapters' markers too: it starts only at the
field's own start marker, so it cannot tell a plain reply (which streams as it is) from a marked
one; and it holds back at most ten chunks, then releases the oldest, so a closing marker cut
into more pieces than that streams (one character per chunk:
``'Paris\n\n[[ ## completed ## ]]'``). This module reuses DSPy's header shape and the partial
JSON reading (jiter) that listener uses.

The regular expressions here are linear (one character, or one ``\\w*`` run, no nested
repetition); they run over one delta or one line start. A line that is still undecided (a
header's prefix) is classified again from its start on each delta, and a JSON reply is parsed
again on each delta (as ``_watch.reading`` reads ``submit``'s arguments).
"""

from __future__ import annotations

import re
from typing import Any, Literal

import jiter

from dspy_imp._prompt.signature import STEP_CALLS, STEP_TEXT

# ``str.splitlines`` breaks lines on these; ``\r\n`` is one break (``_prompt.markup`` splits so).
_BREAK = re.compile(r"\r\n|[\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]")
_WORD = re.compile(r"\w*")  # a header's name: ``\w+`` in DSPy's ``field_header_pattern``
_WHOLE = ("json", "xml")  # modes that read the reply as one text, not line by line
_OPEN = "[[ ## "
_CLOSE = " ## ]]"


class PlainText:
    """One field of a plain reply, streamed: ``feed`` each content delta, ``end`` when the text is over.

    Args:
        field: The field the reply's text is (the task's output for a text answer, else
            ``next_thought``).
        sections: Whose reading of ``[[ ## name ## ]]`` sections to mirror: ``"lenient"``,
            ``_prompt.markup``'s (a plain reply's; a repeated header continues its section), or
            ``"chat"``, ``dspy.ChatAdapter.parse``'s (a reply in the adapter's format, written
            calls, the extractor's: the first section of a name is the field, a repeated one is
            not, and a header's rest of line is cut where DSPy cuts it, at the header's end
            counted in the stripped line), or ``"xml"``, a reply in ``dspy.XMLAdapter``'s format: the
            field is the text between the first ``<field>`` anywhere in the reply and the first
            ``</field>`` after it, stripped, and nothing else streams (as DSPy's own listener
            starts at the field's tag; ``XMLAdapter.parse``'s entity decoding is not mirrored).
        prose: Whether text without markup is the field (a step's text), or nothing (the
            extractor's reply, which must write its fields).
    """

    def __init__(self, field: str, sections: Literal["lenient", "chat", "xml"] = "lenient", prose: bool = True):
        self.field = field
        self.chat = sections == "chat"
        self.prose = prose
        # "lines" (plain or marked text), "fence" (after a fence's line), "json", "xml"; an XMLAdapter
        # reply is read as tags from its start: no text outside the field's tag is the field
        self.mode = "xml" if sections == "xml" else "lines"
        self.line = ""  # the current line so far, while it is undecided
        self.kind: str | None = None  # the current line: None (undecided), "text", "rest" (a header's), "skip"
        self.cr = False  # the last delta ended on "\r" (a "\n" after it is the same break)
        self.fences = True  # a fence may still open the reply
        # plain text (no header yet)
        self.marked = False  # a header was seen: only the field's section streams from now on
        self.raw_started = False  # plain text: something other than whitespace was returned
        self.raw_held = ""  # plain text: the reply's leading whitespace
        # the field's section (once marked)
        self.current: str | None = None  # the section the current line belongs to
        self.opened = False  # the field's section exists
        self.lines = 0  # lines the field's section holds so far
        self.started = False  # text other than whitespace of the field was returned
        self.held = ""  # whitespace in the field, returned once text follows it
        # a fence, JSON
        self.fence = ""  # a fence's opening line and the whitespace after it
        self.json = ""
        self.value = ""
        # XML tags
        self.xml = ""  # the reply from its first tag
        self.xml_scan = 0  # where to look for the next tag from
        self.xml_start = -1  # where the field's text starts, once its tag opened
        self.xml_upto = 0  # the field's text up to here was handed on
        self.xml_done = False

    def feed(self, content: str) -> str:
        """The field's text this delta makes certain."""
        if self.mode in _WHOLE:
            return self._whole(content)
        out = ""
        if self.cr and content.startswith("\n"):  # "\r" then "\n": one break, already taken
            content = content[1:]
            if self.mode == "fence":
                self.fence += "\n"
            elif not self.marked:
                out = self._raw("\n")
        self.cr = content.endswith("\r")
        return out + self._consume(content)

    def end(self) -> str:
        """What the end of the text releases: what was held, as the text it turned out to be."""
        if self.mode in _WHOLE:
            return ""
        if self.mode == "fence":
            return self._raw(self.fence, force=True)
        if self.kind is None and self.line:
            line, self.line = self.line, ""
            return self._text(line, force=True)
        return "" if self.marked else self._raw("", force=True)

    def _consume(self, content: str) -> str:
        out = []
        position = 0
        for found in _BREAK.finditer(content):
            out.append(self._piece(content[position : found.start()]))
            position = found.end()
            if self.mode in _WHOLE:  # the object (or the tag) opened inside this delta
                out.append(self._whole(content[found.start() :]))
                return "".join(out)
            out.append(self._break(found.group()))
        out.append(self._whole(content[position:]) if self.mode in _WHOLE else self._piece(content[position:]))
        return "".join(out)

    # -- lines ---------------------------------------------------------------------------------

    def _piece(self, text: str) -> str:
        """Text inside one line (no break)."""
        if not text:
            return ""
        if self.mode in _WHOLE:
            return self._whole(text)
        if self.mode == "fence":
            return self._after_fence(text)
        if self.kind is None:
            self.line += text
            return self._decide()
        if self.kind == "text":
            return self._more(text)
        if self.kind == "rest":
            if not self.lines and text.strip():
                self.lines = 1  # a header's rest is its section's first line when it holds text
            return self._field(text) if self.lines else ""
        return ""  # "skip"

    def _break(self, mark: str) -> str:
        if self.mode == "fence":
            self.fence += mark
            return ""
        out = ""
        if self.kind is None:  # an undecided line ends: text, or a fence's first line
            line, self.line = self.line, ""
            if self._fence_opens(line):
                self.mode, self.fence = "fence", line + mark
                return ""
            out = self._text(line)
        elif self.kind == "rest":
            self.held = ""  # a header's rest is stripped: its trailing whitespace goes
        self.kind = None
        return out + ("" if self.marked else self._raw(mark))

    def _decide(self) -> str:
        """Classify the undecided current line once it can be; return what that releases."""
        stripped = self.line.lstrip()
        if not stripped:
            return ""
        if not self.marked and not self.raw_started:
            if stripped.startswith("{"):  # the reply opens with a JSON object
                self.mode, self.line = "json", ""
                return self._json(stripped)
            if stripped.startswith("<") and self.prose:  # ... or with a field's tag
                tags = (f"<{self.field}>", f"<{STEP_TEXT}>", f"<{STEP_CALLS}>")
                if any(stripped.startswith(tag) for tag in tags):
                    self.mode, self.line = "xml", ""
                    return self._xml(stripped)
                if any(tag.startswith(stripped) for tag in tags):
                    return ""
            if self.fences and stripped.startswith("`"):
                if len(stripped) < 3 and "```".startswith(stripped):
                    return ""
                if stripped.startswith("```") and _fence_line(stripped[3:]):
                    return ""  # a fence's first line: decided at its end
        header = _header(stripped)
        if header is None:
            return ""
        line, self.line = self.line, ""
        if header is False:
            return self._text(line)
        name, end = header
        return self._opened(name, line[end:] if self.chat else stripped[end:])

    def _opened(self, name: str, rest: str) -> str:
        """A header: section ``name`` starts (or goes on); ``rest``: what follows it on its line."""
        self.marked = True
        self.current = name
        if name == self.field and self.opened and self.chat:  # DSPy: a later section of the name is not the field
            self.current = None
        if name != self.field or self.opened:  # another field's, or a repeated header (its rest is dropped)
            self.kind = "skip"
            return ""
        self.opened = True
        self.kind = "rest"
        return self._piece(rest)

    def _text(self, line: str, force: bool = False) -> str:
        """A line decided as text (no header): ``line``, what it holds so far."""
        self.kind = "text"
        if not self.marked:
            return self._raw(line, force)
        if self.current != self.field:
            return ""
        separator = "\n" if self.lines else ""
        self.lines += 1
        return self._field(separator + line)

    def _more(self, text: str) -> str:
        if not self.marked:
            return self._raw(text)
        return self._field(text) if self.current == self.field else ""

    def _field(self, text: str) -> str:
        """Text of the field's section, which is stripped: whitespace waits for text after it."""
        if not self.started:
            text = text.lstrip()
            if not text:
                return ""
        body = text.rstrip()
        if not body:
            self.held += text
            return ""
        out, self.held = self.held + body, text[len(body) :]
        self.started = True
        return out

    def _raw(self, text: str, force: bool = False) -> str:
        """Plain text as it comes; the reply's leading whitespace waits until text follows it."""
        if not self.prose:
            return ""
        if self.raw_started:
            return text
        self.raw_held += text
        if not force and not text.strip():
            return ""
        self.raw_started = True
        out, self.raw_held = self.raw_held, ""
        return out

    # -- a fence, JSON --------------------------------------------------------------------------

    def _fence_opens(self, line: str) -> bool:
        stripped = line.lstrip()
        return (
            self.fences
            and not self.marked
            and not self.raw_started
            and stripped.startswith("```")
            and _fence_line(stripped[3:])
        )

    def _after_fence(self, text: str) -> str:
        """After a fence's first line: JSON if its first text is ``{``; else the fence was text."""
        content = text.lstrip()
        if not content:
            self.fence += text
            return ""
        if content.startswith("{") and "\n" in self.fence:  # DSPy's fence: ``json``, whitespace, a newline
            self.mode = "json"
            return self._json(content)
        held, self.fence = self.fence + text, ""
        self.mode, self.fences, self.kind, self.line = "lines", False, None, ""
        return self._consume(held)  # read again as lines

    def _whole(self, content: str) -> str:
        return self._json(content) if self.mode == "json" else self._xml(content)

    def _xml(self, content: str) -> str:
        """A reply that opens with a field's tag: the text between the first ``<field>`` and the
        first ``</field>`` after it, stripped (``_prompt.markup``'s tags); a tag's possible start waits."""
        self.xml += content
        if self.xml_done:
            return ""
        opening, closing = f"<{self.field}>", f"</{self.field}>"
        if self.xml_start < 0:
            start = self.xml.find(opening, self.xml_scan)
            if start < 0:
                self.xml_scan = max(0, len(self.xml) - len(opening) + 1)
                return ""
            self.xml_start = self.xml_upto = self.xml_scan = start + len(opening)
        end = self.xml.find(closing, self.xml_scan)
        if end >= 0:
            self.xml_done = True
            out = self._field(self.xml[self.xml_upto : end])
            self.held = ""  # the field is stripped
            return out
        keep = next(
            (size for size in range(len(closing) - 1, 0, -1) if self.xml.endswith(closing[:size])),
            0,
        )
        upto = max(self.xml_upto, len(self.xml) - keep)
        text, self.xml_upto = self.xml[self.xml_upto : upto], upto
        self.xml_scan = max(self.xml_start, len(self.xml) - len(closing) + 1)
        return self._field(text)

    def _json(self, content: str) -> str:
        if not content:
            return ""
        self.json += content
        value = _partial(self.json).get(self.field)
        if not isinstance(value, str) or not value.startswith(self.value) or len(value) == len(self.value):
            return ""
        new, self.value = value[len(self.value) :], value
        return new


def _fence_line(after: str) -> bool:
    """What follows ```` ``` ```` on a fence's first line could still open DSPy's fenced JSON
    (``json`` then whitespace, or whitespace)."""
    if "json".startswith(after):
        return True
    if after.startswith("json"):
        after = after[4:]
    return not after.strip()


def _header(stripped: str) -> tuple[str, int] | Literal[False] | None:
    """A stripped line start: ``(name, end)`` for a header ``[[ ## name ## ]]`` ending at ``end``,
    ``None`` while it could still become one, ``False`` once it cannot."""
    if len(stripped) < len(_OPEN):
        return None if _OPEN.startswith(stripped) else False
    if not stripped.startswith(_OPEN):
        return False
    name_end = _WORD.match(stripped, len(_OPEN)).end()  # type: ignore[union-attr]  # ``\w*`` always matches
    if name_end == len(stripped):
        return None
    if name_end == len(_OPEN):
        return False
    tail = stripped[name_end : name_end + len(_CLOSE)]
    if tail == _CLOSE:
        return stripped[len(_OPEN) : name_end], name_end + len(_CLOSE)
    return None if _CLOSE.startswith(tail) else False


def _partial(text: str) -> dict[str, Any]:
    try:
        parsed = jiter.from_json(text.encode(), partial_mode="trailing-strings")
    except ValueError:
        return {}
    return parsed if isinstance(parsed, dict) else {}
