"""``StepError``: the one error a turn raises to its caller, carrying the history and usage so far."""

from __future__ import annotations

from typing import Any

import dspy

from dspy_imp._records.errors import describe_reason, picklable
from dspy_imp._records.usage import Usage


class StepError(Exception):
    """A turn could not get a model response.

    Raised when the turn's last request failed (provider error, LM client or adapter
    raised), when a step was stopped by the provider's content filter, or when a request
    was refused by an operational guard.

    Attributes:
        reason: The failed request's error, unchanged (also chained as ``__cause__``, except
            for a missing API key: then the message alone, which names the variable to set,
            is printed, without DSPy's chain).
        history: A ``dspy.History`` with everything recorded up to the failure: every tool
            that ran, with its result. Pass it back as ``history=`` to resume the turn.
        usage: What the turn's requests used up to the failure (a ``dspy_imp.Usage``), or
            ``None`` when the error was not raised by a turn.
        hook: When the error is host code's, not the model's (``tool_policy``, ``finish_on``, a
            renderer, the context counter...): the failing function's name (``"'my_counter'"``),
            or ``""`` where dspy_imp refused what it returned; ``None`` otherwise.
    """

    def __init__(
        self, reason: BaseException | str, history: dspy.History, usage: Usage | None = None, hook: str | None = None
    ):
        self.reason = reason
        self.history = history
        self.usage = usage
        self.hook = hook
        if hook is None:
            super().__init__(f"ReActV2 turn got no model response: {describe_reason(reason)}")
        else:
            who = f"host hook {hook}" if hook else "a host hook"
            super().__init__(f"ReActV2 turn stopped: {who} failed (not the model): {describe_reason(reason)}")

    def __repr__(self) -> str:
        count = len(self.history.messages)
        noun = "message" if count == 1 else "messages"
        return f"StepError(reason={describe_reason(self.reason)!r}, history: {count} {noun})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (picklable(self.reason), self.history, self.usage, self.hook))
