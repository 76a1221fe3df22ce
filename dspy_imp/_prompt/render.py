"""Rendering: from (history, guidance, dialect) to the message list of one request. Pure.

Recorded steps replay as they were sent, so each request is the previous one plus the
newest exchange (prompt-cache prefix). With native tool calls a step is an assistant
message with its calls and one tool message per result; with written calls it is the
assistant's fields in the adapter's format and a user message with the results. A request
ends on the pending inputs (or the last tool message), and, outside plain native Chat, on
the adapter's format requirement (written mode: with the tool listing) in a user message
of its own.

Media in inputs and results (``dspy.Image``, ...) become content parts (``_prompt.media``): a native
step's tool results are followed by one user message carrying their media where the provider's
tool messages take text only (``guidance.tool_media``).

Replay rules (reference §7): an *answer* (a step carrying outputs) is never a thought; a
*thought* (text, no call, no output) is followed by the unsent line of the rendering loop,
except when the turn's extracted outputs directly follow it or when thought_as_request
moves it to the user side of a forced request; extracted outputs render nothing; under
``history_replay="actions"`` earlier turns lose their narration and thoughts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from dspy.adapters.utils import serialize_for_json

from dspy_imp._prompt import sentences
from dspy_imp._prompt.demos import demo_examples
from dspy_imp._prompt.dialect import Dialect
from dspy_imp._prompt.guidance import Guidance, system_message, tool_listing
from dspy_imp._prompt.media import Attachments, Content, place_results
from dspy_imp._prompt.memo import RenderMemo
from dspy_imp._prompt.signature import SUBMIT
from dspy_imp._records.media import is_media
from dspy_imp._records.steps import Step, ToolCall, ToolResult
from dspy_imp._records.text import result_text, to_json
from dspy_imp._routes.hosted import foreign_text, served_blocks
from dspy_imp._routes.reasoning import (
    PLACEHOLDER_KIND,
    PLACEHOLDER_SIGNATURE,
    call_signatures,
    openrouter_details,
    reasoning_items,
    thinking_blocks,
)

Message = dict[str, Any]


def render_request(
    guidance: Guidance, instructions: str, demos: Sequence[Mapping[str, Any]], pending: Mapping[str, Any]
) -> list[Message]:
    """The message list of one request; ``guidance.dialect`` says how fields are written."""
    dialect = _dialect(guidance)
    messages: list[Message] = [{"role": "system", "content": system_message(guidance, instructions, dialect)}]
    for example in demo_examples(guidance, demos):
        for step in example:
            messages.extend(_inputs_message(dialect, step.inputs))
            messages.extend(_body(guidance, step))
    _history(guidance, dialect, pending, messages)
    messages.extend(dialect.trailing(pending, () if dialect.native else tool_listing(guidance.roster), guidance.memo))
    if guidance.paused is not None:  # the provider goes on with the reply it paused last (``_turn.paused``)
        messages.extend(_exchange(guidance, guidance.paused.thought, (), (), guidance.paused))
    return messages


def _history(guidance: Guidance, dialect: Dialect, pending: Mapping[str, Any], messages: list[Message]) -> None:
    """Append the recorded steps' messages; with a memo, render only the steps earlier requests did not."""
    steps = guidance.steps[guidance.omitted :]
    moved = _moved_thought(guidance, steps, pending)
    if guidance.summary is not None:
        messages.append(_user(sentences.summary_message(guidance.summary)))
    memo = guidance.memo
    start = 0 if memo is None else memo.reuse(guidance.context(), steps, moved, messages)
    for index in range(start, len(steps)):
        rendered = _step(guidance, dialect, steps, index, moved)
        messages.extend(rendered)
        if memo is not None and index < len(steps) - 1 and (moved is None or index < moved):
            memo.settle(steps, index, rendered)


