"""The history model: typed step records, and the one seam to ``dspy.History`` dicts.

A history is a ``dspy.History`` whose messages are *entries*, one per recorded step, in the
storage vocabulary below whatever the live step fields are called::

    {<task input>: ..., "next_thought": str, "tool_calls": [{"id", "name", "args"}],
     "tool_call_results": [{"id", "name", "result", "error", "returned_at", "shown"}],
     <task output>: ..., "reasoning_content": str, "reasoning_details": ...,
     "pending_calls": [{"id", "name", "args", "kind", "elicitation"}], "not_sent": str,
     "agent_runs": {<call id>: {"agent", "termination_reason", "termination_cause",
                                "pending_calls", "usage", "history": [<entry>, ...]}}}

A result's ``shown`` (present only when the result was cut, ``_turn.limits``) is the text the
model was shown in place of the full ``result``; every later request shows it.
``prompt_view`` (a context policy's view of the history from this step on, ``_records.view``)
is present only on the step a changed view was first rendered for. ``next_thought``, the
reasoning keys, the outputs, ``pending_calls`` (a paused step:
its calls have no results yet, see ``_turn.approval``) and ``agent_runs`` (what each sub-agent
called by this step did, its own history included, see ``_turn.agents``) are present only when
the step has them; ``tool_calls``/``tool_call_results`` are always present (possibly empty). Keys the
loop does not know are kept untouched. The loop and the renderer work on ``Step`` records;
``to_entry``/``from_entry`` are the only places that know the dict shape.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import dspy
import pydantic

from dspy_imp._records import clock
from dspy_imp._records.errors import ConfigurationError, brief
from dspy_imp._records.kinds import PENDING_KINDS, PendingKind
from dspy_imp._records.view import PromptView, read_view

STEP_CONTENT_KEYS = (
    "next_thought",
    "tool_calls",
    "tool_call_results",
    "reasoning_content",
    "reasoning_details",
    "pending_calls",
)
"""The keys of what a step said and did, in the order a history entry holds them."""
_STEP_KEYS = frozenset({*STEP_CONTENT_KEYS, "not_sent", "prompt_view", "agent_runs"})


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One call a step made. ``name`` is ``None`` for a malformed call (``received`` holds it)."""

    id: str
    name: str | None
    args: Mapping[str, Any]
    received: Any = None


@dataclass(frozen=True, slots=True)
class ToolResult:
    """What came back for one call. On an error, ``value`` is the sentence the model reads.

    ``shown``: for a result longer than its tool's limit, the text the model reads instead of
    ``value`` (cut once, when it arrived); ``None`` when the model reads the value.
    """

    id: str
    name: str | None
    value: Any
    error: bool
    returned_at: str
    error_kind: str | None = None
    shown: str | None = None


