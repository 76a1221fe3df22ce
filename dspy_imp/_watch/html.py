"""The notebook view of a turn: ``_repr_html_`` for predictions, metadata and histories.

Pure functions from a turn's data to an HTML string. The eye lands first on how the turn
ended: a coloured badge with the termination reason, the cause beside it, then the errors,
the other endings facts and the usage as a small table. Then the outputs, then the
conversation as the model saw it: one item per history entry, marked by the request it
came from (``step``, ``last text``, ``forced submit``, ``extraction``, or ``note``), with its
inputs, thought, the calls the provider ran inside its reply (``dspy_imp.hosted``: a web search,
code execution, with what came back), tool calls (arguments and results, errors marked) and answer. A thought
that is the answer itself is not shown twice. Every value is HTML-escaped; long ones fold
into a ``<details>`` element.

The styles are inline and scoped to the view, with their own colours, so the view reads the
same in Jupyter (light or dark), in VS Code, on a documentation site or in a saved HTML file.

A history entry does not say which request wrote it; the view reads it from the entry's
shape (an answer with no text and no call is the extractor's; inputs alone are a note)
and, for the turn's last entry, from the termination reason.
"""

from __future__ import annotations

import html
import json
from collections.abc import Mapping, Sequence
from typing import Any

from dspy_imp._records.steps import STEP_CONTENT_KEYS
from dspy_imp._routes.hosted import calls_of

_FOLD = 160
_STEP_KEYS = STEP_CONTENT_KEYS  # a record's other keys (``not_sent``, ...) are split like any field
_LAST_KIND = {"last_text": "last text", "forced_submit": "forced submit", "extracted": "extraction"}
# The badge's colour: a complete ending, an owed reply (the turn was interrupted), no answer, a pause.
_TONE = {
    "answered": "ok",
    "submit": "ok",
    "finished_by_tool": "ok",
    "last_text": "owed",
    "forced_submit": "owed",
    "extracted": "owed",
    "incomplete": "none",
    "paused": "wait",
}
# Repeating the class outweighs the host page's own rules (Jupyter's, a documentation theme's).
_R = ".dspy-imp.dspy-imp"
_STYLE = (
    "<style>"
    f"{_R}{{font:13px/1.45 system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;color:#1f2328;"
    "background:#fff;border:1px solid #d0d7de;border-radius:6px;padding:8px 12px;margin:4px 0;"
    "max-width:100%;overflow-x:auto;box-sizing:border-box}"
    f"{_R} table{{border-collapse:collapse;margin:6px 0;font-size:12px;width:auto;display:table}}"
    f"{_R} th,{_R} td{{border:1px solid #d0d7de;padding:2px 8px;text-align:left;vertical-align:top;"
    "color:#1f2328;background:#fff}"
    f"{_R} th{{background:#f6f8fa;font-weight:600}}"
    f"{_R} code,{_R} pre{{font:12px/1.4 ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;color:#1f2328;"
    "background:none;padding:0;border:none;box-shadow:none}"
    f"{_R} pre{{white-space:pre-wrap;margin:0}}"
    f"{_R} .dspy-imp-head{{display:flex;flex-wrap:wrap;align-items:baseline;gap:8px}}"
    f"{_R} .dspy-imp-reason{{font-weight:700;font-size:15px;padding:1px 10px;border-radius:12px}}"
    f"{_R} .tone-ok{{background:#dafbe1;color:#116329}}{_R} .tone-owed{{background:#fff8c5;color:#7d4e00}}"
    f"{_R} .tone-none{{background:#ffebe9;color:#a40e26}}{_R} .tone-wait{{background:#ddf4ff;color:#0550ae}}"
    f"{_R} .dspy-imp-cause,{_R} .dspy-imp-fact{{color:#57606a}}{_R} .error,{_R} .error code{{color:#a40e26}}"
    f"{_R} details.dspy-imp-fold{{margin:2px 0;padding:0;border:none;box-shadow:none;background:none;"
    "font-size:inherit;overflow:visible}"
    f"{_R} details.dspy-imp-fold>summary{{cursor:pointer;padding:0;margin:0;background:none;color:inherit;"
    "font-weight:inherit;min-height:0;display:list-item}"
    f"{_R} details.dspy-imp-fold>summary::before,{_R} details.dspy-imp-fold>summary::after{{content:none;"
    "display:none}"
    f"{_R} ol,{_R} ul{{margin:4px 0;padding-left:22px}}{_R} li{{margin:2px 0}}"
    f"{_R} .kind{{display:inline-block;font-weight:600;color:#57606a;margin-right:6px}}"
    f"{_R} .dspy-imp-section{{font-weight:600;margin-top:6px}}"
    "</style>"
)


