"""The request in flight: an ``Exchange`` carries a step's guidance, options and pinned LM to
``ReActAdapter`` and its raw reply back, through a context variable (no private keys in
``config``, which could reach the provider or flip ``engine="auto"`` to LiteLLM)."""

from __future__ import annotations

from collections.abc import Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from dspy_imp._prompt.dialect import Dialect
from dspy_imp._prompt.guidance import Guidance
from dspy_imp._records.outcomes import Reply
from dspy_imp._routes.caching import NOTHING, Caching
from dspy_imp._routes.route import Route


@dataclass
class Exchange:
    """One request in flight: the guidance, options and pinned LM in; the raw reply out.

    ``config`` (the request's options: ``tool_choice``, a deadline's ``timeout``, ...) and
    ``lm`` (an LM replacing the configured one, e.g. without retries under a deadline) are
    applied by the adapter, so they never appear among the step predictor's inputs.
    ``fallbacks`` counts the times DSPy's JSON fallback re-sent the request.
    """

    guidance: Guidance
    config: Mapping[str, Any] = field(default_factory=dict)
    lm: Any = None
    reply: Reply | None = None
    dialect: Dialect | None = None
    route: Route = field(default_factory=lambda: Route("custom"))
    media_family: str = "other"
    messages: list[dict[str, Any]] | None = None
    tools: list[dict[str, Any]] | None = None
    fallbacks: int = 0
    instructions: str | None = None  # a summary request: the program's, not its predictor's
    demos: list[Any] | None = None
    drop_block: bool = False  # a context policy changed the prefix: ask for drop_block (``settle_options``)
    context: Mapping[str, Any] | None = None  # what a context policy did before this request (for its span)
    seconds: float | None = None  # a native request's read and write bound (``_routes.timeouts``)
    prompt_cache: bool | str = True  # the call's setting; ``caching``: what is left to place (``_routes.caching``)
    first_inputs: Mapping[str, Any] = field(default_factory=dict)  # the conversation's first (its cache key)
    thinking: str = "every"  # the program's ``thinking`` (``request_options.default_reasoning_effort``)
    caching: Caching = NOTHING
    cache_bust: str | None = None  # why it does not extend the request before (``_turn.busts``), for its span
    sent: tuple[Any, dict[str, Any]] | None = None  # the LM and the options DSPy sends the messages with
    hosted: tuple[Any, ...] = ()  # the program's hosted tools (``dspy_imp.hosted``), on step requests
    hosted_route: Any = None  # their route's translation (``_routes.hosted``), settled with the route


_EXCHANGE: ContextVar[Exchange | None] = ContextVar("dspy_imp_exchange", default=None)


def current_exchange() -> ContextVar[Exchange | None]:
    return _EXCHANGE


def current() -> Exchange:
    exchange = _EXCHANGE.get()
    if exchange is None:  # pragma: no cover - __call__ routes such calls to the base adapter
        raise RuntimeError("ReActAdapter step hooks run only inside a dspy_imp turn")
    return exchange
