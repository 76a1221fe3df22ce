"""One thinking setting on both ``dspy.LM`` engines, and Anthropic's interleaved-thinking beta.

DSPy's native engine (lm15) and LiteLLM read the same ``reasoning_effort`` into different
Anthropic requests: on Claude Sonnet 4.5, ``"low"`` is ``budget_tokens: 2048`` with
``max_tokens: 18432`` natively (lm15's budget table; ``max_tokens`` is the visible cap, 16,384
unless set, plus the budget) and ``budget_tokens: 1024`` with ``max_tokens: 5120`` through
LiteLLM (its own table, plus its 4,096 default). The same program would think, and be billed,
differently by engine. ``same_thinking`` makes LiteLLM's Anthropic route send what the native
engine sends: the effort becomes the native engine's ``thinking`` and ``max_tokens`` (the
program's own ``max_tokens`` read as the native engine reads it: the visible cap, the budget
on top). A ``thinking`` the program sets itself is left as it is. A model of the adaptive
class (Claude 5.x, Opus 4.6+) has no budget to agree on, but its thinking counts against
``max_tokens``: without the program's own, LiteLLM's request gets the native engine's (16,384)
instead of the model's whole output limit. LiteLLM's ``display: "summarized"`` on adaptive
thinking stays (the native engine cannot send it; Anthropic bills the same thinking either way).

``interleaved`` adds Anthropic's ``interleaved-thinking-2025-05-14`` beta header: Claude 4.x
then thinks after every tool result, not once per assistant turn. A header is a client setting
the native engine does not carry, so on ``engine="auto"`` such a request goes through LiteLLM
(DSPy's own choice), where ``same_thinking`` still applies.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dspy_imp._routes import dspy_private
from dspy_imp._routes.model_facts import model_facts
from dspy_imp._routes.route import Route

INTERLEAVED_BETA = "interleaved-thinking-2025-05-14"
_BETA_HEADER = "anthropic-beta"


def one_config_per_turn(lm: Any) -> bool:
    """Claude: "keep one thinking configuration per assistant turn" (Anthropic's thinking guide; a
    tool-use loop is one assistant turn), so a turn's later steps keep its first step's settings."""
    return "claude" in str(getattr(lm, "model", "")).lower()


def manual_claude(lm: Any) -> bool:
    """A Claude model of the manual thinking class (``thinking: {"type": "enabled", "budget_tokens"}``):
    Claude 4.x up to 4.5 and 3.7, where the interleaved beta applies."""
    model = str(getattr(lm, "model", ""))
    if "claude" not in model.lower() or model_facts(model).adaptive_only_thinking:
        return False
    return dspy_private.native_thinking(model.rsplit("/", 1)[-1], "low") is not None


def interleaved(lm: Any, lm_kwargs: dict[str, Any]) -> None:
    """The interleaved-thinking beta on this request's headers (joined with any ``anthropic-beta``
    the program sends), on a manual-class Claude; nothing elsewhere."""
    if not manual_claude(lm):
        return
    own = lm_kwargs.get("extra_headers", (getattr(lm, "kwargs", None) or {}).get("extra_headers")) or {}
    headers = dict(own) if isinstance(own, Mapping) else {}
    key = next((k for k in headers if k.lower() == _BETA_HEADER), _BETA_HEADER)
    betas = [b.strip() for b in str(headers.get(key) or "").split(",") if b.strip()]
    if INTERLEAVED_BETA not in betas:
        betas.append(INTERLEAVED_BETA)
    headers[key] = ",".join(betas)
    lm_kwargs["extra_headers"] = headers


def same_thinking(lm: Any, route: Route, lm_kwargs: dict[str, Any]) -> None:
    """On LiteLLM's Anthropic route, a ``reasoning_effort`` becomes the ``thinking`` and
    ``max_tokens`` the native engine sends for it (``reasoning_effort`` is then ``None``); without
    one, ``max_tokens`` is still the native engine's (16,384 unless set, where LiteLLM would send
    the model's whole output limit)."""
    if route.engine != "litellm" or route.provider != "anthropic":
        return
    model = str(getattr(lm, "model", ""))
    if "claude" not in model.lower():
        return
    own = getattr(lm, "kwargs", None) or {}
    if (
        model_facts(model).adaptive_only_thinking
        or dspy_private.native_thinking(model.rsplit("/", 1)[-1], "low") is None
    ):
        _same_ceiling(model, own, lm_kwargs)  # adaptive class: no budget to agree on, the ceiling still
        return
    if lm_kwargs.get("thinking", own.get("thinking")):
        return  # the program's own ``thinking``: LiteLLM reads its ``max_tokens`` as the whole ceiling
    effort = lm_kwargs.get("reasoning_effort", own.get("reasoning_effort"))
    native = dspy_private.native_thinking(model.rsplit("/", 1)[-1], effort if isinstance(effort, str) else "low")
    if native is None:
        return
    budget, default_visible = native
    visible = lm_kwargs.get("max_tokens", own.get("max_tokens")) or lm_kwargs.get(
        "max_completion_tokens", own.get("max_completion_tokens")
    )
    visible = int(visible) if visible else default_visible
    lm_kwargs.pop("max_completion_tokens", None)
    if not isinstance(effort, str) or effort == "none":  # no thinking: the native engine's ceiling still
        lm_kwargs["max_tokens"] = visible
        return
    lm_kwargs["reasoning_effort"] = None
    lm_kwargs["thinking"] = {"type": "enabled", "budget_tokens": budget}
    lm_kwargs["max_tokens"] = budget + visible


def _same_ceiling(model: str, own: Mapping[str, Any], lm_kwargs: dict[str, Any]) -> None:
    """An adaptive-class Claude (its thinking counts against ``max_tokens``): without a
    ``max_tokens`` of the program's, LiteLLM's request gets the native engine's (16,384), not the
    model's whole output limit (128,000), so both engines cap the same reply the same way."""
    if any(lm_kwargs.get(k, own.get(k)) for k in ("max_tokens", "max_completion_tokens")):
        return
    lm_kwargs["max_tokens"] = dspy_private.native_max_tokens(model.rsplit("/", 1)[-1])
