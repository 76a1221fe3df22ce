"""Which engine and provider a step request goes to, and the native request that carries replay state.

This is the one place that touches DSPy 3.4's private execution API (``dspy.clients.execution``,
``dspy.clients.backend_selection``, ``dspy.clients.call_result``). Why: DSPy's adapter path
hands ``lm(messages=[...])`` to the native lm15 engine through ``request_from_openai_chat``,
which has no slot for a provider's opaque reasoning state (Anthropic's signed and redacted
thinking blocks, Gemini's thought signatures); lm15's own request parts do
(``ContinuationState``). So a step that must replay such state on a native (or custom) engine
is sent as a ``dspy.lm15.Request`` built exactly as DSPy builds it, plus that state.

Where a request goes decides what can be replayed (``docs/providers.md``):

- ``engine="litellm"``, or ``"auto"`` with options only LiteLLM takes (``thinking=...``): LiteLLM
  carries ``reasoning_content``, Anthropic ``thinking_blocks`` and Gemini thought signatures
  (``provider_specific_fields`` on a tool call) from the message dicts;
- the native engine: ``reasoning_content`` reaches DeepSeek as reasoning (its compat replays it)
  but other providers would see it as visible text, so it is left out there; signed thinking and
  thought signatures travel as lm15 continuation state;
- a custom engine receives the lm15 request with ``reasoning_content`` as a thinking part.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from dspy.lm15 import ContinuationState, Message, Request, Response, ThinkingPart, ToolCallPart

from dspy_imp._records.steps import block_kinds
from dspy_imp._routes import dspy_private

# DSPy's adapter-call decorator (scopes capability reads to this call), for a pipeline of our own.
planned = dspy_private.with_capability_planning


# Kinds of replayed reasoning blocks (see ``_routes.reasoning``).
ANTHROPIC_KINDS = frozenset({"thinking", "redacted_thinking"})


GEMINI_KINDS = frozenset({"thought_signature"})


# The message keys the renderer uses for them (LiteLLM's own spelling).
THINKING_BLOCKS = "thinking_blocks"


PROVIDER_FIELDS = "provider_specific_fields"


_LITELLM_KINDS = {"anthropic": ANTHROPIC_KINDS, "gemini": GEMINI_KINDS, "vertex_ai": GEMINI_KINDS}


_NATIVE_KINDS = {"anthropic": ANTHROPIC_KINDS, "gemini": GEMINI_KINDS, "vertex": GEMINI_KINDS}


_NOT_OPTIONS = frozenset({"n", "rollout_id", "num_generations", "prompt_cache", "cache"})


@dataclass(frozen=True)
class Route:
    """``engine``: "native", "litellm" or "custom"; ``provider``: lm15's provider name natively,
    the model prefix on LiteLLM, None on a custom engine."""

    engine: str
    provider: str | None = None

    @property
    def keeps_reasoning(self) -> bool:
        """Whether replayed ``reasoning_content`` reaches the provider as reasoning (never as text)."""
        return self.engine != "native" or self.provider == "deepseek"

    @property
    def replayed_kinds(self) -> frozenset[str]:
        """The reasoning-block kinds this route sends back (others stay in the record only)."""
        table = _NATIVE_KINDS if self.engine == "native" else _LITELLM_KINDS
        return table.get(self.provider or "", frozenset())


def route_for(lm: Any, lm_kwargs: Mapping[str, Any]) -> Route:
    """Where DSPy will send this request, decided as DSPy decides it, before any I/O.

    Remembered per LM and option names (the answer depends on which options are set, not on
    their values, for the options a loop step sends).
    """
    spec = getattr(lm, "_engine_spec", None)
    if not isinstance(spec, str):
        return Route("custom")
    key = _key(lm, lm_kwargs, spec)
    try:
        known = _ROUTES.setdefault(lm, {})
    except TypeError:  # not weak-referenceable: no memory
        return _route(lm, lm_kwargs, spec)
    if key not in known:
        known[key] = _route(lm, lm_kwargs, spec)
    return known[key]


_ROUTES: weakref.WeakKeyDictionary[Any, dict[Any, Route]] = weakref.WeakKeyDictionary()


def _key(lm: Any, lm_kwargs: Mapping[str, Any], spec: str) -> tuple[Any, ...]:
    return (spec, lm.model, frozenset(_options(lm, lm_kwargs)), frozenset(getattr(lm, "kwargs", {})))


def remembered_capabilities(lm: Any, lm_kwargs: dict[str, Any]) -> contextlib.AbstractContextManager[None]:
    """The request's DSPy capability scope, holding what an earlier request of this LM worked out.

    Kept per LM under the route's key (engine, model, which options are set); a custom engine's
    declared hints are read afresh, as DSPy reads them.
    """
    spec = getattr(lm, "_engine_spec", None)
    if not isinstance(spec, str):
        return contextlib.nullcontext()
    try:
        known = _CAPABILITIES.setdefault(lm, {})
    except TypeError:  # not weak-referenceable: no memory
        return contextlib.nullcontext()
    return dspy_private.capabilities_known(lm, lm_kwargs, known, _key(lm, lm_kwargs, spec))


_CAPABILITIES: weakref.WeakKeyDictionary[Any, dict[Any, Any]] = weakref.WeakKeyDictionary()


def _route(lm: Any, lm_kwargs: Mapping[str, Any], spec: str) -> Route:
    prefix = str(getattr(lm, "model", "")).split("/", 1)[0]
    if spec == "litellm":
        return Route("litellm", prefix)
    from dspy.lm15 import request_from_openai_chat

    try:
        selection = dspy_private.select_backend(lm, dict(lm_kwargs))
    except Exception:  # engine="lm15" refusing: the call itself will say why
        return Route("native", None)
    if not selection.native or selection.resolution is None:
        return Route("litellm", prefix)
    options = _options(lm, lm_kwargs)
    probe = {"model": lm.model, "messages": [{"role": "user", "content": "."}], **options}
    try:  # an option lm15 cannot carry (``thinking=...``) sends "auto" through LiteLLM
        request_from_openai_chat(probe, compat=selection.resolution.compat)
    except Exception:
        return Route("litellm", prefix) if spec == "auto" else Route("native", selection.resolution.provider)
    return Route("native", selection.resolution.provider)


def settle_options(lm: Any, lm_kwargs: dict[str, Any]) -> Route:
    """Provider rules on a step's options, then where the request goes (which decides what is replayed).

    A forced ``tool_choice`` goes out without manual ``thinking`` (Anthropic refuses the two
    together; ``reasoning_effort`` is already None there). Adaptive thinking takes a forced
    choice, so it stays.
    """
    choice = lm_kwargs.get("tool_choice")
    forced = choice == "required" or isinstance(choice, Mapping)
    thinking = lm_kwargs.get("thinking", (getattr(lm, "kwargs", None) or {}).get("thinking"))
    if forced and thinking and not (isinstance(thinking, Mapping) and thinking.get("type") == "adaptive"):
        lm_kwargs["thinking"] = None
    return route_for(lm, lm_kwargs)


class KindsMemo(Protocol):
    """What ``replays_state`` asks of a turn's render memo (``_prompt.memo.RenderMemo`` is one)."""

    def block_kinds(self, steps: Sequence[Any]) -> frozenset[str]: ...


