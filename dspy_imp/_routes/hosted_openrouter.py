"""OpenRouter's web search: ``WebSearch`` on ``openrouter/...`` models, both engines.

By default ``WebSearch`` is OpenRouter's ``openrouter:web_search`` server tool (its server tools guide,
Web Search; beta): an entry ``{"type": "openrouter:web_search", "parameters": {...}}`` in the request's
``tools``, beside the function tools, that the model calls zero or more times; OpenRouter runs each search
and loops server-side until the model answers or calls a function tool. The engine is OpenRouter's
``auto``: the model's provider's own search for the models that have one (Anthropic, Google, OpenAI,
Perplexity, xAI), Exa's for the others. The options map onto the guide's parameters: ``max_uses``,
``search_context_size``, ``user_location`` (``{"type": "approximate", ...}``), ``allowed_domains`` and
``blocked_domains`` (``excluded_domains``), each where the guide says the engine keeps it, and a
``ConfigurationError`` naming the option and the model before any request where it says the engine drops
it: with native search ``max_uses`` reaches only Anthropic's, ``search_context_size`` none, and
``excluded_domains`` not OpenAI's; ``user_location`` reaches only native search (not Exa; nor Google's,
whose Gemini API has no location); Anthropic's, Perplexity's and xAI's take one domain filter at a time,
xAI's at most five domains (the web plugin guide's Domain Filtering); Google's none, so with a filter
OpenRouter searches with Exa, which keeps both. The engine is read from the model's vendor slug.

OpenRouter's ``web`` plugin (``plugins: [{"id": "web"}]``, one search on every request before the model
answers; the guide calls it deprecated) is sent only as the user's own choice: an LM given a web plugin
(``dspy.LM(..., plugins=[{"id": "web", ...}])``) or an ``:online`` model (the suffix is the plugin).
Then ``WebSearch`` goes as that plugin, as before: its domain filters as ``include_domains`` and
``exclude_domains`` (kept where the plugin guide's Domain Filtering table says the engine keeps them; the
plugin's ``engine`` decides), ``search_context_size`` as ``web_search_options``, the LM's other plugins as
given, and ``max_uses`` and ``user_location`` refused (the plugin searches once per request and has no
location).

Request: natively the server tool is an lm15 ``BuiltinTool`` named ``openrouter:web_search``, written by
``install``'s patch of lm15's Chat Completions tool writer (which refuses every builtin tool on Chat
Completions) as the guide's entry; on LiteLLM the entry joins the call's ``tools``, which its OpenRouter
route sends as given. The plugin's fields join the lm15 ``Request``'s ``config.extensions`` (sent
verbatim at the top level), or LiteLLM's options. Both ask for ``usage: {"include": true}``
(OpenRouter's usage accounting; LiteLLM adds it to every OpenRouter request), so both engines send the
same body.

Reply: the final message, the model's answer or its function calls; the searches themselves are not in
it (no call item: OpenRouter ran them). An Exa search's results come as the message's ``annotations``,
``url_citation`` entries (``{"type": "url_citation", "url_citation": {url, title, content, start_index,
end_index}}``, spans ``0, 0``: they mark no text); a native search's reply carries none (pydantic-ai's
recordings of both). A reply carrying them is recorded as one ``{"type": "openrouter_served", "content":
[message]}`` block, the message's role, content, refusal and annotations as served. Nothing of it goes
back but the text and the calls (a Chat Completions assistant message has no documented field for url
citations). A streamed reply's annotations come one to a chunk, each on a delta with empty content,
before the text: natively ``_routes.hosted_streams`` assembles the chunks (``ChatFrames``); LiteLLM's
stream builder joins them on its message; the usage comes on the last chunk.

Usage: ``usage.server_tool_use_details.web_search_requests`` counts the searches (OpenRouter's API
reference, ``ChatUsage``, and every recording; the guide's example spells it ``server_tool_use``, which
is read too), so a native search without annotations is counted; a reply with annotations and no count
(the plugin's) counts one. OpenRouter's usage says what it charged, ``cost``, and what the model's
provider charged for the tokens, ``cost_details.upstream_inference_prompt_cost`` and
``upstream_inference_completions_cost``; the rest is the searches' fee: OpenRouter's own for Exa (the
recorded Exa replies: 0.007, the guide's $0.007 per Exa request) and the provider's passed through for a
native search (the recorded OpenAI reply: 0.01, OpenAI's $10 per 1,000 calls). Natively that fee is
added to the call's cost (DSPy prices the tokens only); LiteLLM's cost is OpenRouter's ``cost`` already,
fee included, so there nothing is added. With your own provider key (``is_byok``) or without those
fields the searches are counted and not priced.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dspy_imp._routes import dspy_private, hosted_openai_chat
from dspy_imp._routes.hosted_types import Block, HostedCall, HostedRequest, HostedRoute, HostedUsage

KIND = "openrouter_served"
TOOLS = frozenset({"web_search"})
SERVER_TOOL = "openrouter:web_search"
# The web plugin's limits (its guide): one search per request, no location.
PLUGIN_UNSUPPORTED = {
    "max_uses": "the web plugin runs one search per request (the model does not choose how many)",
    "user_location": "neither the web plugin nor OpenRouter's web_search_options has a location",
}
# The server tool's ``user_location`` fields (OpenRouter's API reference, ``WebSearchUserLocationServerTool``).
LOCATION_KEYS = frozenset({"type", "city", "region", "country", "timezone"})


@dataclass(frozen=True)
class _Engine:
    """What one search engine keeps of the options (OpenRouter's web search guides): ``exclude``: excluded
    domains; ``both``: both domain filters at once; ``most``: domains in one filter; ``max_uses``,
    ``context`` (``search_context_size``) and ``location`` (``user_location``): the server tool's options."""

    who: str
    exclude: bool = True
    both: bool = True
    most: int | None = None
    max_uses: bool = True
    context: bool = True
    location: bool = False


_EXA = _Engine("Exa (OpenRouter's search for a model without its own)")
# Native search, by the model's vendor slug (the server tool guide's Native Search Providers, Domain Filtering,
# and its parameter table: with native search max_uses reaches only Anthropic, search_context_size none;
# user_location only native search). Google's takes no domain filter: with one OpenRouter searches with Exa.
# Google's location: the Gemini API's search has none (docs/hosted-tools.md, Gemini). xAI's five domains: the
# web plugin guide's Domain Filtering (the same native search).
_NATIVE: dict[str, _Engine] = {
    "openai": _Engine(
        "openai's native search", exclude=False, both=False, max_uses=False, context=False, location=True
    ),
    "anthropic": _Engine("anthropic's native search", both=False, context=False, location=True),
    "google": _Engine("google's native search", max_uses=False, context=False),
    "x-ai": _Engine("x-ai's native search", both=False, most=5, max_uses=False, context=False, location=True),
    "perplexity": _Engine("perplexity's native search", both=False, max_uses=False, context=False, location=True),
}
# The web plugin's Domain Filtering table, by the vendor of the model (its native search): Google's is none
# (OpenRouter then searches with Exa, which keeps both).
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


def plugin_chosen(lm: Any) -> bool:
    """Whether the user chose OpenRouter's web plugin: the LM was given one, or names an ``:online`` model."""
    return bool(_given_web(lm)) or _name(lm).endswith(":online")


def refusal(tools: Sequence[Any], lm: Any, functions: Sequence[str]) -> str | None:
    """Why this request cannot carry ``tools`` on OpenRouter, or None."""
    return (_plugin_refusal if plugin_chosen(lm) else _server_refusal)(tools, lm)


def _engine(model: str, filtered: bool) -> _Engine:
    """The engine OpenRouter's ``auto`` searches with for ``model``: its provider's, else Exa; Exa for a
    Google model given a domain filter (the guide: "With engine: auto, falls back to Exa when filters are set")."""
    found = _NATIVE.get(vendor(model), _EXA)
    return _EXA if found is _NATIVE["google"] and filtered else found


def _server_refusal(tools: Sequence[Any], lm: Any) -> str | None:
    model = _name(lm)
    for tool in tools:
        allowed, blocked = list(tool.allowed_domains or ()), list(tool.blocked_domains or ())
        engine = _engine(model, bool(allowed or blocked))
        where = f"{tool.label}({{}}=...) on model {model!r}: OpenRouter's web search server tool"
        guide = "(OpenRouter's web search server tool guide)"
        dropped = [
            (option, why)
            for option, kept, why in (
                ("max_uses", engine.max_uses, "with native search it reaches only Anthropic's"),
                ("search_context_size", engine.context, "native search ignores it"),
                ("user_location", engine.location, "only native search takes it, and not Google's"),
            )
            if getattr(tool, option, None) not in (None, (), [], {}) and not kept
        ]
        for option, why in dropped:
            return (
                f"{where.format(option)} searches with {engine.who}, which ignores {option} ({why}) {guide}; "
                f"leave {option} unset for this model"
            )
        location = dict(tool.user_location or {})
        if set(location) - LOCATION_KEYS or location.get("type", "approximate") != "approximate":
            return (
                f"{where.format('user_location')} takes an approximate location: type 'approximate' and "
                f"{', '.join(sorted(LOCATION_KEYS - {'type'}))} (OpenRouter's API reference); {location!r} given"
            )
        filters = _filter_refusal(tool, model, allowed, blocked, (engine.exclude, engine.both, engine.most), engine.who)
        if filters:
            return filters
    return None


def _plugin_refusal(tools: Sequence[Any], lm: Any) -> str | None:
    model = _name(lm)
    for tool in tools:
        for option, why in PLUGIN_UNSUPPORTED.items():
            if getattr(tool, option, None) not in (None, (), [], {}):
                return (
                    f"{tool.label}({option}=...) on model {model!r}: OpenRouter's web plugin (the LM's own choice) "
                    f"has no {option} ({why}); leave {option} unset, or drop the LM's web plugin (and the :online "
                    "suffix) for OpenRouter's web search server tool"
                )
        allowed, blocked = list(getattr(tool, "allowed_domains", ()) or ()), list(tool.blocked_domains or ())
        engine = _given_web(lm).get("engine")
        if engine in _ENGINE_FILTERS:  # the LM's own web plugin names a search engine (below)
            table, who = _ENGINE_FILTERS[str(engine)], f"the {engine} engine"
        else:  # OpenRouter's choice, or "native": the model's provider's search where it has one, else Exa
            table = _FILTERS.get(vendor(model), (True, True, None))
            who = f"{vendor(model)}'s native search" if vendor(model) in _FILTERS else "it"
        filters = _filter_refusal(tool, model, allowed, blocked, table, who, plugin=True)
        if filters:
            return filters
    return None


def _filter_refusal(
    tool: Any,
    model: str,
    allowed: list[str],
    blocked: list[str],
    table: tuple[bool, bool, int | None],
    who: str,
    plugin: bool = False,
) -> str | None:
    """A domain filter ``who`` drops (``table``: excluded domains kept, both filters at once, the most domains
    in one filter), or None."""
    exclude, both, most = table
    names = ("include_domains", "exclude_domains") if plugin else ("allowed_domains", "excluded_domains")
    guide = "OpenRouter's web search guide, Domain Filtering" if plugin else "OpenRouter's web search server tool guide"
    sent = "OpenRouter's web plugin" if plugin else "OpenRouter's web search server tool"
    if blocked and not exclude:
        return (
            f"{tool.label}(blocked_domains=...) on model {model!r}: {sent} sends it as {names[1]}, which {who} "
            f"ignores ({guide}); use allowed_domains, or leave blocked_domains unset for this model"
        )
    if allowed and blocked and not both:
        return (
            f"{tool.label}(allowed_domains=..., blocked_domains=...) on model {model!r}: {who} takes {names[0]} or "
            f"{names[1]}, not both ({guide}); give one of them"
        )
    for option, given in (("allowed_domains", allowed), ("blocked_domains", blocked)):
        if most is not None and len(given) > most:
            searched = "" if plugin else f"{sent} searches with {who}, which "
            return (
                f"{tool.label}({option}=...) on model {model!r}: {searched or who + ' '}takes at most {most} domains "
                f"in one filter (OpenRouter's web search guide, Domain Filtering); {len(given)} given"
            )
    return None


def parameters(tool: Any) -> dict[str, Any]:
    """The server tool's ``parameters`` for ``tool`` (OpenRouter's web search server tool guide), only the
    options given: OpenRouter's defaults hold for the rest."""
    found: dict[str, Any] = {}
    if tool.max_uses is not None:
        found["max_uses"] = tool.max_uses
    if tool.search_context_size is not None:
        found["search_context_size"] = tool.search_context_size
    if tool.user_location:
        found["user_location"] = {"type": "approximate", **dict(tool.user_location)}
    if tool.allowed_domains:
        found["allowed_domains"] = list(tool.allowed_domains)
    if tool.blocked_domains:
        found["excluded_domains"] = list(tool.blocked_domains)
    return found


def server_tool(tool: Any) -> dict[str, Any]:
    """The request's ``tools`` entry for ``tool``: ``{"type": "openrouter:web_search"}``, with its
    ``parameters`` when an option is given."""
    given = parameters(tool)
    return {"type": SERVER_TOOL, **({"parameters": given} if given else {})}


def plugin(tool: Any) -> dict[str, Any]:
    """The request's ``web`` plugin for ``tool`` (OpenRouter's web search guide)."""
    found: dict[str, Any] = {"id": "web"}
    if tool.allowed_domains:
        found["include_domains"] = list(tool.allowed_domains)
    if tool.blocked_domains:
        found["exclude_domains"] = list(tool.blocked_domains)
    return found


def request(tools: Sequence[Any], lm: Any) -> HostedRequest:
    """The server tool (natively a ``BuiltinTool``, on LiteLLM a ``tools`` entry), or the LM's own web plugin
    (below); with ``usage: {"include": true}`` for the reply's ``usage.cost``, which prices the searches
    (LiteLLM asks for it too)."""
    search = next(t for t in tools if t.kind == "web_search")
    if plugin_chosen(lm):
        return plugin_request(search, lm)
    from dspy.lm15 import BuiltinTool

    entry = server_tool(search)
    return HostedRequest(
        builtins=(BuiltinTool(name=SERVER_TOOL, config=entry.get("parameters")),),
        tools=(entry,),
        options={"usage": {"include": True}},
    )


def plugin_request(search: Any, lm: Any) -> HostedRequest:
    """The plugin beside the LM's own plugins (``dspy.LM(..., plugins=[...])``, which these replace on the
    request): another plugin kept as given, a ``web`` one's own fields (``engine``, ``max_results``,
    ``search_prompt``) kept under the ``WebSearch``'s domain filters; an ``:online`` model's plugin named."""
    given = _given_plugins(lm)
    web = {**_given_web(lm), **plugin(search)}
    plugins = [web if p.get("id") == "web" else p for p in given] if _given_web(lm) else [*given, web]
    options: dict[str, Any] = {"plugins": plugins}
    if search.search_context_size is not None:
        options["web_search_options"] = {"search_context_size": search.search_context_size}
    options["usage"] = {"include": True}
    return HostedRequest(options=options)


def install() -> None:
    """Patch lm15's Chat Completions tool writer once per process (idempotent): natively an OpenRouter request's
    ``openrouter:web_search`` builtin goes out as the server tool's ``tools`` entry; lm15 refuses every
    builtin tool on Chat Completions (its writer's "unproven servers may silently ignore unknown tool types"),
    and every other builtin, and every other server, still is."""

    def wrap(original: Any) -> Any:
        def payload(self: Any, tool: Any, compat: Any) -> dict[str, Any]:
            if getattr(self, "provider", None) == "openrouter" and getattr(tool, "name", None) == SERVER_TOOL:
                config = getattr(tool, "config", None)
                return {"type": SERVER_TOOL, **({"parameters": dict(config)} if config else {})}
            result: dict[str, Any] = original(self, tool, compat)
            return result

        return payload

    dspy_private.wrap_once(dspy_private.lm15_openai_chat().OpenAIChatLM, "_builtin_tool_payload", wrap)


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
    """The search a recorded reply holds: one ``web_search`` whose results are the cited pages (OpenRouter's
    reply names no call and no query: the server tool's searches ran inside the request, the plugin's with the
    conversation), its id made from them."""
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


def _usage_data(response: Any) -> Mapping[str, Any]:
    """The reply's usage as served (natively the raw body's, read in place; LiteLLM's ``Usage`` dumped)."""
    first = response[0] if isinstance(response, list | tuple) and response else response
    data = getattr(first, "provider_data", None)
    if isinstance(data, Mapping):
        found = data.get("usage")
    else:
        found = getattr(first, "usage", None)
        dump = getattr(found, "model_dump", None)
        found = json.loads(json.dumps(dump(), default=str)) if callable(dump) else found
    return found if isinstance(found, Mapping) else {}


def searches(found: Mapping[str, Any]) -> int:
    """The searches a reply's usage counts: ``server_tool_use_details.web_search_requests`` (OpenRouter's API
    reference, ``ChatUsage``; every recording), or ``server_tool_use.web_search_requests`` (its guide's
    example), else 0."""
    for key in ("server_tool_use_details", "server_tool_use"):
        details = found.get(key)
        counted = details.get("web_search_requests") if isinstance(details, Mapping) else None
        if isinstance(counted, int) and not isinstance(counted, bool) and counted > 0:
            return counted
    return 0


def fee(found: Mapping[str, Any]) -> float:
    """What OpenRouter charged beyond the model's tokens: ``cost`` less the provider's prompt and completion
    costs (its ``cost_details``; without them, less ``upstream_inference_cost``); 0 with your own key
    (``is_byok``: ``cost`` is then OpenRouter's fee alone) or without those fields."""
    cost, spent = _number(found.get("cost")), found.get("cost_details")
    spent = spent if isinstance(spent, Mapping) else {}
    prompt, completions = (
        _number(spent.get(k)) for k in ("upstream_inference_prompt_cost", "upstream_inference_completions_cost")
    )
    tokens = (
        prompt + completions
        if prompt is not None and completions is not None
        else _number(spent.get("upstream_inference_cost"))
    )
    if cost is None or tokens is None or found.get("is_byok") is True:
        return 0.0
    return round(max(cost - tokens, 0.0), 12)


def usage(response: Any) -> HostedUsage | None:
    """A reply OpenRouter served that searched: the searches its usage counts (one for a reply carrying
    ``url_citation`` annotations without a count: the web plugin's), priced natively at what OpenRouter
    charged beyond the model's tokens (see the module); None for a reply that did not search."""
    if not _openrouters(response):
        return None
    found = _usage_data(response)
    count = searches(found)
    if not count:
        if not hosted_openai_chat.cited(hosted_openai_chat.message_of(response)):
            return None
        count = 1
    first = response[0] if isinstance(response, list | tuple) and response else response
    if not isinstance(getattr(first, "provider_data", None), Mapping):  # LiteLLM's cost is OpenRouter's own
        return HostedUsage({"web_search_requests": count}, 0.0)
    return HostedUsage({"web_search_requests": count}, fee(found), charged=charged(found))


def charged(found: Mapping[str, Any]) -> float | None:
    """What OpenRouter charged for the call, ``cost`` (tokens and searches), or None: with your own key
    (``is_byok``: ``cost`` is OpenRouter's fee alone) or without it."""
    cost = _number(found.get("cost"))
    return None if cost is None or found.get("is_byok") is True else cost


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
NOT_HERE = (
    "on OpenRouter only WebSearch is built (its openrouter:web_search server tool, or the LM's own web plugin); "
    "its other server tools are not"
)
