"""The notebook view of a turn: ``_repr_html_`` for predictions, metadata and histories.

Pure functions from a turn's data to an HTML string. The termination (reason, cause,
errors) comes first, then the outputs, then the conversation as the model saw it: one
item per history entry, marked by the request it came from (``step``, ``last text``,
``forced submit``, ``extraction``, or ``note``), with its inputs, thought, tool calls
(arguments and results, errors marked) and answer. Every value is HTML-escaped; long ones
fold into a ``<details>`` element.

A history entry does not say which request wrote it; the view reads it from the entry's
shape (an answer with no text and no call is the extractor's; inputs alone are a note)
and, for the turn's last entry, from the termination reason.
"""

from __future__ import annotations

import html
import json
from collections.abc import Mapping, Sequence
from typing import Any

_FOLD = 160


_STEP_KEYS = ("next_thought", "tool_calls", "tool_call_results", "reasoning_content", "reasoning_details")


_LAST_KIND = {"last_text": "last text", "forced_submit": "forced submit", "extracted": "extraction"}


_STYLE = (
    "<style>.dspy-imp{font-family:sans-serif;font-size:13px}.dspy-imp table{border-collapse:collapse}"
    ".dspy-imp td,.dspy-imp th{border:1px solid #ccc;padding:2px 6px;text-align:left;vertical-align:top}"
    ".dspy-imp .kind{font-weight:bold;margin-right:6px}.dspy-imp .error{color:#b00}"
    ".dspy-imp pre{white-space:pre-wrap;margin:0}</style>"
)


def value_html(value: Any) -> str:
    """One value, escaped; folded into ``<details>`` when longer than a line."""
    text = value if isinstance(value, str) else _json(value)
    if len(text) <= _FOLD and "\n" not in text:
        return f"<code>{html.escape(text)}</code>"
    head = " ".join(text.split())[:80]
    return f"<details><summary><code>{html.escape(head)}…</code></summary><pre>{html.escape(text)}</pre></details>"


def _json(value: Any) -> str:
    try:
        return json.dumps(value, ensure_ascii=False, default=_str)
    except Exception:  # a host value whose str() raised, or a circular one: the view never raises
        return _repr(value)


def _str(value: Any) -> str:
    try:
        return str(value)
    except Exception:  # host code's __str__
        return _repr(value)


def _repr(value: Any) -> str:
    try:
        return repr(value)
    except Exception:  # host code's __repr__
        return f"<{type(value).__name__} that cannot be shown>"


def _table(rows: Sequence[tuple[str, str]], cls: str) -> str:
    body = "".join(f"<tr><th>{html.escape(k)}</th><td>{v}</td></tr>" for k, v in rows)
    return f'<table class="{cls}">{body}</table>'


def termination_html(metadata: Any) -> str:
    rows = [("termination_reason", value_html(metadata.termination_reason))]
    if metadata.termination_cause is not None:
        rows.append(("termination_cause", value_html(metadata.termination_cause)))
    for role, error in (metadata.termination_error or {}).items():
        rows.append((f"error ({role})", f'<span class="error">{value_html(error)}</span>'))
    for name in ("finished_by_tool", "finish_reason", "context_projection"):
        value = getattr(metadata, name)
        if value is not None:
            rows.append((name, value_html(value)))
    for name in ("pending_calls", "unexecuted_tool_calls"):
        calls = getattr(metadata, name, ())
        if calls:
            rows.append((name, value_html([dict(c) for c in calls])))
    usage = getattr(metadata, "usage", None)
    if usage is not None and usage.requests:
        summary = {"requests": dict(usage.requests), "input_tokens": usage.input_tokens}
        summary.update(output_tokens=usage.output_tokens, cost=usage.cost)
        rows.append(("usage", value_html(summary)))
    return _table(rows, "dspy-imp-termination")


def metadata_html(metadata: Any, output_names: Sequence[str] = ()) -> str:
    entries = list(metadata.history.messages)
    return (
        f'{_STYLE}<div class="dspy-imp">{termination_html(metadata)}'
        f"{history_html(entries, output_names, metadata.termination_reason)}</div>"
    )


def prediction_html(prediction: Any) -> str:
    outputs = _table([(k, value_html(v)) for k, v in prediction.items()], "dspy-imp-outputs")
    metadata = prediction.metadata
    return (
        f'{_STYLE}<div class="dspy-imp">{termination_html(metadata)}{outputs}'
        f"{history_html(list(metadata.history.messages), list(prediction.keys()), metadata.termination_reason)}</div>"
    )


