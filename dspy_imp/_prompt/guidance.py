"""What the loop tells the model about itself: the guidance lines and the system message.

``Guidance`` is everything the renderer needs to know about the loop and one request; the
loop builds it, the adapter reads it from a context variable. The system message is the
adapter's layout (input fields, structure, objective) with the loop's guidance lines
appended to the objective after the program's own instructions, which are never edited; in
native Chat, where the model answers in tool calls or plain text, it is the instructions and
the guidance lines alone.
"""

from __future__ import annotations

import json
import textwrap
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import dspy
from dspy.adapters.utils import get_field_description_string
from pydantic.fields import FieldInfo

from dspy_imp._prompt import sentences
from dspy_imp._prompt.dialect import Dialect
from dspy_imp._prompt.media import ToolMedia
from dspy_imp._prompt.memo import RenderMemo
from dspy_imp._prompt.signature import SUBMIT, field_description, type_words
from dspy_imp._records.kinds import FinishMode, HistoryReplay, RequestKind
from dspy_imp._records.steps import Step, ToolCall, ToolResult

ResultRenderer = Callable[[ToolCall, ToolResult], Any]


"""Returns a str, a media value (``dspy.Image``, ...) or a list of those (see ``_prompt.media``)."""


@dataclass(frozen=True)
class Task:
    """The task signature's fields, as the renderer needs them (built once per program)."""

    signature: type[dspy.Signature]
    inputs: Mapping[str, FieldInfo]
    outputs: Mapping[str, FieldInfo]
    text_answer: bool

    @classmethod
    def of(cls, signature: type[dspy.Signature], text_answer: bool) -> Task:
        return cls(signature, dict(signature.input_fields), dict(signature.output_fields), text_answer)

    @property
    def input_names(self) -> tuple[str, ...]:
        return tuple(self.inputs)

    @property
    def output_names(self) -> tuple[str, ...]:
        return tuple(self.outputs)


@dataclass(frozen=True)
class Guidance:
    """Everything the renderer needs to know about the loop and this request.

    The loop builds one per request and hands it to the adapter through a context
    variable; nothing of it reaches the LM except through the rendered messages.
    """

    task: Task
    finish: FinishMode
    has_submit: bool
    roster: tuple[dspy.Tool, ...]
    ending_tools: tuple[str, ...] = ()
    unsent_note: str | None = None
    history_replay: HistoryReplay = "trajectory"
    result_renderer: ResultRenderer | None = None
    toolset_instructions: tuple[tuple[str, str], ...] = ()  # untrusted: after the loop's lines (``_toolset_lines``)
    kind: RequestKind = "step"
    steps: Sequence[Step] = ()  # the loop passes a ``Window`` on its step list (never copied)
    history: Any = None
    omitted: int = 0
    boundary: int = 0
    summary: str | None = None  # a context policy's summary, shown before ``steps[omitted:]``
    cleared: int = 0  # steps before this index show their tool results as a placeholder
    unbound: int = 0  # steps before this index replay no thinking block (their prefix changed)
    keep_reasoning: bool = True
    replayed_kinds: frozenset[str] = frozenset()
    dialect: Dialect | None = None
    tool_media: ToolMedia = "after"
    memo: RenderMemo | None = field(default=None, compare=False, repr=False)
    # a reply the provider paused (Anthropic's ``pause_turn``): the request ends with it as the assistant's
    # message, as served, so the provider goes on with it (``_turn.paused``)
    paused: Step | None = None

    def context(self) -> Guidance:
        """What a memo's rendered steps depend on: this guidance without its kind, steps, history, memo
        and paused reply."""
        return replace(self, kind="step", steps=(), history=None, memo=None, paused=None)

    @property
    def text_answer(self) -> bool:
        """The step's text is the answer (a text-answer signature under ``"auto"``)."""
        return self.finish == "auto" and self.task.text_answer

    @property
    def forced(self) -> bool:
        return self.kind in ("forced_submit", "required_retry")

    @property
    def edits_prefix(self) -> bool:
        """This request changes what earlier requests of the turn sent before their replies: earlier
        entries left out after a context-window refusal, or the ``"required"`` retry's smaller roster.
        (Claude 5.1+ binds each thinking block to that prefix.)"""
        return self.omitted > 0 or self.kind == "required_retry"

    @property
    def tool_names(self) -> tuple[str, ...]:
        return tuple(t.name for t in self.roster)


def system_message(guidance: Guidance, instructions: str, dialect: Dialect) -> str:
    loop = [*guidance_lines(guidance, dialect), *_toolset_lines(guidance.toolset_instructions)]
    if dialect.plain:
        return _plain_system(guidance.task, instructions, loop)
    lines = [*textwrap.dedent(instructions).splitlines(), *loop]
    formatted = dialect.system(sentences.OBJECTIVE + ("\n" + " " * 8).join(["", *lines]))
    assert formatted is not None  # only the plain dialect has no layout of its own
    return formatted