@dataclass(frozen=True, slots=True)
class PendingCall:
    """A call of a paused step that waits for a person (``"approval"``), an external runner, or a
    person's input the running call asked for (``"elicitation"``: ``elicitation`` holds the
    question, ``errors.AsksInput``)."""

    id: str
    name: str | None
    args: Mapping[str, Any]
    kind: PendingKind
    elicitation: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class Step:
    """One recorded step (one history entry).

    Attributes:
        inputs: Task inputs carried by this entry (the call's inputs on its first entry, or
            a note under the first input's name).
        thought: The text the model wrote, if any.
        calls: The calls it made, in order; ``results`` pairs with them by id.
        outputs: The task outputs this step carries (an answer), or ``None``.
        reasoning_content: Provider reasoning text, verbatim, for continuation.
        reasoning_details: Opaque provider reasoning blocks, verbatim.
        extra: Keys of the entry the loop does not know, kept as they were.
        bare: The entry had none of the step keys (a host-written ``{question, answer}``
            turn); an answer-only bare entry replays as a step that answered in text.
        pending: For a paused step, the calls that wait for a decision (then ``results`` holds
            only the calls that ran: none, unless a sub-agent paused after them).
        not_sent: Why a text answer was not sent (an output guardrail asked the model to try
            again): the step is a thought, and the line after it says why.
        view: The prompt view (``_records.view``) its request was the first to be rendered
            under, when a context policy changed the view there; ``None`` otherwise.
        agent_runs: For each call of a sub-agent (``agent.as_tool()``), by call id, what the
            sub-agent did: its ending, usage, pending calls and its own history entries.
    """

    inputs: Mapping[str, Any] = field(default_factory=dict)
    thought: str | None = None
    calls: tuple[ToolCall, ...] = ()
    results: tuple[ToolResult, ...] = ()
    outputs: Mapping[str, Any] | None = None
    reasoning_content: str | None = None
    reasoning_details: Any = None
    extra: Mapping[str, Any] = field(default_factory=dict)
    bare: bool = False
    pending: tuple[PendingCall, ...] = ()
    not_sent: str | None = None
    view: PromptView | None = None
    agent_runs: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    @property
    def is_answer(self) -> bool:
        """Carries any task output: never a thought, never moved, never followed by a line."""
        return self.outputs is not None

    @property
    def is_thought(self) -> bool:
        """A genuine thought-only step: text, no calls, no outputs."""
        return bool(self.thought and self.thought.strip()) and not self.calls and self.outputs is None

    @property
    def is_extracted(self) -> bool:
        """Outputs recorded with no text and no call (the extractor's answer)."""
        return self.outputs is not None and not self.bare and not self.calls and not (self.thought or "").strip()


def now_iso() -> str:
    """The current UTC time as ISO 8601, as ``returned_at`` records it."""
    return clock.utc_now().isoformat(timespec="milliseconds").replace("+00:00", "Z")


def to_entry(step: Step) -> dict[str, Any]:
    """The ``dspy.History`` entry for a step (JSON-safe when its values are)."""
    entry: dict[str, Any] = dict(step.inputs)
    if step.thought is not None:
        entry["next_thought"] = step.thought
    entry["tool_calls"] = [_call_dict(c) for c in step.calls]
    entry["tool_call_results"] = [_result_dict(r) for r in step.results]
    if step.outputs is not None:
        entry.update(step.outputs)
    if step.reasoning_content is not None:
        entry["reasoning_content"] = step.reasoning_content
    if step.reasoning_details is not None:
        entry["reasoning_details"] = step.reasoning_details
    if step.pending:
        entry["pending_calls"] = [_pending_dict(p) for p in step.pending]
    if step.not_sent is not None:
        entry["not_sent"] = step.not_sent
    if step.view is not None:
        entry["prompt_view"] = step.view.to_dict()
    if step.agent_runs:
        entry["agent_runs"] = {call_id: dict(run) for call_id, run in step.agent_runs.items()}
    entry.update(step.extra)
    return entry


def _pending_dict(pending: PendingCall) -> dict[str, Any]:
    data: dict[str, Any] = {"id": pending.id, "name": pending.name, "args": dict(pending.args), "kind": pending.kind}
    if pending.elicitation is not None:
        data["elicitation"] = dict(pending.elicitation)
    return data


def _call_dict(call: ToolCall) -> dict[str, Any]:
    data: dict[str, Any] = {"id": call.id, "name": call.name, "args": dict(call.args)}
    if call.received is not None:
        data["received"] = call.received
    return data


def _result_dict(result: ToolResult) -> dict[str, Any]:
    data: dict[str, Any] = {
        "id": result.id,
        "name": result.name,
        "result": result.value,
        "error": result.error,
        "returned_at": result.returned_at,
    }
    if result.error_kind is not None:
        data["error_kind"] = result.error_kind
    if result.shown is not None:
        data["shown"] = result.shown
    return data