def history_html(
    entries: Sequence[Mapping[str, Any]], output_names: Sequence[str] = (), reason: str | None = None
) -> str:
    items = "".join(
        _entry_html(entry, _kind(entry, output_names, reason if i == len(entries) - 1 else None), output_names)
        for i, entry in enumerate(entries)
    )
    count = f"{len(entries)} entr{'y' if len(entries) == 1 else 'ies'}"
    return f'<details open class="dspy-imp-history"><summary>History ({count})</summary><ol>{items}</ol></details>'


def _split(entry: Mapping[str, Any], output_names: Sequence[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The entry's inputs and outputs (by name when known, else by position around the step keys)."""
    inputs: dict[str, Any] = {}
    outputs: dict[str, Any] = {}
    seen_step = False
    for key, value in entry.items():
        if key in _STEP_KEYS:
            seen_step = True
        elif key in output_names or (not output_names and seen_step):
            outputs[key] = value
        else:
            inputs[key] = value
    return inputs, outputs


def _kind(entry: Mapping[str, Any], output_names: Sequence[str], reason: str | None) -> str:
    inputs, outputs = _split(entry, output_names)
    has_step = any(entry.get(k) for k in ("next_thought", "tool_calls"))
    if not has_step and not outputs and inputs:
        return "note"
    if outputs and not has_step and any(k in entry for k in _STEP_KEYS):
        return "extraction"
    return _LAST_KIND.get(reason or "", "step")


def _entry_html(entry: Mapping[str, Any], kind: str, output_names: Sequence[str]) -> str:
    inputs, outputs = _split(entry, output_names)
    parts = [f'<span class="kind">{html.escape(kind)}</span>']
    if inputs:
        parts.append(_table([(k, value_html(v)) for k, v in inputs.items()], "dspy-imp-inputs"))
    if entry.get("reasoning_content"):
        parts.append(f"<div>reasoning: {value_html(entry['reasoning_content'])}</div>")
    if entry.get("next_thought"):
        parts.append(f'<div class="dspy-imp-thought">thought: {value_html(entry["next_thought"])}</div>')
    calls = _calls_html(entry.get("tool_calls") or [], entry.get("tool_call_results") or [])
    if calls:
        parts.append(calls)
    if outputs:
        parts.append(_table([(k, value_html(v)) for k, v in outputs.items()], "dspy-imp-answer"))
    return f'<li class="dspy-imp-entry" data-kind="{html.escape(kind)}">{"".join(parts)}</li>'


def _calls_html(calls: Sequence[Any], results: Sequence[Any]) -> str:
    by_id = {r.get("id"): r for r in results if isinstance(r, Mapping)}
    items = []
    for call in calls:
        if not isinstance(call, Mapping):
            items.append(f"<li>{value_html(call)}</li>")
            continue
        result = by_id.get(call.get("id"))
        name = html.escape(str(call.get("name") or "(malformed)"))
        shown = f"<code>{name}</code>({value_html(call.get('args', {}))})"
        if result is not None:
            error = bool(result.get("error"))
            mark = ' class="error"' if error else ""
            shown += f" → <span{mark}>{'error: ' if error else ''}{value_html(result.get('result'))}</span>"
        items.append(f'<li class="dspy-imp-call">{shown}</li>')
    return f'<ul class="dspy-imp-calls">{"".join(items)}</ul>' if items else ""


def metadata_repr(metadata: Any) -> str:
    cause = f", cause={metadata.termination_cause!r}" if metadata.termination_cause else ""
    tool = f", finished_by_tool={metadata.finished_by_tool!r}" if metadata.finished_by_tool else ""
    count = len(metadata.history.messages)
    entries = "entry" if count == 1 else "entries"
    return f"Metadata(termination_reason={metadata.termination_reason!r}{cause}{tool}, history: {count} {entries})"


class HistoryView:
    """A history as a notebook shows it: ``dspy_imp.HistoryView(pred.history)``.

    Args:
        history: A ``dspy.History`` (or its ``messages`` list).
        output_names: The task's output names, to tell answers from inputs (optional).
    """

    def __init__(self, history: Any, output_names: Sequence[str] = ()):
        self.entries = list(getattr(history, "messages", history))
        self.output_names = tuple(output_names)

    def _repr_html_(self) -> str:
        return f'{_STYLE}<div class="dspy-imp">{history_html(self.entries, self.output_names)}</div>'

    def __repr__(self) -> str:
        return f"HistoryView({len(self.entries)} entries)"