def _step(guidance: Guidance, dialect: Dialect, steps: Sequence[Step], index: int, moved: int | None) -> list[Message]:
    """One recorded step: its inputs, what the model did, and the unsent line after a thought."""
    step = shown(guidance, steps[index], guidance.omitted + index)
    messages = _inputs_message(dialect, step.inputs, guidance.memo)
    if index == moved:
        messages.append(_user(sentences.moved_thought(step.thought or "")))
        return messages
    earlier = guidance.history_replay == "actions" and guidance.omitted + index < guidance.boundary
    messages.extend(_earlier_body(guidance, step) if earlier else _body(guidance, step))
    following = steps[index + 1] if index + 1 < len(steps) else None
    if not earlier and _gets_line(step, following):
        line = sentences.not_sent_because(step.not_sent) if step.not_sent else _unsent_line(guidance)
        if line is not None:
            messages.append(_user(line))
    return messages


def shown(guidance: Guidance, step: Step, position: int) -> Step:
    """The step as a context policy's view shows it at ``position``: old results cleared, unbound
    thinking blocks left out. The record keeps the step as it was."""
    if position < guidance.cleared and any(not r.error for r in step.results):
        names = {c.id: c.name for c in step.calls}
        results = tuple(r if r.error else _cleared(r, names.get(r.id, r.name)) for r in step.results)
        step = replace(step, results=results)
    if position < guidance.unbound and isinstance(step.reasoning_details, list):
        kept = [b for b in step.reasoning_details if not (isinstance(b, Mapping) and b.get("type") in _THINKING)]
        step = replace(step, reasoning_details=kept or None)
    return step


_THINKING = frozenset({"thinking", "redacted_thinking"})


class Cleared(str):
    """A cleared result's placeholder text: shown as it is, never given to a result renderer."""


def _cleared(result: ToolResult, name: str | None) -> ToolResult:
    return replace(result, value=Cleared(sentences.cleared_result(name, result.id)))


def _dialect(guidance: Guidance) -> Dialect:
    if guidance.dialect is None:
        raise ValueError("render_request needs guidance.dialect (the adapter sets it)")
    return guidance.dialect


def _moved_thought(guidance: Guidance, steps: Sequence[Step], pending: Mapping[str, Any]) -> int | None:
    """thought_as_request: a forced request with nothing new ends on its last thought, as a user message."""
    if not guidance.forced or any(v is not None for v in pending.values()):
        return None
    for index in range(len(steps) - 1, -1, -1):
        if steps[index].is_extracted:
            continue
        return index if steps[index].is_thought and not steps[index].not_sent else None
    return None


def _gets_line(step: Step, following: Step | None) -> bool:
    """Every thought gets the line, but one the turn's extracted outputs directly follow."""
    return step.is_thought and not (following is not None and following.is_extracted)


def _body(guidance: Guidance, step: Step) -> list[Message]:
    """What the model did in a step: its assistant message and the tool messages."""
    if not guidance.has_submit and any(_recorded_submit(c, r) for c, r in _paired(step)):
        return _submit_as_answer(guidance, step)
    content = step.thought if step.thought is not None else _answer_text(guidance, step)
    return _exchange(guidance, content, step.calls, step.results, step)


def replay_drops_last_turn(guidance: Guidance) -> bool:
    """``history_replay="actions"`` leaves out of this request something of the turn before, which
    that turn's own requests sent: a thought, a call's narration or provider reasoning.

    Only the turn just before the boundary can differ (older turns were already replayed as
    actions by the requests of the turn after them); it starts at its last step with inputs.
    """
    if guidance.history_replay != "actions" or guidance.boundary <= guidance.omitted:
        return False
    earlier = guidance.steps[guidance.omitted : guidance.boundary]
    start = next((i for i in range(len(earlier) - 1, -1, -1) if earlier[i].inputs), 0)
    return any(_replay_drops(step) for step in earlier[start:])


def _replay_drops(step: Step) -> bool:
    if step.is_answer:
        return bool(step.reasoning_details)
    return bool((step.thought or "").strip() or step.reasoning_content or step.reasoning_details)


