"""A step request's options and route: the request's LM and options under the provider rules,
whether it goes out as a native ``Request``, DSPy's JSON fallback and a ``JSONAdapter``'s
``response_format`` as the base adapter has them, and ``reasoning_effort="low"`` as
``dspy.ReActV2`` sends it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import dspy

from dspy_imp._drivers.exchange import Exchange
from dspy_imp._prompt.dialect import Dialect
from dspy_imp._records.clock import time_left
from dspy_imp._routes.caching import cache_options, conversation_key
from dspy_imp._routes.hosted import check as check_hosted
from dspy_imp._routes.route import (
    encrypted_reasoning,
    forced_keeps_thinking,
    remembered_capabilities,
    replays_state,
    settle_options,
)
from dspy_imp._routes.thinking import interleaved, one_config_per_turn, same_thinking
from dspy_imp._routes.timeouts import native_seconds
from dspy_imp._routes.warmup import warm_litellm


def sends_request(lm: Any, exchange: Exchange) -> bool:
    """The step goes out as a native ``Request``: it replays state, must ask for encrypted reasoning,
    or carries hosted tools (lm15's builtin tools, which the messages path cannot carry)."""
    if exchange.route.engine == "native" and (encrypted_reasoning(lm) or exchange.hosted_route is not None):
        return True
    return replays_state(exchange.route, exchange.guidance.steps, exchange.guidance.memo)


def json_fallback(base: dspy.Adapter | None) -> bool:
    """DSPy's JSON fallback, as the base adapter has it: a ``ChatAdapter`` (or ``XMLAdapter``) with
    the flag on; never a JSON base or an adapter that is no ``ChatAdapter`` (``TwoStepAdapter``)."""
    if base is None:
        return True
    if isinstance(base, dspy.JSONAdapter) or not isinstance(base, dspy.ChatAdapter):
        return False
    return bool(base.use_json_adapter_fallback)


def json_response_format(base: dspy.JSONAdapter, lm: Any, lm_kwargs: dict[str, Any], dialect: Dialect) -> None:
    """The ``response_format`` a ``JSONAdapter`` sends, for the fields the step is shown.

    Written calls get JSON mode, as DSPy gives a ``ToolCalls`` field written as text (a strict
    schema cannot describe free-form call arguments). Otherwise DSPy's private
    ``_prepare_response_format`` decides between a structured schema and JSON mode from the
    LM's capabilities; it is reused rather than copied.
    """
    if dialect.calls_field is not None:
        if "response_format" in lm.supported_params:
            lm_kwargs["response_format"] = {"type": "json_object"}
        return
    base._prepare_response_format(lm, lm_kwargs, dialect.display)


def settled(exchange: Exchange, lm: Any, lm_kwargs: Mapping[str, Any]) -> tuple[Any, dict[str, Any]]:
    """The request's LM and options under the provider rules (``settle_options``), its route on
    the exchange, its prompt-cache options (``_routes.caching``: the marks ours to place on the
    exchange), a native request's timeout as its read and write bound (``_routes.timeouts``);
    LiteLLM's cold import paid before the last deadline check (in ``format``), not inside the send."""
    lm, settled = exchange.lm or lm, {**lm_kwargs, **exchange.config}
    default_reasoning_effort(exchange.guidance.kind, lm, settled, *thinking_of(exchange))  # before the route
    exchange.route = settle_options(lm, settled, exchange.guidance.edits_prefix or exchange.drop_block)
    exchange.hosted_route = check_hosted(  # before any request
        lm, exchange.route, exchange.hosted, exchange.guidance.tool_names
    )
    same_thinking(lm, exchange.route, settled)  # LiteLLM's Anthropic route thinks as the native engine
    exchange.seconds = native_seconds(lm, exchange.route, settled)
    key = conversation_key(
        str(getattr(lm, "model", "")), exchange.guidance.task.signature.instructions, exchange.first_inputs
    )
    exchange.caching = cache_options(lm, exchange.route, settled, exchange.prompt_cache, key)
    if exchange.route.engine == "litellm" and time_left() is not None:
        warm_litellm()
    return lm, settled


def thinking_of(exchange: Exchange) -> tuple[str, bool]:
    """The program's ``thinking`` and whether this is the turn's first step (no step of the turn recorded)."""
    guidance = exchange.guidance
    return exchange.thinking, len(guidance.steps) <= guidance.boundary


def default_reasoning_effort(
    kind: str, lm: Any, lm_kwargs: dict[str, Any], thinking: str = "every", first: bool = True
) -> None:
    """``reasoning_effort`` on a request, by the program's ``thinking`` (``docs/providers.md#thinking``).

    ``"every"`` (DSPy's default, as ``dspy.ReActV2`` sends it: its thought is a ``dspy.Reasoning``
    field): ``"low"`` on every ordinary request to an LM that supports reasoning. An explicit
    setting wins: in the request's config or in ``lm.kwargs``, ``None`` included (the level it
    names is then the one the other modes send too). DSPy's own exception is kept: GPT-5 models on
    the Chat Completions API return no reasoning content, so nothing is sent to them.
    ``"first"``: only the turn's first step asks; on Claude the later steps keep its settings
    (Anthropic: one thinking configuration per assistant turn, and a tool-use loop is one),
    which Claude without the interleaved beta spends once per turn. ``"off"``: ``None`` on every
    request. ``"interleaved"``: as ``"every"``, with Anthropic's interleaved-thinking beta header
    on Claude 4.x (``_routes.thinking``).

    The forced requests (``forced_submit``, the ``"required"`` retry) get ``reasoning_effort=None``
    (Anthropic refuses thinking with a forced choice), except to a model whose forced request
    keeps its thinking (``route.forced_keeps_thinking``: Claude 5.1+), which gets what the steps
    get: the thinking settings, and the prompt cache, hold through the turn.
    """
    if kind in ("forced_submit", "required_retry"):
        if not forced_keeps_thinking(lm):
            lm_kwargs["reasoning_effort"] = None
            return
        kind = "step"
    if kind not in ("step", "last_text", "summary"):
        return
    if thinking == "off" or (thinking == "first" and not first and not one_config_per_turn(lm)):
        lm_kwargs["reasoning_effort"] = None
        return
    if thinking == "first" and kind != "step" and not one_config_per_turn(lm):
        lm_kwargs["reasoning_effort"] = None
        return
    if "reasoning_effort" not in lm_kwargs:
        if "reasoning_effort" in (getattr(lm, "kwargs", None) or {}) or not _supports_reasoning(lm, lm_kwargs):
            return
        if "gpt-5" in str(getattr(lm, "model", "")) and getattr(lm, "model_type", None) == "chat":
            return
        lm_kwargs["reasoning_effort"] = "low"
    effort = lm_kwargs.get("reasoning_effort", (getattr(lm, "kwargs", None) or {}).get("reasoning_effort"))
    if thinking == "interleaved" and effort:
        interleaved(lm, lm_kwargs)


def _supports_reasoning(lm: Any, lm_kwargs: dict[str, Any]) -> bool:
    """``lm.supports_reasoning`` read in the LM's remembered capability scope (``route``): DSPy works
    the capabilities out once per LM and option names, not on every request."""
    with remembered_capabilities(lm, lm_kwargs):
        return bool(getattr(lm, "supports_reasoning", False))
