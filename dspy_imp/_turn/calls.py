"""What a step's calls are checked and run against, and what comes of them: the records that
``_turn.tools`` (running), ``_turn.checks`` (checking) and ``_turn.results`` (judging) share."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from dspy_imp._prompt.signature import OutputSpec, Rejection
from dspy_imp._records.kinds import PendingKind
from dspy_imp._records.outcomes import Raised, Returned
from dspy_imp._records.steps import PendingCall, Step, ToolCall, ToolResult
from dspy_imp._turn.approval import Decisions
from dspy_imp._turn.effects import Tool
from dspy_imp._turn.limits import ToolLimits
from dspy_imp._turn.meter import Meter

CallMode = Literal["step", "last_text", "forced"]


Verdict = Rejection | Literal["approval"] | None


class Finish:
    """What a ``finish_on`` hook returns to end the turn with these outputs.

    Example:
        ```python
        def on_send(args, result, inputs):
            return dspy_imp.Finish(reply=args["text"])
        agent = dspy_imp.ReActV2("message -> reply", tools=[send], finish_on={"send": on_send})
        ```
    """

    def __init__(self, **outputs: Any):
        self.outputs = outputs

    def __repr__(self) -> str:
        return f"Finish({', '.join(f'{k}={v!r}' for k, v in self.outputs.items())})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Finish) and other.outputs == self.outputs

    __hash__ = None  # type: ignore[assignment]


@dataclass(frozen=True)
class CallContext:
    """What a step's calls are checked and run against (fixed for the call)."""

    roster: Mapping[str, Tool]
    runners: Mapping[str, Tool]
    outputs: OutputSpec
    inputs: Mapping[str, Any]
    policy: Callable[[str, dict[str, Any]], Any] | frozenset[str] | None = None
    finish_on: Mapping[str, Callable[..., Any]] = field(default_factory=dict)
    last_request_tools: tuple[str, ...] = ()
    parallel: bool = False
    needs_approval: frozenset[str] = frozenset()
    external: frozenset[str] = frozenset()
    limits: ToolLimits = field(default_factory=ToolLimits)
    renderer: Callable[[Any, Any], Any] | None = None


@dataclass
class StepCalls:
    """What came of a step's calls. ``pending``: the step paused; none of its calls ran, unless a
    sub-agent paused after them (then their results are here). ``agent_runs``: each sub-agent
    call's record, by call id (``_turn.agents``)."""

    calls: list[ToolCall] = field(default_factory=list)
    results: list[ToolResult] = field(default_factory=list)
    submitted: dict[str, Any] | None = None
    submit_denied: bool = False
    finished: tuple[str, dict[str, Any]] | None = None
    unexecuted: list[dict[str, Any]] = field(default_factory=list)
    pending: list[PendingCall] = field(default_factory=list)
    agent_runs: dict[str, Mapping[str, Any]] = field(default_factory=dict)
    renamed: dict[str, str] = field(default_factory=dict)  # the reply's call id -> the id recorded
    running_agent: ToolCall | None = None  # the sub-agent call whose turn runs now


@dataclass(frozen=True)
class Checked:
    """One call after its checks: decided (``result``; ``recorded`` when a paused step had it
    already), to run (``runner``; ``resume``: a paused sub-agent's record), answered externally
    (``answer``), or waiting (``pending``)."""

    call: ToolCall
    result: ToolResult | None = None
    runner: Tool | None = None
    answer: Returned | Raised | None = None
    pending: PendingKind | None = None
    unexecuted: bool = False
    recorded: bool = False
    resume: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class Running:
    """What a step's calls run with beyond the call context: the caller's decisions on resume, the
    paused step being resumed (its recorded results and sub-agent records), and the turn's meter
    (a sub-agent's budget, and where its usage is counted), and what the calls came to so far."""

    decisions: Decisions = field(default_factory=Decisions)
    resumed: Step | None = None
    meter: Meter | None = None
    done: StepCalls = field(default_factory=StepCalls)
    """What came of the step's calls so far, as they run (a stopped turn records the calls that ran)."""
