"""The errors `dspy_imp` raises.

The tree is small on purpose: expected ends of a turn (a step limit, a deadline, a full
context window, a model that never answered usefully) are *data* on the prediction's
metadata, never exceptions. Only two things raise to a caller::

    ValueError
    └── ConfigurationError   bad option, bad input or bad saved state, raised before any request
    Exception
    ├── StepError            the turn could not get a model response; carries the history so far
    │                        (``step_error``: it carries usage, a record of this floor)
    ├── ToolCallRejected     never reaches a caller: what tracers see for a refused or rejected call
    ├── RetryTool            raised by a tool: the model should call it again (its message says how)
    ├── AsksInput            raised by a tool: its call waits for a person's input (the turn pauses)
    └── ToolTimedOut         never reaches a caller: a tool ran past its time bound
"""

from __future__ import annotations

import copy
import pickle
import reprlib
from collections.abc import Mapping
from typing import Any


class ConfigurationError(ValueError):
    """An option, per-call option or saved state was refused.

    Raised at construction, at the start of a call (before any request is sent) or while
    loading saved state. The message names the option or field at fault and shows the
    value that was refused.
    """


class StreamClosed(GeneratorExit):
    """The consumer of the turn's ``dspy.streamify`` stream closed it: the turn stops before its
    next effect (no further request or tool).

    A stop, like the ``GeneratorExit`` it is, never a failure the model reads. The history
    recorded so far is on the exception (``dspy_imp_history``), as on any stop of a turn.
    """


class ToolCallRejected(Exception):
    """A tool call that ended in an error without its tool running here, as DSPy's tool
    callbacks and tracers see it: refused (policy), unknown tool, malformed call, invalid
    arguments, invalid ``submit``, an error result a host supplied (``results=``), a result
    its ``finish_on`` hook rejected, or a call of a last request that was not run.

    The loop reports such a call through a stand-in ``dspy.Tool`` that raises this; the turn
    goes on (the model reads the observation). It is never raised to a caller.

    Attributes:
        kind: The rejection's kind: ``tool_denied``, ``unknown_tool``, ``malformed_tool_call``,
            ``missing_required``, ``schema_validation``, ``tool_error``, a ``submit`` (or
            ``finish_on`` outputs) validation kind, or ``unexecuted``.

    The message is the observation the model read (the tool message's text); for
    ``unexecuted``, which the model never read, it says why the call was not run.
    """

    def __init__(self, kind: str, observation: str):
        super().__init__(observation)
        self.kind = kind


def picklable(reason: BaseException | str) -> BaseException | str:
    """``reason``, or a copy of it whose unpicklable attributes (a provider's read-only header
    mapping, say) are plain copies; the in-process ``reason`` is left unchanged."""
    try:
        pickle.dumps(reason)
        return reason
    except Exception:
        pass
    try:
        clone = copy.copy(reason)
        for key, value in vars(reason).items():
            try:
                pickle.dumps(value)
            except Exception:
                setattr(clone, key, dict(value) if isinstance(value, Mapping) else repr(value))
        clone.__cause__ = clone.__context__ = None  # type: ignore[union-attr]
        pickle.dumps(clone)
        return clone
    except Exception:
        return describe_reason(reason)


_BRIEF = reprlib.Repr()
_BRIEF.maxlevel, _BRIEF.maxstring, _BRIEF.maxother, _BRIEF.maxlong = 4, 120, 120, 60
_BRIEF.maxlist = _BRIEF.maxtuple = _BRIEF.maxdict = _BRIEF.maxset = 8


def brief(value: Any) -> str:
    """A short ``repr`` of a refused value for an error message: nesting, long text and long lists
    cut (a value nested past the recursion limit, or whose ``repr`` raises, still shows)."""
    try:
        return _BRIEF.repr(value)
    except Exception:  # a repr that raises, RecursionError included
        return f"<{type(value).__name__}>"


def describe_reason(reason: BaseException | str) -> str:
    if isinstance(reason, BaseException):
        text = error_text(reason)
        return f"{type(reason).__name__}: {text}" if text else type(reason).__name__
    return str(reason)


def error_text(error: BaseException) -> str:
    """``str(error)``, or ``""`` when host code's exception cannot even say what it is.

    A ``__str__`` that raises must not turn a tool's failure into the loop's (a tool that
    already ran would be lost with the step).
    """
    try:
        text = str(error)
    except Exception:
        return ""
    return text if isinstance(text, str) else ""


class RetryTool(Exception):
    """Raised by a tool to ask the model to call it again with better arguments.

    The message is the observation the model reads (an error result of the call, kind
    ``retry_requested``). Each tool has a budget of such retries per turn (``tool_retries``,
    default 1); one more interrupts the turn with cause ``"tool_retries_exhausted"``.

    Example:
        ```python
        def book(date: str) -> str:
            if "-" not in date:
                raise dspy_imp.RetryTool("send the date as YYYY-MM-DD")
            return f"booked {date}"
        ```
    """

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


class AsksInput(Exception):
    """Raised by a tool whose call waits for a person's input (an MCP server's ``elicitation/create``
    under ``elicit="pause"``): in an ordinary step the turn pauses with the call pending (kind
    ``"elicitation"``, ``_turn.approval``); in a last request, where nobody can answer, it is the
    call's error observation (its message says why).

    Attributes:
        elicitation: What the pending call carries, JSON-safe: ``message`` and ``schema`` (what the
            person is shown; text someone else wrote), ``server`` (who asks), and ``resume`` (what
            the tool needs to finish the call with the answer; opaque to the turn).
    """

    def __init__(self, elicitation: Mapping[str, Any]):
        super().__init__(
            f"{elicitation.get('server') or 'the tool'} asked for input a person must give, and none can be asked now"
        )
        self.elicitation = dict(elicitation)


class ToolTimedOut(Exception):
    """A tool ran past its time bound (``tool_timeouts`` or the deadline); the driver stopped waiting.

    Never reaches a caller: the model reads it as the call's observation (kind ``tool_timeout``).
    """

    def __init__(self, name: str, seconds: float, by_deadline: bool = False):
        super().__init__(f"{name} timed out after {seconds:g} s")
        self.name = name
        self.seconds = seconds
        self.by_deadline = by_deadline


def require_extra(message: str, *modules: str) -> None:
    """Import ``modules`` (an optional extra's), or raise one ``ImportError(message)`` saying how to
    install them, the import's own error as its cause."""
    import importlib

    try:
        for module in modules:
            importlib.import_module(module)
    except ImportError as missing:
        raise ImportError(message) from missing
