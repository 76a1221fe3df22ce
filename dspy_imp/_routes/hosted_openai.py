"""OpenAI Responses' hosted tools on DSPy's native engine: web search, code interpreter, file search, remote MCP.

Request: each tool as an lm15 builtin whose config carries the Responses ``type`` itself
(``web_search``, ``code_interpreter`` with ``container: {"type": "auto"}``, ``file_search`` with
``vector_store_ids``, ``mcp`` with ``server_label``/``server_url``): lm15's own table writes the
older ``web_search_preview``, and its builtin writer lets the config's keys win. An option the
Responses tool has no field for (``WebSearch(max_uses=...)``, ``blocked_domains``) is a
``ConfigurationError`` naming it, before any request, rather than a search without the bound.

The request asks for the code interpreter's outputs, the file search's results and the sources each
web search read (``include``).

Container: once the history holds a ``code_interpreter_call``, the code interpreter names the
container it ran in (``container: "cntr_..."``, ``with_container``, read from the replayed served
items), so a step's files and variables are there at the next step and a later turn;
``CodeExecution(reuse_container=False)`` keeps ``{"type": "auto"}``. A request OpenAI refuses because
that container expired goes once more with a new one (``fresh_container``, the route's ``renewed``).

Reply: lm15 skips ``web_search_call``/``code_interpreter_call``/``file_search_call`` items and
records ``mcp_*`` items as unmapped, but keeps the raw body (``Response.provider_data``). A reply
holding such an item is recorded as one ``{"type": "openai_served", "content": [...]}`` block: the
response's whole ``output`` list as served (reasoning items with their encrypted content, the
hosted call items with their ids, actions and results, message items with their ``url_citation``
annotations, function calls), in order. A streamed reply's ``response.completed`` frame carries the
whole response, which lm15 keeps as ``provider_data``: it is recorded the same way.

Replay: the Responses API takes a response's output items back as input items. The wrapper of
lm15's ``_build_input`` writes an assistant message carrying that record (the replay state
``route.canonical_request`` attaches) as exactly that list, so the next request of the turn, and of
a later turn after ``dump_history``/``load_history``, carries the items byte for byte (no
``previous_response_id``: the loop keeps no server-side state). It stacks on
``_routes.responses_bridge``'s wrapper of the same method (``dspy_private.wrap_once``), which keeps
serving every other message.

On LiteLLM, DSPy reads a Responses reply as text, function calls, reasoning and citations only
(``dspy.clients.legacy_outputs.responses_outputs``): the hosted call items are dropped and cannot go
back, so that route is refused until it can carry them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from dspy_imp._routes import dspy_private
from dspy_imp._routes.failures import RefusedOption
from dspy_imp._routes.hosted_types import Block, HostedCall, HostedRequest, HostedRoute, HostedUsage

KIND = "openai_served"
STATE = "served_content"  # the continuation-state kind ``route.served_state`` attaches (shared with Anthropic)

# Output items the provider ran (OpenAI's API reference, the response object's ``output``).
HOSTED_ITEMS = frozenset(
    {
        "web_search_call",
        "code_interpreter_call",
        "file_search_call",
        "mcp_list_tools",
        "mcp_call",
        "mcp_approval_request",
    }
)
COUNTED_ITEMS = frozenset({"web_search_call", "code_interpreter_call", "file_search_call", "mcp_call"})
TOOLS = frozenset({"web_search", "code_execution", "file_search", "remote_mcp"})
CITATIONS = frozenset({"url_citation", "file_citation", "container_file_citation"})
# The ``include`` values that make the reply carry what the tool returned (without them the code interpreter's
# ``outputs`` and file search's ``results`` come back null), so the record, and the text another provider
# reads, hold them. OpenAI's API reference, Responses ``include``.
RESULTS = {
    "code_execution": "code_interpreter_call.outputs",
    "file_search": "file_search_call.results",
    "web_search": "web_search_call.action.sources",  # every source the search read, beside the cited ones
}
AUTO_CONTAINER: dict[str, Any] = {"type": "auto"}
# What OpenAI answers a request naming a container that has expired (20 minutes without use): a 400
# ``invalid_request_error`` whose message reads "Container is expired."
EXPIRED = "container is expired"


def tool_config(tool: Any) -> dict[str, Any]:
    """The tool's entry in the Responses ``tools`` list (OpenAI's API reference, Tools)."""
    if tool.kind == "web_search":
        return _web_search(tool)
    if tool.kind == "code_execution":
        return {"type": "code_interpreter", "container": dict(AUTO_CONTAINER)}
    if tool.kind == "file_search":
        if not tool.store_ids:
            raise RefusedOption("FileSearch(store_ids=...) is empty: OpenAI's file search needs a vector store id")
        return {"type": "file_search", "vector_store_ids": list(tool.store_ids)}
    if tool.kind == "remote_mcp":
        return _mcp(tool)
    raise RefusedOption(f"OpenAI's Responses API has no hosted {tool.label}")


def _web_search(tool: Any) -> dict[str, Any]:
    for option in ("max_uses", "blocked_domains"):
        if getattr(tool, option):
            raise RefusedOption(
                f"WebSearch({option}=...): OpenAI's web_search tool has no {option} (only allowed_domains, "
                "user_location and search_context_size); leave it out for an OpenAI model"
            )
    config: dict[str, Any] = {"type": "web_search"}
    if tool.allowed_domains:
        config["filters"] = {"allowed_domains": list(tool.allowed_domains)}
    if tool.user_location:
        config["user_location"] = {"type": "approximate", **dict(tool.user_location)}
    if tool.search_context_size is not None:
        config["search_context_size"] = tool.search_context_size
    return config


def _mcp(tool: Any) -> dict[str, Any]:
    url = str(tool.url)
    host = url.split("//", 1)[-1].split("/", 1)[0]
    if not host:
        raise RefusedOption("RemoteMCP(url=...) is empty: OpenAI's mcp tool needs the server's URL")
    # server_label names the server in the reply's items; the host is stable and readable
    config: dict[str, Any] = {
        "type": "mcp",
        "server_label": re.sub(r"[^A-Za-z0-9_-]", "_", host),
        "server_url": url,
        "require_approval": "never",  # the provider runs it within the request: no approval can apply
    }
    if tool.allowed_tools is not None:
        config["allowed_tools"] = list(tool.allowed_tools)
    if tool.headers:
        config["headers"] = dict(tool.headers)
    return config


def request(tools: Sequence[Any], lm: Any) -> HostedRequest:
    from dspy.lm15 import BuiltinTool

    try:
        configs = [(t.kind, tool_config(t)) for t in tools]
    except RefusedOption as refused:  # before the request is sent: the turn raises it as a ConfigurationError
        import dspy

        model = getattr(lm if lm is not None else dspy.settings.lm, "model", None)  # None: the configured LM
        raise RefusedOption(f"model {model!r}: {refused}") from None
    include = tuple(RESULTS[kind] for kind, _ in configs if kind in RESULTS)
    reuse = any(t.kind == "code_execution" and t.reuse_container for t in tools)
    return HostedRequest(
        builtins=tuple(BuiltinTool(name=k, config=c) for k, c in configs),
        include=include,
        continued=with_container if reuse else None,
    )


def last_container(messages: Sequence[Any]) -> str | None:
    """The ``container_id`` of the last ``code_interpreter_call`` the history's served items hold (None: none)."""
    for msg in reversed(messages):
        for item in reversed(served_items(msg) or ()):
            container = item.get("container_id") if item.get("type") == "code_interpreter_call" else None
            if isinstance(container, str) and container:
                return container
    return None


