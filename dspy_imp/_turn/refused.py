"""A last-text request the provider refused for the model's own malformed call (issue 22).

Groq validates the model's tool call server-side and answers a malformed one with a 400
``tool_use_failed`` (``_routes.failures.refused_call`` reads it as a reply carrying that call).
On an ordinary step that call is an observation and the loop goes on. The last-text request
has no next step, so the turn records the refused call as an observation that asks for a text
answer, and sends the last-text request once more. The request is the same (the tools still
offered, ``tool_choice="auto"``), so the cached prefix holds; ``tool_choice="none"`` would not
help: Groq refuses a call written under it with the same ``tool_use_failed``.
"""

from __future__ import annotations

from collections.abc import Generator, Mapping
from dataclasses import replace
from typing import Any

from dspy_imp._prompt.sentences import ANSWER_NOW
from dspy_imp._records.outcomes import RawCall, Reply
from dspy_imp._routes.failures import REFUSED_CALL
from dspy_imp._turn.effects import CheckArguments, DecidedCall, RunTool, RunTools
from dspy_imp._turn.meter import Meter
from dspy_imp._turn.tools import CallContext, Running, StepCalls, run_calls


def refused(reply: Reply) -> bool:
    """The reply stands for the provider's refusal of the model's own call (nothing else in it)."""
    return bool(reply.calls) and not reply.said_something and all(_refused(call) for call in reply.calls)


def observe(
    ctx: CallContext, reply: Reply, step_index: int, taken: set[str], meter: Meter
) -> Generator[RunTool | RunTools | DecidedCall | CheckArguments, Any, StepCalls]:
    """The refused calls as malformed-call observations (no tool runs), saying to answer in text."""
    calls = tuple(replace(call, received={**call.received, ANSWER_NOW: True}) for call in reply.calls)
    return (yield from run_calls(ctx, calls, "step", step_index, taken, Running(meter=meter)))


def _refused(call: RawCall) -> bool:
    return call.name is None and isinstance(call.received, Mapping) and REFUSED_CALL in call.received
