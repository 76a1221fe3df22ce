"""Gemini's built-in tools on DSPy's native engine: Google Search, code execution, URL context, file search.

Request: ``WebSearch`` goes out as ``{"googleSearch": {}}``, ``CodeExecution`` as
``{"codeExecution": {}}``, ``WebFetch`` as ``{"urlContext": {}}`` and ``FileSearch`` as
``{"fileSearch": {"fileSearchStoreNames": [...]}}`` (lm15 builtin tools). The
Gemini API's ``googleSearch`` takes none of ``WebSearch``'s options (its domain filter is Vertex
AI's only) and ``urlContext`` no ``max_uses``: an option set is a ``ConfigurationError`` naming
the option, the tool and the model, before any request. Built-in tools beside function
declarations are a Gemini 3 feature (Google's tool-combination guide; earlier models refuse the
request): on Gemini 3 such a request asks for ``toolConfig.includeServerSideToolInvocations`` (the
wrapper of lm15's ``_payload``), on an earlier model it is refused before any request, naming the
function tools (the loop's ``submit`` among them) — there a hosted tool takes a program without
function tools.

Reply: lm15 reads text, thoughts and ``functionCall`` parts and skips ``executableCode``,
``codeExecutionResult``, ``toolCall`` and ``toolResponse``, but keeps the raw body
(``Response.provider_data``). A reply holding such a part, or grounded (``groundingMetadata``,
``urlContextMetadata``), is recorded as one ``{"type": "gemini_served", "content": [...]}`` block:
the candidate's parts as served, in order, every field and ``thoughtSignature`` kept, with the
candidate's grounding and URL metadata and the response's ``usageMetadata`` beside them. A streamed
reply's raw body is the one ``_routes.hosted_streams`` assembles from its chunks (every chunk's parts,
the grounding from whichever chunk carried it), recorded the same way.

Replay: the model turn of such a step goes back as exactly those parts (the wrapper of lm15's
``_message``, reading the replay state ``route.canonical_request`` attaches); the grounding metadata
stays in the record (it is no part of a request's ``Content``). LiteLLM keeps no code execution
parts and writes the model turn back from its own message (the server tool parts after the text
and calls), so that route is refused with a ``ConfigurationError``.

Vertex AI: lm15's ``vertex`` and ``vertex-express`` doors (``vertex:gemini-...``) are the same ``GeminiLM``
at Vertex's URL, so ``VERTEX_ROUTE`` is this translation without ``fileSearch`` (the Gemini API's own).
``vertex_ai/gemini-...`` goes to LiteLLM and is refused as above (``not_on_litellm_vertex``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from dspy_imp._routes import dspy_private, hosted_streams
from dspy_imp._routes.hosted_types import Block, HostedCall, HostedRequest, HostedRoute, HostedUsage
from dspy_imp._routes.reasoning import validates_signatures

KIND = "gemini_served"

# The tool's kind -> lm15's builtin name (``_GEMINI_BUILTIN_MAP`` maps the first two; an unknown
# name goes out as the wire key itself).
BUILTINS = {
    "web_search": "web_search",
    "code_execution": "code_execution",
    "web_fetch": "urlContext",
    "file_search": "fileSearch",
}
WIRE_KEYS = {
    "web_search": "googleSearch",
    "code_execution": "codeExecution",
    "web_fetch": "urlContext",
    "file_search": "fileSearch",
}
# Parts the provider ran (and the model wrote for them), which lm15 does not read.
SERVED_PARTS = ("executableCode", "codeExecutionResult", "toolCall", "toolResponse")
_GROUNDING = ("groundingMetadata", "urlContextMetadata")


def refusal(tools: Sequence[Any], lm: Any, functions: Sequence[str]) -> str | None:
    """Why this request cannot carry ``tools`` on Gemini, or None: an option Gemini has no field for,
    or function tools beside built-in tools on a model before Gemini 3."""
    model = str(getattr(lm, "model", lm))
    for tool in tools:
        if tool.kind == "file_search" and not tool.store_ids:
            return f"FileSearch() on model {model!r}: Gemini's fileSearch searches named stores; give store_ids"
        options = _set_options(tool)
        if options:
            return (
                f"{tool.label}({options[0]}=...) on model {model!r}: Gemini's {WIRE_KEYS[tool.kind]} tool has no "
                f"{options[0]} (the Gemini API takes no option for it); leave {options[0]} unset for Gemini models"
            )
    if functions and not combines_tools(model):
        names = ", ".join(str(t.label) for t in tools)
        return (
            f"model {model!r} refuses built-in tools ({names}) beside function tools ({', '.join(functions)}) in one "
            "request: combining them is a Gemini 3 feature; use a Gemini 3 model, or give this model a program "
            "without function tools (finish='auto', no tools besides the hosted ones)"
        )
    return None


def combines_tools(model: str) -> bool:
    """Gemini 3 and later take built-in tools beside function declarations (Google's tool-combination
    guide); the model name is read as for thought signatures, which the same models validate."""
    return validates_signatures(model)


def _set_options(tool: Any) -> list[str]:
    names = ("max_uses", "allowed_domains", "blocked_domains", "user_location", "search_context_size")
    return [n for n in names if getattr(tool, n, None) not in (None, (), [], {})]


def request(tools: Sequence[Any], lm: Any) -> HostedRequest:
    from dspy.lm15 import BuiltinTool

    return HostedRequest(builtins=tuple(BuiltinTool(name=BUILTINS[t.kind], config=_config(t)) for t in tools))


def _config(tool: Any) -> dict[str, Any]:
    """The tool's body in Gemini's ``tools`` list: empty, but a file search's store names."""
    if tool.kind == "file_search":
        return {"fileSearchStoreNames": [str(s) for s in tool.store_ids]}
    return {}


