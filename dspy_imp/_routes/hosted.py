"""Hosted tools per route: the one table each route plugs its translation into.

A hosted tool (``dspy_imp.hosted``) is run by the provider inside its reply. A route that takes
hosted tools has a ``HostedRoute`` (``_routes.hosted_types``) under its ``(engine, provider)`` key in
``_ROUTES`` below; the loop asks it, and only it, for

- ``tools``: which hosted tools it takes (others are a ``ConfigurationError`` naming the model and
  the tool, raised by ``check`` before any request);
- ``request``: what the request carries for them (lm15 ``BuiltinTool`` entries natively, tool
  dicts on LiteLLM, beta headers);
- ``served``: the call and result blocks of one raw response, recorded as *one* reasoning-details
  block of its ``kind`` holding every field as served (ids, encrypted content, citations);
- ``citations`` and ``usage`` of such a block and response (``pred.metadata.citations``, the
  hosted calls counted in ``metadata.usage``);
- ``as_text``: the block as text, for a request to another provider (the served blocks only go back
  to the provider that served them, as foreign reasoning does: ``_routes.reasoning``).

The served block joins the step's ``reasoning_details`` (kept verbatim by ``dump_history``,
``load_history``, durable records and the web store, as thinking blocks are); a route lists its
``kind`` in its replayed kinds, so the step goes out as a native ``Request`` carrying it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from dspy_imp._routes import hosted_anthropic, hosted_gemini, hosted_openai, hosted_openai_chat, hosted_openrouter
from dspy_imp._routes.failures import RefusedOption
from dspy_imp._routes.hosted_types import Block, HostedCall, HostedRoute, HostedUsage

# The table: each route's translation under its ``(engine, provider)`` key (``_routes.route.Route``'s).
_ROUTES: dict[tuple[str, str | None], HostedRoute] = {
    # OpenRouter's web search, its server tool or the web plugin (both engines); first, as ``usage_of`` asks
    # the routes in order and an OpenRouter reply is also a Chat Completions one
    ("native", "openrouter"): hosted_openrouter.ROUTE,
    ("litellm", "openrouter"): hosted_openrouter.ROUTE,
    ("native", "anthropic"): hosted_anthropic.ROUTE,
    ("native", "openai"): hosted_openai.ROUTE,  # the Responses API
    ("native", "gemini"): hosted_gemini.ROUTE,  # the Gemini API (AI Studio), generateContent
    # Chat Completions: OpenAI's search models, WebSearch as web_search_options (both engines)
    ("native", "openai-chat"): hosted_openai_chat.ROUTE,
    ("litellm", "openai"): hosted_openai_chat.ROUTE,
    # Vertex AI through lm15's own doors (``vertex:gemini-...``, ``vertex-express:...``,
    # ``vertex-anthropic:claude-...``): the Gemini and Anthropic translations, with the tools Vertex offers
    ("native", "vertex"): hosted_gemini.VERTEX_ROUTE,
    ("native", "vertex-express"): hosted_gemini.VERTEX_ROUTE,
    ("native", "vertex-anthropic"): hosted_anthropic.VERTEX_ROUTE,
}
# Routes that cannot carry hosted tools (or some of them), and why (the ``ConfigurationError`` says it): one
# reason for the route, a reason per tool kind, or one read from the model name (``_reason``).
Reason = str | Mapping[str, str] | Callable[[str], str]
_WHY_NOT: dict[tuple[str, str | None], Reason] = {
    ("litellm", "anthropic"): hosted_anthropic.NOT_ON_LITELLM,
    ("native", "openai"): hosted_openai.NOT_HERE,  # the Responses API: a tool it lacks (WebFetch)
    ("litellm", "openai-responses"): hosted_openai.NOT_ON_LITELLM,  # model_type="responses" on LiteLLM
    ("litellm", "openai"): hosted_openai_chat.NOT_ON_CHAT,  # Chat Completions: web search alone, on search models
    ("native", "openai-chat"): hosted_openai_chat.NOT_ON_CHAT,
    ("litellm", "gemini"): hosted_gemini.NOT_ON_LITELLM,
    ("native", "gemini"): hosted_gemini.NOT_OFFERED,  # the one tool that route lacks: RemoteMCP
    ("native", "vertex"): hosted_gemini.NOT_ON_VERTEX,  # FileSearch (the Gemini API's), RemoteMCP
    ("native", "vertex-express"): hosted_gemini.NOT_ON_VERTEX,
    ("native", "vertex-anthropic"): hosted_anthropic.NOT_ON_VERTEX,  # web search only
    # ``vertex_ai/...``: DSPy's default engine sends it to LiteLLM; the reason names the model's own family
    ("litellm", "vertex_ai"): lambda model: (
        hosted_anthropic.not_on_litellm_vertex(model)
        if "claude" in model
        else hosted_gemini.not_on_litellm_vertex(model)
    ),
    ("litellm", "bedrock"): hosted_anthropic.NOT_ON_BEDROCK,
    ("native", "openrouter"): hosted_openrouter.NOT_HERE,  # web search only
    ("litellm", "openrouter"): hosted_openrouter.NOT_HERE,
    ("native", "bedrock-anthropic"): hosted_anthropic.NOT_ON_BEDROCK,
}


def _reason(why: Reason | None, tool: Any, model: str) -> str | None:
    if why is None or isinstance(why, str):
        return why
    if isinstance(why, Mapping):
        return why.get(tool.kind)
    return why(model)


def hosted_route(route: Any) -> HostedRoute | None:
    """The translation of ``route`` (a ``_routes.route.Route``), or None when it takes no hosted tool."""
    return _ROUTES.get((route.engine, route.provider))


def served_kinds() -> frozenset[str]:
    """Every registered route's recorded block kind."""
    return frozenset(r.kind for r in _ROUTES.values())


