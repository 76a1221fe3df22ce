"""Rendering: from (history, task, guidance) to the message list of one request. Pure.

The system message is DSPy's ChatAdapter layout (input fields, structure, objective) for
the task's inputs, with the loop's guidance lines appended to the objective after the
program's own instructions. With native tool calls no output markers are shown: the model
answers with tool calls or with plain text, and recorded steps replay as native
assistant/tool messages exactly as they were sent, so each request is the previous one
plus the newest exchange (prompt-cache prefix).

Replay rules (reference §7): an *answer* (a step carrying outputs) is never a thought; a
*thought* (text, no call, no output) is followed by the unsent line of the rendering loop,
except when the turn's extracted outputs directly follow it or when thought_as_request
moves it to the user side of a forced request; extracted outputs render nothing.
"""

from __future__ import annotations

import json
import textwrap
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import dspy
from dspy.adapters.utils import format_field_value, get_field_description_string, serialize_for_json
from pydantic.fields import FieldInfo

from . import _prompts
from ._kinds import FinishMode, HistoryReplay, RequestKind
from ._records import Step, ToolCall, ToolResult
from ._signature import SUBMIT, field_description, type_words

Message = dict[str, Any]
ResultRenderer = Callable[[ToolCall, ToolResult], str]


@dataclass(frozen=True)
class Task:
    """The task signature's fields, as the renderer needs them (built once per program)."""

    inputs: Mapping[str, FieldInfo]
    outputs: Mapping[str, FieldInfo]
    text_answer: bool

    @classmethod
    def of(cls, signature: type[dspy.Signature], text_answer: bool) -> Task:
        return cls(dict(signature.input_fields), dict(signature.output_fields), text_answer)

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
    kind: RequestKind = "step"
    steps: tuple[Step, ...] = ()
    history: Any = None
    omitted: int = 0
    boundary: int = 0
    keep_reasoning: bool = True

    @property
    def text_answer(self) -> bool:
        """The step's text is the answer (a text-answer signature under ``"auto"``)."""
        return self.finish == "auto" and self.task.text_answer

    @property
    def forced(self) -> bool:
        return self.kind in ("forced_submit", "required_retry")

    @property
    def tool_names(self) -> tuple[str, ...]:
        return tuple(t.name for t in self.roster)


# -- system message ------------------------------------------------------------------------------


def system_message(guidance: Guidance, instructions: str) -> str:
    task = guidance.task
    description = "Your input fields are:\n" + get_field_description_string(task.inputs)
    structure = "\n\n".join([_prompts.INPUT_STRUCTURE, *(f"[[ ## {name} ## ]]\n{{{name}}}" for name in task.inputs)])
    lines = [*textwrap.dedent(instructions).splitlines(), *guidance_lines(guidance)]
    objective = _prompts.OBJECTIVE + ("\n" + " " * 8).join(["", *lines])
    return f"{description}\n{structure}\n\n{objective}"


def guidance_lines(guidance: Guidance) -> list[str]:
    """The loop's lines, in order: agent, outputs, call tools, finish, tool list (reference §2.5)."""
    task = guidance.task
    inputs, outputs = task.input_names, task.output_names
    if guidance.finish == "tools":
        lines = [_prompts.agent_line_act(inputs)]
    elif guidance.text_answer:
        lines = [_prompts.agent_line_text_answer(outputs, inputs)]
    else:
        lines = [_prompts.agent_line_tools_produce(outputs, inputs)]
    if guidance.finish != "tools":
        lines.append(_prompts.OUTPUTS_HEADER)
        lines.extend(
            _prompts.outputs_item(i, name, type_words(f.annotation), field_description(name, f))
            for i, (name, f) in enumerate(task.outputs.items(), start=1)
        )
    lines.append(_prompts.CALL_TOOLS_LINE)
    lines.append(_finish_line(guidance))
    if guidance.roster:
        lines.append(_prompts.tools_line(guidance.tool_names))
    return lines


def _finish_line(guidance: Guidance) -> str:
    if guidance.finish == "tools":
        return _prompts.finish_line_tools(guidance.ending_tools)
    if guidance.has_submit:
        return _prompts.finish_line_submit(guidance.task.output_names)
    return _prompts.finish_line_native_text(guidance.task.output_names[0])


# -- the whole request ---------------------------------------------------------------------------


