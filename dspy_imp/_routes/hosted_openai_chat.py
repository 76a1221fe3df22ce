"""OpenAI's search models on Chat Completions: ``WebSearch`` as ``web_search_options``, both engines.

OpenAI's models that search through Chat Completions (``gpt-4o-search-preview``,
``gpt-4o-mini-search-preview``, ``gpt-5-search-api``, and their dated snapshots) take no tool
for it: the request carries a top-level ``web_search_options`` object (``user_location``:
``{"type": "approximate", "approximate": {country, city, region, timezone}}``, and
``search_context_size``), and the model
searches before it answers (OpenAI's web search guide, Chat Completions), reading as much as
``search_context_size`` says. An option it has no
field for (``max_uses``, ``allowed_domains``, ``blocked_domains``) is a ``ConfigurationError``
naming it, before any request, rather than a search without the bound. Other models on Chat
Completions have no hosted tool: the error names the Responses API (``hosted_openai.NOT_ON_CHAT``).

These models take no function tools (their model pages: function calling not supported), and the
loop's own ``submit`` is one: a hosted tool on them takes a program without function tools
(``finish="auto"``, one text output, no other ``tools``), which answers in text. Anything else is
refused before any request (the precedent is Gemini 2.5's built-in tools, ``hosted_gemini``).

Request: natively the options join the lm15 ``Request``'s ``config.extensions``, which lm15's
Chat Completions writer sends verbatim at the top level (``route.canonical_request``); on LiteLLM
they join the call's options, which LiteLLM passes through for OpenAI models (``_drivers.adapter``).

Reply: the message's ``annotations`` (``url_citation``: ``{"type": "url_citation", "url_citation":
{start_index, end_index, title, url}}``) are kept in the raw body (lm15's ``provider_data``,
LiteLLM's ``Message.annotations``). A reply carrying them is recorded as one ``{"type":
"openai_chat_served", "content": [message]}`` block: the choice's message as served. Nothing goes
back: a Chat Completions assistant message has no field for annotations, and its text already
holds the cited links, so later requests send the text only (``as_text`` is empty). A streamed
reply's annotations come on a delta of their own: natively ``_routes.hosted_streams`` assembles the
chunks into that ``chat.completion`` body (``ChatFrames``); LiteLLM's stream builder keeps them on its
message but drops a null ``refusal``, which the record keeps as null, as OpenAI's message always has it.

Usage: Chat Completions reports no count of searches; a reply carrying ``url_citation``
annotations counts one ``web_search_call``, priced at OpenAI's web search preview rates (its
pricing page, built-in tools: $25 per 1,000 calls on the non-reasoning models, search content
tokens free; $10 per 1,000 on the reasoning ones, ``gpt-5-search-api``). Natively the fee is added
to the call's cost; LiteLLM's cost already holds it (its price map's ``search_context_cost_per_query``
for these models, the same rates), so there nothing is added and both engines count the same.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from dspy_imp._routes.hosted_types import Block, HostedRequest, HostedRoute, HostedUsage

KIND = "openai_chat_served"
TOOLS = frozenset({"web_search"})
LOCATION_KEYS = ("country", "city", "region", "timezone")  # ``web_search_options.user_location.approximate``
UNSUPPORTED = ("max_uses", "allowed_domains", "blocked_domains")  # WebSearch options without a field there


def _name(lm: Any) -> str:
    return str(getattr(lm, "model", lm) or "")


def searches(model: str) -> bool:
    """A model that searches through Chat Completions (OpenAI's models list: the ``-search-preview``
    models and ``gpt-5-search-api``, and their dated snapshots)."""
    name = model.rsplit("/", 1)[-1].lower()
    return "-search-preview" in name or "-search-api" in name


def refusal(tools: Sequence[Any], lm: Any, functions: Sequence[str]) -> str | None:
    """Why this request cannot carry ``tools`` on Chat Completions, or None."""
    model = _name(lm)
    if not searches(model):
        names = ", ".join(str(t.label) for t in tools)
        return f"model {model!r} has no hosted {names} on Chat Completions: {NOT_ON_CHAT}"
    for tool in tools:
        for option in UNSUPPORTED:
            if getattr(tool, option, None) not in (None, (), [], {}):
                return (
                    f"{tool.label}({option}=...) on model {model!r}: Chat Completions' web_search_options has no "
                    f"{option} (only search_context_size and user_location); leave {option} unset for this model"
                )
        location = getattr(tool, "user_location", None) or {}
        extra = sorted(k for k in location if k not in (*LOCATION_KEYS, "type"))
        if extra or location.get("type", "approximate") != "approximate":
            what = f"key {extra[0]!r}" if extra else f"type {location.get('type')!r}"
            return (
                f"{tool.label}(user_location=...) on model {model!r}: web_search_options.user_location is an "
                f"approximate location ({', '.join(LOCATION_KEYS)}); it has no {what}"
            )
    if functions:
        return (
            f"model {model!r} takes no function tools ({', '.join(functions)}): OpenAI's search models on Chat "
            "Completions search the web and answer, without function calling; give this model a program without "
            "function tools (finish='auto', one text output, no tools besides WebSearch), or use a model that runs "
            "web search on the Responses API (model_type='responses')"
        )
    return None


def web_search_options(tool: Any) -> dict[str, Any]:
    """The request's ``web_search_options`` for ``tool`` (OpenAI's API reference, Chat Completions)."""
    options: dict[str, Any] = {}
    if getattr(tool, "search_context_size", None) is not None:
        options["search_context_size"] = tool.search_context_size
    location = {k: v for k, v in dict(getattr(tool, "user_location", None) or {}).items() if k in LOCATION_KEYS}
    if location:
        options["user_location"] = {"type": "approximate", "approximate": location}
    return options


def request(tools: Sequence[Any], lm: Any) -> HostedRequest:
    search = next(t for t in tools if t.kind == "web_search")
    return HostedRequest(options={"web_search_options": web_search_options(search)})


def message_of(response: Any) -> dict[str, Any] | None:
    """The reply's message as served: lm15's raw Chat Completions body, or LiteLLM's ``ModelResponse``."""
    if isinstance(response, list | tuple):
        response = response[0] if response else None
    data = getattr(response, "provider_data", None)
    if isinstance(data, Mapping):
        choices = data.get("choices") if data.get("object") == "chat.completion" else None
        message = choices[0].get("message") if isinstance(choices, list) and choices else None
        return json.loads(json.dumps(message)) if isinstance(message, Mapping) else None
    choices = getattr(response, "choices", None)
    message = getattr(choices[0], "message", None) if isinstance(choices, list) and choices else None
    dump = getattr(message, "model_dump", None)
    found = dump() if callable(dump) else None
    return json.loads(json.dumps(found, default=str)) if isinstance(found, Mapping) else None


