"""OpenAI Responses' hosted tools on DSPy's native engine: web search, code interpreter, file search, remote MCP.

Request: each tool as an lm15 builtin whose config carries the Responses ``type`` itself
(``web_search``, ``code_interpreter`` with ``container: {"type": "auto"}``, ``file_search`` with
``vector_store_ids``, ``mcp`` with ``server_label``/``server_url``); lm15's own table would write
the older ``web_search_preview``, and its builtin writer lets the config's keys win.

Reply: lm15 skips ``web_search_call``/``code_interpreter_call``/``file_search_call`` items and
records ``mcp_*`` items as unmapped, but keeps the raw body (``Response.provider_data``). A reply
holding such an item is recorded as one ``{"type": "openai_served", "content": [...]}`` block: the
response's whole ``output`` list as served (reasoning items with their encrypted content, the
hosted call items with their ids and actions, message items with their ``url_citation``
annotations, function calls), in order.

Replay: the Responses API takes a response's output items back as input items; the wrapper of
lm15's ``_build_input`` writes an assistant message recorded that way as exactly that list, so the
next request of the turn, and of a later turn after ``dump_history``/``load_history``, carries the
items byte for byte (no ``previous_response_id``: the loop keeps no server-side state).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from dspy_imp._routes import dspy_private
from dspy_imp._routes.hosted_types import Block, HostedRequest, HostedRoute, HostedUsage

KIND = "openai_served"
STATE = "served_content"  # the continuation-state kind ``route.served_state`` attaches (shared with Anthropic)

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
TOOLS = frozenset({"web_search", "code_execution", "file_search", "remote_mcp"})


def tool_config(tool: Any) -> dict[str, Any]:
    """The tool's entry in the Responses ``tools`` list (OpenAI's API reference, Tools)."""
    if tool.kind == "web_search":
        config: dict[str, Any] = {"type": "web_search"}
        if getattr(tool, "allowed_domains", ()):
            config["filters"] = {"allowed_domains": list(tool.allowed_domains)}
        if getattr(tool, "user_location", None):
            config["user_location"] = {"type": "approximate", **dict(tool.user_location)}
        return config
    if tool.kind == "code_execution":
        return {"type": "code_interpreter", "container": {"type": "auto"}}
    if tool.kind == "file_search":
        return {"type": "file_search", "vector_store_ids": list(getattr(tool, "store_ids", ()) or ())}
    if tool.kind == "remote_mcp":
        url = str(tool.url)
        label = url.split("//", 1)[-1].split("/", 1)[0].replace(".", "_").replace(":", "_")
        config = {"type": "mcp", "server_label": label, "server_url": url, "require_approval": "never"}
        if getattr(tool, "allowed_tools", None):
            config["allowed_tools"] = list(tool.allowed_tools)
        if getattr(tool, "headers", None):
            config["headers"] = dict(tool.headers)
        return config
    raise ValueError(f"no OpenAI Responses tool for {tool.kind!r}")


def request(tools: Sequence[Any], lm: Any) -> HostedRequest:
    from dspy.lm15 import BuiltinTool

    return HostedRequest(builtins=tuple(BuiltinTool(name=t.kind, config=tool_config(t)) for t in tools))


def _body(response: Any) -> Mapping[str, Any] | None:
    if isinstance(response, list | tuple):
        response = response[0] if response else None
    data = getattr(response, "provider_data", None)
    if not isinstance(data, Mapping) or not isinstance(data.get("output"), list):
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
    """Each output text's ``url_citation`` annotations as served, with the text they cover (``cited_for``)."""
    found: list[dict[str, Any]] = []
    for item in block.get("content") or ():
        if not isinstance(item, Mapping) or item.get("type") != "message":
            continue
        for part in item.get("content") or ():
            text = str(part.get("text") or "") if isinstance(part, Mapping) else ""
            for a in (part.get("annotations") or ()) if isinstance(part, Mapping) else ():
                if isinstance(a, Mapping) and a.get("type") in ("url_citation", "file_citation"):
                    start, end = a.get("start_index"), a.get("end_index")
                    cited = text[start:end] if isinstance(start, int) and isinstance(end, int) else text
                    found.append({**a, "cited_for": cited})
    return found


# OpenAI's pricing page (tools): web search $10 per 1,000 calls, file search $2.50 per 1,000 calls, beside
# tokens; code interpreter containers are billed per session and remote MCP costs tokens only (not priced here).
PRICES = {"web_search_call": 10.0 / 1000, "file_search_call": 2.5 / 1000}


def usage(response: Any) -> HostedUsage | None:
    """The hosted call items of a Responses body, counted by type and priced (None: not a Responses body)."""
    data = _body(response)
    if data is None:
        return None
    counts: dict[str, int] = {}
    for item in data["output"]:
        if _hosted(item) and item["type"] != "mcp_list_tools":
            counts[item["type"]] = counts.get(item["type"], 0) + 1
    return HostedUsage(counts, sum(PRICES.get(k, 0.0) * v for k, v in counts.items()))


def as_text(block: Mapping[str, Any]) -> str:
    """What the provider ran and returned, for a request to another provider."""
    lines: list[str] = []
    for item in block.get("content") or ():
        kind = item.get("type") if isinstance(item, Mapping) else None
        if kind == "web_search_call":
            action = item.get("action") or {}
            lines.append(f"[web_search ran by the provider: {json.dumps(action, ensure_ascii=False)}]")
        elif kind == "code_interpreter_call":
            outputs = "; ".join(str(o.get("logs") or o.get("url") or "") for o in item.get("outputs") or ())
            lines.append(f"[code_interpreter ran by the provider: {item.get('code')}]\n[output: {outputs[:2000]}]")
        elif kind == "file_search_call":
            lines.append(f"[file_search ran by the provider: {json.dumps(item.get('queries'), ensure_ascii=False)}]")
        elif kind == "mcp_call":
            lines.append(
                f"[{item.get('server_label')}.{item.get('name')} ran by the provider: {item.get('arguments')}]\n"
                f"[output: {str(item.get('output') or item.get('error') or '')[:2000]}]"
            )
    cited = [f"{c.get('title')} <{c.get('url')}>" for c in citations(block) if c.get("url")]
    if cited:
        lines.append("[sources: " + "; ".join(dict.fromkeys(cited)) + "]")
    return "\n".join(lines)


def _served_items(msg: Any) -> list[dict[str, Any]] | None:
    if getattr(msg, "role", None) != "assistant":
        return None
    for state in getattr(msg, "continuation", ()) or ():
        if state.kind == STATE:
            items = [dict(b) for b in (state.data or {}).get("content") or ()]
            if any(_hosted(i) for i in items):
                return items
    return None


def install() -> None:
    """Wrap lm15's Responses input writer once per process (idempotent)."""
    provider = dspy_private.lm15_openai_responses().OpenAILM

    def wrap_build_input(original: Any) -> Any:
        def build_input(self: Any, messages: Any, compat: Any, *, breakpoint_index: int | None = None) -> Any:
            if not any(_served_items(m) is not None for m in messages):
                return original(self, messages, compat, breakpoint_index=breakpoint_index)
            items: list[dict[str, Any]] = []
            for index, msg in enumerate(messages):
                replay = _served_items(msg)
                if replay is not None:
                    items.extend(replay)
                else:
                    mark = 0 if index == breakpoint_index else None
                    items.extend(original(self, (msg,), compat, breakpoint_index=mark))
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
)
