"""Performing ``Measure``: a request rendered exactly as it would be sent, and its tokens counted.

Nothing is sent and no DSPy callback fires: the step adapter's ``preview`` renders the messages
and the native tool list through the same code as ``format`` (same dialect, route, roster and
memo). The counter is the policy's own or LiteLLM's (``_routes.tokens``); the window is LiteLLM's
model map's. Pure, so the durable driver does not checkpoint it: a replay measures the same. The
async driver measures in a worker thread, off the event loop.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import dspy

from dspy_imp._drivers import tool_threads
from dspy_imp._drivers.adapter import Exchange, ReActAdapter, current_exchange
from dspy_imp._prompt.guidance import tool_listing
from dspy_imp._records.outcomes import Measured
from dspy_imp._routes.model_facts import model_facts
from dspy_imp._routes.tokens import count_tokens, window_of
from dspy_imp._turn.effects import Measure
from dspy_imp._turn.plan import Program


def measure(program: Program, effect: Measure) -> Measured:
    request = effect.request
    lm = program.react.lm or dspy.settings.lm
    exchange = Exchange(request.guidance, config=dict(request.config), drop_block=request.drop_block)
    inputs: dict[str, Any] = {**request.pending, "tools": tool_listing(request.guidance.roster)}
    adapter = _adapter()
    token = current_exchange().set(exchange)
    try:
        messages, tools = adapter.preview(lm, program.react.signature, program.react.demos, inputs)
    finally:
        current_exchange().reset(token)
    model = str(getattr(lm, "model", "") or "")
    counter = effect.counter or count_tokens
    return Measured(_tokens(counter(messages, tools, model)), window_of(model), model_facts(model).binds_thinking)


async def ameasure(program: Program, effect: Measure) -> Measured:
    """``measure`` in a worker thread with this context: the rendering, the counter and LiteLLM's
    cold import (seconds, the first time) never hold the event loop, which other turns share (the
    web app's streams)."""
    return await tool_threads.arun(functools.partial(measure, program, effect))


def _adapter() -> ReActAdapter:
    configured = dspy.settings.adapter
    return configured if isinstance(configured, ReActAdapter) else ReActAdapter(base=configured)


def _tokens(counted: Any) -> int:
    """A counter's answer as a token count; anything else fails the turn naming the counter."""
    if isinstance(counted, bool) or not isinstance(counted, int | float) or not math.isfinite(counted) or counted < 0:
        raise TypeError(f"`context.counter` returned {counted!r}, not a token count (a number >= 0)")
    return int(counted)