def _candidate(response: Any) -> tuple[Mapping[str, Any], Mapping[str, Any]] | None:
    """A native Gemini response's raw body and first candidate, or None for any other response."""
    if isinstance(response, list | tuple):
        response = response[0] if response else None
    data = getattr(response, "provider_data", None)
    if not isinstance(data, Mapping) or not isinstance(data.get("candidates"), list) or not data["candidates"]:
        return None
    candidate = data["candidates"][0]
    return (data, candidate) if isinstance(candidate, Mapping) else None


def _parts(candidate: Mapping[str, Any]) -> list[Any]:
    content = candidate.get("content")
    parts = content.get("parts") if isinstance(content, Mapping) else None
    return list(parts) if isinstance(parts, list) else []


def _served_part(part: Any) -> bool:
    return isinstance(part, Mapping) and any(key in part for key in SERVED_PARTS)


def served(response: Any) -> Block | None:
    """The candidate's parts as served, when it holds a part the provider ran or is grounded (else None)."""
    found = _candidate(response)
    if found is None:
        return None
    data, candidate = found
    parts = _parts(candidate)
    grounded = {k: candidate[k] for k in _GROUNDING if isinstance(candidate.get(k), Mapping)}
    if not grounded and not any(_served_part(p) for p in parts):
        return None
    if not hosted_streams.assembled(data) and not _whole(response, parts):  # assembled: every chunk's parts
        return None  # not the body lm15 read: lm15's own replay stays

    block: Block = {"type": KIND, "content": json.loads(json.dumps(parts))}
    block.update(json.loads(json.dumps(grounded)))
    if isinstance(data.get("usageMetadata"), Mapping):
        block["usageMetadata"] = json.loads(json.dumps(data["usageMetadata"]))
    return block


def _whole(response: Any, parts: Sequence[Any]) -> bool:
    """Whether the raw parts are the whole reply lm15 read: the same function calls and text. A streamed
    reply keeps only its last chunk as ``provider_data``; written back as the turn, that would drop the
    rest of it."""
    if isinstance(response, list | tuple):
        response = response[0] if response else None
    read = getattr(getattr(response, "message", None), "parts", None)
    if read is None:
        return True
    raw = [p for p in parts if isinstance(p, Mapping)]
    calls = sum(1 for p in read if getattr(p, "type", None) == "tool_call")
    text = "".join(str(getattr(p, "text", "")) for p in read if getattr(p, "type", None) == "text")
    raw_text = "".join(str(p.get("text") or "") for p in raw if "text" in p and not p.get("thought"))
    return calls == sum(1 for p in raw if "functionCall" in p) and text == raw_text


def citations(block: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Each grounding support, once per source it names: the source's ``url`` and ``title`` (its
    ``groundingChunks`` entry), the answer's text it supports (``cited_for``), and both as served."""
    grounding = block.get("groundingMetadata")
    if not isinstance(grounding, Mapping):
        return []
    chunks = _list(grounding.get("groundingChunks"))
    found: list[dict[str, Any]] = []
    for support in grounding.get("groundingSupports") or ():
        if not isinstance(support, Mapping):
            continue
        segment = _mapping(support.get("segment"))
        for index in support.get("groundingChunkIndices") or ():
            if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < len(chunks):
                continue
            chunk = _mapping(chunks[index])
            source = next((_mapping(v) for v in chunk.values() if isinstance(v, Mapping)), _mapping(None))
            citation = {
                "type": "grounding_support",
                "url": source.get("uri"),
                "title": source.get("title"),
                "cited_for": segment.get("text", ""),
                "segment": dict(segment),
                "chunk": dict(chunk),
            }
            if isinstance(source.get("text"), str):  # a file search's retrieved text: the source's own words
                citation["cited_text"] = source["text"]
            found.append(citation)
    return found


