"""The vocabulary between the turn's state machine and its drivers.

The machine (``_machine.Turn.run``) is a generator: it *yields* an effect and is sent back
what came of it. Drivers (``_drivers.driver``) perform effects, sync or async, and contain no
loop logic::

    ModelRequest -> Reply | Failed        one request to the step predictor
    Extraction   -> Extracted | Failed    one request to the tool-less extractor
    RunTool      -> Returned | Raised     one tool call
    RunAgent     -> AgentEnded            one sub-agent call (``agent.as_tool()``): the child's turn
    DecidedCall  -> None                  a call decided without running a tool, reported to tracers
    RunTools     -> tuple[Returned | Raised, ...]
                                          several tool calls at once, results in call order
    Sleep        -> None                  a deadline-bounded retry's pause
    CheckGuardrails -> Checked            guardrails on the inputs or outputs (``_turn.guardrails``)
    Alongside    -> (Reply | Failed, Checked)
                                          the first request and the input guardrails at once

``ModelRequest.model``/``Extraction.model`` name the LM of the program's chain the request goes
to (0: the program's LM; ``_turn.fallback``). ``RunTool.timeout`` bounds the run (``_turn.limits``).
    Measure      -> Measured              a request's prompt tokens, counted before it is sent (pure)
    CheckArguments -> Rejection | None    a call's arguments against a schema someone else wrote,
                                          off the event loop and time-bounded (not watched)
    Summarize    -> Reply | Failed        a context policy's summary request (``_turn.context``)

A request's answer carries ``usage``: the model calls it took, as the LM reported them.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from dspy_imp._prompt.guidance import Guidance
from dspy_imp._records.kinds import CacheBustReason, GuardrailStage, TerminationCause, TerminationReason
from dspy_imp._records.steps import PendingCall, ToolCall, ToolResult
from dspy_imp._records.usage import UsageLimits
from dspy_imp._turn.approval import Decisions


class Tool(Protocol):
    """What the turn needs of a tool: a ``dspy.Tool`` is one (the turn itself imports no DSPy).

    The machine reads a tool's name, description and argument schema to check a call, and hands
    the tool to a driver in ``RunTool`` to run.
    """

    name: str
    desc: str | None
    args: dict[str, Any]
    has_kwargs: bool

    def __call__(self, **kwargs: Any) -> Any: ...

    async def acall(self, **kwargs: Any) -> Any: ...


def carried(tool: Any, name: str, default: Any = None) -> Any:
    """``getattr(tool, name, default)``, without the exception a pydantic model (a ``dspy.Tool``) raises
    inside for a name it cannot hold: about 60 times the cost of reading an attribute it has, paid a
    few times on every tool call for what only some tools carry (``parameters_schema``, ``runs_agent``...)."""
    kind: Any = type(tool)
    if _cannot_hold(kind, name) and name not in getattr(tool, "__dict__", ()):
        return default
    return getattr(tool, name, default)


@functools.lru_cache(maxsize=1024)
def _cannot_hold(cls: type, name: str) -> bool:
    """A pydantic model class none of whose instances can have ``name`` but in its ``__dict__``: not a
    field, a private attribute or an extra, nothing of that name on the class or its bases, and
    pydantic's own ``__getattr__`` (no one else's) behind the lookup. Constant per class."""
    fields = getattr(cls, "__pydantic_fields__", None)
    if not isinstance(fields, dict) or name in fields or name in (getattr(cls, "__private_attributes__", None) or {}):
        return False
    if (getattr(cls, "model_config", None) or {}).get("extra") == "allow":
        return False
    if any(name in vars(base) for base in cls.__mro__):
        return False
    getter = next((base for base in cls.__mro__ if "__getattr__" in vars(base)), None)
    lookup = next(base for base in cls.__mro__ if "__getattribute__" in vars(base))
    return getter is not None and getter.__module__ == "pydantic.main" and lookup is object


@dataclass(frozen=True)
class ModelRequest:
    """One step request. ``fallback``: whether DSPy's JSON fallback may send a second one;
    ``model``: which LM of the chain it goes to."""

    guidance: Guidance
    pending: Mapping[str, Any]
    config: Mapping[str, Any]
    no_retries: bool = False
    fallback: bool = True
    model: int = 0
    context: Mapping[str, Any] | None = None  # what a context policy applied before this request
    drop_block: bool = False  # ask the provider to drop thinking blocks bound to a changed prefix
    prompt_cache: bool | str = True  # the call's ``prompt_cache`` (``_routes.caching`` says what it sends)
    thinking: str = "every"  # the program's ``thinking`` (``_drivers.request_options`` says what it sends)
    cache_bust: CacheBustReason | None = None  # why it does not extend the request before (``_turn.busts``)


@dataclass(frozen=True)
class Summarize(ModelRequest):
    """A summary request: the conversation's own messages, then the summary predictor's
    instruction as a note entry; sent through the program's summary predictor. Its reply's text
    is the summary."""


@dataclass(frozen=True)
class Measure:
    """Count the prompt tokens of ``request`` as it would be sent; nothing is sent.

    ``counter``: the policy's ``counter(messages, tools, model)``, or ``None`` for LiteLLM's.
    """

    request: ModelRequest
    counter: Any = None


@dataclass(frozen=True)
class Extraction:
    guidance: Guidance
    inputs: Mapping[str, Any]
    config: Mapping[str, Any]
    no_retries: bool = False
    model: int = 0


@dataclass(frozen=True)
class RunTool:
    """One tool call; ``timeout``: the seconds it may run (``None``: unbounded), ``by_deadline``:
    whether the deadline is what bounds it; ``call``: the call it answers, as recorded (watchers
    report its id)."""

    tool: Tool
    args: dict[str, Any]
    timeout: float | None = None
    by_deadline: bool = False
    call: ToolCall | None = field(default=None, compare=False)
    budget: UsageLimits | None = field(default=None, compare=False)
    """What the turn's usage limits leave for the model calls made during the call (an MCP server's
    sampling requests); ``None``: no limits."""


@dataclass(frozen=True)
class CheckArguments:
    """A call's arguments checked against a schema someone else wrote (a tool that carries an
    ``arguments_bound``: a web client's), in a worker thread, never on the event loop, for at most
    ``bound`` seconds -> the check's ``Rejection`` or ``None``. A check that overran or failed is a
    rejection naming the tool (the model reads it); the thread is left behind, as a timed-out tool's."""

    tool: Tool
    args: Any
    bound: float


