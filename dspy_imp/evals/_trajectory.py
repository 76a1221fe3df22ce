"""The tool-call trajectory against the expected one.

Matching modes (``Match``), over the calls of the whole team in the order they were made:

- ``"exact"``: the same calls, in the same order, nothing else;
- ``"in_order"``: the expected calls appear in that order; other calls may come between;
- ``"any_order"``: the same calls in any order, nothing else;
- ``"subset"``: every call made is an expected one (some may be missing);
- ``"superset"``: every expected call was made (others may be too).

A call matches an expected one when the tool's name and the agent that made it are the same
(``Call(..., agent="researcher")`` for a sub-agent's call, no agent for the program's own), and
the arguments agree: exactly, by a function per argument, or not at all (``args=``; an expected
``Call`` with ``args=None`` takes any arguments). Pairs are found greedily, first come first
served. The score is the share of calls matched (of the larger of the two lists where extra
calls count against it), 1 for a match.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, get_args

from dspy_imp._records.errors import ConfigurationError
from dspy_imp.evals._metric import Metric, Verdict
from dspy_imp.evals._record import Called, Record, show, show_args

Match = Literal["exact", "in_order", "any_order", "subset", "superset"]
"""How the calls made are compared with the expected ones (the module docstring)."""

ArgsMode = Literal["exact", "ignore"] | Mapping[str, Callable[[Any, Any], bool]]
"""How arguments are compared: exactly, not at all, or ``{name: fn(actual, expected) -> bool}`` for
the arguments it names (the others exactly)."""


@dataclass(frozen=True)
class Call:
    """An expected call: the tool's name, its arguments (``None``: any), the agent that makes it.

    Example:
        ```python
        [evals.Call("lookup_order", {"order_id": "A-42"}, agent="researcher"), evals.Call("refund")]
        ```
    """

    name: str
    args: Mapping[str, Any] | None = None
    agent: str | None = None

    def __str__(self) -> str:
        by = f"{self.agent}/" if self.agent else ""
        return f"{by}{self.name}({'…' if self.args is None else show_args(self.args)})"


def as_call(value: Any) -> Call:
    """``Call``, a tool name, or a dict ``{"name", "args", "agent"}``."""
    if isinstance(value, Call):
        return value
    if isinstance(value, str):
        return Call(value)
    if isinstance(value, Mapping) and isinstance(value.get("name"), str):
        return Call(value["name"], value.get("args"), value.get("agent"))
    raise ConfigurationError(f"an expected call must be a dspy_imp.evals.Call, a tool name or a dict, got {value!r}")


class ToolTrajectory(Metric):
    """The calls the team made against the expected ones, with feedback on each difference.

    Args:
        match: ``"exact"``, ``"in_order"`` (default), ``"any_order"``, ``"subset"`` or ``"superset"``.
        args: ``"exact"`` (default), ``"ignore"``, or ``{arg name: fn(actual, expected) -> bool}``
            (the arguments it names compared by their function, the others exactly).
        expected: The example's field with the expected calls (default ``"expected_calls"``), or
            a function ``fn(example) -> calls``.
        name: The metric's name in feedback and reports.

    Example:
        ```python
        metric = evals.ToolTrajectory(match="in_order", args={"amount": lambda a, e: abs(a - e) < 0.01})
        dspy.Evaluate(devset=devset, metric=metric)(agent)
        ```
    """

    def __init__(
        self,
        match: Match = "in_order",
        *,
        args: ArgsMode = "exact",
        expected: str | Callable[[Any], Sequence[Any]] = "expected_calls",
        name: str = "tool_trajectory",
        threshold: float = 1.0,
    ):
        if match not in get_args(Match):
            raise ConfigurationError(f"`match` must be one of {get_args(Match)!r}, got {match!r}")
        if not (args in ("exact", "ignore") or (isinstance(args, Mapping) and all(map(callable, args.values())))):
            raise ConfigurationError(
                f"`args` must be 'exact', 'ignore' or a mapping of argument names to functions, got {args!r}"
            )
        if not (isinstance(expected, str) or callable(expected)):
            raise ConfigurationError(f"`expected` must be a field name or a function of the example, got {expected!r}")
        super().__init__(name=name, threshold=threshold)
        self.match: Match = match
        self.args = args
        self.expected = expected

    def expected_calls(self, example: Any) -> list[Call]:
        value = self.expected(example) if callable(self.expected) else getattr(example, self.expected, None)
        if value is None:
            raise ConfigurationError(f"`expected`: the example has no {self.expected!r} field: {example!r}")
        return [as_call(v) for v in value]

    def judge(self, example: Any, record: Record) -> Verdict:
        expected, made = self.expected_calls(example), list(record.calls)
        score, problems = _MODES[self.match](expected, made, self._differences)
        mode = self.match.replace("_", " ")
        if score >= 1 and not problems:
            text = f"The tool calls matched the expected ones ({mode}): {_listed(made)}."
            return Verdict(1.0, text, self.name)
        lines = [
            f"The tool calls did not match the expected ones ({mode}).",
            f"Expected: {_listed(expected)}.",
            f"The agent called: {_listed(made)}.",
            *problems,
            f"The turn {record.ending()}.",
        ]
        return Verdict(min(score, 0.99), "\n".join(lines), self.name)

    def _differences(self, want: Call, made: Called) -> list[str] | None:
        """``None`` for another tool or agent; else what differs in the arguments (``[]``: a match)."""
        if want.name != made.name or want.agent != made.agent:
            return None
        if want.args is None or self.args == "ignore":
            return []
        tests = self.args if isinstance(self.args, Mapping) else {}
        found = []
        for key in [*want.args, *(k for k in made.args if k not in want.args)]:
            if key not in made.args:
                found.append(f"argument `{key}` was missing, expected {show(want.args[key])}")
            elif key not in want.args:
                found.append(f"argument `{key}` was {show(made.args[key])}, not expected")
            elif not _agrees(tests.get(key), made.args[key], want.args[key]):
                found.append(f"argument `{key}` was {show(made.args[key])}, expected {show(want.args[key])}")
        return found


def _agrees(test: Callable[[Any, Any], bool] | None, actual: Any, expected: Any) -> bool:
    return bool(test(actual, expected)) if test is not None else actual == expected


def _listed(calls: Sequence[Any]) -> str:
    return " → ".join(f"`{c}`" for c in calls) if calls else "no tools"


Differ = Callable[[Call, Called], "list[str] | None"]


def _missing(want: Call, made: Sequence[Called], free: Sequence[int], differ: Differ) -> str:
    """Why ``want`` found no partner: the argument differences of a same-name free call, or not called."""
    for index in free:
        found = differ(want, made[index])
        if found:
            return f"Call `{made[index]}`: " + "; ".join(found) + "."
    by = f" by `{want.agent}`" if want.agent else ""
    return f"Expected a call to `{want.name}`{by}, which was not made."


def _pairs(expected: Sequence[Call], made: Sequence[Called], differ: Differ) -> tuple[dict[int, int], list[str]]:
    """Greedy pairs in any order (expected index -> made index), and a sentence per unpaired expected call."""
    pairs: dict[int, int] = {}
    for i, want in enumerate(expected):
        for j, call in enumerate(made):
            if j not in pairs.values() and differ(want, call) == []:
                pairs[i] = j
                break
    free = [j for j in range(len(made)) if j not in pairs.values()]
    missing = [_missing(want, made, free, differ) for i, want in enumerate(expected) if i not in pairs]
    return pairs, missing


def _extra(made: Sequence[Called], used: Sequence[int]) -> list[str]:
    return [f"Called `{call}`, which was not expected." for j, call in enumerate(made) if j not in used]


def _exact(expected: Sequence[Call], made: Sequence[Called], differ: Differ) -> tuple[float, list[str]]:
    problems, right = [], 0
    for k in range(max(len(expected), len(made))):
        want, call = (expected[k] if k < len(expected) else None), (made[k] if k < len(made) else None)
        found = differ(want, call) if want and call else None
        if found == []:
            right += 1
        elif want and call and found:
            problems.append(f"Call {k + 1} `{want.name}`: " + "; ".join(found) + ".")
        elif want and call:
            problems.append(f"Call {k + 1} was `{call}`, expected `{want}`.")
        elif want:
            problems.append(f"Call {k + 1}, expected `{want}`, was not made.")
        else:
            problems.append(f"Call {k + 1} `{call}` was not expected.")
    problems += _order(expected, made, differ)
    return right / max(len(expected), len(made), 1), problems


def _order(expected: Sequence[Call], made: Sequence[Called], differ: Differ) -> list[str]:
    """``called `b` before `a` `` for each pair of expected calls made in the reverse order."""
    pairs, _ = _pairs(expected, made, differ)
    found = []
    for i in sorted(pairs):
        for k in sorted(pairs):
            if i < k and pairs[i] > pairs[k]:
                found.append(f"Called `{expected[k].name}` before `{expected[i].name}`.")
    return found


def _in_order(expected: Sequence[Call], made: Sequence[Called], differ: Differ) -> tuple[float, list[str]]:
    position, problems, at = 0, [], {}
    for i, want in enumerate(expected):
        found = next((j for j in range(position, len(made)) if differ(want, made[j]) == []), None)
        if found is not None:
            at[i], position = found, found + 1
            continue
        earlier = next((j for j in range(position) if differ(want, made[j]) == []), None)
        after = [expected[k].name for k in at if earlier is not None and at[k] > earlier]
        if after:
            problems.append(f"Called `{want.name}` before `{after[0]}`.")
            continue
        problems.append(_missing(want, made, range(len(made)), differ))
        alike = next((j for j in range(len(made)) if differ(want, made[j])), None)
        before = [expected[k].name for k in at if alike is not None and at[k] > alike]
        if before:
            problems.append(f"And `{want.name}` was called before `{before[0]}`.")
    return len(at) / max(len(expected), 1), problems


def _any_order(expected: Sequence[Call], made: Sequence[Called], differ: Differ) -> tuple[float, list[str]]:
    pairs, missing = _pairs(expected, made, differ)
    return len(pairs) / max(len(expected), len(made), 1), missing + _extra(made, list(pairs.values()))


def _subset(expected: Sequence[Call], made: Sequence[Called], differ: Differ) -> tuple[float, list[str]]:
    pairs, _ = _pairs(expected, made, differ)
    return (len(pairs) / len(made) if made else 1.0), _extra(made, list(pairs.values()))


def _superset(expected: Sequence[Call], made: Sequence[Called], differ: Differ) -> tuple[float, list[str]]:
    pairs, missing = _pairs(expected, made, differ)
    return len(pairs) / max(len(expected), 1), missing


_MODES: dict[str, Callable[[Sequence[Call], Sequence[Called], Differ], tuple[float, list[str]]]] = {
    "exact": _exact,
    "in_order": _in_order,
    "any_order": _any_order,
    "subset": _subset,
    "superset": _superset,
}
