"""OpenRouter's web plugin: ``WebSearch`` on ``openrouter/...`` models, both engines.

OpenRouter searches the web for any model through its ``web`` plugin (its web search guide): the
request carries a top-level ``plugins: [{"id": "web"}]`` (the ``:online`` model suffix is the same
plugin), and OpenRouter runs one search per request before the model answers: the model's provider's
own search for the models that have one (``engine: "native"``: Anthropic, Google, OpenAI, Perplexity,
xAI), Exa's for the others. ``search_context_size`` goes out as ``web_search_options`` (the guide's
native search pricing section; pydantic-ai's recorded request sends it beside the plugin).
``allowed_domains`` and ``blocked_domains`` are the plugin's ``include_domains`` and
``exclude_domains``, where the guide's *Domain Filtering* table says the engine keeps them: OpenAI's
native search ignores ``exclude_domains`` (so ``blocked_domains`` is refused on ``openai/`` models),
Anthropic's, Perplexity's and xAI's take one of the two at a time (xAI at most five domains), Google's
none (OpenRouter then searches with Exa, which keeps both). ``max_uses`` (the plugin searches once per
request, the model does not choose) and ``user_location`` (no field in the plugin or in OpenRouter's
``web_search_options``) are a ``ConfigurationError`` naming the option and the model, before any
request. Function tools go beside the plugin as usual: the model reads the results and may call them.
The LM's own ``plugins`` (``dspy.LM(..., plugins=[...])``) stay on the request: a ``web`` plugin given
there keeps its ``engine``, ``max_results`` and ``search_prompt`` (and its engine decides which filters
hold), other plugins go as given.

Request: natively the fields join the lm15 ``Request``'s ``config.extensions``, which lm15's Chat
Completions writer sends verbatim at the top level; on LiteLLM they join the call's options, which its
OpenRouter route passes through to the body. Both ask for ``usage: {"include": true}`` (OpenRouter's usage
accounting: the reply's ``usage.cost``, which prices the search; LiteLLM adds it to every OpenRouter request),
so both engines send the same body.

Reply: the message's ``annotations``, ``url_citation`` entries as OpenRouter standardizes them
(``{"type": "url_citation", "url_citation": {url, title, content, start_index, end_index}}``; an Exa
result's span is ``0, 0``: it marks no text). A reply carrying them is recorded as one ``{"type":
"openrouter_served", "content": [message]}`` block, the message's role, content, refusal and
annotations as served. Nothing of it goes back but the text (a Chat Completions assistant message has
no documented field for url citations; OpenRouter's SDK sends back only its file annotations), as on
OpenAI's search models (``hosted_openai_chat``). A streamed reply's annotations come one to a chunk,
each on a delta with empty content, before the text: natively ``_routes.hosted_streams`` assembles the
chunks (``ChatFrames``); LiteLLM's stream builder joins them on its message.

Usage: a reply carrying ``url_citation`` annotations counts one ``web_search_requests`` (or the count
``usage.server_tool_use_details.web_search_requests`` gives). OpenRouter's usage has what it charged,
``cost``, and of it what the model's provider charged, ``cost_details.upstream_inference_cost``; the
rest is the search's fee (the recorded Exa reply: 0.0077641 - 0.0007641 = 0.007, the guide's $0.007 per
Exa request). Natively that fee is added to the call's cost (DSPy prices the tokens only); LiteLLM's
cost is OpenRouter's ``cost`` already, fee included, so there nothing is added. With your own provider
key (``is_byok``) or without those fields the search is counted and not priced.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from dspy_imp._routes import hosted_openai_chat
from dspy_imp._routes.hosted_types import Block, HostedCall, HostedRequest, HostedRoute, HostedUsage

KIND = "openrouter_served"
TOOLS = frozenset({"web_search"})
UNSUPPORTED = {
    "max_uses": "the web plugin runs one search per request (the model does not choose how many)",
    "user_location": "neither the web plugin nor OpenRouter's web_search_options has a location",
}
# The web plugin's Domain Filtering table, by the vendor of the model (its native search): (exclude_domains
# kept, both filters at once, the most domains in one filter or None). Every engine keeps include_domains
# (Google's native search none, and OpenRouter then searches with Exa); any other model searches with Exa,
# which keeps both at once.
_FILTERS: dict[str, tuple[bool, bool, int | None]] = {
    "openai": (False, False, None),  # exclude_domains silently ignored
    "anthropic": (True, False, None),  # mutually exclusive
    "perplexity": (True, False, None),  # mutually exclusive (include_domains wins)
    "x-ai": (True, False, 5),  # mutually exclusive, at most five domains each
}


# The same table, by the engine a web plugin names (its ``engine`` field).
_ENGINE_FILTERS: dict[str, tuple[bool, bool, int | None]] = {
    "exa": (True, True, None),
    "parallel": (True, False, None),
    "perplexity": (True, False, None),
    "firecrawl": (True, False, None),
}


def _given_plugins(lm: Any) -> list[dict[str, Any]]:
    """The plugins the LM itself was given (``dspy.LM(..., plugins=[...])``), each an object."""
    given = (getattr(lm, "kwargs", None) or {}).get("plugins")
    return [dict(p) for p in given if isinstance(p, Mapping)] if isinstance(given, list | tuple) else []


def _given_web(lm: Any) -> dict[str, Any]:
    return next((p for p in _given_plugins(lm) if p.get("id") == "web"), {})


def _name(lm: Any) -> str:
    return str(getattr(lm, "model", lm) or "")


def vendor(model: str) -> str:
    """``openrouter/openai/gpt-4o:online`` -> ``openai``."""
    rest = model.removeprefix("openrouter/")
    return rest.split("/", 1)[0].lower() if "/" in rest else ""


def refusal(tools: Sequence[Any], lm: Any, functions: Sequence[str]) -> str | None:
    """Why this request cannot carry ``tools`` on OpenRouter, or None."""
    model = _name(lm)
    for tool in tools:
        for option, why in UNSUPPORTED.items():
            if getattr(tool, option, None) not in (None, (), [], {}):
                return (
                    f"{tool.label}({option}=...) on model {model!r}: OpenRouter's web search has no {option} ({why}); "
                    f"leave {option} unset for this model"
                )
        allowed, blocked = list(getattr(tool, "allowed_domains", ()) or ()), list(tool.blocked_domains or ())
        engine = _given_web(lm).get("engine")
        if engine in _ENGINE_FILTERS:  # the LM's own web plugin names a search engine (below)
            (exclude, both, most), who = _ENGINE_FILTERS[str(engine)], f"the {engine} engine"
        else:  # OpenRouter's choice, or "native": the model's provider's search where it has one, else Exa
            exclude, both, most = _FILTERS.get(vendor(model), (True, True, None))
            who = f"{vendor(model)}'s native search" if vendor(model) in _FILTERS else "it"
        if blocked and not exclude:
            return (
                f"{tool.label}(blocked_domains=...) on model {model!r}: OpenRouter's web plugin sends it as "
                f"exclude_domains, which {who} ignores (OpenRouter's web search guide, Domain Filtering); "
                "use allowed_domains, or leave blocked_domains unset for this model"
            )
        if allowed and blocked and not both:
            return (
                f"{tool.label}(allowed_domains=..., blocked_domains=...) on model {model!r}: {who} takes "
                "include_domains or exclude_domains, not both (OpenRouter's web search guide, Domain Filtering); "
                "give one of them"
            )
        for option, given in (("allowed_domains", allowed), ("blocked_domains", blocked)):
            if most is not None and len(given) > most:
                return (
                    f"{tool.label}({option}=...) on model {model!r}: {who} takes at most {most} domains in one "
                    f"filter (OpenRouter's web search guide, Domain Filtering); {len(given)} given"
                )
    return None


def plugin(tool: Any) -> dict[str, Any]:
    """The request's ``web`` plugin for ``tool`` (OpenRouter's web search guide)."""
    found: dict[str, Any] = {"id": "web"}
    if tool.allowed_domains:
        found["include_domains"] = list(tool.allowed_domains)
    if tool.blocked_domains:
        found["exclude_domains"] = list(tool.blocked_domains)
    return found


def request(tools: Sequence[Any], lm: Any) -> HostedRequest:
    """The plugin beside the LM's own plugins (``dspy.LM(..., plugins=[...])``, which these replace on the
    request): another plugin kept as given, a ``web`` one's own fields (``engine``, ``max_results``,
    ``search_prompt``) kept under the ``WebSearch``'s domain filters."""
    search = next(t for t in tools if t.kind == "web_search")
    given = _given_plugins(lm)
    web = {**_given_web(lm), **plugin(search)}
    plugins = [web if p.get("id") == "web" else p for p in given] if _given_web(lm) else [*given, web]
    options: dict[str, Any] = {"plugins": plugins}
    if search.search_context_size is not None:
        options["web_search_options"] = {"search_context_size": search.search_context_size}
    options["usage"] = {"include": True}  # the reply's ``usage.cost``, which prices the search (LiteLLM asks too)
    return HostedRequest(options=options)


