"""Reading listened fields out of one request's raw stream chunks.

A reader follows one listener through one request and knows where its field is:

- ``_TextReader``: the reply's text field (the answer of a text-answer step, else
  ``next_thought``), known from the request's dialect. Plain native text is the field
  itself, without any field markup the model wrote in it anyway (``_watch.unmarking``, which
  mirrors how ``Dialect.read`` reads it); a reply written in an adapter's format (native
  JSON/XML, or written calls) is read in that format: JSON as partial JSON, ``ChatAdapter``
  markers and XML tags by ``_watch.unmarking`` (never DSPy's own listener, which lets a closing
  marker or tag cut into more than ten chunks through).
- ``_SubmitReader``: one output inside ``submit``'s streamed tool-call arguments, read as
  partial JSON.
- ``_ExtractionReader``: one output of the extractor, in its adapter's format.

``close`` ends the field for the request with an ``is_last_chunk=True`` chunk that makes
the chunks add up to the value the turn read (when nothing could be streamed, the whole
value comes in that chunk).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import dspy
import jiter
from dspy.streaming.messages import StreamResponse

from dspy_imp._prompt.signature import SUBMIT
from dspy_imp._records.outcomes import Extracted, Reply
from dspy_imp._turn.effects import Extraction, ModelRequest, Summarize
from dspy_imp._turn.plan import Program
from dspy_imp._watch.listener import StreamListener
from dspy_imp._watch.unmarking import PlainText


class FieldReader:
    """One listener's field during one request."""

    def __init__(self, listener: StreamListener, predict_name: str):
        self.listener = listener
        self.field = listener.signature_field_name
        self.name = listener.predict_name or predict_name
        self.sent = ""
        self.ended = False

    def feed(self, chunk: Any) -> list[StreamResponse]:
        raise NotImplementedError

    def final(self, outcome: Any) -> str | None:
        """The field's value as the turn read it (``None``: not in this request)."""
        raise NotImplementedError

    def close(self, outcome: Any) -> list[StreamResponse]:
        if self.ended:
            return []
        value = self.final(outcome)
        if value is None and not self.sent:
            return []
        rest = value[len(self.sent) :] if value is not None and value.startswith(self.sent) else ""
        return [self._response(rest, last=True)]

    def _response(self, text: str, last: bool = False) -> StreamResponse:
        self.sent += text
        self.ended = last
        self.listener.stream_start = True
        return StreamResponse(self.name, self.field, text, is_last_chunk=last)


class _TextReader(FieldReader):
    def __init__(self, listener: StreamListener, predict_name: str, exchange: Any):
        super().__init__(listener, predict_name)
        self.exchange = exchange
        self.marked: _Marked | None = None
        self.plain: PlainText | None = None

    def feed(self, chunk: Any) -> list[StreamResponse]:
        dialect = self.exchange.dialect
        content = _delta(chunk, "content")
        if dialect is None or dialect.text_field != self.field or self.ended:
            return []
        if dialect.plain and self.plain is not None and _delta(chunk, "tool_calls"):
            rest = self.plain.end()  # the text is written once the calls start
            return [self._response(rest, last=True)] if self.sent or rest else []
        if not content:
            return []
        if dialect.plain:  # a model may write markup anyway: it never streams (``_watch.unmarking``)
            if self.plain is None:
                self.plain = PlainText(self.field)
            text = self.plain.feed(content)
            return [self._response(text)] if text else []
        if self.marked is None:
            self.marked = _Marked(self.field, dialect.base, prose=not dialect.two_step)  # two-step: extracted
        return [self._response(r.chunk, r.is_last_chunk) for r in self.marked.feed(chunk)]

    def final(self, outcome: Any) -> str | None:
        dialect = self.exchange.dialect
        if not isinstance(outcome, Reply) or dialect is None or dialect.text_field != self.field:
            return None
        return outcome.text or None


class TextFollower(_TextReader):
    """A request's text, whichever field its dialect writes it in (for ``_watch.events``): the text
    of a native reply as it streams, the ``next_thought`` or answer field of a written one."""

    def __init__(self, exchange: Any):
        unnamed: Any = _Unnamed()
        super().__init__(unnamed, "react", exchange)

    def feed(self, chunk: Any) -> list[StreamResponse]:
        self._follow()
        return super().feed(chunk)

    def final(self, outcome: Any) -> str | None:
        self._follow()
        return super().final(outcome)

    def _follow(self) -> None:
        dialect = self.exchange.dialect  # known once the request is formatted
        if dialect is not None:
            self.field = dialect.text_field


class _Unnamed:
    """The listener of a ``TextFollower``: it follows no field by name."""

    signature_field_name = ""
    predict_name: str | None = None
    stream_start = False


