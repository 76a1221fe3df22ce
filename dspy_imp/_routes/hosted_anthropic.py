"""Anthropic Messages' server tools on DSPy's native engine: web search, code execution, web fetch.

Request: each tool as lm15 builds a builtin tool (``{"type": <versioned type>, "name": ...}`` and
its options), with the beta headers the versions need (lm15's own ``_headers`` knows only the
2025-05-22 code execution beta; the wrapper below writes the ones these types take).

Reply: lm15 reads the text and ``tool_use`` blocks and skips ``server_tool_use`` and the
``*_tool_result`` blocks, but keeps the raw body (``Response.provider_data``). A reply holding a
server block is recorded as one ``{"type": "anthropic_served", "content": [...]}`` block: the
reply's whole ``content`` list as served (thinking, ``server_tool_use``, ``web_search_tool_result``
with its ``encrypted_content``, text blocks with their ``citations``, ``tool_use``), in order. A
streamed reply's raw body is the one ``_routes.hosted_streams`` assembles from its frames, recorded
the same way.

Container: the record keeps the reply's ``container`` (``id``, ``expires_at``) beside the content; the
next request names the last one as its top-level ``container`` until it expires (``with_container``),
unless ``CodeExecution(reuse_container=False)``.

Paused: a reply that ends with ``stop_reason: "pause_turn"`` is recorded the same way, server block
or not, and goes back at once (``_turn.paused``); the continuation's content joins it in one record
(``joined``), in order.

Replay: the assistant message of such a step goes back as exactly that list (the wrapper of lm15's
``_message``, reading the replay state ``route.canonical_request`` attaches), so the next request
of the turn, and of a later turn after ``dump_history``/``load_history``, carries the blocks byte
for byte. On LiteLLM the served blocks come back split across ``provider_specific_fields`` without
their order and the text blocks' citations are not sent back, so that route is refused with a
``ConfigurationError`` until a verbatim path exists there.

Vertex AI: lm15's ``vertex-anthropic`` door (``vertex-anthropic:claude-...``) is the same ``AnthropicLM``,
the model moved into the URL and ``anthropic_version`` into the body by lm15's host rewrite; Vertex offers
web search only (``VERTEX_ROUTE``). ``vertex_ai/claude-...`` goes to LiteLLM and is refused as above.
Bedrock offers none of these tools (``NOT_ON_BEDROCK``).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from dspy_imp._records import clock
from dspy_imp._routes import dspy_private, hosted_streams
from dspy_imp._routes.hosted_types import Block, HostedCall, HostedRequest, HostedRoute, HostedUsage

KIND = "anthropic_served"
STATE = "served_content"  # the lm15 continuation-state kind on a replayed assistant message

# Current versions (Anthropic's server tools docs): the type on the wire and the beta it needs.
VERSIONS: dict[str, tuple[str, str | None]] = {
    "web_search": ("web_search_20250305", None),
    "code_execution": ("code_execution_20250825", "code-execution-2025-08-25"),
    "web_fetch": ("web_fetch_20250910", "web-fetch-2025-09-10"),
}
_OLD_CODE_BETA = "code-execution-2025-05-22"  # what lm15 adds for any builtin named code_execution


def tool_config(tool: Any) -> dict[str, Any]:
    """The tool's entry in Anthropic's ``tools`` list (without ``name``, which lm15 writes)."""
    wire, _ = VERSIONS[tool.kind]
    config: dict[str, Any] = {"type": wire}
    if getattr(tool, "max_uses", None) is not None:
        config["max_uses"] = tool.max_uses
    if getattr(tool, "allowed_domains", ()):
        config["allowed_domains"] = list(tool.allowed_domains)
    if getattr(tool, "blocked_domains", ()):
        config["blocked_domains"] = list(tool.blocked_domains)
    if getattr(tool, "user_location", None):
        config["user_location"] = dict(tool.user_location)
    return config


def refusal(tools: Sequence[Any], lm: Any, functions: Sequence[str]) -> str | None:
    """An option Anthropic's tools have no field for (``WebSearch(search_context_size=...)``), or None."""
    for tool in tools:
        if getattr(tool, "search_context_size", None) is not None:
            return (
                f"{tool.label}(search_context_size=...) on model {str(getattr(lm, 'model', lm))!r}: Anthropic's "
                "web search tool has no search_context_size; leave it unset for Anthropic models"
            )
    return None


