"""The providers' documented request rules, checked on the HTTP body as it leaves the client.

Every wire test runs every request it sends through ``assert_accepted``. A rule is one
function ``rule(body, path) -> Iterator[str]`` yielding one sentence per violation; each
protocol has a list of rules in ``RULES``. To add a rule (media rules, say), write the
function with a docstring naming the provider's rule and its source, and append it to the
protocol's list. A rule a test knowingly breaks is labelled in ``known_broken`` (the
violation is then expected, and its absence fails), never skipped.

Protocols: ``"openai"`` (Chat Completions), ``"deepseek"`` (Chat Completions plus its thinking
rules), ``"anthropic"`` (Messages), ``"gemini"`` (generateContent).

Sources: OpenAI Chat Completions API reference (messages, tool messages answer the preceding
``tool_calls`` by ``tool_call_id``); Anthropic's prompt-caching guide (at most four
``cache_control`` breakpoints, on cacheable blocks); Anthropic Messages API and the extended-thinking guide
("text content blocks must be non-empty"; each ``tool_use`` answered by a ``tool_result``
in the next user turn; "a final assistant message must start with a thinking block";
thinking is incompatible with a forced ``tool_choice``; thinking blocks are signed);
Gemini API function-calling and thought-signatures guides (``user``/``model`` roles, each
``functionCall`` answered by a ``functionResponse`` in the next turn; on Gemini 3 the first
``functionCall`` of every model turn of the current turn carries its ``thoughtSignature``);
DeepSeek thinking-mode guide (with tools, every assistant turn carries ``reasoning_content``).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

Body = Mapping[str, Any]
Rule = Callable[[Body, str], Iterator[str]]


def check(
    protocol: str, body: Body, path: str = "", rules: Mapping[str, Sequence[Rule]] | None = None
) -> dict[str, list[str]]:
    """Every violated rule of ``protocol`` (in ``rules``, default ``RULES``): ``{rule name: [sentences]}``."""
    found: dict[str, list[str]] = {}
    for rule in (RULES if rules is None else rules)[protocol]:
        problems = list(rule(body, path))
        if problems:
            found[rule.__name__] = problems
    return found


def assert_accepted(protocol: str, body: Body, path: str = "", known_broken: Mapping[str, str] | None = None) -> None:
    """Fail unless the body keeps every rule; ``known_broken`` (rule name -> why) must be broken."""
    known = dict(known_broken or {})
    found = check(protocol, body, path)
    unexpected = {name: problems for name, problems in found.items() if name not in known}
    assert not unexpected, f"{protocol} would refuse this request: {unexpected}"
    missing = [name for name in known if name not in found]
    assert not missing, f"rules labelled broken but kept (remove the label): {missing}"


# -- OpenAI Chat Completions ---------------------------------------------------------------------

_CHAT_ROLES = {"system", "developer", "user", "assistant", "tool"}


def chat_roles(body: Body, path: str) -> Iterator[str]:
    """Roles are the documented ones; a tool message only follows an assistant's calls or another tool message."""
    messages = body.get("messages") or []
    for index, message in enumerate(messages):
        role = message.get("role")
        if role not in _CHAT_ROLES:
            yield f"messages[{index}]: unknown role {role!r}"
        if role == "tool" and (index == 0 or messages[index - 1].get("role") not in ("assistant", "tool")):
            yield f"messages[{index}]: a tool message that follows no assistant tool_calls"


def chat_call_pairing(body: Body, path: str) -> Iterator[str]:
    """Each assistant ``tool_calls`` id is answered exactly once, by the tool messages right after it."""
    messages = body.get("messages") or []
    for index, message in enumerate(messages):
        if message.get("role") != "assistant" or not message.get("tool_calls"):
            continue
        asked = [c.get("id") for c in message["tool_calls"]]
        answered = []
        for following in messages[index + 1 :]:
            if following.get("role") != "tool":
                break
            answered.append(following.get("tool_call_id"))
        if sorted(map(str, asked)) != sorted(map(str, answered)):
            yield f"messages[{index}]: calls {asked} answered by {answered}"


def chat_assistant_not_empty(body: Body, path: str) -> Iterator[str]:
    """An assistant message has text or tool calls."""
    for index, message in enumerate(body.get("messages") or []):
        if message.get("role") == "assistant" and not message.get("tool_calls") and not message.get("content"):
            yield f"messages[{index}]: an assistant message with neither content nor tool_calls"


def chat_named_choice(body: Body, path: str) -> Iterator[str]:
    """A named ``tool_choice`` names an offered tool."""
    choice = body.get("tool_choice")
    if isinstance(choice, Mapping):
        name = (choice.get("function") or {}).get("name")
        offered = [t.get("function", {}).get("name") for t in body.get("tools") or []]
        if name not in offered:
            yield f"tool_choice names {name!r}, tools are {offered}"


def chat_choice_needs_tools(body: Body, path: str) -> Iterator[str]:
    """``tool_choice`` and ``parallel_tool_calls`` only beside tools, and ``tools`` never empty (OpenAI
    Chat Completions API reference: ``tool_choice`` "Controls which (if any) tool is called by the
    model ... ``none`` is the default when no tools are present"; the 400s: "Invalid value for
    'tool_choice': 'tool_choice' is only allowed when 'tools' are specified.", "'parallel_tool_calls'
    is only allowed when 'tools' are specified", and for ``tools: []`` "Invalid 'tools': empty array.
    Expected an array with minimum length 1, but got an empty array instead." (code ``empty_array``)).
    The OpenAI-compatible routes (Groq, OpenRouter, DeepSeek, Gemini's compatibility endpoint, vLLM)
    validate the same schema."""
    tools = body.get("tools")
    if tools is not None and not tools:
        yield "Invalid 'tools': empty array. Expected an array with minimum length 1, but got an empty array instead."
    for key in ("tool_choice", "parallel_tool_calls"):
        if key in body and not tools:
            yield f"Invalid value for {key!r}: {key!r} is only allowed when 'tools' are specified."


