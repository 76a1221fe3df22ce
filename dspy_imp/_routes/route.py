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

from dspy_imp._records.steps import block_kinds, holds_reasoning
from dspy_imp._routes import dspy_private, hosted_anthropic, hosted_gemini, hosted_openai, local_servers
from dspy_imp._routes.failures import RefusedOption
from dspy_imp._routes.model_facts import model_facts
from dspy_imp._routes.reasoning import (
    COMPAT_SIGNATURE_KINDS,
    OPENROUTER_KINDS,
    PLACEHOLDER_KIND,
    RESPONSES_KINDS,
    validates_signatures,
)

# DSPy's adapter-call decorator (scopes capability reads to this call), for a pipeline of our own.
planned = dspy_private.with_capability_planning


# Kinds of replayed reasoning blocks (see ``_routes.reasoning``).
ANTHROPIC_KINDS = frozenset({"thinking", "redacted_thinking"})
GEMINI_KINDS = frozenset({"thought_signature"})

# The message keys the renderer uses for them (LiteLLM's own spelling).
THINKING_BLOCKS = "thinking_blocks"
PROVIDER_FIELDS = "provider_specific_fields"
EXTRA_CONTENT = "extra_content"  # Gemini's OpenAI-compatible spelling, on a tool call
REASONING_DETAILS = "reasoning_details"  # OpenRouter's key, on the assistant message
REASONING_ITEMS = "reasoning_items"  # the Responses API's reasoning items (read by ``canonical_request`` only)
ENCRYPTED_REASONING = ["reasoning.encrypted_content"]
SERVED_CONTENT = "served_content"  # a reply's content as served with hosted tool blocks (``_routes.hosted``)
SERVED_KIND = "served_kind"  # the recorded block kind of that content (whose blocks they are)
SERVED_CONTAINER = "served_container"  # the container that reply's code ran in (Anthropic's ``container``)
# Each served kind's provider, as its continuation state names it (the writer reading it checks the name).
_SERVED_PROVIDERS = {hosted_anthropic.KIND: "anthropic", hosted_gemini.KIND: "gemini", hosted_openai.KIND: "openai"}


_LITELLM_KINDS = {
    "anthropic": ANTHROPIC_KINDS,
    "gemini": GEMINI_KINDS,
    "vertex_ai": GEMINI_KINDS,
    "openrouter": OPENROUTER_KINDS,
    "openai": COMPAT_SIGNATURE_KINDS,  # Gemini's OpenAI-compatible endpoint (signatures only exist there)
    "openai-responses": RESPONSES_KINDS,  # model_type="responses", through ``_routes.responses_bridge``
}


_NATIVE_KINDS = {
    "anthropic": ANTHROPIC_KINDS | {hosted_anthropic.KIND},  # the served blocks of hosted tools
    "gemini": GEMINI_KINDS | {hosted_gemini.KIND},  # the served parts of built-in tools
    # Vertex AI through lm15's doors: Gemini's signatures and served parts, Claude's served blocks
    "vertex": GEMINI_KINDS | {hosted_gemini.KIND},
    "vertex-express": GEMINI_KINDS | {hosted_gemini.KIND},
    "vertex-anthropic": ANTHROPIC_KINDS | {hosted_anthropic.KIND},
    "openrouter": OPENROUTER_KINDS,  # written by the ``_routes.chat_extras`` patch
    # lm15's Responses API provider (Chat Completions is "openai-chat"), and the served items of hosted tools
    "openai": RESPONSES_KINDS | {hosted_openai.KIND},
    "openai-chat": COMPAT_SIGNATURE_KINDS,  # Gemini's OpenAI-compatible endpoint, via ``_routes.chat_extras``
}


_CACHE_OPTIONS = ("prompt_cache", "prompt_cache_key", "prompt_cache_retention")  # ``caching``: decide no route
_NOT_OPTIONS = frozenset({"n", "rollout_id", "num_generations", "cache", *_CACHE_OPTIONS})


