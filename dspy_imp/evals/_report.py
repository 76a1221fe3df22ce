"""``dspy.Evaluate``'s results as a table people would rather look at, and the failing turns in the HTML view.

``report(result, metric)`` re-judges each (example, prediction) pair of an ``EvaluationResult``
with the metric (deterministic metrics give the same verdicts; an LM judge is asked again) and
shows one row per example: score, feedback, termination reason, requests, cost, time (a
conversation's: its agent turns'). In a notebook the
report is an HTML table; ``report.failing()`` shows each failing turn in ``dspy_imp``'s notebook
view of a prediction, its feedback above it.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from dspy_imp._watch import html as view
from dspy_imp.evals._metric import Metric, Verdict
from dspy_imp.evals._record import NotARecord, read


@dataclass(frozen=True)
class Row:
    """One example's line of the report."""

    index: int
    example: Any
    prediction: Any
    verdict: Verdict
    reason: str
    requests: int
    cost: float | None
    seconds: float | None = None


class Report:
    """One row per example (``rows``); ``_repr_html_`` is the table, ``failing()`` the failing turns."""

    def __init__(self, rows: Sequence[Row], metric: str):
        self.rows = tuple(rows)
        self.metric = metric

    @property
    def score(self) -> float:
        """The mean score, in percent (what ``dspy.Evaluate`` reports)."""
        return round(100 * sum(r.verdict.score for r in self.rows) / max(len(self.rows), 1), 2)

    def failing(self) -> Failing:
        return Failing([r for r in self.rows if not r.verdict.passed])

    def __str__(self) -> str:
        lines = [f"{self.metric}: {self.score}% over {len(self.rows)} examples"]
        for r in self.rows:
            first = r.verdict.feedback.splitlines()[0] if r.verdict.feedback else ""
            cost = "-" if r.cost is None else f"{r.cost:.4f}"
            took = "-" if r.seconds is None else view.seconds_text(r.seconds)
            line = f"{r.index:>3}  {r.verdict.score:.2f}  {r.reason:<16} {r.requests:>3} req  {cost:>8}  {took:>8}"
            lines.append(f"{line}  {first}")
        return "\n".join(lines)

    __repr__ = __str__

    def _repr_html_(self) -> str:
        head = "".join(f"<th>{h}</th>" for h in ("#", "score", "feedback", "reason", "requests", "cost", "time"))
        body = "".join(
            "<tr>"
            f"<td>{r.index}</td><td>{r.verdict.score:.2f}</td>"
            f"<td style='text-align:left;white-space:pre-wrap'>{html.escape(r.verdict.feedback)}</td>"
            f"<td>{html.escape(r.reason)}</td><td>{r.requests}</td>"
            f"<td>{'' if r.cost is None else f'{r.cost:.4f}'}</td>"
            f"<td>{'' if r.seconds is None else view.seconds_text(r.seconds)}</td>"
            "</tr>"
            for r in self.rows
        )
        caption = f"<caption>{html.escape(self.metric)}: {self.score}% over {len(self.rows)} examples</caption>"
        return f"<table class='dspy-imp-report'>{caption}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


class Failing:
    """The failing rows of a report, each shown as its feedback over the turn's notebook view."""

    def __init__(self, rows: Sequence[Row]):
        self.rows = tuple(rows)

    def __len__(self) -> int:
        return len(self.rows)

    def __repr__(self) -> str:
        return f"Failing({len(self.rows)} examples: {[r.index for r in self.rows]})"

    def _repr_html_(self) -> str:
        parts = []
        for r in self.rows:
            title = f"<h4>Example {r.index}: score {r.verdict.score:.2f}</h4>"
            feedback = f"<pre style='white-space:pre-wrap'>{html.escape(r.verdict.feedback)}</pre>"
            has_record = "_metadata" in getattr(r.prediction, "__dict__", {})
            turn = view.prediction_html(r.prediction) if has_record else "<p>(no dspy_imp record)</p>"
            parts.append(title + feedback + turn)
        return "".join(parts) or "<p>No failing examples.</p>"


def report(result: Any, metric: Metric) -> Report:
    """A report of a ``dspy.Evaluate`` result (``EvaluationResult``, or its ``results`` list) under ``metric``."""
    if not isinstance(metric, Metric):
        raise TypeError(f"report() takes a dspy_imp.evals metric, got {metric!r}")
    results = getattr(result, "results", result)
    rows = []
    for index, (example, pred, _score) in enumerate(results):
        verdict = metric.verdict(example, pred)
        reason: str = "(no record)"
        requests, cost, seconds = 0, None, None
        try:
            record = read(example, pred)
            talk = record.conversation
            usage = talk.agent_usage if talk is not None else record.usage
            reason, requests, cost = record.metadata.termination_reason, usage.total_requests, usage.cost
            seconds = talk.agent_duration if talk is not None else record.metadata.duration
        except NotARecord:
            pass
        rows.append(Row(index, example, pred, verdict, reason, requests, cost, seconds))
    return Report(rows, metric.name)