def _openrouters(response: Any) -> bool:
    """A reply OpenRouter served: its ``gen-`` id (natively the raw body's, on LiteLLM the provider LiteLLM
    routed to)."""
    first = response[0] if isinstance(response, list | tuple) and response else response
    data = getattr(first, "provider_data", None)
    if isinstance(data, Mapping):
        return str(data.get("id") or "").startswith("gen-")
    hidden = getattr(first, "_hidden_params", None)
    return isinstance(hidden, Mapping) and hidden.get("custom_llm_provider") == "openrouter"


def served(response: Any) -> Block | None:
    """The reply's message as served, when OpenRouter served it with ``url_citation`` annotations."""
    if not _openrouters(response):
        return None
    message = hosted_openai_chat.message_of(response)
    if not hosted_openai_chat.cited(message):
        return None
    assert message is not None
    kept = {k: message[k] for k in ("role", "content", "refusal", "annotations") if k in message}
    return {"type": KIND, "content": [kept]}


def citations(block: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Each ``url_citation`` annotation as served, with the text span it marks (``cited_for``); an
    annotation marking no span (an Exa result, ``0, 0``) grounds the whole answer, so that is its text."""
    found = hosted_openai_chat.citations(block)
    texts = [str(m.get("content") or "") for m in block.get("content") or () if isinstance(m, Mapping)]
    return [{**c, "cited_for": c["cited_for"] or (texts[0] if texts else "")} for c in found]


def calls(block: Mapping[str, Any]) -> list[HostedCall]:
    """The search a recorded reply holds: one ``web_search`` whose results are the cited pages (OpenRouter
    names no call and no query: the plugin searches with the conversation), its id made from them."""
    results = [
        {"title": str(span.get("title") or ""), "url": str(span.get("url") or "")}
        for c in hosted_openai_chat.citations(block)
        if isinstance(span := c.get("url_citation"), Mapping)
    ]
    if not results:
        return []
    digest = hashlib.sha256(json.dumps(results, sort_keys=True).encode()).hexdigest()[:24]
    return [HostedCall(f"openrouter_{digest}", "web_search", {}, {"results": results}, None, "openrouter")]


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _usage_data(response: Any) -> dict[str, Any]:
    first = response[0] if isinstance(response, list | tuple) and response else response
    data = getattr(first, "provider_data", None)
    if isinstance(data, Mapping):
        found = data.get("usage")
    else:
        found = getattr(first, "usage", None)
        dump = getattr(found, "model_dump", None)
        found = dump() if callable(dump) else found
    return json.loads(json.dumps(found, default=str)) if isinstance(found, Mapping) else {}


def usage(response: Any) -> HostedUsage | None:
    """A reply OpenRouter served carrying ``url_citation`` annotations: its searches, priced natively at
    what OpenRouter charged beyond the model (see the module)."""
    if not _openrouters(response) or not hosted_openai_chat.cited(hosted_openai_chat.message_of(response)):
        return None
    found = _usage_data(response)
    details = found.get("server_tool_use_details")
    counted = details.get("web_search_requests") if isinstance(details, Mapping) else None
    count = int(counted) if isinstance(counted, int) and not isinstance(counted, bool) and counted > 0 else 1
    first = response[0] if isinstance(response, list | tuple) and response else response
    if not isinstance(getattr(first, "provider_data", None), Mapping):  # LiteLLM's cost is OpenRouter's own
        return HostedUsage({"web_search_requests": count}, 0.0)
    cost, spent = _number(found.get("cost")), found.get("cost_details")
    upstream = _number(spent.get("upstream_inference_cost")) if isinstance(spent, Mapping) else None
    if cost is None or upstream is None or found.get("is_byok") is True:
        return HostedUsage({"web_search_requests": count}, 0.0)
    return HostedUsage({"web_search_requests": count}, round(max(cost - upstream, 0.0), 12))


ROUTE = HostedRoute(
    kind=KIND,
    tools=TOOLS,
    request=request,
    served=served,
    citations=citations,
    usage=usage,
    calls=calls,
    refuse=refusal,
)
NOT_HERE = "on OpenRouter only WebSearch is built (its web plugin, for every model); its other server tools are not"