def _mapping(value: Any) -> Mapping[str, Any]:
    """``value`` when it is a mapping, else an empty one (a served body is untrusted input)."""
    return value if isinstance(value, Mapping) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def usage(response: Any) -> HostedUsage | None:
    """A grounded response counts one web search (``groundingMetadata.webSearchQueries``, or a
    ``GOOGLE_SEARCH_WEB`` tool call) and a URL-context one a web fetch; ``toolUsePromptTokenCount`` (the
    tool results the model read, billed as input) joins the call's input tokens. Not priced (see
    ``docs/hosted-tools.md``): Google's grounding prices apply after a free allowance per project."""
    found = _candidate(response)
    if found is None:
        return None
    data, candidate = found
    meta = _mapping(data.get("usageMetadata"))
    tool_tokens = meta.get("toolUsePromptTokenCount")
    tool_tokens = tool_tokens if isinstance(tool_tokens, int) and not isinstance(tool_tokens, bool) else 0
    calls = [p.get("toolCall") for p in _parts(candidate) if isinstance(p, Mapping)]
    types = {c.get("toolType") for c in calls if isinstance(c, Mapping)}
    grounding = _mapping(candidate.get("groundingMetadata"))
    searched = any(q for q in grounding.get("webSearchQueries") or () if isinstance(q, str)) or (
        "GOOGLE_SEARCH_WEB" in types
    )
    fetched = isinstance(candidate.get("urlContextMetadata"), Mapping) or "URL_CONTEXT" in types
    if not (searched or fetched or tool_tokens):
        return None
    counts = {"web_search_requests": int(searched), "web_fetch_requests": int(fetched)}
    return HostedUsage(counts, 0.0, tool_tokens)


def as_text(block: Mapping[str, Any]) -> str:
    """What the provider ran and returned, for a request to another provider (the text parts are the
    step's own content already)."""
    lines: list[str] = []
    for part in block.get("content") or ():
        if not isinstance(part, Mapping):
            continue
        if isinstance(part.get("executableCode"), Mapping):
            lines.append(f"[code_execution ran by the provider: {part['executableCode'].get('code', '')}]")
        elif isinstance(part.get("codeExecutionResult"), Mapping):
            result = part["codeExecutionResult"]
            lines.append(f"[code_execution_result {result.get('outcome')}: {str(result.get('output', ''))[:2000]}]")
        elif isinstance(part.get("toolCall"), Mapping):
            call = part["toolCall"]
            lines.append(f"[{call.get('toolType')} ran by the provider: {json.dumps(call.get('args'))}]")
    grounding = block.get("groundingMetadata")
    if isinstance(grounding, Mapping):
        queries = [q for q in grounding.get("webSearchQueries") or () if isinstance(q, str) and q]
        if queries:
            lines.append(f"[web_search ran by the provider: {json.dumps(queries, ensure_ascii=False)}]")
        sources = [
            f"{s.get('title')} <{s.get('uri')}>"
            for c in grounding.get("groundingChunks") or ()
            if isinstance(c, Mapping)
            for s in c.values()
            if isinstance(s, Mapping) and s.get("uri")
        ]
        if sources:
            lines.append(f"[web_search_results: {'; '.join(sources)}]")
    return "\n".join(lines)


# A ``toolCall``'s ``toolType`` -> the call's name (Gemini's tool-combination guide).
TOOL_TYPES = {"GOOGLE_SEARCH_WEB": "web_search", "URL_CONTEXT": "web_fetch", "FILE_SEARCH": "file_search"}


