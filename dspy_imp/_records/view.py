"""``PromptView``: how a request shows the record, once a context policy has shortened it.

A context policy (``_turn.context``) never edits the record. It changes what a request shows of
it, and that is this small value: which leading entries are left out, which a summary stands in
for (and the summary's text), whose tool results show as a placeholder, and (on models that bind
thinking to the prefix) whose thinking blocks are no longer replayed. All positions are entry
indices in the history the view was recorded in.

The first step recorded under a new view carries it in its history entry (``prompt_view``), so
the next call, or a history reloaded from JSON, restores the view and renders the same prompt::

    {"omitted": int, "summarized": int, "summary": str, "cleared": int, "unbound": int}

(only the keys that are not zero or empty).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from dspy_imp._records.errors import ConfigurationError


@dataclass(frozen=True, slots=True)
class PromptView:
    """What a request shows of the record.

    Attributes:
        omitted: Leading entries left out (with the summary, when it covers no more than these).
        summarized: Leading entries the summary stands in for.
        summary: The summary's text (shown as one user message where those entries were).
        cleared: Entries before this index show their tool results as a placeholder naming the call.
        unbound: Entries before this index replay no thinking block (their prefix changed).
    """

    omitted: int = 0
    summarized: int = 0
    summary: str | None = None
    cleared: int = 0
    unbound: int = 0

    @property
    def start(self) -> int:
        """The first entry shown in full."""
        return max(self.omitted, self.summarized if self.summary is not None else 0)

    @property
    def shows_summary(self) -> bool:
        return self.summary is not None and self.summarized > self.omitted

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name)}


NO_VIEW = PromptView()


def read_view(data: Any) -> PromptView:
    """A recorded ``prompt_view``; anything malformed is refused (a history is data someone may edit)."""
    if not isinstance(data, Mapping) or set(data) - {f.name for f in fields(PromptView)}:
        raise ConfigurationError(f"a recorded `prompt_view` must be a dict of the view's keys, got {data!r}")
    summary = data.get("summary")
    if summary is not None and not isinstance(summary, str):
        raise ConfigurationError(f"`prompt_view.summary` must be a string, got {summary!r}")
    counts = {}
    for name in ("omitted", "summarized", "cleared", "unbound"):
        value = data.get(name, 0)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ConfigurationError(f"`prompt_view.{name}` must be a non-negative integer, got {value!r}")
        counts[name] = value
    return PromptView(summary=summary, **counts)