@dataclass(frozen=True)
class Route:
    """``engine``: "native", "litellm" or "custom"; ``provider``: lm15's provider name natively,
    the model prefix on LiteLLM, None on a custom engine."""

    engine: str
    provider: str | None = None
    signs_foreign_calls: bool = False  # Gemini 3+: unsigned calls go back with the placeholder signature
    reads_reasoning: bool = False  # natively, a server of your own: ``reasoning_content`` goes back

    @property
    def keeps_reasoning(self) -> bool:
        """Whether replayed ``reasoning_content`` reaches the provider as reasoning (never as text)."""
        return self.engine != "native" or self.provider == "deepseek" or self.reads_reasoning

    @property
    def replayed_kinds(self) -> frozenset[str]:
        """The reasoning-block kinds this route sends back (others stay in the record only)."""
        table = _NATIVE_KINDS if self.engine == "native" else _LITELLM_KINDS
        kinds = table.get(self.provider or "", frozenset()) | ({local_servers.KIND} if self.reads_reasoning else set())
        gemini = kinds - {hosted_gemini.KIND} == GEMINI_KINDS
        return kinds | {PLACEHOLDER_KIND} if self.signs_foreign_calls and gemini else kinds


def refuse_misrouted(lm: Any, route: Route) -> None:
    """``openai/responses/<model>``, LiteLLM's spelling of the Responses API, is refused on both engines
    with a ``ConfigurationError`` naming the spelling that works, before the request is sent: DSPy's
    native engine sends it to ``/v1/chat/completions`` as model ``responses/<model>``, and on LiteLLM
    DSPy does not know the name calls tools and the loop cannot send its reasoning items back."""
    model = str(getattr(lm, "model", ""))
    if model.startswith("openai/responses/"):
        name = model.removeprefix("openai/responses/")
        why = (
            f"DSPy's default engine sends this to /v1/chat/completions as model 'responses/{name}'"
            if route.engine == "native"
            else "on LiteLLM this spelling gets written tool calls and no reasoning items sent back"
        )
        raise RefusedOption(
            f"model={model!r}: {why}; for the Responses API write dspy.LM('openai/{name}', model_type='responses')"
        )


def route_for(lm: Any, lm_kwargs: Mapping[str, Any]) -> Route:
    """Where DSPy will send this request, decided as DSPy decides it, before any I/O.

    Remembered per LM and option names (the answer depends on which options are set, not on
    their values, for the options a loop step sends).
    """
    spec = getattr(lm, "_engine_spec", None)
    if not isinstance(spec, str):
        dspy_private.install_engine_client_options(lm)  # a ``LiteLLMEngine`` object: its options are sent
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
    known = dspy_private.client_keys()
    clients = frozenset(k for k in lm_kwargs if k in known)  # a header sends "auto" to LiteLLM
    return (spec, lm.model, frozenset(_options(lm, lm_kwargs)), frozenset(getattr(lm, "kwargs", {})), clients)


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
    route = _engine_route(lm, lm_kwargs, spec)
    reads = route.engine == "native" and route.provider == "openai-chat" and local_servers.reads_reasoning_back(lm)
    return replace(route, signs_foreign_calls=validates_signatures(str(lm.model)), reads_reasoning=reads)


def _engine_route(lm: Any, lm_kwargs: Mapping[str, Any], spec: str) -> Route:
    prefix = str(getattr(lm, "model", "")).split("/", 1)[0]
    if prefix == "openai" and getattr(lm, "model_type", None) == "responses":
        prefix = "openai-responses"  # LiteLLM's Responses API, not its Chat Completions
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
    probe = {"model": lm.model, "messages": [{"role": "user", "content": "."}], **options, **_probe_tools(options)}
    try:  # an option lm15 cannot carry (``thinking=...``) sends "auto" through LiteLLM
        request_from_openai_chat(probe, compat=selection.resolution.compat)
    except Exception:
        return Route("litellm", prefix) if spec == "auto" else Route("native", selection.resolution.provider)
    return Route("native", selection.resolution.provider)


def _probe_tools(options: Mapping[str, Any]) -> dict[str, Any]:
    """The tool a named ``tool_choice`` names (the tools join the request later): without it lm15
    refuses the probe, and a forced request DSPy sends natively would be taken for LiteLLM's."""
    choice = options.get("tool_choice")
    name = (choice.get("function") or {}).get("name") if isinstance(choice, Mapping) else None
    if not name:
        return {}
    schema = {"type": "object", "properties": {}}
    return {"tools": [{"type": "function", "function": {"name": name, "parameters": schema}}]}