def value_html(value: Any) -> str:
    """One value, escaped; folded into ``<details>`` when longer than a line."""
    text = value if isinstance(value, str) else _json(value)
    if len(text) <= _FOLD and "\n" not in text:
        return f"<code>{html.escape(text)}</code>"
    head = html.escape(" ".join(text.split())[:80])
    return (
        f'<details class="dspy-imp-fold"><summary><code>{head}…</code></summary>'
        f"<pre>{html.escape(text)}</pre></details>"
    )


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


def _view(body: str) -> str:
    return f'{_STYLE}<div class="dspy-imp">{body}</div>'


def termination_html(metadata: Any) -> str:
    """The badge (reason, cause, short facts, how long the turn took), then errors and the other
    ending facts, then the usage."""
    reason = str(metadata.termination_reason)
    head = f'<span class="dspy-imp-reason tone-{_TONE.get(reason, "none")}">{html.escape(reason)}</span>'
    cause = metadata.termination_cause
    if cause is not None:
        head += f'<span class="dspy-imp-cause">cause: <code>{html.escape(str(cause))}</code></span>'
    for name in ("finished_by_tool", "finish_reason"):  # short facts stand beside the reason
        value = getattr(metadata, name)
        if value is not None:
            head += f'<span class="dspy-imp-fact">{name}: <code>{html.escape(str(value))}</code></span>'
    duration = getattr(metadata, "duration", None)
    if duration is not None:
        head += f'<span class="dspy-imp-fact">took <code>{seconds_text(duration)}</code></span>'
    facts = _facts(metadata)
    parts = [f'<div class="dspy-imp-head">{head}</div>']
    if facts:
        parts.append(_table(facts, "dspy-imp-facts"))
    parts.append(usage_html(getattr(metadata, "usage", None)))
    return f'<div class="dspy-imp-termination">{"".join(parts)}</div>'


def seconds_text(seconds: float) -> str:
    """A duration as the views show it: ``12.5 s``, ``0.0031 s``."""
    return f"{seconds:.3g} s" if seconds < 100 else f"{seconds:.0f} s"


def _facts(metadata: Any) -> list[tuple[str, str]]:
    rows = [
        (f"error ({role})", f'<span class="error">{value_html(error)}</span>')
        for role, error in (metadata.termination_error or {}).items()
    ]
    if metadata.context_projection is not None:
        rows.append(("context_projection", value_html(metadata.context_projection)))
    guardrail = getattr(metadata, "guardrail", None)
    if guardrail:
        rows.append(("guardrail", value_html(dict(guardrail))))
    for name in ("pending_calls", "unexecuted_tool_calls", "fallbacks"):
        calls = getattr(metadata, name, ())
        if calls:
            rows.append((name, value_html([dict(c) for c in calls])))
    return rows


def usage_html(usage: Any) -> str:
    """The turn's usage as one small table: requests (by kind), tokens, cost."""
    if usage is None or not usage.requests:
        return ""
    kinds = " · ".join(f"{html.escape(str(kind))} {count}" for kind, count in usage.requests.items())
    cost = "—" if usage.cost is None else f"${usage.cost:.6g}"
    cells = [
        ("requests", f"{sum(usage.requests.values())} <small>({kinds})</small>"),
        ("input tokens", str(usage.input_tokens)),
        ("output tokens", str(usage.output_tokens)),
    ]
    cells += [(name, str(getattr(usage, key))) for name, key in _EXTRA_TOKENS if getattr(usage, key)]
    cells.append(("cost", cost))
    header = "".join(f"<th>{name}</th>" for name, _ in cells)
    row = "".join(f"<td>{value}</td>" for _, value in cells)
    return f'<table class="dspy-imp-usage"><tr>{header}</tr><tr>{row}</tr></table>'


_EXTRA_TOKENS = (
    ("cached tokens", "cached_tokens"),
    ("cache-write tokens", "cache_write_tokens"),
    ("reasoning tokens", "reasoning_tokens"),
)


def metadata_html(metadata: Any, output_names: Sequence[str] = ()) -> str:
    entries = list(metadata.history.messages)
    return _view(termination_html(metadata) + history_html(entries, output_names, metadata.termination_reason))


def prediction_html(prediction: Any) -> str:
    metadata = prediction.metadata
    outputs = _table([(k, value_html(v)) for k, v in prediction.items()], "dspy-imp-outputs")
    names = list(prediction.keys())
    history = history_html(list(metadata.history.messages), names, metadata.termination_reason, dict(prediction))
    return _view(termination_html(metadata) + outputs + history)