def request(tools: Sequence[Any], lm: Any) -> HostedRequest:
    from dspy.lm15 import BuiltinTool

    builtins = tuple(BuiltinTool(name=t.kind, config=tool_config(t)) for t in tools)
    betas = tuple(beta for t in tools if (beta := VERSIONS[t.kind][1]) is not None)
    reuse = any(t.kind == "code_execution" and t.reuse_container for t in tools)
    return HostedRequest(builtins=builtins, betas=betas, continued=with_container if reuse else None)


def last_container(messages: Sequence[Any], now: datetime | None = None) -> str | None:
    """The id of the container the history's last reply with one ran its code in, while it has not
    expired (its ``expires_at``, Anthropic's code execution docs); None: none, or it expired."""
    for msg in reversed(messages):
        for state in getattr(msg, "continuation", ()) or ():
            container = (state.data or {}).get("container") if state.provider == "anthropic" else None
            if state.kind != STATE or not isinstance(container, Mapping) or not container.get("id"):
                continue
            expires = _instant(container.get("expires_at"))
            if expires is not None and expires <= (now or clock.utc_now()):
                return None  # the last container is gone: the request gets a new one
            return str(container["id"])
    return None


def _instant(value: Any) -> datetime | None:
    try:
        moment = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def with_container(request: Any) -> Any:
    """The request naming, as its top-level ``container``, the container the history's last code ran in
    (Anthropic's code execution docs: the response's ``container.id`` sent on the next request reuses
    it, files and all); unchanged when there is none or it expired."""
    from dataclasses import replace

    container = last_container(request.messages)
    if container is None:
        return request
    extensions = {**(request.config.extensions or {}), "container": container}
    return replace(request, config=replace(request.config, extensions=extensions))


def _data(response: Any) -> Mapping[str, Any] | None:
    """The raw Messages body lm15 keeps (None: none)."""
    if isinstance(response, list | tuple):
        response = response[0] if response else None
    data = getattr(response, "provider_data", None)
    return data if isinstance(data, Mapping) else None


def served(response: Any) -> Block | None:
    """The reply's whole content list, when it holds a block the provider ran or the provider paused
    the reply (it goes back whole either way; else None)."""
    data = _data(response)
    if data is None:
        return None
    content = data.get("content")
    if not isinstance(content, list) or not (any(_server_block(b) for b in content) or paused(response)):
        return None
    hosted_streams.check_read(data, "Anthropic")  # a streamed reply: its body assembled from the frames
    block: Block = {"type": KIND, "content": json.loads(json.dumps(content))}
    raw = data.get("usage")
    counts = raw.get("server_tool_use") if isinstance(raw, Mapping) else None
    if isinstance(counts, Mapping):
        block["server_tool_use"] = dict(counts)
    if isinstance(data.get("container"), Mapping):  # the container its code ran in: ``id``, ``expires_at``
        block["container"] = dict(data["container"])
    return block


def paused(response: Any) -> bool:
    """Anthropic paused a long-running server-tool turn (``stop_reason: "pause_turn"``, Anthropic's server
    tools docs): the reply goes back as the assistant's message, unchanged, and Claude goes on."""
    data = _data(response)
    return data is not None and data.get("stop_reason") == "pause_turn"