def _interpreter(tool: Any) -> bool:
    return getattr(tool, "type", None) == "builtin" and (tool.config or {}).get("type") == "code_interpreter"


def _contained(request: Any, container: Any) -> Any:
    from dataclasses import replace

    tools = tuple(
        replace(t, config={**t.config, "container": container}) if _interpreter(t) else t for t in request.tools
    )
    return replace(request, tools=tools)


def with_container(request: Any) -> Any:
    """The request with its code interpreter naming the container the history's last call ran in
    (OpenAI's code interpreter guide: a container is reused by passing its id as ``container``), so
    the files and variables of earlier steps are there; unchanged when no call ran yet."""
    container = last_container(request.messages)
    return request if container is None else _contained(request, container)


def fresh_container(request: Any, error: BaseException) -> Any:
    """The request again with a new container (``{"type": "auto"}``), when ``error`` is OpenAI refusing the
    container it names as expired; else None (the error stands)."""
    if EXPIRED not in str(error).lower():
        return None
    named = [t for t in getattr(request, "tools", ()) if _interpreter(t) and isinstance(t.config.get("container"), str)]
    return _contained(request, dict(AUTO_CONTAINER)) if named else None


def _body(response: Any) -> Mapping[str, Any] | None:
    """The raw Responses body lm15 keeps (None: not one)."""
    if isinstance(response, list | tuple):
        response = response[0] if response else None
    data = getattr(response, "provider_data", None)
    if not isinstance(data, Mapping) or data.get("object") != "response" or not isinstance(data.get("output"), list):
        return None
    return data