def settle_options(lm: Any, lm_kwargs: dict[str, Any], edits_prefix: bool = False) -> Route:
    """Provider rules on a step's options, then where the request goes (which decides what is replayed).

    A model that refuses a forced ``tool_choice`` (``model_facts``) gets ``"auto"`` instead, with
    the same tools (a smaller roster would invalidate the thinking blocks such models bind to the
    prefix); the turn still runs only ``submit`` from that reply, and extracts when there is none.
    A forced ``tool_choice`` goes out without manual ``thinking`` (Anthropic refuses the two
    together; ``reasoning_effort`` is already None there). Adaptive thinking takes a forced
    choice, so it stays.

    Manual thinking (``enabled``/``disabled``) on a model that takes only adaptive thinking is a
    ``ConfigurationError`` naming ``thinking``, before the request is sent (fatal to the turn).
    A request that ``edits_prefix`` (``Guidance.edits_prefix``) to a model that binds thinking
    asks for ``drop_block`` (``binding_safe``): a block behind the edited prefix is dropped by the
    provider instead of refusing the request.
    """
    facts = model_facts(lm)
    choice = lm_kwargs.get("tool_choice")
    forced = choice == "required" or isinstance(choice, Mapping)
    if forced and facts.refuses_forced_tool_choice:
        lm_kwargs["tool_choice"] = "auto"
        forced = False
    thinking = lm_kwargs.get("thinking", (getattr(lm, "kwargs", None) or {}).get("thinking"))
    if facts.adaptive_only_thinking and isinstance(thinking, Mapping) and thinking.get("type") != "adaptive":
        raise RefusedOption(
            f"thinking={dict(thinking)!r}: {lm.model} takes only adaptive thinking "
            '({"type": "adaptive"}, or reasoning_effort); its provider refuses "enabled" and "disabled"'
        )
    if forced and thinking and not (isinstance(thinking, Mapping) and thinking.get("type") == "adaptive"):
        lm_kwargs["thinking"] = None
    elif edits_prefix and facts.binds_thinking:
        lm_kwargs["thinking"] = binding_safe(thinking)
    route = route_for(lm, lm_kwargs)
    refuse_misrouted(lm, route)
    if route.engine == "litellm" and encrypted_reasoning(lm):  # natively, ``canonical_request`` asks
        lm_kwargs["include"] = list(ENCRYPTED_REASONING)
    return route


def forced_keeps_thinking(lm: Any) -> bool:
    """A forced request to this model keeps the thinking settings of the turn's steps
    (``reasoning_effort``, adaptive ``thinking``): its forced choice goes out as ``"auto"``
    (``refuses_forced_tool_choice``), or its only thinking, adaptive, takes a forced choice."""
    facts = model_facts(lm)
    return facts.refuses_forced_tool_choice or facts.adaptive_only_thinking


DROP_BLOCK = {"prefix_mismatch_behavior": "drop_block"}


def binding_safe(thinking: Any) -> dict[str, Any]:
    """``thinking`` asking Claude to drop, not refuse, a block whose prefix changed.

    No ``thinking`` (reasoning through ``reasoning_effort``) becomes adaptive thinking, the only
    kind these models take. The option is one lm15 cannot carry, so on ``engine="auto"`` the
    request goes through LiteLLM, which adds the ``thinking-binding-controls-2026-08-01`` beta.
    """
    base = dict(thinking) if isinstance(thinking, Mapping) else {"type": "adaptive"}
    return {**base, "block_binding": dict(DROP_BLOCK)}


class KindsMemo(Protocol):
    """What ``replays_state`` asks of a turn's render memo (``_prompt.memo.RenderMemo`` is one)."""

    def block_kinds(self, steps: Sequence[Any]) -> frozenset[str]: ...

    def holds_reasoning(self, steps: Sequence[Any]) -> bool: ...