def check(lm: Any, route: Any, hosted: Sequence[Any], functions: Sequence[str] = ()) -> HostedRoute | None:
    """The route's translation, or a ``ConfigurationError`` naming the model and the first tool it lacks,
    or the route's own refusal of these tools beside the request's function tools (``functions``)."""
    if not hosted:
        return None
    found = hosted_route(route)
    for tool in hosted:
        if found is None or tool.kind not in found.tools:
            model = str(getattr(lm, "model", lm))
            why = _reason(_WHY_NOT.get((route.engine, route.provider)), tool, model)
            where = f"{route.engine} engine" + (f", provider {route.provider!r}" if route.provider else "")
            raise RefusedOption(
                f"model {model!r} has no hosted {tool.label} on this route ({where})"
                + (f": {why}" if why else "")
                + "; leave the tool out or pick a model whose provider runs it (docs/hosted-tools.md)"
            )
    why_not = found.refuse(hosted, lm, functions) if found is not None else None
    if why_not:
        raise RefusedOption(f"{why_not} (docs/hosted-tools.md)")
    return found


def served_blocks(details: Any, kinds: frozenset[str]) -> list[Block]:
    """The recorded served blocks of a step's ``reasoning_details`` whose kind the route replays."""
    if not isinstance(details, list | tuple):
        return []
    replayed = kinds & served_kinds()
    # a loaded history is untrusted: a block's "type" may be any JSON value (a list is unhashable)
    return [
        dict(b) for b in details if isinstance(b, Mapping) and isinstance(b.get("type"), str) and b["type"] in replayed
    ]


def foreign_text(details: Any, kinds: frozenset[str]) -> str:
    """The served blocks a route does not replay, as text another provider accepts."""
    if not isinstance(details, list | tuple):
        return ""
    by_kind = {r.kind: r for r in _ROUTES.values()}
    texts = [
        by_kind[str(b["type"])].as_text(b)
        for b in details
        if isinstance(b, Mapping) and isinstance(b.get("type"), str) and b["type"] in by_kind and b["type"] not in kinds
    ]
    return "\n\n".join(t for t in texts if t)


def usage_of(response: Any) -> HostedUsage:
    """The hosted calls a raw response counted (the first route that reads it), or none."""
    if response is None:
        return HostedUsage()
    for route in _ROUTES.values():
        found = route.usage(response)
        if found is not None:
            return found
    return HostedUsage()


def citations_of(details: Any) -> list[dict[str, Any]]:
    """The citations of a step's served blocks, in order."""
    if not isinstance(details, list | tuple):
        return []
    by_kind = {r.kind: r for r in _ROUTES.values()}
    return [
        c
        for b in details
        if isinstance(b, Mapping) and b.get("type") in by_kind
        for c in by_kind[str(b["type"])].citations(b)
    ]


def calls_of(details: Any) -> list[HostedCall]:
    """The hosted calls a step's served blocks record (``HostedCall``: what people see of each), in order."""
    if not isinstance(details, list | tuple):
        return []
    by_kind = {r.kind: r for r in _ROUTES.values()}
    return [
        call
        for b in details
        if isinstance(b, Mapping) and isinstance(b.get("type"), str) and b["type"] in by_kind
        for call in by_kind[str(b["type"])].calls(b)
    ]