class _SubmitReader(FieldReader):
    def __init__(self, listener: StreamListener, predict_name: str):
        super().__init__(listener, predict_name)
        self.calls: dict[int, list[str]] = {}  # index -> [name, arguments so far]

    def feed(self, chunk: Any) -> list[StreamResponse]:
        out = []
        for call in _delta(chunk, "tool_calls") or []:
            index = _get(call, "index") or 0
            function = _get(call, "function") or {}
            entry = self.calls.setdefault(index, ["", ""])
            entry[0] += _get(function, "name") or ""
            arguments = _get(function, "arguments")
            entry[1] += arguments if isinstance(arguments, str) else ""
            if entry[0] == SUBMIT and not self.ended:
                value = _partial(entry[1]).get(self.field)
                if isinstance(value, str) and value.startswith(self.sent) and len(value) > len(self.sent):
                    out.append(self._response(value[len(self.sent) :]))
        return out

    def final(self, outcome: Any) -> str | None:
        if not isinstance(outcome, Reply):
            return None
        for call in outcome.calls:
            if call.name == SUBMIT and isinstance(call.args, dict) and self.field in call.args:
                return _text(call.args[self.field])
        return None


class _ExtractionReader(FieldReader):
    def __init__(self, listener: StreamListener, predict_name: str, base: dspy.Adapter | None):
        super().__init__(listener, predict_name)
        self.marked = _Marked(self.field, base, prose=False)  # text without markers is no output

    def feed(self, chunk: Any) -> list[StreamResponse]:
        if self.ended or not _delta(chunk, "content"):
            return []
        return [self._response(r.chunk, r.is_last_chunk) for r in self.marked.feed(chunk)]

    def final(self, outcome: Any) -> str | None:
        if isinstance(outcome, Extracted) and self.field in outcome.outputs:
            return _text(outcome.outputs[self.field])
        return None


class _Marked:
    """A field written in an adapter's format.

    JSON is read as partial JSON (the field's string as it grows); ``ChatAdapter`` markers as
    ``ChatAdapter.parse`` reads them, and XML tags from the field's first tag to its closing one
    (``_watch.unmarking``), by the stock adapter class the configured one derives from. Not by
    DSPy's own listener: it holds back at most ten chunks, so a closing marker or tag cut into
    more pieces than that streams (``</final_answer>`` one character at a time).
    """

    def __init__(self, field: str, base: dspy.Adapter | None, prose: bool = True):
        self.field = field
        self.adapter = _stock(base)
        self.unmarked: PlainText | None = None
        if isinstance(self.adapter, dspy.XMLAdapter):
            self.unmarked = PlainText(field, "xml")
        elif not isinstance(self.adapter, dspy.JSONAdapter):
            self.unmarked = PlainText(field, "chat", prose)
        self.text = ""
        self.sent = ""

    def feed(self, chunk: Any) -> list[StreamResponse]:
        if self.unmarked is None:
            return self._json(_delta(chunk, "content") or "")
        text = self.unmarked.feed(_delta(chunk, "content") or "")
        return [StreamResponse("", self.field, text, is_last_chunk=False)] if text else []

    def _json(self, content: str) -> list[StreamResponse]:
        self.text += content
        start = self.text.find("{")
        value = _partial(self.text[start:]).get(self.field) if start >= 0 else None
        if not isinstance(value, str) or not value.startswith(self.sent) or len(value) == len(self.sent):
            return []
        new, self.sent = value[len(self.sent) :], value
        return [StreamResponse("", self.field, new, is_last_chunk=False)]


def _stock(base: dspy.Adapter | None) -> dspy.Adapter:
    for cls in (dspy.JSONAdapter, dspy.XMLAdapter):
        if isinstance(base, cls):
            return cls()
    return dspy.ChatAdapter()


def readers_for(listeners: Sequence[StreamListener], program: Program, effect: Any, exchange: Any) -> list[FieldReader]:
    """The readers of one request: each listener's field where this request can carry it."""
    readers: list[FieldReader] = []
    outputs = program.signature.output_fields
    for listener in listeners:
        field = listener.signature_field_name
        if isinstance(effect, Summarize):  # a context policy's summary is no field of the turn
            continue
        if isinstance(effect, ModelRequest):
            readers.append(_TextReader(listener, "react", exchange))
            if field in outputs and effect.guidance.has_submit:
                readers.append(_SubmitReader(listener, "react"))
        elif isinstance(effect, Extraction) and field in outputs:
            readers.append(_ExtractionReader(listener, "extract", _base_adapter()))
    return readers


def _base_adapter() -> dspy.Adapter | None:
    configured = dspy.settings.adapter
    return getattr(configured, "base", configured)


def delta_of(chunk: Any, key: str) -> Any:
    """One key of a stream chunk's delta (``content``, ``tool_calls``, ``reasoning_content``), or ``None``."""
    return _delta(chunk, key)


def _delta(chunk: Any, key: str) -> Any:
    try:
        return _get(chunk.choices[0].delta, key)
    except (AttributeError, IndexError, KeyError, TypeError):
        return None


def _get(obj: Any, key: str) -> Any:
    if isinstance(obj, dict):
        return obj.get(key)
    return getattr(obj, key, None)


def _partial(arguments: str) -> dict[str, Any]:
    try:
        parsed = jiter.from_json(arguments.encode(), partial_mode="trailing-strings")
    except ValueError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