def deepseek_reasoning_replayed(body: Body, path: str) -> Iterator[str]:
    """Thinking mode (``deepseek-reasoner`` or ``thinking.type == "enabled"``) with tools: every assistant
    turn carries its ``reasoning_content`` back (non-empty)."""
    thinking = body.get("model") == "deepseek-reasoner" or (body.get("thinking") or {}).get("type") == "enabled"
    if not body.get("tools") or not thinking:
        return
    for index, message in enumerate(body.get("messages") or []):
        if message.get("role") == "assistant" and not message.get("reasoning_content"):
            yield f"messages[{index}]: assistant turn without its reasoning_content"


def openrouter_reasoning_details_replayed(body: Body, path: str) -> Iterator[str]:
    """OpenRouter, Claude or Gemini 3 reasoning with tools: each assistant tool-call turn of the current
    turn carries its ``reasoning_details`` back unchanged, with a signed entry (``reasoning.text`` with
    ``signature``, or ``reasoning.encrypted``); Claude needs it to continue the tool loop, Gemini 3
    refuses unsigned calls ("preserve the complete reasoning_details when passing messages back")."""
    model = str(body.get("model") or "")
    reasoning = body.get("reasoning") or body.get("reasoning_effort")
    if not body.get("tools") or not reasoning or not model.startswith(("anthropic/", "google/gemini-3")):
        return
    messages = body.get("messages") or []
    start = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=0)
    for index in range(start, len(messages)):
        message = messages[index]
        if message.get("role") != "assistant" or not message.get("tool_calls"):
            continue
        details = message.get("reasoning_details") or []
        if not any(d.get("signature") or d.get("type") == "reasoning.encrypted" for d in details):
            yield f"messages[{index}]: an assistant tool-call turn without its signed reasoning_details"


_WEB_PLUGIN_KEYS = {"id", "engine", "mode", "max_results", "search_prompt", "include_domains", "exclude_domains"}


def openrouter_web_plugin(body: Body, path: str) -> Iterator[str]:
    """OpenRouter's web search (its web search guide, the ``web`` plugin): each plugin an object naming
    its ``id``, the web plugin with only the fields the guide names, ``web_search_options`` with only
    ``search_context_size`` (low, medium, high); no assistant message sends ``url_citation``
    annotations back (an assistant message's ``annotations`` are OpenRouter's file annotations only:
    its SDK's ``ChatCompletionAssistantMessageParam``)."""
    plugins = body.get("plugins")
    if plugins is not None and not isinstance(plugins, list):
        yield "plugins: not a list"
    for index, plugin in enumerate(plugins if isinstance(plugins, list) else ()):
        if not isinstance(plugin, Mapping) or not isinstance(plugin.get("id"), str):
            yield f"plugins[{index}]: not an object with an id"
        elif plugin["id"] == "web" and set(plugin) - _WEB_PLUGIN_KEYS:
            yield f"plugins[{index}]: the web plugin has no {sorted(set(plugin) - _WEB_PLUGIN_KEYS)}"
    options = body.get("web_search_options")
    if options is not None and (
        not isinstance(options, Mapping)
        or set(options) - {"search_context_size"}
        or options.get("search_context_size", "medium") not in ("low", "medium", "high")
    ):
        yield f"web_search_options: {options!r} (OpenRouter documents search_context_size only)"
    for index, message in enumerate(body.get("messages") or []):
        notes = message.get("annotations") if message.get("role") == "assistant" else None
        if any(isinstance(n, Mapping) and n.get("type") == "url_citation" for n in notes or ()):
            yield f"messages[{index}]: url_citation annotations sent back"


# The server tool's parameters (OpenRouter's API reference, ``WebSearchServerToolConfig``; its web search server
# tool guide's table) and its ``user_location`` fields (``WebSearchUserLocationServerTool``).
_SERVER_SEARCH_KEYS = {
    "engine",
    "mode",
    "max_results",
    "max_uses",
    "max_total_results",
    "search_context_size",
    "max_characters",
    "user_location",
    "allowed_domains",
    "excluded_domains",
}
_LOCATION_KEYS = {"type", "city", "region", "country", "timezone"}


def openrouter_server_tools(body: Body, path: str) -> Iterator[str]:
    """OpenRouter's web search server tool (its server tools guide): an ``openrouter:`` entry in ``tools`` is
    ``{"type": "openrouter:web_search"}`` with, optionally, ``parameters`` naming only the documented fields
    (``search_context_size`` low, medium or high; ``user_location`` approximate; the domain filters lists of
    strings); never beside the web plugin, which would search on every request besides (the guide: the plugin
    is deprecated in favour of the tool)."""
    entries = [t for t in body.get("tools") or [] if str(t.get("type") or "").startswith("openrouter:")]
    for entry in entries:
        if entry.get("type") != "openrouter:web_search" or set(entry) - {"type", "parameters"}:
            yield f"tools: {entry!r} (only openrouter:web_search, with its parameters, is built)"
            continue
        if "parameters" not in entry:
            continue
        given = entry["parameters"]
        if not isinstance(given, Mapping) or not given or set(given) - _SERVER_SEARCH_KEYS:
            yield f"tools: openrouter:web_search parameters {given!r} (the guide's fields only, none empty)"
            continue
        if given.get("search_context_size", "medium") not in ("low", "medium", "high"):
            yield f"tools: search_context_size {given['search_context_size']!r}"
        location = given.get("user_location", {"type": "approximate"})
        if not isinstance(location, Mapping) or set(location) - _LOCATION_KEYS or location.get("type") != "approximate":
            yield f"tools: user_location {location!r} (type approximate, city, region, country, timezone)"
        for key in ("allowed_domains", "excluded_domains"):
            if key in given and not (isinstance(given[key], list) and all(isinstance(d, str) for d in given[key])):
                yield f"tools: {key} {given[key]!r} (a list of domains)"
    if entries and any(isinstance(p, Mapping) and p.get("id") == "web" for p in body.get("plugins") or ()):
        yield "tools: openrouter:web_search beside the web plugin (two searches)"


