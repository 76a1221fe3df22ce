"""What a program holds (``ProgramOptions``) and what one call runs with (``CallPlan``).

Checked once by ``_program.options``; the turn trusts them afterwards.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from dspy_imp._records.kinds import FinishMode, HistoryReplay, PromptCache, ThinkingMode
from dspy_imp._records.usage import UsageLimits
from dspy_imp._turn.approval import Decisions
from dspy_imp._turn.context import Context
from dspy_imp._turn.effects import Tool
from dspy_imp._turn.guardrails import Guardrail

ToolPolicy = Callable[[str, dict[str, Any]], "bool | str"] | frozenset[str] | None


FinishHook = Callable[[dict[str, Any], Any, dict[str, Any]], Any]


@dataclass(frozen=True)
class ProgramOptions:
    """A program's validated options (everything but the signature and the tools)."""

    max_iters: int = 20
    finish: FinishMode = "auto"
    finish_on: Mapping[str, FinishHook] = field(default_factory=dict)
    history_replay: HistoryReplay = "trajectory"
    unsent_note: str | None = None
    last_request_note: str | None = None
    last_request_tools: tuple[str, ...] = ()
    tool_policy: ToolPolicy = None
    tool_result_renderer: Callable[[Any, Any], Any] | None = None
    config: Mapping[str, Any] = field(default_factory=dict)
    parallel_tools: bool = False
    usage_limits: UsageLimits | None = None
    needs_approval: tuple[str, ...] = ()
    external_tools: tuple[str, ...] = ()
    tool_timeouts: Mapping[str, float] = field(default_factory=dict)
    tool_retries: Mapping[str, int] = field(default_factory=dict)
    max_result_chars: Mapping[str, int] = field(default_factory=dict)
    repeat_limit: int | None = 3  # _turn.limits.DEFAULT_REPEAT_LIMIT
    input_guardrails: tuple[Guardrail, ...] = ()
    output_guardrails: tuple[Guardrail, ...] = ()
    fallback: tuple[Any, ...] = ()  # dspy.BaseLM objects (the turn imports no DSPy)
    toolset_instructions: tuple[tuple[str, str], ...] = ()  # a turn's toolsets' (``with_listing``), never saved

    context: Context | None = None
    prompt_cache: PromptCache = True  # on: breakpoints and cache keys where the route takes them
    thinking: ThinkingMode = "every"  # which requests ask for thinking (``_drivers.request_options``)


@dataclass(frozen=True)
class CallPlan:
    """What one call runs with; built by ``plan_call`` before any request."""

    options: ProgramOptions
    inputs: dict[str, Any]
    history: Any
    runners: Mapping[str, Tool]
    config: Mapping[str, Any]
    decisions: Decisions = field(default_factory=Decisions)


class Program(Protocol):
    """A program as the drivers and watchers see it: a ``dspy_imp.ReActV2`` is one.

    Drivers send through its inner predictor and read its options; the turn never sees it.
    """

    @property
    def signature(self) -> Any: ...

    @property
    def react(self) -> Any: ...

    @property
    def options(self) -> ProgramOptions: ...

    def summary_predictor(self) -> Any: ...

    def fallback_chain(self) -> tuple[Any, ...]: ...  # its fallback LMs, or its caller's (a sub-agent)

    @property
    def Extractor(self) -> Any: ...  # the extractor's class, built per request