def history_html(
    entries: Sequence[Mapping[str, Any]],
    output_names: Sequence[str] = (),
    reason: str | None = None,
    shown: Mapping[str, Any] | None = None,
) -> str:
    """The entries, in order; ``shown``: outputs already on the page (the last entry points to them)."""
    last = len(entries) - 1
    items = "".join(
        _entry_html(
            entry,
            _kind(entry, output_names, reason if i == last else None),
            output_names,
            shown if i == last else None,
        )
        for i, entry in enumerate(entries)
    )
    count = f"{len(entries)} entr{'y' if len(entries) == 1 else 'ies'}"
    return (
        f'<details open class="dspy-imp-fold dspy-imp-history"><summary class="dspy-imp-section">'
        f"History ({count})</summary><ol>{items}</ol></details>"
    )


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


def _entry_html(
    entry: Mapping[str, Any], kind: str, output_names: Sequence[str], shown: Mapping[str, Any] | None
) -> str:
    inputs, outputs = _split(entry, output_names)
    parts = [f'<span class="kind">{html.escape(kind)}</span>']
    if inputs:
        parts.append(_table([(k, value_html(v)) for k, v in inputs.items()], "dspy-imp-inputs"))
    if entry.get("reasoning_content"):
        parts.append(f"<div>reasoning: {value_html(entry['reasoning_content'])}</div>")
    thought = entry.get("next_thought")
    if thought and not (isinstance(thought, str) and thought in outputs.values()):  # a text answer: shown once
        parts.append(f'<div class="dspy-imp-thought">thought: {value_html(thought)}</div>')
    waiting = {p.get("id"): p.get("kind") for p in entry.get("pending_calls") or [] if isinstance(p, Mapping)}
    runs = entry.get("agent_runs") if isinstance(entry.get("agent_runs"), Mapping) else {}
    hosted = _hosted_html(calls_of(entry.get("reasoning_details")))
    if hosted:
        parts.append(hosted)
    calls = _calls_html(entry.get("tool_calls") or [], entry.get("tool_call_results") or [], waiting, runs)
    if calls:
        parts.append(calls)
    if outputs and shown is not None and outputs == {k: shown.get(k) for k in outputs}:
        parts.append('<div class="dspy-imp-answer">answered with the outputs above</div>')
    elif outputs:
        parts.append(_table([(k, value_html(v)) for k, v in outputs.items()], "dspy-imp-answer"))
    return f'<li class="dspy-imp-entry" data-kind="{html.escape(kind)}">{"".join(parts)}</li>'


def _calls_html(
    calls: Sequence[Any], results: Sequence[Any], waiting: Mapping[Any, Any], runs: Mapping[Any, Any] | None = None
) -> str:
    """Each call with its arguments and its result (an error marked), or what it waits for; a
    sub-agent's call with its run nested under it (``runs``: the step's ``agent_runs``)."""
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
        elif call.get("id") in waiting:
            shown += f' → <span class="dspy-imp-cause">waits ({html.escape(str(waiting[call.get("id")]))})</span>'
        run = (runs or {}).get(call.get("id"))
        if isinstance(run, Mapping):
            shown += _agent_run_html(run)
        items.append(f'<li class="dspy-imp-call">{shown}</li>')
    return f'<ul class="dspy-imp-calls">{"".join(items)}</ul>' if items else ""


def _hosted_html(calls: Sequence[Any]) -> str:
    """The calls the provider ran inside the step's reply (``HostedCall``), each with its input and
    its result (an error marked), and who ran it."""
    items = []
    for call in calls:
        shown = f"<code>{html.escape(call.name)}</code>({value_html(dict(call.input))})"
        if call.error:
            shown += f' → <span class="error">error: {html.escape(str(call.error))}</span>'
        else:
            shown += f" → <span>{value_html(dict(call.result))}</span>"
        by = f'<span class="dspy-imp-cause">run by {html.escape(call.provider or "the provider")}</span>'
        items.append(
            f'<li class="dspy-imp-call dspy-imp-hosted" data-call-id="{html.escape(call.id)}">{shown} {by}</li>'
        )
    return f'<ul class="dspy-imp-calls">{"".join(items)}</ul>' if items else ""


def _agent_run_html(run: Mapping[str, Any]) -> str:
    """A sub-agent's run, nested in the call that made it: how it ended, then its own history."""
    entries = [e for e in run.get("history") or [] if isinstance(e, Mapping)]
    reason = str(run.get("termination_reason") or "")
    cause = f" ({run['termination_cause']})" if run.get("termination_cause") else ""
    head = f"{html.escape(str(run.get('agent') or 'agent'))}: {html.escape(reason + cause)}"
    body = history_html(entries, (), reason or None)
    return f'<details class="dspy-imp-fold dspy-imp-agent"><summary>{head}</summary>{body}</details>'


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
        return _view(history_html(self.entries, self.output_names))

    def __repr__(self) -> str:
        return f"HistoryView({len(self.entries)} entries)"
