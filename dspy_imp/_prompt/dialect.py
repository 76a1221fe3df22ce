"""How one request's fields are written and read: the configured adapter's format.

A ``Dialect`` pairs the user's DSPy adapter (Chat, JSON, XML, or a subclass) with the
request's mode:

- *native* tool calls with ``ChatAdapter``: ``plain``. The model answers with tool calls
  or plain text; no output markers are asked for or replayed.
- *native* with ``JSONAdapter``/``XMLAdapter``: the step's text field is written in that
  format, and each request ends on the adapter's own format requirement, in a user message
  of its own (so the prompt before it stays a cacheable prefix).
- *written* tool calls (the LM cannot call tools natively): the step asks for the text
  field and the calls as a JSON list, in the adapter's format; earlier steps replay as text
  and every request ends on the tool listing.

The display signatures are built once per step signature and mode (DSPy's own history
rendering builds one per recorded step on every request).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import dspy
import json_repair
from dspy.adapters.chat_adapter import field_header_pattern
from dspy.utils.exceptions import AdapterParseError

from dspy_imp._prompt import sentences
from dspy_imp._prompt.markup import find_fields, without_markers
from dspy_imp._prompt.media import Content, with_media
from dspy_imp._prompt.signature import STEP_CALLS, STEP_TEXT
from dspy_imp._records.media import contains_media
from dspy_imp._records.outcomes import RawCall
from dspy_imp._routes import dspy_private

Message = dict[str, Any]

dspy_private.install_reused_json_adapters()  # the inputs' text, written on every request: ``dspy_private``


CALLS_FALLBACK = "agent_tool_calls"


@dataclass(frozen=True)
class Dialect:
    base: dspy.Adapter
    native: bool
    display: type[dspy.Signature]
    reading: type[dspy.Signature]
    text_field: str
    calls_field: str | None

    @property
    def plain(self) -> bool:
        """Native calls with a Chat-style adapter: plain text, no markers."""
        return self.native and not isinstance(self.base, dspy.JSONAdapter | dspy.XMLAdapter)

    @property
    def two_step(self) -> bool:
        """``TwoStepAdapter``: free text for the main LM, fields read by its extraction model."""
        return isinstance(self.base, dspy.TwoStepAdapter)

    # -- writing ------------------------------------------------------------------------------

    def system(self, objective: str) -> str | None:
        """The field description and structure of the adapter, then the objective (``None``: plain)."""
        if self.plain:
            return None
        if self.two_step:
            return f"{self.base.format_task_description(self.display.with_instructions(''))}\n{objective}"
        return (
            f"{self.base.format_field_description(self.display)}\n"
            f"{self.base.format_field_structure(self.display)}\n"
            f"{objective}"
        )

    def inputs(self, values: Mapping[str, Any], memo: Any = None) -> Content:
        """The user message content of these inputs: text, or content parts when they hold media.

        ``memo`` (the turn's ``RenderMemo``) hands back the content it wrote for the very same
        values: a turn's inputs are written for its first request, then twice more as its first
        step's (once unsettled, once settled), each time through DSPy's field formatting."""
        if memo is not None:
            return memo.inputs_content(self, values, lambda: self.inputs(values))
        fields = self.display.input_fields
        shown = {k: _formattable(fields[k], v) for k, v in values.items() if k in fields and v is not None}
        if not shown:
            return ""
        return with_media(lambda lifted: self.base.format_user_message_content(self.display, lifted).strip(), shown)

    def assistant(self, text: str | None, calls: Sequence[Mapping[str, Any]] | None) -> str:
        if self.plain:
            return text or ""
        outputs: dict[str, Any] = {self.text_field: text or ""}
        if self.calls_field is not None:
            outputs[self.calls_field] = list(calls or [])
        return self.base.format_assistant_message_content(self.display, outputs)

    def results(self, lines: Sequence[str]) -> str:
        """Written mode: the tool results of a step, as the user message that follows it."""
        body = "\n".join(lines)
        if isinstance(self.base, dspy.XMLAdapter):
            return f"<tool_call_results>\n{body}\n</tool_call_results>"
        return f"[[ ## tool_call_results ## ]]\n{body}"

    def trailing(self, pending: Mapping[str, Any], listing: Sequence[str], memo: Any = None) -> list[Message]:
        """The request's last user messages: pending inputs, then the format requirement.

        Written mode ends on the tool listing (with the requirement), native JSON/XML on the
        requirement alone; plain native ends on the pending inputs, if any.
        """
        messages = []
        content = self.inputs(pending, memo)
        if content:
            messages.append({"role": "user", "content": content})
        if self.plain:
            return messages
        requirement = "" if self.two_step else self.base.user_message_output_requirements(self.display)
        if not self.native:
            tools = self.base.format_user_message_content(self.display, {"tools": list(listing)})
            requirement = f"{tools}\n\n{requirement}" if requirement else tools
        messages.append({"role": "user", "content": requirement})
        return messages

    # -- reading ------------------------------------------------------------------------------

    def read(self, completion: str) -> tuple[str | None, tuple[RawCall, ...]]:
        """The step's text and written calls from a reply's text.

        Plain text with none of the format's structure is the text field. A reply in the
        format is parsed by the adapter; one it cannot parse is read leniently in any of
        DSPy's formats (``_prompt.markup``): the text field if written, the calls if written, even
        in native mode, so calls in a readable shape run and markup never becomes the text.
        A reply that writes neither raises ``ValueError`` (an ``AdapterParseError`` for the
        adapter: a ``parse_error`` interruption), except in plain native mode, where its text
        without the markers is the text field.
        """
        if self.two_step and not self.native:
            return self._fields(_innermost(type(self.base).parse)(self.base, self.reading, completion))
        names = (self.text_field, self.calls_field or STEP_CALLS, STEP_TEXT)
        if not _structured(completion, self) and find_fields(completion, names) is None:
            return completion, ()
        if not self.plain:
            try:
                return self._fields(_innermost(type(self.base).parse)(self.base, self.reading, completion))
            except AdapterParseError as exc:
                lenient = find_fields(completion, names)
                if lenient is None:
                    raise ValueError(str(exc)) from exc
                return self._fields(lenient)
        found = find_fields(completion, names)
        if found is None:
            return without_markers(completion), ()
        return self._fields(found)

    def _fields(self, fields: Mapping[str, Any]) -> tuple[str | None, tuple[RawCall, ...]]:
        text = fields.get(self.text_field, fields.get(STEP_TEXT))
        raw_calls = fields.get(self.calls_field or STEP_CALLS)
        calls = read_written_calls(raw_calls) if raw_calls is not None else ()
        if text is None and raw_calls is None:
            raise ValueError(f"the reply writes neither `{self.text_field}` nor `{self.calls_field or STEP_CALLS}`")
        return (None if text is None else str(text)), calls


def dialect_for(base: dspy.Adapter, task: Any, text_answer: bool, native: bool) -> Dialect:
    text_field = next(iter(task.output_fields)) if text_answer else STEP_TEXT
    calls_field = None if native else (CALLS_FALLBACK if text_field == STEP_CALLS else STEP_CALLS)
    display = _display(task, text_answer, calls_field, list)
    reading = _display(task, text_answer, calls_field, Any)  # wrappers and odd spellings get through parsing
    return Dialect(base, native, display, reading, text_field, calls_field)


@functools.lru_cache(maxsize=128)
def _display(task: Any, text_answer: bool, calls_field: str | None, calls_type: Any) -> Any:
    """What the model is shown of a step: the task's inputs (and, written, the tool listing),
    the text field (the task's own output for a text answer), and, written, the calls."""
    fields: dict[str, Any] = {name: (info.annotation, info) for name, info in task.input_fields.items()}
    if calls_field is not None:
        fields["tools"] = (list[str], dspy.InputField(desc=sentences.TOOLS_FIELD_DESCRIPTION))
    if text_answer:
        name, info = next(iter(task.output_fields.items()))
        fields[name] = (str, info)
    else:
        fields[STEP_TEXT] = (str, dspy.OutputField())
    if calls_field is not None:
        fields[calls_field] = (calls_type, dspy.OutputField(desc=sentences.CALLS_FIELD_DESCRIPTION, default=[]))
    return dspy.Signature(fields, task.instructions)


def _structured(completion: str, dialect: Dialect) -> bool:
    if isinstance(dialect.base, dspy.JSONAdapter):
        return completion.lstrip().startswith("{")
    if isinstance(dialect.base, dspy.XMLAdapter):
        names = (dialect.text_field, dialect.calls_field)
        return any(f"<{n}>" in completion for n in names if n)
    return any(field_header_pattern.match(line.strip()) for line in completion.splitlines())


def _innermost(function: Any) -> Any:
    while hasattr(function, "__wrapped__"):
        function = function.__wrapped__
    return function


def read_written_calls(value: Any) -> tuple[RawCall, ...]:
    """Calls written as JSON: ``name``/``tool``/``recipient_name``, ``arguments``/``args``/``parameters``."""
    if isinstance(value, str):
        value = json_repair.loads(value) if value.strip() else []
    if isinstance(value, Mapping) and "tool_calls" in value:
        value = value["tool_calls"]
    if isinstance(value, Mapping):
        value = [value]
    if not isinstance(value, list):
        raise ValueError(f"tool calls must be a JSON list, got {value!r}")
    return tuple(_written_call(item) for item in value)


def _written_call(item: Any) -> RawCall:
    if not isinstance(item, Mapping):
        return RawCall(None, None, {}, received=jsonable(item))
    function: Mapping[str, Any] = item["function"] if isinstance(item.get("function"), Mapping) else {}
    name = item.get("name") or item.get("tool") or function.get("name") or item.get("recipient_name")
    if isinstance(name, str) and name.startswith("functions."):
        name = name.removeprefix("functions.")
    args = next((item[k] for k in ("arguments", "args", "parameters") if k in item), function.get("arguments", {}))
    if isinstance(args, str):
        args = json_repair.loads(args) if args.strip() else {}
    if not isinstance(name, str) or not name:
        return RawCall(None, None, {}, received=jsonable(dict(item)))
    return RawCall(item.get("id") if isinstance(item.get("id"), str) else None, name, args)


def jsonable(value: Any) -> Any:
    """``value`` if JSON can hold it, else its ``repr`` (a malformed call's payload, kept for the record)."""
    try:
        json.dumps(value)
        return value
    except (TypeError, ValueError):
        return repr(value)


def _formattable(info: Any, value: Any) -> Any:
    """``value``, or its JSON text where DSPy's formatter cannot take it: a list holding other than
    text for a ``str`` field (DSPy joins the items as text, and a ``None`` or a number raises)."""
    if (
        isinstance(value, list)
        and getattr(info, "annotation", None) is str
        and not all(isinstance(item, str) for item in value)
        and not contains_media(value)
    ):
        return json.dumps(value, ensure_ascii=False, default=str)
    return value
