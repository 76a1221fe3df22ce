"""Per-tool limits, and the turn's watch on a model that keeps calling without progress.

A tool or a model can misbehave without failing: a tool that never returns, a tool that asks
for better arguments again and again, a result too long to show, a model repeating one call
until the step limit. Each has a limit here (``docs/controls.md#tools-and-models-that-misbehave``):

- **Timeout** (``tool_timeouts``): the time one run of the tool may take; the deadline bounds it
  too. The driver enforces it (``_drivers.tool_threads``); the model reads that the call timed out.
- **Retry budget** (``tool_retries``): how many calls of the tool may raise ``dspy_imp.RetryTool``
  in one turn; one more interrupts the turn with cause ``"tool_retries_exhausted"``.
- **Result size** (``max_result_chars``): a longer result is cut once, when it arrives; the record
  keeps the full value and the shown text (``ToolResult.shown``), so every later request, and a
  reloaded history, shows it the same way.
- **Repeats** (``repeat_limit``): the same call (name and arguments) with the same result this
  many times in one turn interrupts it with cause ``"repeated_calls"``; the last request (text or
  forced submit) still gets its chance, before ``max_iters`` is spent. Occurrences whose results
  the context policy has cleared do not count: the placeholder asks the model to call again.

Per-tool values are tables ``{tool name: value}``; the key ``"*"`` applies to every other tool.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from dspy_imp._prompt import sentences
from dspy_imp._prompt.signature import Rejection
from dspy_imp._records import clock
from dspy_imp._records.errors import RetryTool, ToolTimedOut
from dspy_imp._records.kinds import TerminationCause
from dspy_imp._records.media import contains_media
from dspy_imp._records.steps import Step, ToolCall, ToolResult
from dspy_imp._records.text import result_text

ANY_TOOL = "*"
"""The key of a per-tool table that applies to every tool not named in it."""

DEFAULT_RETRIES = 1
"""Calls of one tool that may ask for a retry in one turn, unless ``tool_retries`` says otherwise."""

DEFAULT_REPEAT_LIMIT = 3
"""The same call with the same result this many times in one turn interrupts it."""

RETRY_KIND = "retry_requested"
"""The ``error_kind`` of a result whose tool raised ``dspy_imp.RetryTool``."""

UNBOUNDED = float("inf")
"""A tool's timeout of ``None`` in a table: no bound at all, not even the deadline's. Under a sync
call the tool then runs in the driver's own thread, as a tool tied to its thread must (a SQLite
connection, say); under ``acall`` in a worker thread like every sync tool, never on the loop's."""

TIMEOUT_KIND = "tool_timeout"
"""The ``error_kind`` of a result whose tool ran out of time."""


@dataclass(frozen=True)
class ToolLimits:
    """The limits one call runs with (checked by ``_program.limits``)."""

    timeouts: Mapping[str, float] = field(default_factory=dict)
    retries: Mapping[str, int] = field(default_factory=dict)
    max_chars: Mapping[str, int] = field(default_factory=dict)
    repeat_limit: int | None = DEFAULT_REPEAT_LIMIT

    @classmethod
    def of(cls, options: Any) -> ToolLimits:
        """The limits of a program's (or a call's) ``ProgramOptions``."""
        return cls(options.tool_timeouts, options.tool_retries, options.max_result_chars, options.repeat_limit)

    def retries_for(self, name: str | None) -> int:
        found = _lookup(self.retries, name)
        return DEFAULT_RETRIES if found is None else int(found)

    def max_chars_for(self, name: str | None) -> int | None:
        found = _lookup(self.max_chars, name)
        return None if found is None else int(found)

    def bound(self, name: str | None) -> tuple[float | None, bool]:
        """The time a run of ``name`` may take now, and whether the deadline is what bounds it.

        ``0`` when the deadline has passed: the driver then starts nothing.
        """
        timeout = _lookup(self.timeouts, name)
        if timeout == UNBOUNDED:
            return None, False
        left = clock.time_left()
        if left is None:
            return timeout, False
        left = max(left, 0.0)
        if timeout is None or left < timeout:
            return left, True
        return timeout, False


