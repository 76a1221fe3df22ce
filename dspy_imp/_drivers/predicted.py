"""A step read from the prediction the inner predictor returned, when no raw reply was captured.

The adapter records each step's raw reply before DSPy's parsing can lose anything. A step
request that never reached the adapter (a test that patches ``agent.react.forward`` or
``aforward`` the way DSPy's own tests do, or a predictor replaced by hand) has no raw reply;
its prediction is then the step: ``next_thought`` (a ``str`` or ``dspy.Reasoning``) and
``tool_calls`` (a ``dspy.ToolCalls``, or a list of call dicts).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import dspy

from dspy_imp._prompt.dialect import read_written_calls
from dspy_imp._prompt.signature import STEP_CALLS, STEP_TEXT
from dspy_imp._records.outcomes import RawCall, Reply


def reply_from_prediction(prediction: Any) -> Reply | None:
    """The step a prediction carries, or ``None`` when it is not a prediction of the step fields."""
    if not isinstance(prediction, dspy.Prediction | Mapping):
        return None
    keys = set(prediction.keys())
    if not keys & {STEP_TEXT, STEP_CALLS}:
        return None
    return Reply(text=_text(prediction.get(STEP_TEXT)), calls=_calls(prediction.get(STEP_CALLS)))


def _text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, dspy.Reasoning):
        return value.content
    return str(value)


def _calls(value: Any) -> tuple[RawCall, ...]:
    if value is None:
        return ()
    if isinstance(value, dspy.ToolCalls):
        return tuple(RawCall(c.id, c.name, dict(c.args)) for c in value.tool_calls)
    return read_written_calls(value)