def from_entry(
    entry: Mapping[str, Any], input_names: Sequence[str], output_names: Sequence[str], position: int = 0
) -> Step:
    """Read one history entry: ours, ``dspy.ReActV2``'s, a host's ``{question, answer}``, or a bare input.

    ``position`` (the entry's index) makes ids for calls recorded without one: a
    ``dspy.ReActV2`` history that went through JSON lost them; each call then takes its
    result's ``call_id`` by position, or ``call_h{position}_{index}``.
    """
    if not isinstance(entry, Mapping):
        raise ConfigurationError(f"history entries must be dicts, got {brief(entry)}")
    known = set(input_names) | set(output_names) | _STEP_KEYS
    raw_calls, raw_results = _calls_and_results(entry)
    results = tuple(_read_result(r) for r in raw_results)
    calls = tuple(_read_call(c, i, position, results) for i, c in enumerate(raw_calls))
    results = tuple(replace(r, id=calls[i].id) if not r.id and i < len(calls) else r for i, r in enumerate(results))
    if any(not r.id for r in results):
        raise ConfigurationError(
            f"history entry {position}: a recorded tool result has no `id` and no call at its position to answer"
        )
    outputs = {n: entry[n] for n in output_names if n in entry}
    thought = entry.get("next_thought")
    return Step(
        inputs={n: entry[n] for n in input_names if n in entry},
        thought=None if thought is None else str(thought),
        calls=calls,
        results=results,
        outputs=outputs or None,
        reasoning_content=_text_or_none(entry.get("reasoning_content"), "reasoning_content"),
        reasoning_details=entry.get("reasoning_details"),
        extra={k: v for k, v in entry.items() if k not in known},
        bare=not _STEP_KEYS.intersection(entry),
        pending=tuple(_read_pending(p) for p in _as_list(entry.get("pending_calls"))),
        not_sent=_text_or_none(entry.get("not_sent"), "not_sent"),
        view=read_view(entry["prompt_view"]) if "prompt_view" in entry else None,
        agent_runs=_read_agent_runs(entry.get("agent_runs")),
    )


def _read_agent_runs(value: Any) -> dict[str, Mapping[str, Any]]:
    if value is None:
        return {}
    runs = value.values() if isinstance(value, Mapping) else None
    if runs is None or not all(isinstance(run, Mapping) and isinstance(run.get("history", []), list) for run in runs):
        raise ConfigurationError(
            f"history `agent_runs` must map call ids to sub-agent records (with a `history` list), got {brief(value)}"
        )
    return {str(call_id): dict(run) for call_id, run in value.items()}


def _read_pending(data: Any) -> PendingCall:
    kind = data.get("kind") if isinstance(data, Mapping) else None
    if kind not in PENDING_KINDS or not isinstance(data.get("id"), str):
        raise ConfigurationError(f"a recorded pending call must be a dict with an id and a kind, got {brief(data)}")
    args = data.get("args")
    asked = data.get("elicitation")
    url = isinstance(asked, Mapping) and asked.get("mode") == "url"
    if kind == "elicitation" and not (
        isinstance(asked, Mapping)
        and isinstance(asked.get("message"), str)
        and (isinstance(asked.get("url"), str) if url else isinstance(asked.get("schema"), Mapping))
    ):
        raise ConfigurationError(
            f"a recorded elicitation pending call must hold its `elicitation` (a `message` and a `schema`, or "
            f'`mode` "url" and a `url`), got {brief(data)}'
        )
    elicitation = dict(asked) if kind == "elicitation" and isinstance(asked, Mapping) else None
    return PendingCall(data["id"], data.get("name"), dict(args) if isinstance(args, Mapping) else {}, kind, elicitation)


def _as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    if isinstance(value, list | tuple):
        return list(value)
    raise ConfigurationError(f"history `tool_calls`/`tool_call_results` must be lists, got {brief(value)}")