def _earlier_body(guidance: Guidance, step: Step) -> list[Message]:
    """``history_replay="actions"``: an earlier turn's calls and results, without narration.

    Answers are shown whole, but without their signed reasoning blocks: those were bound to the
    narration this mode leaves out (Claude 5.1+ refuses them behind another prefix), and no
    provider reads an earlier turn's blocks. Thought-only steps are left out (so is their line).
    """
    if step.is_answer:
        return _body(guidance, replace(step, reasoning_details=None))
    unreasoned = replace(step, reasoning_content=None, reasoning_details=None)
    return _exchange(guidance, None, step.calls, step.results, unreasoned)


def _exchange(
    guidance: Guidance,
    content: str | None,
    calls: Sequence[ToolCall],
    results: Sequence[ToolResult],
    step: Step,
) -> list[Message]:
    """A step's assistant message and its results, natively or written.

    A calls-only message has ``content`` None (an empty string would become an empty text
    block, which Anthropic and Gemini refuse). Natively, the step's provider reasoning goes
    back as the route allows (``guidance.keep_reasoning``, ``guidance.replayed_kinds``); on
    Gemini 3+ the first call of a message recorded without a thought signature carries the
    documented placeholder.
    """
    foreign = foreign_text(step.reasoning_details, guidance.replayed_kinds)  # hosted blocks another provider ran
    if foreign:
        content = f"{foreign}\n\n{content}" if (content or "").strip() else foreign
    served = served_blocks(step.reasoning_details, guidance.replayed_kinds)
    if not calls and not (content or "").strip() and not served:  # served blocks alone: a paused reply's
        return []
    dialect = _dialect(guidance)
    by_id = {c.id: c for c in calls}
    paired = [(by_id.get(r.id) or ToolCall(r.id, r.name, {}), r) for r in results]
    if not dialect.native:
        message: Message = {"role": "assistant", "content": dialect.assistant(content, [_written(c) for c in calls])}
        _add_reasoning(guidance, message, step)
        attachments = Attachments()
        lines = [_written_result(guidance, call, result, attachments) for call, result in paired]
        return [message, _user(attachments.content(dialect.results(lines)))] if lines else [message]
    message = {"role": "assistant", "content": dialect.assistant(content, None) if content or not calls else None}
    if served:  # the reply's content as served (hosted tool blocks): it goes back verbatim, in their place
        message["served_content"] = [dict(b) for b in served[-1]["content"]]
        message["served_kind"] = served[-1]["type"]  # whose blocks (``route.served_state`` labels them)
        if isinstance(served[-1].get("container"), Mapping):  # the container it ran in (``hosted_anthropic``)
            message["served_container"] = dict(served[-1]["container"])
    blocks = thinking_blocks(step.reasoning_details, guidance.replayed_kinds)
    if blocks:
        message["thinking_blocks"] = blocks
    details = openrouter_details(step.reasoning_details, guidance.replayed_kinds)
    if details:
        message["reasoning_details"] = details
    items = reasoning_items(step.reasoning_details, guidance.replayed_kinds)
    if items:  # our own key: read by ``_routes.route.canonical_request`` and ``_routes.responses_bridge``
        message["reasoning_items"] = items
    if calls:
        signatures = call_signatures(step.reasoning_details, guidance.replayed_kinds)
        if PLACEHOLDER_KIND in guidance.replayed_kinds and calls[0].id not in signatures:
            signatures[calls[0].id] = PLACEHOLDER_SIGNATURE  # a call Gemini did not make (another model's, a host's)
        compat = "extra_content" in guidance.replayed_kinds  # Gemini's OpenAI-compatible spelling
        message["tool_calls"] = [_native_call(c, signatures.get(c.id), compat) for c in calls]
    _add_reasoning(guidance, message, step)
    return [message, *place_results([_tool(guidance, call, result) for call, result in paired], guidance.tool_media)]