def joined(earlier: Block, response: Any) -> Block:
    """A paused reply's record continued by ``response``: the paused content, then the continuation's, as
    served (one assistant message, as Anthropic reads consecutive assistant turns); the counts summed."""
    data = _data(response) or {}
    content = data.get("content") if isinstance(data.get("content"), list) else []
    block: Block = {"type": KIND, "content": [*earlier.get("content", ()), *json.loads(json.dumps(content))]}
    raw = data.get("usage")
    counts = raw.get("server_tool_use") if isinstance(raw, Mapping) else None
    summed = dict(earlier.get("server_tool_use") or {})
    for name, value in (counts or {}).items():
        if isinstance(value, int) and not isinstance(value, bool):
            summed[name] = int(summed.get(name, 0)) + value
    if summed:
        block["server_tool_use"] = summed
    container = data.get("container") if isinstance(data.get("container"), Mapping) else earlier.get("container")
    if isinstance(container, Mapping):
        block["container"] = dict(container)
    return block


def _server_block(block: Any) -> bool:
    kind = block.get("type") if isinstance(block, Mapping) else None
    return isinstance(kind, str) and (kind == "server_tool_use" or kind.endswith("_tool_result"))


def citations(block: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Each text block's citations as served, with the text they support (``cited_for``)."""
    return [
        {**c, "cited_for": b.get("text", "")}
        for b in block.get("content") or ()
        if isinstance(b, Mapping) and b.get("type") == "text"
        for c in b.get("citations") or ()
        if isinstance(c, Mapping)
    ]


# Anthropic's pricing page: web search $10 per 1,000 searches (beside tokens); web fetch costs tokens only;
# code execution's container hours are not priced here (their free allowance is per organization).
PRICES = {"web_search_requests": 10.0 / 1000}


def usage(response: Any) -> HostedUsage | None:
    """``usage.server_tool_use`` of a native response (lm15 keeps the raw body), priced."""
    if isinstance(response, list | tuple):
        response = response[0] if response else None
    data = getattr(response, "provider_data", None)
    raw = data.get("usage") if isinstance(data, Mapping) else None
    counts = raw.get("server_tool_use") if isinstance(raw, Mapping) else None
    if not isinstance(counts, Mapping):
        return None
    found = {str(k): int(v) for k, v in counts.items() if isinstance(v, int) and not isinstance(v, bool)}
    return HostedUsage(found, sum(PRICES.get(k, 0.0) * v for k, v in found.items()))


def as_text(block: Mapping[str, Any]) -> str:
    """What the provider ran and returned, for a request to another provider."""
    lines: list[str] = []
    for b in block.get("content") or ():
        kind = b.get("type") if isinstance(b, Mapping) else None
        if kind == "server_tool_use":
            lines.append(f"[{b.get('name')} ran by the provider: {json.dumps(b.get('input'), ensure_ascii=False)}]")
        elif isinstance(kind, str) and kind.endswith("_tool_result"):
            lines.append(f"[{kind}: {_result_text(b.get('content'))}]")
    return "\n".join(lines)


def _result_text(content: Any) -> str:
    if isinstance(content, list):
        found = [f"{c.get('title')} <{c.get('url')}>" for c in content if isinstance(c, Mapping) and c.get("url")]
        if found:
            return "; ".join(found)
    if isinstance(content, Mapping):
        if content.get("type", "").endswith("_error"):
            return f"error {content.get('error_code')}"
        text = content.get("stdout") or content.get("content") or ""
        return str(text)[:2000]
    return ""


def calls(block: Mapping[str, Any]) -> list[HostedCall]:
    """Each ``server_tool_use`` block with the ``*_tool_result`` block answering it (by ``tool_use_id``).

    The name is one spelling across providers: ``web_search``, ``web_fetch``, ``code_execution`` (also
    for the bash and text editor calls of ``code_execution_20250825``); the input as served; the
    result summarized (the results' titles and URLs, the code's output and return code, the fetched
    URL and title), or the error code of a ``*_tool_result_error``.
    """
    content = [b for b in block.get("content") or () if isinstance(b, Mapping)]
    results = {b.get("tool_use_id"): b for b in content if str(b.get("type") or "").endswith("_tool_result")}
    found: list[HostedCall] = []
    for b in content:
        if b.get("type") != "server_tool_use":
            continue
        served_name = str(b.get("name") or "")
        name = "code_execution" if "code_execution" in served_name else served_name or "server_tool"
        given = b.get("input")
        answer = results.get(b.get("id"))
        result, error = _summary(answer.get("content") if answer is not None else None)
        call_input = dict(given) if isinstance(given, Mapping) else {"input": given}
        if name == "code_execution" and served_name != name:
            call_input = {"tool": served_name, **call_input}
        found.append(HostedCall(str(b.get("id") or ""), name, call_input, result, error, "anthropic"))
    return found


def _summary(content: Any) -> tuple[dict[str, Any], str | None]:
    """A result block's content summarized, and its error code (None: it ran)."""
    if isinstance(content, list):
        return {
            "results": [{"title": c.get("title"), "url": c.get("url")} for c in content if isinstance(c, Mapping)]
        }, None
    if not isinstance(content, Mapping):
        return {}, None
    kind = str(content.get("type") or "")
    if kind.endswith("_error"):
        return {}, str(content.get("error_code") or kind)
    if "return_code" in content or "stdout" in content:
        summary: dict[str, Any] = {
            "output": str(content.get("stdout") or ""),
            "return_code": content.get("return_code"),
        }
        if content.get("stderr"):
            summary["stderr"] = str(content["stderr"])
        return summary, None
    if kind == "web_fetch_result":
        document = content.get("content")
        title = document.get("title") if isinstance(document, Mapping) else None
        return {"url": content.get("url"), "title": title}, None
    return {"type": kind} if kind else {}, None


def install() -> None:
    """Wrap lm15's Anthropic message writer and headers once per process (idempotent)."""
    provider = dspy_private.lm15_anthropic().AnthropicLM

    def wrap_message(original: Any) -> Any:
        def message(self: Any, msg: Any) -> dict[str, Any]:
            content = _served_content(msg)
            return original(self, msg) if content is None else {"role": "assistant", "content": content}

        return message

    def wrap_headers(original: Any) -> Any:
        def headers(self: Any, request: Any = None) -> dict[str, str]:
            return with_betas(original(self, request), request)

        return headers

    def wrap_payload(original: Any) -> Any:
        def payload(self: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
            body = original(self, *args, **kwargs)
            if isinstance(body, dict) and isinstance(body.get("messages"), list):
                body["messages"] = unmarked_pause(body["messages"])
            return body

        return payload

    dspy_private.wrap_once(provider, "_message", wrap_message)
    dspy_private.wrap_once(provider, "_headers", wrap_headers)
    dspy_private.wrap_once(provider, "_payload", wrap_payload)
    hosted_streams.install()  # a streamed reply's body, assembled from its frames


def unmarked_pause(messages: list[Any]) -> list[Any]:
    """A body that ends on the assistant's paused reply (a continuation, ``_turn.paused``) sends that reply
    unchanged: the prompt cache's last breakpoint, which lm15 puts on the last message's last block, moves
    to the message before it (where the paused request ended, so the continuation reads its cache)."""
    if len(messages) < 2 or not isinstance(messages[-1], Mapping) or messages[-1].get("role") != "assistant":
        return messages
    content = messages[-1].get("content")
    if not isinstance(content, list) or not content or not isinstance(content[-1], Mapping):
        return messages
    if "cache_control" not in content[-1]:
        return messages
    last = dict(content[-1])
    mark = last.pop("cache_control")
    out = [*messages[:-1], {**messages[-1], "content": [*content[:-1], last]}]
    before = out[-2]
    earlier = before.get("content") if isinstance(before, Mapping) else None
    if isinstance(earlier, str):
        earlier = [{"type": "text", "text": earlier}]
    if isinstance(earlier, list) and earlier and isinstance(earlier[-1], Mapping):
        out[-2] = {**before, "content": [*earlier[:-1], {"cache_control": mark, **earlier[-1]}]}
    return out


def _served_content(msg: Any) -> list[dict[str, Any]] | None:
    if getattr(msg, "role", None) != "assistant":
        return None
    for state in getattr(msg, "continuation", ()) or ():
        if state.provider == "anthropic" and state.kind == STATE:
            return [dict(b) for b in (state.data or {}).get("content") or ()]
    return None


def with_betas(headers: dict[str, str], request: Any) -> dict[str, str]:
    """The beta headers of the hosted tool versions the request carries (and not lm15's older one)."""
    types = {
        (getattr(t, "config", None) or {}).get("type")
        for t in getattr(request, "tools", None) or ()
        if getattr(t, "type", None) == "builtin"
    }
    wanted = [beta for wire, beta in VERSIONS.values() if wire in types and beta]
    if not wanted:
        return headers
    present = [b for b in headers.get("anthropic-beta", "").split(",") if b and b != _OLD_CODE_BETA]
    return {**headers, "anthropic-beta": ",".join(dict.fromkeys([*present, *wanted]))}


ROUTE = HostedRoute(
    kind=KIND,
    tools=frozenset(VERSIONS),
    request=request,
    served=served,
    citations=citations,
    usage=usage,
    as_text=as_text,
    calls=calls,
    paused=paused,
    joined=joined,
    refuse=refusal,
)
# Claude on Vertex AI, natively (lm15's ``vertex-anthropic`` door, ``vertex-anthropic:claude-...``): the Messages
# API at ``:rawPredict``, ``anthropic_version`` in the body, the same content blocks. Google Cloud documents one
# server tool for Claude there, web search (``web_search_20250305``, Preview; its current page asks for no beta,
# and the type needs none on Anthropic's API either); code execution and web fetch are not offered on Vertex AI.
VERTEX_ROUTE = dataclasses.replace(ROUTE, tools=frozenset({"web_search"}))
_NOT_ON_VERTEX = (
    "Claude on Vertex AI has web search only among Anthropic's server tools (Google Cloud's Claude web search "
    "page); {tool} is not offered there: use an anthropic/... model for it"
)
NOT_ON_VERTEX = {
    "code_execution": _NOT_ON_VERTEX.format(tool="code execution (code_execution_20250825)"),
    "web_fetch": _NOT_ON_VERTEX.format(tool="web fetch (web_fetch_20250910)"),
    "remote_mcp": "Anthropic's MCP connector is not built on any route (it is a beta of Anthropic's own API)",
    "file_search": "Anthropic's Messages API has no file search tool",
}


def not_on_litellm_vertex(model: str) -> str:
    """Why ``vertex_ai/claude-...`` (LiteLLM's spelling, which DSPy's default engine sends to LiteLLM) is refused."""
    name = model.split("/", 1)[-1]
    return (
        f"DSPy sends {model!r} to LiteLLM (lm15 has no door for the vertex_ai/ prefix), and LiteLLM's Vertex AI "
        "Claude route is its Anthropic code: it returns the served blocks split apart, without their order, and "
        "does not send the text blocks' citations back; for WebSearch write the model as "
        f"'vertex-anthropic:{name}' for DSPy's default engine"
    )


# Claude on Amazon Bedrock: Anthropic's server tools are not offered there. Anthropic's Bedrock page lists
# them among what Claude in Amazon Bedrock lacks (lm15's ``bedrock-anthropic`` door, from that page: "no ...
# server tools"), and LiteLLM sends none of their betas to Bedrock (its beta table maps web search, web fetch
# and code execution to none for ``bedrock``, ``bedrock_converse``).
NOT_ON_BEDROCK = (
    "Amazon Bedrock does not offer Anthropic's server tools (web search, web fetch, code execution: Anthropic's "
    "Claude in Amazon Bedrock page lists server tools among what Bedrock lacks), so no Bedrock route can carry "
    "them; use an anthropic/... model, or a function tool that searches"
)


NOT_ON_LITELLM = (
    "LiteLLM returns the served blocks split apart, without their order, and does not send the text blocks' "
    "citations back; use DSPy's default engine (engine='auto' or 'native')"
)