def _hosted(item: Any) -> bool:
    return isinstance(item, Mapping) and item.get("type") in HOSTED_ITEMS


def served(response: Any) -> Block | None:
    """The response's whole output list, when it holds an item the provider ran (else None)."""
    data = _body(response)
    if data is None or not any(_hosted(i) for i in data["output"]):
        return None
    return {"type": KIND, "content": json.loads(json.dumps(data["output"]))}


def citations(block: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Each output text's citation annotations as served, with the text they support (``cited_for``:
    the span a ``url_citation`` marks, else the whole text)."""
    found: list[dict[str, Any]] = []
    for item in block.get("content") or ():
        if not isinstance(item, Mapping) or item.get("type") != "message":
            continue
        for part in item.get("content") or ():
            if not isinstance(part, Mapping):
                continue
            text = str(part.get("text") or "")
            for note in part.get("annotations") or ():
                if isinstance(note, Mapping) and note.get("type") in CITATIONS:
                    start, end = note.get("start_index"), note.get("end_index")
                    spanned = isinstance(start, int) and isinstance(end, int)
                    found.append({**note, "cited_for": text[start:end] if spanned else text})
    return found


# OpenAI's pricing page (built-in tools): web search $10 per 1,000 calls (the ``web_search`` tool; its
# search content tokens are billed as tokens), file search $2.50 per 1,000 calls. Code interpreter is
# billed per container, not per call, and remote MCP costs tokens only: neither is priced here.
PRICES = {"web_search_call": 10.0 / 1000, "file_search_call": 2.5 / 1000}


def usage(response: Any) -> HostedUsage | None:
    """The hosted call items of a Responses body, counted by item type and priced (None: no such body).

    The Responses usage block has no count of them (Anthropic's ``server_tool_use``): each item is one
    call the provider ran. Listing an MCP server's tools (``mcp_list_tools``) is no call.
    """
    data = _body(response)
    if data is None:
        return None
    counts: dict[str, int] = {}
    for item in data["output"]:
        kind = item.get("type") if isinstance(item, Mapping) else None
        if kind in COUNTED_ITEMS:
            counts[kind] = counts.get(kind, 0) + 1
    return HostedUsage(counts, sum(PRICES.get(k, 0.0) * v for k, v in counts.items()))


def as_text(block: Mapping[str, Any]) -> str:
    """What the provider ran and returned, for a request to another provider."""
    lines: list[str] = []
    for item in block.get("content") or ():
        kind = item.get("type") if isinstance(item, Mapping) else None
        if kind == "web_search_call":
            lines.append(f"[web_search ran by the provider: {json.dumps(item.get('action'), ensure_ascii=False)}]")
        elif kind == "code_interpreter_call":
            outputs = "; ".join(
                str(o.get("logs") or o.get("url") or "") for o in item.get("outputs") or () if isinstance(o, Mapping)
            )
            lines.append(f"[code_interpreter ran by the provider: {item.get('code')}]")
            if outputs:
                lines.append(f"[code_interpreter output: {outputs[:2000]}]")
        elif kind == "file_search_call":
            lines.append(f"[file_search ran by the provider: {json.dumps(item.get('queries'), ensure_ascii=False)}]")
        elif kind == "mcp_call":
            lines.append(
                f"[{item.get('server_label')}.{item.get('name')} ran by the provider: {item.get('arguments')}]"
            )
            lines.append(f"[mcp output: {str(item.get('output') or item.get('error') or '')[:2000]}]")
    cited = [f"{c.get('title')} <{c.get('url')}>" for c in citations(block) if c.get("url")]
    if cited:
        lines.append("[sources: " + "; ".join(dict.fromkeys(cited)) + "]")
    return "\n".join(lines)


def calls(block: Mapping[str, Any]) -> list[HostedCall]:
    """Each hosted call item of a recorded output list, in order (listing an MCP server's tools is
    none): ``web_search_call`` as ``web_search`` (its action as served: a ``search`` and its
    ``query``, an ``open_page`` and its ``url``), ``code_interpreter_call`` as ``code_execution``,
    ``file_search_call`` as ``file_search``, ``mcp_call`` as ``mcp_call``; a ``failed`` status is
    the error."""
    found: list[HostedCall] = []
    result: dict[str, Any]
    for item in block.get("content") or ():
        if not isinstance(item, Mapping) or item.get("type") not in COUNTED_ITEMS:
            continue
        call_id = str(item.get("id") or "")
        failed = "failed" if item.get("status") == "failed" else None
        kind = item["type"]
        if kind == "web_search_call":
            action = dict(item["action"]) if isinstance(item.get("action"), Mapping) else {}
            sources = action.pop("sources", None)
            result = {"results": [_source(s) for s in sources if isinstance(s, Mapping)]} if sources else {}
            found.append(HostedCall(call_id, "web_search", action, result, failed, "openai"))
        elif kind == "code_interpreter_call":
            outputs = [o for o in item.get("outputs") or () if isinstance(o, Mapping)]
            result = {"output": "".join(str(o.get("logs") or "") for o in outputs if o.get("type") == "logs")}
            images = [o.get("url") for o in outputs if o.get("type") == "image"]
            if images:
                result["images"] = images
            found.append(HostedCall(call_id, "code_execution", {"code": item.get("code")}, result, failed, "openai"))
        elif kind == "file_search_call":
            hits = [
                {"title": r.get("filename"), "file_id": r.get("file_id"), "score": r.get("score")}
                for r in item.get("results") or ()
                if isinstance(r, Mapping)
            ]
            queries = list(item.get("queries") or ())
            found.append(HostedCall(call_id, "file_search", {"queries": queries}, {"results": hits}, failed, "openai"))
        else:  # mcp_call
            arguments = _arguments(item.get("arguments"))
            call_input = {"server": item.get("server_label"), "tool": item.get("name"), "arguments": arguments}
            error = item.get("error")
            result = {"output": item.get("output")} if item.get("output") is not None else {}
            found.append(HostedCall(call_id, "mcp_call", call_input, result, str(error) if error else failed, "openai"))
    return found


def _arguments(arguments: Any) -> Any:
    """An MCP call's arguments as JSON values, or as served when they are not JSON."""
    if not isinstance(arguments, str):
        return arguments
    try:
        return json.loads(arguments)
    except ValueError:
        return arguments


def _source(source: Mapping[str, Any]) -> dict[str, Any]:
    return {"title": source.get("title"), "url": source.get("url")}


def served_items(msg: Any) -> list[dict[str, Any]] | None:
    """The output items an assistant message was served with, when it carries them (else None).

    Read by the state's provider and kind (``route.served_state`` labels it from the record's
    kind); a served list holding no Responses hosted item is not ours.
    """
    if getattr(msg, "role", None) != "assistant":
        return None
    for state in getattr(msg, "continuation", ()) or ():
        if state.provider == "openai" and state.kind == STATE:
            items = [dict(b) for b in (state.data or {}).get("content") or () if isinstance(b, Mapping)]
            if any(_hosted(i) for i in items):
                return items
    return None


def install() -> None:
    """Wrap lm15's Responses input writer once per process (idempotent)."""
    provider = dspy_private.lm15_openai_responses().OpenAILM

    def wrap_build_input(original: Any) -> Any:
        def build_input(self: Any, messages: Any, compat: Any, *, breakpoint_index: int | None = None) -> Any:
            if not any(served_items(m) is not None for m in messages):
                return original(self, messages, compat, breakpoint_index=breakpoint_index)
            items: list[dict[str, Any]] = []
            for index, msg in enumerate(messages):
                replay = served_items(msg)
                mark = 0 if index == breakpoint_index else None
                if replay is None or mark is not None:  # lm15 refuses a breakpoint on an assistant message
                    items.extend(original(self, (msg,), compat, breakpoint_index=mark))
                else:
                    items.extend(replay)
            return items

        return build_input

    dspy_private.wrap_once(provider, "_build_input", wrap_build_input)


ROUTE = HostedRoute(
    kind=KIND,
    tools=TOOLS,
    request=request,
    served=served,
    citations=citations,
    usage=usage,
    as_text=as_text,
    calls=calls,
    renewed=fresh_container,
)
NOT_ON_LITELLM = (
    "on LiteLLM DSPy reads a Responses reply as text, function calls and reasoning only, so the hosted call items "
    "(web_search_call, code_interpreter_call, file_search_call, mcp_call) are dropped and cannot be sent back; "
    "use DSPy's default engine (engine='auto' or 'native')"
)
NOT_HERE = (
    "OpenAI's Responses API runs web search, code interpreter, file search and remote MCP, and has no tool that "
    "fetches a URL (WebFetch)"
)