def _add_reasoning(guidance: Guidance, message: Message, step: Step) -> None:
    if step.reasoning_content is not None and guidance.keep_reasoning:
        message["reasoning_content"] = step.reasoning_content


def _written(call: ToolCall) -> dict[str, Any]:
    return {"name": call.name, "arguments": dict(call.args)}


def _written_result(guidance: Guidance, call: ToolCall, result: ToolResult, attachments: Attachments) -> str:
    return f"{call.name or 'unreadable_call'} ({result.id}): {_result_text(guidance, call, result, attachments)}"


def _result_text(guidance: Guidance, call: ToolCall, result: ToolResult, attachments: Attachments) -> str:
    """A result as text, its media held by ``attachments`` (the renderer gets the value as returned).

    A result cut when it arrived is shown as it was cut, whatever renders the others; a result a
    context policy cleared shows its placeholder.
    """
    if isinstance(result.value, Cleared):
        return str(result.value)
    if result.shown is not None:
        return result.shown
    if guidance.result_renderer is not None:
        return attachments.keep(guidance.result_renderer(call, result))
    if result.error:
        return render_result(call, result)
    return attachments.keep(render_result(call, replace(result, value=attachments.lift(result.value))))


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
        return _exchange(guidance, content, (), (), step)
    results = [r for _, r in others if r is not None]
    messages = _exchange(guidance, step.thought, [c for c, _ in others], results, step)
    if answer:
        messages.append({"role": "assistant", "content": _dialect(guidance).assistant(answer, [])})
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


def _native_call(call: ToolCall, signature: str | None = None, compat: bool = False) -> Message:
    name = call.name if call.name is not None else "unreadable_call"
    arguments = to_json(dict(call.args))
    message: Message = {"id": call.id, "type": "function", "function": {"name": name, "arguments": arguments}}
    if signature is not None and compat:
        message["extra_content"] = {"google": {"thought_signature": signature}}
    elif signature is not None:
        message["provider_specific_fields"] = {"thought_signature": signature}
    return message


def _tool(guidance: Guidance, call: ToolCall, result: ToolResult) -> Message:
    attachments = Attachments()
    content = attachments.content(_result_text(guidance, call, result, attachments))
    return {"role": "tool", "tool_call_id": result.id, "content": content}


def render_result(call: ToolCall, result: ToolResult) -> str:
    """The default tool-message text: errors as one sentence, values whole (Appendix B)."""
    if result.error:
        return sentences.ERROR_PREFIX + str(result.value)
    return result_text(result.value)


def _unsent_line(guidance: Guidance) -> str | None:
    if guidance.finish == "auto" and not guidance.text_answer:
        return None  # DSPy's ending, unchanged: a thought shows bare
    if guidance.unsent_note is not None:
        return guidance.unsent_note
    if guidance.finish == "submit":
        return sentences.unsent_submit(guidance.task.output_names)
    if guidance.finish == "tools":
        return sentences.unsent_tools(guidance.ending_tools)
    return sentences.UNSENT_PLAIN


def _inputs_message(dialect: Dialect, inputs: Mapping[str, Any], memo: RenderMemo | None = None) -> list[Message]:
    content = dialect.inputs({k: v for k, v in inputs.items() if k != "tools"}, memo)
    return [_user(content)] if content else []


def _user(content: Content) -> Message:
    return {"role": "user", "content": content}


def transcript(guidance: Guidance) -> str:
    """The history as the extractor reads it: plain text, one block per recorded step."""
    blocks = [sentences.summary_message(guidance.summary)] if guidance.summary is not None else []
    for number, step in enumerate(guidance.steps[guidance.omitted :], start=1):
        step = shown(guidance, step, guidance.omitted + number - 1)
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
    """Values as the extractor reads them; media as DSPy's markers, which its adapter sends as parts."""
    if isinstance(value, str):
        return value
    return str(serialize_for_json(value)) if is_media(value) else to_json(value)