def render_request(
    guidance: Guidance, instructions: str, demos: Sequence[Mapping[str, Any]], pending: Mapping[str, Any]
) -> list[Message]:
    """The message list of one native request."""
    messages: list[Message] = [{"role": "system", "content": system_message(guidance, instructions)}]
    for demo in demos:
        messages.extend(_demo(guidance.task, demo))
    steps = guidance.steps[guidance.omitted :]
    moved = _moved_thought(guidance, steps, pending)
    for index, step in enumerate(steps):
        messages.extend(_inputs_message(guidance.task, step.inputs))
        if index == moved:
            messages.append(_user(_prompts.moved_thought(step.thought or "")))
            continue
        earlier = guidance.history_replay == "actions" and guidance.omitted + index < guidance.boundary
        messages.extend(_earlier_body(guidance, step) if earlier else _body(guidance, step))
        following = steps[index + 1] if index + 1 < len(steps) else None
        if not earlier and _gets_line(step, following):
            line = _unsent_line(guidance)
            if line is not None:
                messages.append(_user(line))
    messages.extend(_inputs_message(guidance.task, pending))
    return messages


def _moved_thought(guidance: Guidance, steps: Sequence[Step], pending: Mapping[str, Any]) -> int | None:
    """thought_as_request: a forced request with nothing new ends on its last thought, as a user message."""
    if not guidance.forced or any(v is not None for v in pending.values()):
        return None
    for index in range(len(steps) - 1, -1, -1):
        if steps[index].is_extracted:
            continue
        return index if steps[index].is_thought else None
    return None


def _gets_line(step: Step, following: Step | None) -> bool:
    """Every thought gets the line, but one the turn's extracted outputs directly follow."""
    return step.is_thought and not (following is not None and following.is_extracted)


def _body(guidance: Guidance, step: Step) -> list[Message]:
    """What the model did in a step: its assistant message and the tool messages."""
    if not guidance.has_submit and any(_recorded_submit(c, r) for c, r in _paired(step)):
        return _submit_as_answer(guidance, step)
    content = step.thought if step.thought is not None else _answer_text(guidance, step)
    return _exchange(guidance, content, step.calls, step.results, step.reasoning_content)


def _earlier_body(guidance: Guidance, step: Step) -> list[Message]:
    """``history_replay="actions"``: an earlier turn's calls and results, without narration.

    Answers are shown whole; thought-only steps are left out (so is their line).
    """
    if step.is_answer:
        return _body(guidance, step)
    return _exchange(guidance, None, step.calls, step.results, None)


def _exchange(
    guidance: Guidance,
    content: str | None,
    calls: Sequence[ToolCall],
    results: Sequence[ToolResult],
    reasoning: str | None,
) -> list[Message]:
    messages: list[Message] = []
    if calls or (content or "").strip():
        message: Message = {"role": "assistant", "content": content or ""}
        if calls:
            message["tool_calls"] = [_native_call(c) for c in calls]
        if reasoning is not None and guidance.keep_reasoning:
            message["reasoning_content"] = reasoning
        messages.append(message)
    by_id = {c.id: c for c in calls}
    for result in results:
        call = by_id.get(result.id) or ToolCall(result.id, result.name, {})
        messages.append(_tool(guidance, call, result))
    return messages


def _submit_as_answer(guidance: Guidance, step: Step) -> list[Message]:
    """Reference §7.4: in a loop without ``submit``, a recorded submit replays as the answer.

    An accepted submit becomes assistant text (the value of a single text output, else the
    JSON of its arguments) and its result is dropped; a rejected one is dropped with its
    error. Other calls of the step replay natively, the answer after their tool messages.
    """
    pairs = _paired(step)
    others = [(c, r) for c, r in pairs if not _recorded_submit(c, r)]
    accepted = [c for c, r in pairs if _recorded_submit(c, r) and r is not None and not r.error]
    answer = _submitted_text(guidance, accepted[-1]) if accepted else None
    if not others:
        content = "\n\n".join(t for t in (step.thought, answer) if t and t.strip())
        return _exchange(guidance, content, (), (), step.reasoning_content)
    results = [r for _, r in others if r is not None]
    messages = _exchange(guidance, step.thought, [c for c, _ in others], results, step.reasoning_content)
    if answer:
        messages.append({"role": "assistant", "content": answer})
    return messages


def _recorded_submit(call: ToolCall, result: ToolResult | None) -> bool:
    """A submit made in a loop that had one (not a call to an unknown tool named ``submit``)."""
    return call.name == SUBMIT and not (result is not None and result.error_kind == "unknown_tool")


def _paired(step: Step) -> list[tuple[ToolCall, ToolResult | None]]:
    """Each call with its result: by id, else by name in call order."""
    by_id = {r.id: r for r in step.results if r.id}
    unclaimed = [r for r in step.results if r.id not in {c.id for c in step.calls}]
    pairs = []
    for call in step.calls:
        result = by_id.get(call.id)
        if result is None:
            result = next((r for r in unclaimed if r.name == call.name), None)
            if result is not None:
                unclaimed.remove(result)
        pairs.append((call, result))
    return pairs


def _submitted_text(guidance: Guidance, call: ToolCall) -> str:
    names = guidance.task.output_names
    if len(names) == 1 and isinstance(call.args.get(names[0]), str):
        return str(call.args[names[0]])
    return to_json(dict(call.args))