def replays_state(route: Route, steps: Sequence[Any], memo: KindsMemo | None = None) -> bool:
    """A native (or custom-engine) step whose history holds reasoning blocks this provider takes back,
    or (Gemini 3+) any call: one recorded without a signature goes back with the placeholder.

    With the turn's memo, only the steps recorded since the last request are read.
    """
    if route.engine == "litellm" or not route.replayed_kinds:
        return False
    if PLACEHOLDER_KIND in route.replayed_kinds and any(getattr(step, "calls", None) for step in steps):
        return True  # an unsigned (foreign) call goes back with the placeholder, which only the Request carries
    if local_servers.KIND in route.replayed_kinds and (
        memo.holds_reasoning(steps) if memo is not None else holds_reasoning(steps)
    ):
        return True  # only the Request carries it in its own field (the messages path would make it text)
    kinds = memo.block_kinds(steps) if memo is not None else block_kinds(steps)
    return bool(kinds & route.replayed_kinds)


def _options(lm: Any, lm_kwargs: Mapping[str, Any]) -> dict[str, Any]:
    merged = {**getattr(lm, "kwargs", {}), **lm_kwargs}
    dropped = dspy_private.client_keys() | _NOT_OPTIONS  # once, not per option
    return {k: v for k, v in merged.items() if v is not None and k not in dropped}


def carries_state(messages: Sequence[Mapping[str, Any]]) -> bool:
    """Whether a rendered request holds replay state the messages path cannot carry natively."""
    return any(
        m.get(THINKING_BLOCKS)
        or m.get(REASONING_DETAILS)
        or m.get(SERVED_CONTENT)
        or any(PROVIDER_FIELDS in c or EXTRA_CONTENT in c for c in m.get("tool_calls") or ())
        for m in messages
        if m.get("role") == "assistant"
    )


def canonical_request(
    lm: Any, messages: Sequence[Mapping[str, Any]], lm_kwargs: Mapping[str, Any], hosted: Any = None
) -> Request:
    """DSPy's own ``Request`` for these messages and options, with the replay state attached, and the
    builtin tools of ``hosted`` (a ``_routes.hosted.HostedRequest``) after the function tools."""
    local = local_servers.KIND in route_for(lm, lm_kwargs).replayed_kinds
    plain = [_without_state(m, local) for m in messages]
    call, build = dspy_private.canonical(lm, plain, dict(lm_kwargs))
    compat = None
    if isinstance(getattr(lm, "_engine_spec", None), str):
        resolution = dspy_private.select_backend(lm, call.legacy).resolution
        compat = resolution.compat if resolution is not None else None
    request = build(compat)
    if encrypted_reasoning(lm):
        extensions = {**(request.config.extensions or {}), "include": list(ENCRYPTED_REASONING)}
        request = replace(request, config=replace(request.config, extensions=extensions))
    if hosted is not None and hosted.builtins:
        request = replace(request, tools=(*request.tools, *hosted.builtins))
    if hosted is not None and hosted.include:  # the hosted tools' results (``_routes.hosted_openai``)
        present = list((request.config.extensions or {}).get("include") or ())
        extensions = {**(request.config.extensions or {}), "include": list(dict.fromkeys([*present, *hosted.include]))}
        request = replace(request, config=replace(request.config, extensions=extensions))
    if hosted is not None and hosted.options:  # top-level fields (``_routes.hosted_openai_chat``), sent verbatim
        extensions = {**(request.config.extensions or {}), **hosted.options}
        request = replace(request, config=replace(request.config, extensions=extensions))
    rows = iter([m for m in messages if m.get("role") == "assistant"])
    rebuilt = [_with_state(m, next(rows), local) if m.role == "assistant" else m for m in request.messages]
    request = replace(request, messages=tuple(rebuilt))
    if hosted is not None and hosted.continued is not None:  # read from the replayed history (``hosted_openai``)
        request = hosted.continued(request)
    return request


