"""The metric protocol: one verdict (a score and words on it), three ways DSPy asks for it.

Every metric of ``dspy_imp.evals`` is a ``Metric``: it judges one (example, prediction) pair as a
``Verdict``, and its ``__call__`` answers each caller in the form that caller expects:

- ``metric(example, pred)`` (``dspy.Evaluate``, MIPROv2, SIMBA, GEPA's scoring): the score, a float
  in [0, 1];
- ``metric(example, pred, trace)`` with a trace (``BootstrapFewShot`` deciding whether to keep a
  turn's steps as demos): ``True`` when the score reaches ``threshold`` (1.0 unless set), the
  bool DSPy's bootstrapping expects;
- ``metric(example, pred, trace, pred_name, pred_trace)`` (GEPA asking for feedback):
  ``dspy.Prediction(score=..., feedback=...)``.

A prediction that is not a ``dspy_imp`` one (the program raised and DSPy scored an empty
prediction) scores 0 with feedback that says so. Combinators (``Weighted``, ``AllOf``) keep the
verdict of each part in their feedback.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import dspy

from dspy_imp._records.errors import ConfigurationError
from dspy_imp.evals._record import NotARecord, Record, read


@dataclass(frozen=True)
class Verdict:
    """A metric's judgement of one prediction.

    Attributes:
        score: In [0, 1]; 1 is a pass.
        feedback: What went right or wrong, in the agent's terms.
        metric: The name of the metric that gave it.
        parts: A combinator's parts, each with its own verdict.
    """

    score: float
    feedback: str
    metric: str = ""
    parts: tuple[Verdict, ...] = field(default_factory=tuple)

    @property
    def passed(self) -> bool:
        return self.score >= 1.0


class Metric:
    """The base of every ``dspy_imp.evals`` metric (see the module docstring for the call forms).

    Subclasses implement ``judge(example, record)``; ``verdict(example, pred)`` reads the record.

    Args:
        name: What the feedback and the report call it (the class's own name by default).
        threshold: The score from which a bootstrapping trace is kept (``trace`` given).
    """

    def __init__(self, *, name: str | None = None, threshold: float = 1.0) -> None:
        if not isinstance(threshold, int | float) or isinstance(threshold, bool) or not 0 <= threshold <= 1:
            raise ConfigurationError(f"`threshold` must be a number in [0, 1], got {threshold!r}")
        self.name = name or _snake(type(self).__name__)
        self.threshold = float(threshold)

    def judge(self, example: Any, record: Record) -> Verdict:
        raise NotImplementedError

    def verdict(self, example: Any, pred: Any) -> Verdict:
        """This metric's verdict on ``pred`` (0 with a sentence when it carries no record)."""
        try:
            record = read(example, pred)
        except NotARecord:
            return Verdict(
                0.0, "The program returned no dspy_imp record (it raised, or is not a dspy_imp agent).", self.name
            )
        return self.judge(example, record)

    def __call__(
        self, example: Any, pred: Any, trace: Any = None, pred_name: str | None = None, pred_trace: Any = None
    ) -> Any:
        verdict = self.verdict(example, pred)
        if pred_name is not None or pred_trace is not None:
            return dspy.Prediction(score=verdict.score, feedback=verdict.feedback)
        if trace is not None:
            return verdict.score >= self.threshold
        return verdict.score

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"


def _snake(name: str) -> str:
    return "".join(f"_{c.lower()}" if c.isupper() and i else c.lower() for i, c in enumerate(name))


Judged = float | bool | tuple[float, str] | Verdict


class Check(Metric):
    """A metric from a function of the example and the record: ``fn(example, record)``.

    ``fn`` returns a bool, a score, ``(score, feedback)`` or a ``Verdict``.

    Example:
        ```python
        refunded = evals.Check(lambda example, record: DB.refunds == example.refunds, name="refunded")
        ```
    """

    def __init__(self, fn: Callable[[Any, Record], Judged], *, name: str | None = None, threshold: float = 1.0):
        if not callable(fn):
            raise ConfigurationError(f"`fn` must be callable, got {fn!r}")
        super().__init__(name=name or getattr(fn, "__name__", "check"), threshold=threshold)
        self.fn = fn

    def judge(self, example: Any, record: Record) -> Verdict:
        return as_verdict(self.fn(example, record), self.name)


def as_verdict(value: Judged, name: str) -> Verdict:
    """A function's answer as a verdict: a bool or score gets a one-line feedback."""
    if isinstance(value, Verdict):
        return value
    if isinstance(value, tuple):
        score, feedback = value
        return Verdict(_unit(score, name), str(feedback), name)
    score = _unit(value, name)
    return Verdict(score, f"`{name}`: {'passed' if score >= 1 else f'scored {score:g}'}.", name)


def _unit(value: Any, name: str) -> float:
    if isinstance(value, bool):
        return float(value)
    if not isinstance(value, int | float) or not 0 <= value <= 1:
        raise ValueError(f"metric `{name}` must score in [0, 1], got {value!r}")
    return float(value)


class Weighted(Metric):
    """A weighted mean of metrics, each part's feedback kept.

    Args:
        parts: ``{metric: weight}`` or ``[(metric, weight), ...]`` (weights positive).

    Example:
        ```python
        metric = evals.Weighted({evals.ToolTrajectory(match="in_order"): 2, evals.Ended(): 1})
        ```
    """

    def __init__(
        self,
        parts: Mapping[Metric, float] | Sequence[tuple[Metric, float]],
        *,
        name: str = "weighted",
        threshold: float = 1.0,
    ):
        pairs = list(parts.items() if isinstance(parts, Mapping) else parts)
        if not pairs:
            raise ConfigurationError("`parts` must name at least one metric")
        for metric, weight in pairs:
            if not isinstance(metric, Metric):
                raise ConfigurationError(f"`parts` must hold dspy_imp.evals metrics, got {metric!r}")
            if isinstance(weight, bool) or not isinstance(weight, int | float) or weight <= 0:
                raise ConfigurationError(f"`parts` weight of {metric.name} must be a positive number, got {weight!r}")
        super().__init__(name=name, threshold=threshold)
        self.parts = tuple((metric, float(weight)) for metric, weight in pairs)

    def judge(self, example: Any, record: Record) -> Verdict:
        verdicts = tuple(metric.judge(example, record) for metric, _ in self.parts)
        total = sum(weight for _, weight in self.parts)
        score = sum(v.score * w for v, (_, w) in zip(verdicts, self.parts, strict=True)) / total
        return Verdict(score, _joined(verdicts), self.name, verdicts)


class AllOf(Metric):
    """Every metric must pass: the score is the lowest part's, every part's feedback kept.

    Example:
        ```python
        metric = evals.AllOf(evals.ToolTrajectory(), evals.Ended(), evals.Budget(requests=8))
        ```
    """

    def __init__(self, *metrics: Metric, name: str = "all_of", threshold: float = 1.0):
        if not metrics or not all(isinstance(m, Metric) for m in metrics):
            raise ConfigurationError(f"`metrics` must be one or more dspy_imp.evals metrics, got {metrics!r}")
        super().__init__(name=name, threshold=threshold)
        self.metrics = metrics

    def judge(self, example: Any, record: Record) -> Verdict:
        verdicts = tuple(metric.judge(example, record) for metric in self.metrics)
        return Verdict(min(v.score for v in verdicts), _joined(verdicts), self.name, verdicts)


def _joined(verdicts: Sequence[Verdict]) -> str:
    """Failing parts first (what to fix), then the passing ones; each line names its metric."""
    ordered = sorted(verdicts, key=lambda v: v.passed)
    return "\n".join(f"[{v.metric} {v.score:.2f}] {v.feedback}" for v in ordered)