def _answer_text(guidance: Guidance, step: Step) -> str | None:
    """A host-written answer-only entry replays as a step that answered in text."""
    if not step.bare or step.outputs is None:
        return None
    names = guidance.task.output_names
    if len(names) == 1 and isinstance(step.outputs.get(names[0]), str):
        return str(step.outputs[names[0]])
    return to_json(dict(step.outputs))


def _native_call(call: ToolCall) -> Message:
    name = call.name if call.name is not None else "unreadable_call"
    arguments = to_json(dict(call.args))
    return {"id": call.id, "type": "function", "function": {"name": name, "arguments": arguments}}


def _tool(guidance: Guidance, call: ToolCall, result: ToolResult) -> Message:
    render = guidance.result_renderer or render_result
    return {"role": "tool", "tool_call_id": result.id, "content": render(call, result)}


def render_result(call: ToolCall, result: ToolResult) -> str:
    """The default tool-message text: errors as one sentence, values whole (Appendix B)."""
    if result.error:
        return _prompts.ERROR_PREFIX + str(result.value)
    value = result.value
    if isinstance(value, str):
        return value
    if isinstance(value, dict | list):
        return to_json(value)
    jsonable = serialize_for_json(value)
    return to_json(jsonable) if isinstance(jsonable, dict | list) else str(jsonable)


def to_json(value: Any) -> str:
    """Compact JSON with ``", "``/``": "`` separators, non-ASCII kept; DSPy's serializer for other values."""
    try:
        return json.dumps(value, ensure_ascii=False)
    except TypeError:
        return json.dumps(serialize_for_json(value), ensure_ascii=False)


def _unsent_line(guidance: Guidance) -> str | None:
    if guidance.finish == "auto" and not guidance.text_answer:
        return None  # DSPy's ending, unchanged: a thought shows bare
    if guidance.unsent_note is not None:
        return guidance.unsent_note
    if guidance.finish == "submit":
        return _prompts.unsent_submit(guidance.task.output_names)
    if guidance.finish == "tools":
        return _prompts.unsent_tools(guidance.ending_tools)
    return _prompts.UNSENT_PLAIN


def _inputs_message(task: Task, inputs: Mapping[str, Any]) -> list[Message]:
    parts = [
        f"[[ ## {name} ## ]]\n{format_field_value(field_info=info, value=inputs[name])}"
        for name, info in task.inputs.items()
        if name in inputs and inputs[name] is not None
    ]
    content = "\n\n".join(parts).strip()
    return [_user(content)] if content else []


def _demo(task: Task, demo: Mapping[str, Any]) -> list[Message]:
    """A bootstrapped demo: its inputs, then what the model did, calls written as text."""
    user = _inputs_message(task, demo)
    if not user:
        return []
    parts = [str(demo["next_thought"])] if demo.get("next_thought") else []
    calls = [
        {"name": c.get("name"), "arguments": c.get("args", c.get("arguments", {}))}
        for c in demo.get("tool_calls") or []
        if isinstance(c, Mapping)
    ]
    if calls:
        parts.append("[[ ## tool_calls ## ]]\n" + to_json(calls))
    if not parts:
        return []
    return [*user, {"role": "assistant", "content": "\n\n".join(parts)}]


def _user(content: str) -> Message:
    return {"role": "user", "content": content}


def roster_for_provider(roster: Sequence[dspy.Tool]) -> list[dict[str, Any]]:
    return [tool.format_as_litellm_function_call() for tool in roster]


def submit_only(roster: Sequence[dspy.Tool]) -> tuple[dspy.Tool, ...]:
    return tuple(t for t in roster if t.name == SUBMIT)


def transcript(guidance: Guidance) -> str:
    """The history as the extractor reads it: plain text, one block per recorded step."""
    blocks = []
    for number, step in enumerate(guidance.steps[guidance.omitted :], start=1):
        lines = [f"[{number}]"]
        lines += [f"{name}: {_plain(value)}" for name, value in step.inputs.items()]
        if step.thought and step.thought.strip():
            lines.append(f"assistant: {step.thought}")
        calls = {c.id: c for c in step.calls}
        for result in step.results:
            call = calls.get(result.id) or ToolCall(result.id, result.name, {})
            arguments = to_json(dict(call.args))
            lines.append(f"call {call.name}({arguments}) -> {render_result(call, result)}")
        if step.outputs is not None and not step.is_thought:
            lines += [f"{name}: {_plain(value)}" for name, value in step.outputs.items()]
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def _plain(value: Any) -> str:
    return value if isinstance(value, str) else to_json(value)


def tool_listing(roster: Sequence[dspy.Tool]) -> list[str]:
    """The roster in DSPy's ``Tool`` text shape, one line per tool (the step's ``tools`` input)."""
    return [str(tool) for tool in roster]