def cited(message: Mapping[str, Any] | None) -> bool:
    notes = message.get("annotations") if isinstance(message, Mapping) else None
    return isinstance(notes, list) and any(isinstance(n, Mapping) and n.get("type") == "url_citation" for n in notes)


def _unannotated(response: Any) -> bool:
    """Whether lm15's raw reply has a message without annotations (so none cites), read without a copy: nearly
    every reply, for which ``_message`` copied the whole message through JSON three times (``served`` once,
    ``usage`` twice)."""
    if isinstance(response, list | tuple):
        response = response[0] if response else None
    data = getattr(response, "provider_data", None)
    if not isinstance(data, Mapping) or data.get("object") != "chat.completion":
        return False
    choices = data.get("choices")
    message = choices[0].get("message") if isinstance(choices, list) and choices else None
    return isinstance(message, Mapping) and not message.get("annotations")


def served(response: Any) -> Block | None:
    """The reply's message as served, when it carries ``url_citation`` annotations (else None)."""
    if _unannotated(response):
        return None
    message = message_of(response)
    if not cited(message):
        return None
    assert message is not None
    # OpenAI's message always carries ``refusal`` (null when none); LiteLLM's assembly of a stream drops a null one
    kept = {k: message.get(k) for k in ("role", "content", "refusal", "annotations") if k in message or k == "refusal"}
    return {"type": KIND, "content": [kept]}


def citations(block: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Each ``url_citation`` annotation as served, with the text span it marks (``cited_for``)."""
    found: list[dict[str, Any]] = []
    for message in block.get("content") or ():
        if not isinstance(message, Mapping):
            continue
        text = str(message.get("content") or "")
        for note in message.get("annotations") or ():
            if not isinstance(note, Mapping) or note.get("type") != "url_citation":
                continue
            raw = note.get("url_citation")
            span: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
            start, end = span.get("start_index"), span.get("end_index")
            spanned = isinstance(start, int) and isinstance(end, int)
            found.append({**note, "cited_for": text[start:end] if spanned else text})
    return found


# OpenAI's pricing page, built-in tools, web search preview: per call, by the model's kind.
PRICE = 25.0 / 1000  # non-reasoning models (gpt-4o-search-preview, gpt-4o-mini-search-preview)
PRICE_REASONING = 10.0 / 1000  # reasoning models (gpt-5-search-api)


def usage(response: Any) -> HostedUsage | None:
    """A reply carrying ``url_citation`` annotations counts one search, priced natively (see the module)."""
    if _unannotated(response):
        return None
    message = message_of(response)
    if not cited(message):
        return None
    first = response[0] if isinstance(response, list | tuple) and response else response
    data = getattr(first, "provider_data", None)
    if not isinstance(data, Mapping):  # LiteLLM's: its cost already holds the search's fee
        return HostedUsage({"web_search_call": 1}, 0.0)
    model = str(data.get("model") or getattr(first, "model", "") or "").lower()
    return HostedUsage({"web_search_call": 1}, PRICE_REASONING if "gpt-5" in model else PRICE)


ROUTE = HostedRoute(
    kind=KIND,
    tools=TOOLS,
    request=request,
    served=served,
    citations=citations,
    usage=usage,
    refuse=refusal,
    functions=False,
)
NOT_ON_CHAT = (
    "on Chat Completions only OpenAI's search models (gpt-4o-search-preview, gpt-4o-mini-search-preview, "
    "gpt-5-search-api) search the web, and no model runs the other hosted tools; OpenAI's run on the Responses "
    "API, on DSPy's default engine: dspy.LM('openai/<model>', model_type='responses')"
)