def call_options(lm_kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """What ``lm(request, ...)`` still takes beside the request."""
    return {k: lm_kwargs[k] for k in ("cache", "rollout_id") if k in lm_kwargs}


def outputs_of(response: Response) -> list[dict[str, Any]]:
    """The adapter outputs DSPy makes of a native response (text, reasoning, tool calls)."""
    return [dspy_private.legacy_output(response)]


def _without_state(message: Mapping[str, Any], local: bool = False) -> dict[str, Any]:
    dropped = (
        THINKING_BLOCKS,
        REASONING_DETAILS,
        REASONING_ITEMS,
        SERVED_CONTENT,
        SERVED_KIND,
        SERVED_CONTAINER,
        *(("reasoning_content",) if local else ()),
    )
    out = {k: v for k, v in message.items() if k not in dropped}
    if out.get("tool_calls"):
        out["tool_calls"] = [
            {k: v for k, v in c.items() if k not in (PROVIDER_FIELDS, EXTRA_CONTENT)} for c in out["tool_calls"]
        ]
    return out


def _with_state(message: Message, row: Mapping[str, Any], local: bool = False) -> Message:
    found = ((c.get("id"), _signature(c)) for c in row.get("tool_calls") or ())
    signatures = {call_id: signature for call_id, signature in found if signature}
    parts = [_signed_call(p, signatures) if isinstance(p, ToolCallPart) else p for p in message.parts]
    thinking = [_thinking_part(block) for block in row.get(THINKING_BLOCKS) or ()]
    thinking += [_reasoning_item_part(item) for item in row.get(REASONING_ITEMS) or ()]
    continuation = message.continuation
    if row.get(REASONING_DETAILS):  # written back by the ``_routes.chat_extras`` patch
        details = ContinuationState(
            provider="openrouter", kind=REASONING_DETAILS, data={"details": row[REASONING_DETAILS]}
        )
        continuation = (*continuation, details)
    if row.get(
        SERVED_CONTENT
    ):  # as served, written back by ``_routes.hosted_anthropic`` / ``hosted_gemini`` / ``hosted_openai``
        continuation = (
            *continuation,
            served_state(row[SERVED_CONTENT], row.get(SERVED_KIND), row.get(SERVED_CONTAINER)),
        )
    if local and row.get("reasoning_content"):  # written back by the ``_routes.chat_extras`` patch
        continuation = (*continuation, local_servers.reasoning_state(str(row["reasoning_content"])))
    return replace(message, parts=(*thinking, *parts), continuation=continuation)


def served_state(content: Any, kind: Any = None, container: Any = None) -> ContinuationState:
    """The replay state that makes an assistant message go back as the content it was served with,
    labelled with the provider of its recorded ``kind`` (Anthropic's when none is named), and the
    container its code ran in when the reply named one (read by ``hosted_anthropic.with_container``)."""
    provider = _SERVED_PROVIDERS.get(str(kind), "anthropic")
    data: dict[str, Any] = {"content": list(content)}
    if isinstance(container, Mapping):
        data["container"] = dict(container)
    return ContinuationState(provider=provider, kind=hosted_anthropic.STATE, data=data)


def _signature(call: Mapping[str, Any]) -> str | None:
    fields = call.get(PROVIDER_FIELDS) or ((call.get(EXTRA_CONTENT) or {}).get("google")) or {}
    return fields.get("thought_signature")


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


def _reasoning_item_part(item: Mapping[str, Any]) -> ThinkingPart:
    """A Responses API reasoning item as lm15 replays it: its own input item, before the output it preceded
    (its summary parts and content ride in the state for the ``_routes.responses_bridge`` patch)."""
    data = {k: item[k] for k in ("id", "encrypted_content", "summary_parts", "content") if item.get(k)}
    state = ContinuationState(provider="openai", kind="reasoning_item", data=data)
    return ThinkingPart(text=str(item.get("summary") or ""), continuation=(state,))


def encrypted_reasoning(lm: Any) -> bool:
    """A Responses API LM with ``store=False``: nothing is kept server-side, so every request asks for
    ``include: ["reasoning.encrypted_content"]`` (without it the reasoning items come back without their
    content, and an item replayed by id alone is refused: "Items are not persisted when store is set
    to false"). Such requests always go out as a native ``Request`` (``canonical_request``)."""
    kwargs = getattr(lm, "kwargs", None) or {}
    return getattr(lm, "model_type", None) == "responses" and kwargs.get("store") is False