def _toolset_lines(given: Sequence[tuple[str, str]]) -> list[str]:
    """A toolset's instructions (an MCP server's, ``add_instructions=True``) after the loop's lines,
    each said to be that server's untrusted text, between markers its text cannot close."""
    lines: list[str] = []
    for whose, text in given:
        body = text.replace(sentences.TOOLSET_INSTRUCTIONS_END, "")
        lines += [sentences.TOOLSET_INSTRUCTIONS.format(whose=whose), *body.splitlines(),
                  sentences.TOOLSET_INSTRUCTIONS_END]  # fmt: skip
    return lines


def _plain_system(task: Task, instructions: str, lines: list[str]) -> str:
    """Native Chat: the program's instructions, then the guidance lines; nothing the request says elsewhere.

    DSPy's ChatAdapter layout (the input fields, the marker template, "In adhering to this
    structure...") is left out: the user message shows the inputs under their markers, and the
    model answers in tool calls or plain text. Inputs with a description of their own are listed.
    """
    described = {name: f for name, f in task.inputs.items() if field_description(name, f)}
    head = [f"{sentences.INPUTS_HEADER}\n{get_field_description_string(described).strip()}"] if described else []
    own = textwrap.dedent(instructions).strip()
    return "\n".join([*head, *([own] if own else []), *lines])


def guidance_lines(guidance: Guidance, dialect: Dialect) -> list[str]:
    """The loop's lines, in order: agent, outputs, call tools, finish, tool list (reference §2.5).

    In native Chat (``dialect.plain``) a line that repeats what the request already says is left
    out: the agent line (the request's ``tools`` are the tools, its user message shows the inputs,
    ``submit``'s schema or the finish line names the outputs), the outputs list when ``submit``'s
    schema carries the outputs' names, types and descriptions (and, for a text answer, outputs
    without a description), "Call tools when more information is needed.", the outputs named
    again in the finish line, and the tool list. What stays is the finish line: how the turn ends.
    """
    task = guidance.task
    inputs, outputs = task.input_names, task.output_names
    plain = dialect.plain
    if plain:
        lines: list[str] = []
    elif guidance.finish == "tools":
        lines = [sentences.agent_line_act(inputs)]
    elif guidance.text_answer and dialect.native:
        lines = [sentences.agent_line_text_answer(outputs, inputs)]
    else:
        lines = [sentences.agent_line_tools_produce(outputs, inputs)]
    if guidance.finish != "tools" and not (plain and guidance.has_submit):
        items = [
            sentences.outputs_item(i, name, type_words(f.annotation), field_description(name, f))
            for i, (name, f) in enumerate(task.outputs.items(), start=1)
            if not plain or field_description(name, f)
        ]
        lines.extend([sentences.OUTPUTS_HEADER, *items] if items else [])
    if not plain:
        lines.append(sentences.CALL_TOOLS_LINE)
    lines.append(_finish_line(guidance, dialect))
    if guidance.roster and not plain:
        lines.append(sentences.tools_line(guidance.tool_names))
    return lines


def _finish_line(guidance: Guidance, dialect: Dialect) -> str:
    if guidance.finish == "tools":
        return sentences.finish_line_tools(guidance.ending_tools)
    if guidance.has_submit:
        if dialect.plain:
            return sentences.FINISH_LINE_SUBMIT_PLAIN
        return sentences.finish_line_submit(guidance.task.output_names)
    if dialect.calls_field is not None:
        return sentences.finish_line_written_text(dialect.text_field, dialect.calls_field)
    return sentences.finish_line_native_text(guidance.task.output_names[0])


def tool_listing(roster: Sequence[dspy.Tool]) -> list[str]:
    """The roster as text, one line per tool, in DSPy's ``Tool`` shape (reference §2.3).

    ``NAME, whose description is <desc>DESC</desc>. It takes arguments JSON.``, the JSON
    being ``{"properties", "required", "$defs"}`` (the last two only when present), compact,
    with the properties in the tool's declared order.
    """
    return [_tool_line(tool) for tool in roster]


def _tool_line(tool: dspy.Tool) -> str:
    schema = tool.format_as_litellm_function_call()["function"]["parameters"]
    compact = {"separators": (",", ":"), "ensure_ascii": False}
    properties = ",".join(
        f"{json.dumps(name, **compact)}:{json.dumps(spec, sort_keys=True, **compact)}"  # type: ignore[arg-type]
        for name, spec in (schema.get("properties") or {}).items()
    )
    parts = [f'"properties":{{{properties}}}']
    if schema.get("required"):
        parts.append(f'"required":{json.dumps(schema["required"], **compact)}')  # type: ignore[arg-type]
    if schema.get("$defs"):
        parts.append(f'"$defs":{json.dumps(schema["$defs"], sort_keys=True, **compact)}')  # type: ignore[arg-type]
    desc = f", whose description is <desc>{tool.desc}</desc>.".replace("\n", "  ") if tool.desc else "."
    return f"{tool.name}{desc} It takes arguments {{{','.join(parts)}}}."


def roster_for_provider(roster: Sequence[dspy.Tool]) -> list[dict[str, Any]]:
    return [tool.format_as_litellm_function_call() for tool in roster]


def submit_only(roster: Sequence[dspy.Tool]) -> tuple[dspy.Tool, ...]:
    return tuple(t for t in roster if t.name == SUBMIT)