def gemini_compat_thought_signatures(body: Body, path: str) -> Iterator[str]:
    """Gemini 3 behind its OpenAI-compatible endpoint: in the current turn, each assistant tool-call turn's
    first call carries ``extra_content.google.thought_signature`` ("Function call is missing a
    thought_signature"; Gemini's OpenAI-compatibility guide)."""
    if not str(body.get("model") or "").startswith("gemini-3"):
        return
    messages = body.get("messages") or []
    start = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=0)
    for index in range(start, len(messages)):
        calls = messages[index].get("tool_calls") or []
        if messages[index].get("role") == "assistant" and calls:
            google = (calls[0].get("extra_content") or {}).get("google") or {}
            if not google.get("thought_signature"):
                yield f"messages[{index}]: a function call without its thought_signature"


# -- Anthropic Messages --------------------------------------------------------------------------


def _blocks(message: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    content = message.get("content")
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return list(content or [])


def _thinking_on(body: Body) -> bool:
    return (body.get("thinking") or {}).get("type") in ("enabled", "adaptive")


def anthropic_roles(body: Body, path: str) -> Iterator[str]:
    """Roles are ``user``/``assistant`` (system is top-level), the first message is the user's."""
    messages = body.get("messages") or []
    if messages and messages[0].get("role") != "user":
        yield "the first message is not the user's"
    for index, message in enumerate(messages):
        if message.get("role") not in ("user", "assistant"):
            yield f"messages[{index}]: role {message.get('role')!r}"


def anthropic_nonempty_blocks(body: Body, path: str) -> Iterator[str]:
    """ "text content blocks must be non-empty"; no message is empty."""
    for index, message in enumerate(body.get("messages") or []):
        blocks = _blocks(message)
        if not blocks:
            yield f"messages[{index}]: empty content"
        for block in blocks:
            if block.get("type") == "text" and not str(block.get("text") or "").strip():
                yield f"messages[{index}]: an empty text block"


def anthropic_call_pairing(body: Body, path: str) -> Iterator[str]:
    """Each ``tool_use`` is answered by a ``tool_result`` (same id, same count) in the very next user message,
    and those results come first in it."""
    messages = body.get("messages") or []
    for index, message in enumerate(messages):
        if message.get("role") != "assistant":
            continue
        asked = [b.get("id") for b in _blocks(message) if b.get("type") == "tool_use"]
        if not asked:
            continue
        following = _blocks(messages[index + 1]) if index + 1 < len(messages) else []
        results = [b.get("tool_use_id") for b in following if b.get("type") == "tool_result"]
        if sorted(asked) != sorted(results):
            yield f"messages[{index}]: tool_use {asked} answered by {results}"
        leading = [b.get("type") for b in following[: len(results)]]
        if any(kind != "tool_result" for kind in leading):
            yield f"messages[{index + 1}]: tool_result blocks must come first"


def anthropic_thinking_signed(body: Body, path: str) -> Iterator[str]:
    """Thinking blocks go back as received: signed ``thinking``, ``redacted_thinking`` with its data,
    and only at the start of an assistant message."""
    for index, message in enumerate(body.get("messages") or []):
        seen_other = False
        for block in _blocks(message):
            kind = block.get("type")
            if kind in ("thinking", "redacted_thinking"):
                if message.get("role") != "assistant" or seen_other:
                    yield f"messages[{index}]: a {kind} block not at the start of an assistant message"
                if kind == "thinking" and not block.get("signature"):
                    yield f"messages[{index}]: a thinking block without its signature"
                if kind == "redacted_thinking" and not block.get("data"):
                    yield f"messages[{index}]: a redacted_thinking block without its data"
            else:
                seen_other = True


def anthropic_thinking_first(body: Body, path: str) -> Iterator[str]:
    """With thinking on, the final assistant message (the one whose tool use is being answered)
    starts with its thinking block."""
    if not _thinking_on(body):
        return
    messages = body.get("messages") or []
    assistants = [i for i, m in enumerate(messages) if m.get("role") == "assistant"]
    if not assistants:
        return
    last = assistants[-1]
    blocks = _blocks(messages[last])
    if any(b.get("type") == "tool_use" for b in blocks) and (
        not blocks or blocks[0].get("type") not in ("thinking", "redacted_thinking")
    ):
        yield f"messages[{last}]: thinking is on but the final assistant message does not start with a thinking block"


def anthropic_forced_choice(body: Body, path: str) -> Iterator[str]:
    """ "Thinking may not be enabled when tool_choice forces tool use" (``any``/``tool``)."""
    kind = (body.get("tool_choice") or {}).get("type")
    if kind in ("any", "tool") and _thinking_on(body):
        yield f"tool_choice {kind!r} with thinking {body.get('thinking')}"


def anthropic_choice_needs_tools(body: Body, path: str) -> Iterator[str]:
    """ "tool_choice may only be specified while providing tools." (Anthropic Messages, 400), and ``tools``
    is never an empty list ("tools: List should have at least 1 item after validation, not 0")."""
    tools = body.get("tools")
    if tools is not None and not tools:
        yield "tools: List should have at least 1 item after validation, not 0"
    if "tool_choice" in body and not tools:
        yield "tool_choice may only be specified while providing tools."


def anthropic_ends_on_user(body: Body, path: str) -> Iterator[str]:
    """With thinking on, a request cannot end on a (prefilled) assistant turn, unless that turn is a reply
    as served, its thinking first (a ``pause_turn`` continuation). Anthropic's refusal: "When `thinking` is
    enabled, a final `assistant` message must start with a thinking block"."""
    messages = body.get("messages") or []
    if _thinking_on(body) and messages and messages[-1].get("role") == "assistant":
        blocks = _blocks(messages[-1])
        if not (blocks and blocks[0].get("type") in _UNCACHEABLE):
            yield "ends on the assistant's turn while thinking is enabled"


_UNCACHEABLE = frozenset({"thinking", "redacted_thinking"})


def _marked_blocks(body: Body) -> list[tuple[str, Mapping[str, Any]]]:
    """Every block carrying ``cache_control``, in the cache's order (tools, system, messages)."""
    marked = [(f"tools[{i}]", t) for i, t in enumerate(body.get("tools") or []) if "cache_control" in t]
    system = body.get("system")
    if isinstance(system, list):
        marked += [(f"system[{i}]", b) for i, b in enumerate(system) if "cache_control" in b]
    for index, message in enumerate(body.get("messages") or []):
        marked += [(f"messages[{index}]", b) for b in _blocks(message) if "cache_control" in b]
    return marked


def anthropic_cache_breakpoints(body: Body, path: str) -> Iterator[str]:
    """Prompt caching (Anthropic's prompt-caching guide): "A maximum of 4 blocks with cache_control may
    be provided"; ``cache_control`` is ``{"type": "ephemeral"}`` with an optional ``ttl`` of ``"5m"`` or
    ``"1h"``, and a longer TTL never follows a shorter one; thinking blocks cannot be marked; an empty
    text block cannot carry one ("cache_control cannot be set for empty text blocks"). A breakpoint
    on a prefix under the model's minimum is no error: that prefix is just not cached."""
    marked = _marked_blocks(body)
    if len(marked) > 4:
        yield f"A maximum of 4 blocks with cache_control may be provided. Found {len(marked)}."
    seen_short = False
    for where, block in marked:
        mark = block.get("cache_control") or {}
        ttl = mark.get("ttl", "5m")
        if mark.get("type") != "ephemeral" or ttl not in ("5m", "1h"):
            yield f"{where}: cache_control {dict(mark)} is not ephemeral with a 5m or 1h ttl"
        if ttl == "1h" and seen_short:
            yield f"{where}: a ttl='1h' cache_control block must not come after a ttl='5m' one"
        seen_short = seen_short or ttl == "5m"
        if block.get("type") in _UNCACHEABLE:
            yield f"{where}: a {block.get('type')} block cannot carry cache_control"
        if block.get("type") == "text" and not str(block.get("text") or "").strip():
            yield f"{where}: cache_control cannot be set for empty text blocks"


def no_openai_cache_fields(body: Body, path: str) -> Iterator[str]:
    """A route without OpenAI's prompt-cache fields refuses them as unknown (``prompt_cache_key``,
    ``prompt_cache_retention``: "Extra inputs are not permitted" on Anthropic's Messages API, an
    unrecognized argument on the OpenAI-compatible servers that do not take them)."""
    for key in ("prompt_cache_key", "prompt_cache_retention", "prompt_cache_options"):
        if key in body:
            yield f"{key}: Extra inputs are not permitted"


def no_cache_control(body: Body, path: str) -> Iterator[str]:
    """Anthropic's ``cache_control`` marks belong to Anthropic's API (and the routes that pass them
    through, OpenRouter's Claude and Gemini): an OpenAI-compatible server that does not take them
    refuses the unknown key on a message or a content part."""
    for index, message in enumerate(body.get("messages") or []):
        parts = message.get("content") if isinstance(message.get("content"), list) else []
        if "cache_control" in message or any(isinstance(p, Mapping) and "cache_control" in p for p in parts):
            yield f"messages[{index}]: unknown field cache_control"


# Claude 5.x (the Fable 5.1 and Opus 5.5 migration guides, the preserved-thinking guide; LiteLLM's
# model map agrees: ``supports_forced_tool_use: false``, ``thinking_always_on: true``).
_REFUSES_FORCED = re.compile(r"claude-(fable-5-1|mythos-5-1|opus-5-5|sonnet-5-5)")
_BINDS_THINKING = re.compile(r"claude-(fable-5-1|mythos-5-1|opus-5-5|sonnet-5-5|haiku-5-5)")
BINDING_MARK = "~bound:"


def _claude_model(body: Body) -> str:
    return str(body.get("model") or "").lower().replace(".", "-")


def anthropic_forced_choice_refused(body: Body, path: str) -> Iterator[str]:
    """Fable 5.1 / Mythos 5.1 / Opus 5.5 / Sonnet 5.5: ``tool_choice: type "tool" and "any" are not
    supported for this model`` (400), with or without thinking."""
    kind = (body.get("tool_choice") or {}).get("type")
    if kind in ("any", "tool") and _REFUSES_FORCED.search(_claude_model(body)):
        yield f'tool_choice: type "{kind}" is not supported for {body.get("model")}'


def anthropic_adaptive_only(body: Body, path: str) -> Iterator[str]:
    """The same models take only adaptive thinking: ``"thinking.type.enabled" is not supported for this
    model. Use "thinking.type.adaptive" and "output_config.effort" ...`` (and ``disabled`` likewise)."""
    kind = (body.get("thinking") or {}).get("type")
    if kind in ("enabled", "disabled") and _REFUSES_FORCED.search(_claude_model(body)):
        yield f'"thinking.type.{kind}" is not supported for {body.get("model")}'


def unmarked(value: Any) -> Any:
    """``value`` without cache marks, a string content (or system) as its one text block: a
    ``cache_control`` mark says where to cache, not what the prompt is, so it never changes what a
    block is bound to."""
    if isinstance(value, Mapping):
        out = {k: unmarked(v) for k, v in value.items() if k != "cache_control"}
        for key in ("content", "system"):
            if isinstance(out.get(key), str):
                out[key] = [{"type": "text", "text": out[key]}]
        return out
    if isinstance(value, list):
        return [unmarked(v) for v in value]
    return value


def binding_key(body: Body, upto: int) -> str:
    """What a thinking block is bound to: the system prompt, the tools and the messages before it
    (their content: cache marks aside)."""
    prefix = unmarked(
        {"system": body.get("system"), "tools": body.get("tools"), "messages": (body.get("messages") or [])[:upto]}
    )
    return hashlib.sha256(json.dumps(prefix, sort_keys=True, ensure_ascii=False).encode()).hexdigest()[:16]


def bound(value: str, request: Body) -> str:
    """A signature (or redacted data) as a binding model signs it: bound to the request's whole prefix."""
    return f"{value}{BINDING_MARK}{binding_key(request, len(request.get('messages') or []))}"


def anthropic_thinking_binding(body: Body, path: str) -> Iterator[str]:
    """Preserved thinking on Claude 5.1+: a replayed block whose prefix changed since it was signed is
    refused ("Invalid `signature` in `thinking` block. The block is bound to a different
    conversation."), unless the request asks ``thinking.block_binding.prefix_mismatch_behavior:
    "drop_block"`` (beta ``thinking-binding-controls-2026-08-01``). Only blocks the emulator signed
    as bound (``responses.anthropic(..., bound=True)``) carry a binding."""
    binding = ((body.get("thinking") or {}).get("block_binding") or {}).get("prefix_mismatch_behavior")
    if binding == "drop_block":
        return
    for index, message in enumerate(body.get("messages") or []):
        for position, block in enumerate(_blocks(message)):
            value = str(block.get("signature") or block.get("data") or "")
            if BINDING_MARK in value and value.rsplit(BINDING_MARK, 1)[1] != binding_key(body, index):
                yield (
                    f"messages.{index}.content.{position}: Invalid `signature` in `thinking` block. "
                    "The block is bound to a different conversation."
                )


# -- OpenAI Responses API ------------------------------------------------------------------------


def _items(body: Body) -> list[Mapping[str, Any]]:
    value = body.get("input")
    return [i for i in value if isinstance(i, Mapping)] if isinstance(value, list) else []


def _kind(item: Mapping[str, Any]) -> str:
    return str(item.get("type") or ("message" if "role" in item else ""))


def responses_call_pairing(body: Body, path: str) -> Iterator[str]:
    """Each ``function_call`` input item is answered by one ``function_call_output`` with its ``call_id``
    ("No tool output found for function call call_...")."""
    items = _items(body)
    outputs = [i.get("call_id") for i in items if _kind(i) == "function_call_output"]
    for index, item in enumerate(items):
        if _kind(item) == "function_call" and outputs.count(item.get("call_id")) != 1:
            count = outputs.count(item.get("call_id"))
            yield f"input[{index}]: function_call {item.get('call_id')!r} answered {count} time(s)"


# Items the provider ran that may follow a reasoning item: pydantic-ai's recordings send a gpt-5 reply's
# reasoning item back right before its ``web_search_call`` and ``code_interpreter_call``, and are answered
# (tests/models/cassettes/test_openai_responses/test_openai_responses_model_web_search_tool.yaml and
# test_openai_responses_thinking_with_code_execution_tool.yaml, the second request of each).
_HOSTED_ITEMS = ("web_search_call", "code_interpreter_call", "file_search_call", "mcp_call", "mcp_list_tools")


def responses_reasoning_followed(body: Body, path: str) -> Iterator[str]:
    """A replayed ``reasoning`` item comes right before the output it preceded ("Item 'rs_...' of type
    'reasoning' was provided without its required following item."), with its ``summary`` (even [])."""
    items = _items(body)
    for index, item in enumerate(items):
        if _kind(item) != "reasoning":
            continue
        following = _kind(items[index + 1]) if index + 1 < len(items) else None
        if following not in ("function_call", "message", "reasoning", *_HOSTED_ITEMS) or (
            following == "message" and items[index + 1].get("role") != "assistant"
        ):
            yield f"input[{index}]: a reasoning item followed by {following!r}"
        if "summary" not in item:
            yield f"input[{index}]: Missing required parameter: input[{index}].summary"


def responses_reasoning_replayed(body: Body, path: str) -> Iterator[str]:
    """Reasoning models with tools (OpenAI's function-calling guide): each ``function_call`` of the current
    turn goes back after its reasoning item; under ``store: false`` the item carries its
    ``encrypted_content`` and the request asks for ``include: ["reasoning.encrypted_content"]``."""
    if not str(body.get("model") or "").startswith(("gpt-5", "o3", "o4")) or not body.get("tools"):
        return
    items = _items(body)
    start = max((i for i, item in enumerate(items) if item.get("role") == "user"), default=0)
    for index in range(start, len(items)):
        if _kind(items[index]) == "function_call" and (
            index == 0 or _kind(items[index - 1]) not in ("reasoning", "function_call")
        ):
            yield f"input[{index}]: function_call {items[index].get('call_id')!r} without its reasoning item"
    if body.get("store") is False:
        if "reasoning.encrypted_content" not in (body.get("include") or []):
            yield 'store is false but include does not ask for "reasoning.encrypted_content"'
        for index, item in enumerate(items):
            if _kind(item) == "reasoning" and not item.get("encrypted_content"):
                yield (
                    f"input[{index}]: Item with id {item.get('id')!r} not found. "
                    "Items are not persisted when `store` is set to false."
                )


def _input_types() -> dict[str, Any]:
    from openai.types.responses import response_input_item_param as items

    return {
        "web_search_call": items.ResponseFunctionWebSearchParam,
        "code_interpreter_call": items.ResponseCodeInterpreterToolCallParam,
        "file_search_call": items.ResponseFileSearchToolCallParam,
        "mcp_call": items.McpCall,
        "mcp_list_tools": items.McpListTools,
        "reasoning": items.ResponseReasoningItemParam,
        "function_call": items.ResponseFunctionToolCallParam,
        "output_message": items.ResponseOutputMessageParam,
    }


def responses_items_typed(body: Body, path: str) -> Iterator[str]:
    """Each input item a response served (hosted calls, reasoning, function calls, output messages: a
    ``message`` with an ``id``) has the fields of its input type in the Responses API reference, as the
    openai SDK declares them (``ResponseInputItemParam``): every required one, none unknown."""
    types = _input_types()
    for index, item in enumerate(_items(body)):
        kind = _kind(item)
        typed = types.get("output_message" if kind == "message" and "id" in item else kind)
        if typed is None:
            continue
        fields = typed.__annotations__  # strings: the SDK module defers its annotations
        for name in fields:
            if "Required[" in str(fields[name]) and name not in item:
                yield f"input[{index}]: {kind} without its required {name!r}"
        for name in item:
            if name not in fields:
                yield f"input[{index}]: {kind} has no field {name!r}"


def responses_include_and_containers(body: Body, path: str) -> Iterator[str]:
    """Each ``include`` value is one the Responses API takes (``ResponseIncludable`` in the openai SDK:
    ``web_search_call.action.sources``, ``code_interpreter_call.outputs``, ...), and a ``code_interpreter``
    tool's ``container`` is a container id (``cntr_...``) or ``{"type": "auto", ...}`` (the SDK's
    ``CodeInterpreter`` tool param; OpenAI's code interpreter guide, "Containers")."""
    import typing

    from openai.types.responses.response_includable import ResponseIncludable

    known = set(typing.get_args(ResponseIncludable))
    for value in body.get("include") or []:
        if value not in known:
            yield f"include: unknown value {value!r}"
    for index, tool in enumerate(body.get("tools") or []):
        if not isinstance(tool, Mapping) or tool.get("type") != "code_interpreter":
            continue
        container = tool.get("container")
        if isinstance(container, str):
            if not container.startswith("cntr_"):
                yield f"tools[{index}]: container {container!r} is no container id"
        elif not (isinstance(container, Mapping) and container.get("type") == "auto"):
            yield f"tools[{index}]: container {container!r} is neither an id nor {{'type': 'auto'}}"


# -- Gemini generateContent ----------------------------------------------------------------------


def _parts(content: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return list(content.get("parts") or [])


def _call(part: Mapping[str, Any]) -> Mapping[str, Any] | None:
    return part.get("functionCall") or part.get("function_call")


def _response(part: Mapping[str, Any]) -> Mapping[str, Any] | None:
    return part.get("functionResponse") or part.get("function_response")


def gemini_roles(body: Body, path: str) -> Iterator[str]:
    """Roles are ``user``/``model``; the conversation starts with the user."""
    contents = body.get("contents") or []
    if contents and contents[0].get("role") != "user":
        yield "the first content is not the user's"
    for index, content in enumerate(contents):
        if content.get("role") not in ("user", "model"):
            yield f"contents[{index}]: role {content.get('role')!r}"


def gemini_nonempty_parts(body: Body, path: str) -> Iterator[str]:
    """Every content has parts, and no part is an empty text (one carrying only a signature aside)."""
    for index, content in enumerate(body.get("contents") or []):
        parts = _parts(content)
        if not parts:
            yield f"contents[{index}]: no parts"
        for part in parts:
            if "text" in part and not part["text"] and "thoughtSignature" not in part:
                yield f"contents[{index}]: an empty text part"


def gemini_call_pairing(body: Body, path: str) -> Iterator[str]:
    """Each model turn's ``functionCall`` parts are answered, same count and names (and ids when given),
    by the ``functionResponse`` parts of the next user turn."""
    contents = body.get("contents") or []
    for index, content in enumerate(contents):
        calls = [c for c in map(_call, _parts(content)) if c]
        if content.get("role") != "model" or not calls:
            continue
        following = _parts(contents[index + 1]) if index + 1 < len(contents) else []
        answers = [r for r in map(_response, following) if r]
        if sorted(c.get("name") for c in calls) != sorted(r.get("name") for r in answers):
            yield f"contents[{index}]: {len(calls)} call(s) answered by {len(answers)} response(s)"
        ids = sorted(str(c.get("id")) for c in calls if c.get("id"))
        if ids and ids != sorted(str(r.get("id")) for r in answers if r.get("id")):
            yield f"contents[{index}]: call ids {ids} not answered by the same ids"


def gemini_thought_signatures(body: Body, path: str) -> Iterator[str]:
    """Gemini 3: in the current turn (since the last user text), each model turn's first ``functionCall``
    carries its ``thoughtSignature`` ("Function call is missing a thought_signature")."""
    if "gemini-3" not in path:
        return
    contents = body.get("contents") or []
    start = max(
        (i for i, c in enumerate(contents) if c.get("role") == "user" and any("text" in p for p in _parts(c))),
        default=0,
    )
    for index in range(start, len(contents)):
        calls = [p for p in _parts(contents[index]) if _call(p)]
        if contents[index].get("role") == "model" and calls and not calls[0].get("thoughtSignature"):
            yield f"contents[{index}]: functionCall without its thoughtSignature"


# Gemini's thought-signatures FAQ: the placeholder for a call the model did not make, as bytes
# (base64 in JSON). The emulator's own signatures all start with ``MINTED``.
PLACEHOLDER = "c2tpcF90aG91Z2h0X3NpZ25hdHVyZV92YWxpZGF0b3I="
MINTED = "CiQBVKhc7sIg"


def _recorded_signatures() -> frozenset[str]:
    """The signatures third-party recordings show Gemini returning (``cassettes/hosted/gemini_*.json``)."""
    found: set[str] = set()
    for path in (Path(__file__).resolve().parents[2] / "cassettes" / "hosted").glob("gemini_*.json"):
        recording = json.loads(path.read_text())
        bodies = [r["body"] for r in recording.get("responses") or ()] + [  # a streamed one: each chunk
            json.loads(e["data"]) for i in recording.get("interactions") or () for e in i["events"]
        ]
        for body in bodies:
            for candidate in body.get("candidates") or ():
                for part in (candidate.get("content") or {}).get("parts") or ():
                    if part.get("thoughtSignature"):
                        found.add(part["thoughtSignature"])
    return frozenset(found)


RECORDED = _recorded_signatures()


def gemini_signatures_genuine(body: Body, path: str) -> Iterator[str]:
    """A replayed ``thoughtSignature`` is one Gemini returned or the documented placeholder; anything
    else is refused ("Corrupted thought signature.", LiteLLM's ``rejected_thought_signature_retry``)."""
    for index, content in enumerate(body.get("contents") or []):
        for part in _parts(content):
            value = part.get("thoughtSignature") or part.get("thought_signature")
            if value and value != PLACEHOLDER and value not in RECORDED and not str(value).startswith(MINTED):
                yield f"contents[{index}]: Corrupted thought signature {value!r}"


_BUILTIN_KEYS = (
    *("googleSearch", "google_search", "codeExecution", "code_execution"),
    *("urlContext", "url_context", "fileSearch", "file_search"),
)


def gemini_tool_combination(body: Body, path: str) -> Iterator[str]:
    """Built-in tools beside ``functionDeclarations`` in one request: Gemini 3 models only, and with
    ``toolConfig.includeServerSideToolInvocations`` set (Google's "Combine built-in tools and function
    calling" guide: "supported for Gemini 3 models only"; pydantic-ai's recording
    ``test_function_tools_with_builtin_tools`` sends the flag; earlier models refuse it, "Tool call context
    circulation is not enabled")."""
    tools = body.get("tools") or []
    builtins = [k for t in tools for k in t if k in _BUILTIN_KEYS]
    functions = any(t.get("functionDeclarations") or t.get("function_declarations") for t in tools)
    config = body.get("toolConfig") or body.get("tool_config") or {}
    flag = config.get("includeServerSideToolInvocations") or config.get("include_server_side_tool_invocations")
    if builtins and functions and "gemini-3" not in path:
        yield f"built-in tools {builtins} beside function declarations on a model before Gemini 3"
    elif builtins and functions and not flag:
        yield f"built-in tools {builtins} beside function declarations without includeServerSideToolInvocations"
    elif flag and "gemini-3" not in path:
        yield "includeServerSideToolInvocations on a model before Gemini 3"


def gemini_server_tool_parts(body: Body, path: str) -> Iterator[str]:
    """A replayed ``toolCall`` goes back with its ``toolResponse`` (same ``id``, later in the same model
    turn), each with its ``id``, ``toolType`` and ``thoughtSignature`` as served (the tool-combination
    guide's second turn sends the turn's tool parts back with their ids, tool types and signatures;
    google-genai's ``ToolCall``: "pass this ToolCall back to the API in a subsequent turn within a
    Content message, along with the corresponding ToolResponse")."""
    for index, content in enumerate(body.get("contents") or []):
        parts = _parts(content)
        calls = [(i, p) for i, p in enumerate(parts) if p.get("toolCall") or p.get("tool_call")]
        answers = {
            str((p.get("toolResponse") or p.get("tool_response") or {}).get("id")): i
            for i, p in enumerate(parts)
            if p.get("toolResponse") or p.get("tool_response")
        }
        for at, part in calls:
            call = part.get("toolCall") or part.get("tool_call")
            if content.get("role") != "model":
                yield f"contents[{index}]: a toolCall outside a model turn"
            if not call.get("id") or not (call.get("toolType") or call.get("tool_type")):
                yield f"contents[{index}]: a toolCall without its id or toolType"
            if not part.get("thoughtSignature"):
                yield f"contents[{index}]: toolCall {call.get('id')!r} without its thoughtSignature"
            if answers.get(str(call.get("id")), -1) <= at:
                yield f"contents[{index}]: toolCall {call.get('id')!r} without its toolResponse after it"


def gemini_forced_choice(body: Body, path: str) -> Iterator[str]:
    """``mode: ANY`` names only declared functions."""
    config = ((body.get("toolConfig") or body.get("tool_config") or {}).get("functionCallingConfig")) or {}
    allowed = config.get("allowedFunctionNames") or config.get("allowed_function_names") or []  # JSON takes both
    declared = [
        d.get("name")
        for tool in body.get("tools") or []
        for d in tool.get("functionDeclarations") or tool.get("function_declarations") or []
    ]
    for name in allowed:
        if name not in declared:
            yield f"allowedFunctionNames names {name!r}, declared are {declared}"


def gemini_calling_config_needs_declarations(body: Body, path: str) -> Iterator[str]:
    """``toolConfig.functionCallingConfig`` only beside ``functionDeclarations``: "Function calling config
    is set without function_declarations." (400 INVALID_ARGUMENT on the Gemini Developer API; the config
    governs function tools only, so a request with none, or with built-in tools only, carries no
    ``functionCallingConfig``: pydantic-ai's ``test_google_tool_config`` and its live recording)."""
    config = body.get("toolConfig") or body.get("tool_config") or {}
    calling = config.get("functionCallingConfig") or config.get("function_calling_config")
    declared = any(t.get("functionDeclarations") or t.get("function_declarations") for t in body.get("tools") or [])
    if calling and not declared:
        yield "Function calling config is set without function_declarations."


# -- Vertex AI ---------------------------------------------------------------------------------------
# Claude on Vertex AI (Anthropic's "Claude on Vertex AI" page: the model is in the endpoint URL, not the
# body; ``anthropic_version`` is in the body, "vertex-2023-10-16"); Google Cloud's Claude web search page
# (the one server tool documented there). Gemini on Vertex AI: generateContent at
# ``/v1/projects/{project}/locations/{location}/publishers/google/models/{model}``; File Search stores are
# the Gemini API's (Vertex AI's ``Tool`` has no ``fileSearch``).

_VERTEX_CLAUDE_PATH = re.compile(
    r"/v1/projects/[^/]+/locations/[^/]+/publishers/anthropic/models/[^/:]+:(rawPredict|streamRawPredict)$"
)
_VERTEX_GEMINI_PATH = re.compile(r"/v1/projects/[^/]+/locations/[^/]+/publishers/google/models/[^/:]+:")


def vertex_claude_body(body: Body, path: str) -> Iterator[str]:
    """The model in the URL (``:rawPredict``/``:streamRawPredict``), none in the body, and
    ``anthropic_version: "vertex-2023-10-16"`` in the body."""
    found = _VERTEX_CLAUDE_PATH.search(path.split("?", 1)[0])
    if not found:
        yield f"path {path!r} is not a Vertex AI Claude rawPredict endpoint"
    elif (found.group(1) == "streamRawPredict") != bool(body.get("stream")):
        yield f"stream={body.get('stream')!r} sent to :{found.group(1)}"
    if "model" in body:
        yield "a model in the body (Vertex AI takes it in the endpoint URL)"
    if body.get("anthropic_version") != "vertex-2023-10-16":
        yield f"anthropic_version {body.get('anthropic_version')!r}, not 'vertex-2023-10-16'"


def vertex_claude_server_tools(body: Body, path: str) -> Iterator[str]:
    """Of Anthropic's server tools, only web search is offered for Claude on Vertex AI."""
    for tool in body.get("tools") or []:
        kind = str(tool.get("type") or "")
        if kind.startswith(("code_execution_", "web_fetch_", "mcp_", "bash_code_execution")):
            yield f"server tool {kind!r} is not offered on Vertex AI"


def vertex_gemini_request(body: Body, path: str) -> Iterator[str]:
    """A Vertex AI generateContent endpoint, and no ``fileSearch`` tool (the Gemini API's own)."""
    if not _VERTEX_GEMINI_PATH.search(path.split("?", 1)[0]):
        yield f"path {path!r} is not a Vertex AI generateContent endpoint"
    for tool in body.get("tools") or []:
        if "fileSearch" in tool or "file_search" in tool:
            yield "a fileSearch tool (File Search stores are the Gemini API's; Vertex AI has none)"


RULES: dict[str, Sequence[Rule]] = {
    "openai": [
        chat_roles,
        chat_call_pairing,
        chat_assistant_not_empty,
        chat_named_choice,
        chat_choice_needs_tools,
        no_cache_control,
    ],
    "deepseek": [
        chat_roles,
        chat_call_pairing,
        chat_assistant_not_empty,
        chat_named_choice,
        chat_choice_needs_tools,
        deepseek_reasoning_replayed,
        no_openai_cache_fields,
        no_cache_control,
    ],
    "groq": [
        chat_roles,
        chat_call_pairing,
        chat_assistant_not_empty,
        chat_named_choice,
        chat_choice_needs_tools,
        no_openai_cache_fields,
        no_cache_control,
    ],
    "local": [
        chat_roles,
        chat_call_pairing,
        chat_assistant_not_empty,
        chat_named_choice,
        chat_choice_needs_tools,
        no_openai_cache_fields,
        no_cache_control,
    ],
    "gemini_compat": [
        chat_roles,
        chat_call_pairing,
        chat_assistant_not_empty,
        chat_named_choice,
        chat_choice_needs_tools,
        gemini_compat_thought_signatures,
        no_openai_cache_fields,
        no_cache_control,
    ],
    "responses": [
        responses_call_pairing,
        responses_reasoning_followed,
        responses_reasoning_replayed,
        responses_items_typed,
        responses_include_and_containers,
    ],
    "openrouter": [
        chat_roles,
        chat_call_pairing,
        chat_assistant_not_empty,
        chat_named_choice,
        chat_choice_needs_tools,
        openrouter_reasoning_details_replayed,
        openrouter_web_plugin,
        openrouter_server_tools,
    ],
    "anthropic": [
        anthropic_roles,
        anthropic_nonempty_blocks,
        anthropic_call_pairing,
        anthropic_thinking_signed,
        anthropic_thinking_first,
        anthropic_forced_choice,
        anthropic_ends_on_user,
        anthropic_choice_needs_tools,
        anthropic_forced_choice_refused,
        anthropic_adaptive_only,
        anthropic_thinking_binding,
        anthropic_cache_breakpoints,
        no_openai_cache_fields,
    ],
    "gemini": [
        gemini_roles,
        gemini_nonempty_parts,
        gemini_call_pairing,
        gemini_thought_signatures,
        gemini_signatures_genuine,
        gemini_forced_choice,
        gemini_calling_config_needs_declarations,
        gemini_tool_combination,
        gemini_server_tool_parts,
    ],
}
RULES["vertex_anthropic"] = [*RULES["anthropic"], vertex_claude_body, vertex_claude_server_tools]
RULES["vertex_gemini"] = [*RULES["gemini"], vertex_gemini_request]