def replays_state(route: Route, steps: Sequence[Any], memo: KindsMemo | None = None) -> bool:
    """A native (or custom-engine) step whose history holds reasoning blocks this provider takes back.

    With the turn's memo, only the steps recorded since the last request are read.
    """
    if route.engine == "litellm" or not route.replayed_kinds:
        return False
    kinds = memo.block_kinds(steps) if memo is not None else block_kinds(steps)
    return bool(kinds & route.replayed_kinds)


def _options(lm: Any, lm_kwargs: Mapping[str, Any]) -> dict[str, Any]:
    merged = {**getattr(lm, "kwargs", {}), **lm_kwargs}
    return {k: v for k, v in merged.items() if v is not None and k not in dspy_private.client_keys() | _NOT_OPTIONS}


def carries_state(messages: Sequence[Mapping[str, Any]]) -> bool:
    """Whether a rendered request holds replay state the messages path cannot carry natively."""
    return any(
        m.get(THINKING_BLOCKS) or any(PROVIDER_FIELDS in c for c in m.get("tool_calls") or ())
        for m in messages
        if m.get("role") == "assistant"
    )


def canonical_request(lm: Any, messages: Sequence[Mapping[str, Any]], lm_kwargs: Mapping[str, Any]) -> Request:
    """DSPy's own ``Request`` for these messages and options, with the replay state attached."""
    plain = [_without_state(m) for m in messages]
    call, build = dspy_private.canonical(lm, plain, dict(lm_kwargs))
    compat = None
    if isinstance(getattr(lm, "_engine_spec", None), str):
        resolution = dspy_private.select_backend(lm, call.legacy).resolution
        compat = resolution.compat if resolution is not None else None
    request = build(compat)
    rows = iter([m for m in messages if m.get("role") == "assistant"])
    rebuilt = [_with_state(m, next(rows)) if m.role == "assistant" else m for m in request.messages]
    return replace(request, messages=tuple(rebuilt))


def call_options(lm_kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """What ``lm(request, ...)`` still takes beside the request."""
    return {k: lm_kwargs[k] for k in ("cache", "rollout_id") if k in lm_kwargs}


def outputs_of(response: Response) -> list[dict[str, Any]]:
    """The adapter outputs DSPy makes of a native response (text, reasoning, tool calls)."""
    return [dspy_private.legacy_output(response)]


def _without_state(message: Mapping[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in message.items() if k != THINKING_BLOCKS}
    if out.get("tool_calls"):
        out["tool_calls"] = [{k: v for k, v in c.items() if k != PROVIDER_FIELDS} for c in out["tool_calls"]]
    return out


def _with_state(message: Message, row: Mapping[str, Any]) -> Message:
    calls = [c for c in row.get("tool_calls") or () if PROVIDER_FIELDS in c]
    signatures = {c.get("id"): c[PROVIDER_FIELDS]["thought_signature"] for c in calls}
    parts = [_signed_call(p, signatures) if isinstance(p, ToolCallPart) else p for p in message.parts]
    thinking = [_thinking_part(block) for block in row.get(THINKING_BLOCKS) or ()]
    return replace(message, parts=(*thinking, *parts))


def _signed_call(part: ToolCallPart, signatures: Mapping[Any, str]) -> ToolCallPart:
    signature = signatures.get(part.id)
    if signature is None:
        return part
    state = ContinuationState(provider="gemini", kind="thought_signature", data={"value": signature})
    return replace(part, continuation=(state,))


def _thinking_part(block: Mapping[str, Any]) -> ThinkingPart:
    if block.get("type") == "redacted_thinking":
        state = ContinuationState(provider="anthropic", kind="redacted_thinking", data={"data": block["data"]})
        return ThinkingPart(text="", continuation=(state,))
    signed = ContinuationState(provider="anthropic", kind="thinking_signature", data={"signature": block["signature"]})
    return ThinkingPart(text=str(block.get("thinking") or ""), continuation=(signed,))
