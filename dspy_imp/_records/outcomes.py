"""What performing an effect produced: a reply, a tool's return or raise, a failed request.

These are records: the machine reads them, the durable codec stores them, the dialects build them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from dspy_imp._records.usage import RequestUsage, Usage


@dataclass(frozen=True)
class RawCall:
    """A call as the reply carried it: ``name`` is ``None`` when the call named no tool."""

    id: str | None
    name: str | None
    args: Any
    received: Any = None


@dataclass(frozen=True)
class Reply:
    """What one step request answered, read before any DSPy parsing could lose it."""

    text: str | None = None
    calls: tuple[RawCall, ...] = ()
    reasoning_content: str | None = None
    reasoning_details: Any = None
    finish_reason: str | None = None
    usage: tuple[RequestUsage, ...] = ()

    @property
    def said_something(self) -> bool:
        return bool(self.text and self.text.strip())


@dataclass(frozen=True)
class Extracted:
    outputs: Mapping[str, Any]
    usage: tuple[RequestUsage, ...] = ()


@dataclass(frozen=True)
class Failed:
    error: BaseException
    usage: tuple[RequestUsage, ...] = ()


@dataclass(frozen=True)
class Returned:
    """A tool's value; ``at`` is when it came back (ISO 8601 UTC), stamped by the driver; ``usage``:
    the model calls made for the turn during the call (an MCP server's sampling requests)."""

    value: Any
    at: str | None = None
    usage: tuple[RequestUsage, ...] = ()


@dataclass(frozen=True)
class Checked(Returned):
    """The guardrails' answer (``value``: ``None`` or the tripped one's ``{"name", "reason"}``), with
    the model calls they made for the turn (``usage``) and, when a guardrail's model call was not
    sent because the turn's deadline had passed or a usage limit was reached, why (``stopped``)."""

    usage: tuple[RequestUsage, ...] = ()
    stopped: str | None = None


@dataclass(frozen=True)
class Raised:
    error: BaseException
    at: str | None = None
    usage: tuple[RequestUsage, ...] = ()


@dataclass(frozen=True)
class Measured:
    """A request's prompt, counted before it is sent.

    ``tokens``: by the context policy's counter; ``window``: the model's input window (the policy's
    number, else LiteLLM's model map; ``None`` when neither knows it); ``binds``: the model binds
    thinking blocks to the prefix before them.
    """

    tokens: int
    window: int | None
    binds: bool = False


@dataclass(frozen=True)
class AgentEnded:
    """How a sub-agent's turn ended (what a ``RunAgent`` came to), read off its prediction or ``StepError``.

    ``outputs`` are the child's outputs when it answered (``None`` otherwise); ``reason`` is its
    ``termination_reason`` (``"step_error"`` when it raised ``StepError``, whose reason is
    ``error``); ``pending`` its pending calls when it paused; ``history`` its history entries.
    """

    reason: str
    outputs: Mapping[str, Any] | None = None
    cause: str | None = None
    pending: tuple[Mapping[str, Any], ...] = ()
    history: tuple[Mapping[str, Any], ...] = ()
    usage: Usage = field(default_factory=Usage)
    error: BaseException | None = None
    at: str | None = None