def calls(block: Mapping[str, Any]) -> list[HostedCall]:
    """The calls the provider ran for a recorded reply, in order: each ``executableCode`` part with
    the ``codeExecutionResult`` answering it (``code_execution``), each ``toolCall`` (``web_search``,
    ``web_fetch``, ``file_search`` by its ``toolType``) with its sources; and, for a reply grounded
    without a ``toolCall`` (Gemini 2.5, a ``googleSearch`` or ``urlContext`` alone), one call read
    from the grounding: the ``webSearchQueries``, the retrieved URLs, the File Search stores. Gemini
    gives such a call no id (nor code before Gemini 3): one is made from the call's content, the same
    on every read."""
    parts = [p for p in block.get("content") or () if isinstance(p, Mapping)]
    grounding = _mapping(block.get("groundingMetadata"))
    sources = _sources(grounding)
    found: list[HostedCall] = []
    results = [
        _mapping(p.get("codeExecutionResult")) for p in parts if isinstance(p.get("codeExecutionResult"), Mapping)
    ]
    by_id = {r.get("id"): r for r in results if r.get("id")}
    unanswered = [r for r in results if not r.get("id")]
    types: set[str] = set()
    for part in parts:
        code = part.get("executableCode")
        call = part.get("toolCall")
        if isinstance(code, Mapping):
            answer = by_id.get(code.get("id")) if code.get("id") else (unanswered.pop(0) if unanswered else None)
            answer = answer or {}
            outcome = answer.get("outcome")
            result = {"output": str(answer.get("output") or ""), "outcome": outcome} if answer else {}
            error = str(outcome) if outcome and outcome != "OUTCOME_OK" else None
            call_input = {"code": code.get("code"), "language": code.get("language")}
            found.append(
                HostedCall(
                    _id(code.get("id"), "code", call_input), "code_execution", call_input, result, error, "gemini"
                )
            )
        elif isinstance(call, Mapping):
            kind = str(call.get("toolType") or "")
            types.add(kind)
            name = TOOL_TYPES.get(kind, kind.lower() or "tool")
            args = dict(call["args"]) if isinstance(call.get("args"), Mapping) else {}
            picked = sources["file"] if name == "file_search" else sources["web"]
            found.append(HostedCall(_id(call.get("id"), name, args), name, args, {"results": picked}, None, "gemini"))
    queries = [q for q in grounding.get("webSearchQueries") or () if isinstance(q, str) and q]
    if queries and "GOOGLE_SEARCH_WEB" not in types:
        call_input = {"queries": queries}
        found.append(_grounded("web_search", call_input, {"results": sources["web"]}))
    urls = [_mapping(u) for u in _list(_mapping(block.get("urlContextMetadata")).get("urlMetadata"))]
    if urls and "URL_CONTEXT" not in types:
        statuses = [{"url": u.get("retrievedUrl"), "status": u.get("urlRetrievalStatus")} for u in urls]
        failed = [s["status"] for s in statuses if s["status"] and s["status"] != "URL_RETRIEVAL_STATUS_SUCCESS"]
        call_input = {"urls": [s["url"] for s in statuses]}
        found.append(_grounded("web_fetch", call_input, {"results": statuses}, str(failed[0]) if failed else None))
    if sources["file"] and "FILE_SEARCH" not in types:
        stores = list(dict.fromkeys(str(s.get("store")) for s in sources["file"] if s.get("store")))
        found.append(_grounded("file_search", {"stores": stores}, {"results": sources["file"]}))
    return found


def _grounded(name: str, call_input: dict[str, Any], result: dict[str, Any], error: str | None = None) -> HostedCall:
    return HostedCall(_id(None, name, [call_input, result]), name, call_input, result, error, "gemini")


def _id(served_id: Any, name: str, content: Any) -> str:
    """The served id, or one made from the call's name and content (stable: the same record, the same id)."""
    if isinstance(served_id, str) and served_id:
        return served_id
    digest = hashlib.sha256(json.dumps([name, content], sort_keys=True, default=str).encode()).hexdigest()
    return f"gemini_{name}_{digest[:12]}"