def bound_at_start(timeout: float | None, by_deadline: bool) -> tuple[float | None, bool]:
    """A planned bound (``ToolLimits.bound``) as it stands when the run starts: the time left then,
    when the deadline is now the nearer end. A call of a batch that waited for a free worker gets
    what is left when it starts, never what was left when the batch was planned."""
    left = clock.time_left()
    if timeout is None or left is None or left >= timeout:
        return timeout, by_deadline
    return max(left, 0.0), True


def _lookup(table: Mapping[str, Any], name: str | None) -> Any:
    if name is not None and name in table:
        return table[name]
    return table.get(ANY_TOOL)


def misbehaved(name: str, error: BaseException) -> Rejection | None:
    """The observation for a tool that asked for a retry or ran out of time, else ``None``."""
    if isinstance(error, RetryTool):
        return Rejection(RETRY_KIND, " ".join(str(error.message).split()) or type(error).__name__)
    if isinstance(error, ToolTimedOut):
        if error.by_deadline:
            return Rejection(TIMEOUT_KIND, sentences.tool_stopped_by_deadline(name))
        return Rejection(TIMEOUT_KIND, sentences.tool_timed_out(name, error.seconds))
    return None


def cut_result(
    limits: ToolLimits, renderer: Callable[[Any, Any], Any] | None, call: ToolCall, result: ToolResult
) -> ToolResult:
    """``result`` with ``shown`` set when its text (the renderer's, if any) passes its tool's limit.

    Errors and media are never cut; a renderer that raises or returns media leaves it whole (the
    renderer then runs at render time, as for any result).
    """
    limit = limits.max_chars_for(call.name)
    if limit is None or result.error or contains_media(result.value):
        return result
    try:
        text = renderer(call, result) if renderer is not None else result_text(result.value)
    except Exception:  # host code: left to fail where it always did, at render time
        return result
    shown = cut(text, limit) if isinstance(text, str) else None
    return result if shown is None else replace(result, shown=shown)


def cut(text: str, limit: int | None) -> str | None:
    """What the model is shown of a result longer than ``limit`` characters, or ``None``."""
    if limit is None or len(text) <= limit:
        return None
    return text[:limit] + sentences.result_cut(limit, len(text))


class Watchdog:
    """Counts, over one turn's steps, the retries each tool asked for and each repeated call."""

    def __init__(self, limits: ToolLimits):
        self.limits = limits
        self.retries: Counter[str | None] = Counter()
        self.repeats: dict[tuple[Any, ...], list[int]] = {}  # each call and result: the steps it was recorded at

    def after(self, step: Step, index: int = 0, cleared: int = 0) -> TerminationCause | None:
        """Why the turn is interrupted after recording ``step`` (the ``index``-th of the record), if it is.

        ``cleared``: the steps before it show their results as a placeholder (the context policy's
        clearing), which tells the model to call the tool again: a call whose earlier results were
        all cleared is no repeat; only the occurrences still shown count.
        """
        exhausted = repeated = False
        results = {r.id: r for r in step.results}
        for call in step.calls:
            result = results.get(call.id)
            if result is None:
                continue
            if result.error_kind == RETRY_KIND:
                self.retries[call.name] += 1
                exhausted |= self.retries[call.name] > self.limits.retries_for(call.name)
            key = (call.name, _canonical(call.args), result.error, _shown(result))
            seen = self.repeats.setdefault(key, [])
            seen.append(index)
            limit = self.limits.repeat_limit
            repeated |= limit is not None and sum(1 for at in seen if at >= cleared) >= limit
        if exhausted:
            return "tool_retries_exhausted"
        return "repeated_calls" if repeated else None


def _canonical(args: Mapping[str, Any]) -> str:
    return json.dumps(args, sort_keys=True, ensure_ascii=False, default=repr)


def _shown(result: ToolResult) -> str:
    if result.shown is not None:
        return result.shown
    try:
        return result_text(result.value)
    except Exception:  # a value that cannot even be shown compares by its repr
        return repr(result.value)