def _calls_and_results(entry: Mapping[str, Any]) -> tuple[list[Any], list[Any]]:
    """Ours: two lists. ``dspy.ReActV2``'s: a ``ToolCalls`` (or its dump) holding its results."""
    calls = entry.get("tool_calls")
    results = entry.get("tool_call_results")
    if isinstance(calls, dspy.ToolCalls):
        nested = calls.tool_call_results
        calls = [{"id": c.id, "name": c.name, "args": c.args} for c in calls.tool_calls]
        results = nested if results is None else results
    elif isinstance(calls, Mapping) and "tool_calls" in calls:
        results = calls.get("tool_call_results") if results is None else results
        calls = calls["tool_calls"]
    if isinstance(results, pydantic.BaseModel):
        results = results.model_dump()
    if isinstance(results, Mapping) and "tool_call_results" in results:
        results = results["tool_call_results"]
    return _as_list(calls), _as_list(results)


def _read_call(data: Any, index: int, position: int, results: Sequence[ToolResult]) -> ToolCall:
    if isinstance(data, pydantic.BaseModel):
        data = data.model_dump()
    if not isinstance(data, Mapping):
        raise ConfigurationError(f"a recorded tool call must be a dict, got {brief(data)}")
    name = _text_or_none(data.get("name"), "tool_calls[].name") or None  # "" is a call without a name
    args = data.get("args", data.get("arguments", {}))
    made_up = results[index].id if index < len(results) and results[index].id else f"call_h{position}_{index}"
    return ToolCall(
        id=str(data.get("id") or made_up),
        name=name,
        args=dict(args) if isinstance(args, Mapping) else {},
        received=data.get("received"),
    )


def _read_result(data: Any) -> ToolResult:
    if isinstance(data, pydantic.BaseModel):
        data = data.model_dump()
    if not isinstance(data, Mapping):
        raise ConfigurationError(f"a recorded tool result must be a dict, got {brief(data)}")
    return ToolResult(
        id=str(data.get("id") or data.get("call_id") or ""),
        name=data.get("name"),
        value=data.get("result", data.get("value")),
        error=bool(data.get("error", data.get("is_error", False))),
        returned_at=str(data.get("returned_at") or ""),
        error_kind=data.get("error_kind"),
        shown=_shown(data.get("shown")),
    )


def _shown(value: Any) -> str | None:
    return _text_or_none(value, "shown")


def _text_or_none(value: Any, key: str) -> str | None:
    if value is not None and not isinstance(value, str):
        raise ConfigurationError(f"a recorded `{key}` must be a string, got {brief(value)}")
    return value


def coerce_history(value: Any) -> list[Mapping[str, Any]]:
    """The entries of a caller's history: a ``dspy.History``, ``{"messages": [...]}`` or a list.

    The caller's object is never mutated; the returned list is new.
    """
    if value is None:
        return []
    if isinstance(value, dspy.History):
        return list(value.messages)
    if isinstance(value, Mapping) and isinstance(value.get("messages"), list):
        return list(value["messages"])
    if isinstance(value, list):
        return list(value)
    raise ConfigurationError(
        f"`history` must be a dspy.History, a dict with `messages`, or a list of entries; got {brief(value)}"
    )


def read_steps(
    entries: Iterable[Mapping[str, Any]], input_names: Sequence[str], output_names: Sequence[str]
) -> list[Step]:
    return [from_entry(e, input_names, output_names, i) for i, e in enumerate(entries)]


def make_history(entries: Iterable[Mapping[str, Any]]) -> dspy.History:
    """A new ``dspy.History`` over these entries (the entries are not copied)."""
    return dspy.History.model_construct(messages=list(entries))


def holds_reasoning(steps: Iterable[Step]) -> bool:
    """Whether any of these steps carries ``reasoning_content`` (a server of your own reads it back)."""
    return any(getattr(step, "reasoning_content", None) for step in steps)


def block_kinds(steps: Iterable[Step]) -> frozenset[str]:
    """The ``type`` of every reasoning block these steps hold (``"thinking"``, ``"thought_signature"``...)."""
    return frozenset(
        str(block.get("type"))
        for step in steps
        for block in (step.reasoning_details if isinstance(step.reasoning_details, list) else ())
        if isinstance(block, Mapping)
    )