@dataclass(frozen=True)
class RunAgent(RunTool):
    """A call of a sub-agent (``agent.as_tool()``): the driver runs the child's turn through the tool.

    ``history`` and ``decisions`` resume a child that paused (``None``: a new child turn on ``args``);
    ``budget`` is what the caller's usage limits have left, which bounds the child too. The driver
    runs the child on its own kind of driver (the durable driver checkpoints each child effect), and
    never in a parallel batch.
    """

    history: tuple[Mapping[str, Any], ...] | None = None
    decisions: Decisions = field(default_factory=Decisions)
    budget: UsageLimits | None = None


@dataclass(frozen=True)
class DecidedCall:
    """A call that ran no tool (refused, unknown, malformed, rejected arguments, ``submit``).

    The driver reports it through DSPy's tool callbacks (``_watch.tracing``), so tracers and status
    messages see every call the model made. ``args`` are the arguments as the model sent them.
    ``stage`` says what is reported: ``"call"`` the call itself; ``"finish_on"`` the verdict of
    the ``finish_on`` hook that rejected the result of a tool that ran (``result``: the error
    the model reads); ``"unexecuted"`` a call of a last request that was not run (``result``:
    an error whose text says why; nothing is recorded, the model reads nothing).
    """

    call: ToolCall
    result: ToolResult
    args: Any
    description: str | None = None
    stage: Literal["call", "finish_on", "unexecuted"] = "call"


@dataclass(frozen=True)
class RunTools:
    """Calls of one reply run concurrently; one failing or slow call cancels none of the others."""

    runs: tuple[RunTool, ...]


@dataclass(frozen=True)
class Sleep:
    seconds: float


@dataclass(frozen=True)
class CheckGuardrails:
    """Run guardrails in order until one trips -> ``Checked(None | {"name", "reason"})``.

    ``guardrails`` are ``_turn.guardrails.Guardrail``s; ``outputs`` is ``None`` for input guardrails.
    ``budget``: what the turn's usage limits leave for the guardrails' own model calls (``None``: no
    limits); under a deadline each of those calls also waits at most the time left.
    """

    stage: GuardrailStage
    guardrails: tuple[Any, ...]
    inputs: Mapping[str, Any]
    outputs: Mapping[str, Any] | None = None
    budget: UsageLimits | None = None


@dataclass(frozen=True)
class Alongside:
    """The first request and the input guardrails at once -> ``(request outcome, Returned)``."""

    request: ModelRequest
    check: CheckGuardrails


@dataclass(frozen=True)
class Ending:
    """How the turn ended, as data (becomes the prediction's metadata)."""

    reason: TerminationReason
    outputs: Mapping[str, Any] | None = None
    cause: TerminationCause | None = None
    error: Mapping[str, str] | None = None
    finished_by_tool: str | None = None
    unexecuted: tuple[Mapping[str, Any], ...] = ()
    finish_reason: str | None = None
    pending: tuple[PendingCall, ...] = ()
    guardrail: Mapping[str, str] | None = None


@dataclass(frozen=True)
class Failure:
    """The turn got no model response, or host code (``hook``: the function's name) failed; becomes
    a ``StepError``."""

    error: BaseException
    hook: str | None = None


Effect = (
    ModelRequest
    | Extraction
    | RunTool
    | RunAgent
    | RunTools
    | DecidedCall
    | Sleep
    | CheckGuardrails
    | Alongside
    | Measure
    | CheckArguments
)
"""Every effect a turn yields (``Summarize`` is a ``ModelRequest``); the drivers perform each."""
