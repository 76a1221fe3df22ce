"""The errors `dspy_imp` raises.

The tree is small on purpose: expected ends of a turn (a step limit, a deadline, a full
context window, a model that never answered usefully) are *data* on the prediction's
metadata, never exceptions. Only two things raise::

    ValueError
    └── ConfigurationError   bad option, bad input or bad saved state, raised before any request
    Exception
    └── StepError            the turn could not get a model response; carries the history so far
"""

from __future__ import annotations

import copy
import pickle
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import dspy


class ConfigurationError(ValueError):
    """An option, per-call option or saved state was refused.

    Raised at construction, at the start of a call (before any request is sent) or while
    loading saved state. The message names the option or field at fault and shows the
    value that was refused.
    """


class StepError(Exception):
    """A turn could not get a model response.

    Raised when the turn's last request failed (provider error, LM client or adapter
    raised), when a step was stopped by the provider's content filter, or when a request
    was refused by an operational guard.

    Attributes:
        reason: The failed request's error, unchanged (also chained as ``__cause__``).
        history: A ``dspy.History`` with everything recorded up to the failure: every tool
            that ran, with its result. Pass it back as ``history=`` to resume the turn.
    """

    def __init__(self, reason: BaseException | str, history: dspy.History):
        self.reason = reason
        self.history = history
        super().__init__(f"ReActV2 turn got no model response: {_describe(reason)}")

    def __repr__(self) -> str:
        count = len(self.history.messages)
        noun = "message" if count == 1 else "messages"
        return f"StepError(reason={_describe(self.reason)!r}, history: {count} {noun})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (_picklable(self.reason), self.history))


def _picklable(reason: BaseException | str) -> BaseException | str:
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
        return _describe(reason)


def _describe(reason: BaseException | str) -> str:
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