def _sources(grounding: Mapping[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """The grounding's sources: the web's (title and URL) and the File Search stores' (store, title, text)."""
    web: list[dict[str, Any]] = []
    files: list[dict[str, Any]] = []
    for chunk in _list(grounding.get("groundingChunks")):
        chunk = _mapping(chunk)
        if isinstance(chunk.get("web"), Mapping):
            web.append({"title": chunk["web"].get("title"), "url": chunk["web"].get("uri")})
        elif isinstance(chunk.get("retrievedContext"), Mapping):
            found = chunk["retrievedContext"]
            text = str(found.get("text") or "")
            files.append({"title": found.get("title"), "store": found.get("fileSearchStore"), "text": text[:500]})
    return {"web": web, "file": files}


def install() -> None:
    """Wrap lm15's Gemini model-turn writer and body writer once per process (idempotent)."""
    provider = dspy_private.lm15_gemini().GeminiLM

    def wrap_message(original: Any) -> Any:
        def message(self: Any, msg: Any, names: Any = None) -> dict[str, Any]:
            parts = served_parts(msg)
            return original(self, msg, names) if parts is None else {"role": "model", "parts": parts}

        return message

    def wrap_payload(original: Any) -> Any:
        def payload(self: Any, request: Any) -> dict[str, Any]:
            return with_tool_circulation(original(self, request), request)

        return payload

    dspy_private.wrap_once(provider, "_message", wrap_message)
    dspy_private.wrap_once(provider, "_payload", wrap_payload)
    hosted_streams.install()  # a streamed reply's body, assembled from its chunks


def served_parts(msg: Any) -> list[dict[str, Any]] | None:
    """The parts a model turn was served with (its replay state), or None.

    Each part goes back as served; a ``functionCall`` served without an ``id`` (Gemini 2.5) carries the
    id the loop answers it by (lm15's ``tool_call_<n>``, made unique by the loop), in order.
    """
    if getattr(msg, "role", None) != "assistant":
        return None
    state = next(
        (s for s in getattr(msg, "continuation", ()) or () if s.provider == "gemini" and s.kind == "served_content"),
        None,
    )
    if state is None:
        return None
    parts = [dict(p) for p in (state.data or {}).get("content") or () if isinstance(p, Mapping)]
    ids = iter([p.id for p in msg.parts if getattr(p, "type", None) == "tool_call" and getattr(p, "id", None)])
    for index, part in enumerate(parts):
        call = part.get("functionCall")
        if isinstance(call, Mapping):
            known = next(ids, None)
            if not call.get("id") and known:
                parts[index] = {**part, "functionCall": {**call, "id": known}}
    return parts


def with_tool_circulation(payload: dict[str, Any], request: Any) -> dict[str, Any]:
    """``toolConfig.includeServerSideToolInvocations`` on a Gemini 3 request declaring built-in tools beside
    functions: the tool-combination guide's flag, without which such a request is refused."""
    tools = payload.get("tools") or []
    builtins = any(isinstance(t, Mapping) and set(t) & set(WIRE_KEYS.values()) for t in tools)
    functions = any(isinstance(t, Mapping) and t.get("functionDeclarations") for t in tools)
    if builtins and functions and combines_tools(str(getattr(request, "model", ""))):
        payload["toolConfig"] = {**(payload.get("toolConfig") or {}), "includeServerSideToolInvocations": True}
    return payload


ROUTE = HostedRoute(
    kind=KIND,
    tools=frozenset(BUILTINS),
    request=request,
    served=served,
    citations=citations,
    usage=usage,
    as_text=as_text,
    refuse=refusal,
    calls=calls,
)
NOT_OFFERED = (
    "Gemini's generateContent has no remote MCP tool (Google's SDKs connect to MCP servers on the client side); "
    "connect the server with dspy_imp.mcp instead"
)
# Gemini on Vertex AI, natively (lm15's ``vertex`` and ``vertex-express`` doors, ``vertex:gemini-...``): the
# same generateContent, the same parts and grounding, but no ``fileSearch`` (File Search stores are the
# Gemini API's; google-genai's ``toolToVertex`` refuses it: "fileSearch parameter is not supported in Vertex
# AI"; Vertex grounds on your own data through Vertex AI Search, ``retrieval``, not built here).
VERTEX_ROUTE = dataclasses.replace(ROUTE, tools=frozenset(BUILTINS) - {"file_search"})
NOT_ON_VERTEX = {
    "file_search": (
        "fileSearch (File Search stores) is the Gemini API's own: Vertex AI's generateContent has no fileSearch "
        "tool (Vertex grounds on your data through Vertex AI Search, which dspy_imp.hosted does not build); use a "
        "gemini/... model for FileSearch"
    ),
    "remote_mcp": NOT_OFFERED,
}


def not_on_litellm_vertex(model: str) -> str:
    """Why ``vertex_ai/gemini-...`` (LiteLLM's spelling, which DSPy's default engine sends to LiteLLM) is refused."""
    name = model.split("/", 1)[-1]
    return (
        f"DSPy sends {model!r} to LiteLLM (lm15 has no door for the vertex_ai/ prefix), and LiteLLM's Vertex AI "
        "Gemini route is its Gemini API code: it keeps no executableCode or codeExecutionResult part, and writes a "
        "model turn back from its own message, its toolCall and toolResponse parts after the text and function "
        f"calls rather than in the order served; write the model as 'vertex:{name}' for DSPy's default engine"
    )


NOT_ON_LITELLM = (
    "LiteLLM keeps no executableCode or codeExecutionResult part, and writes a model turn back from its own "
    "message, its toolCall and toolResponse parts appended after the text and function calls rather than in the "
    "order served; use DSPy's default engine (engine='auto' or 'native')"
)
