"""Prompt caching per route: what a request carries so the provider caches the prefix it shares
with the next one (``prompt_cache=``, ``docs/providers.md#prompt-caching``).

Each request of a turn is a byte-exact extension of the one before, the best case for a cache,
but some providers cache only where the request marks a breakpoint, and OpenAI routes a request
to a warm cache by a key. Per route, with ``prompt_cache`` on:

- **Anthropic** (native engine, LiteLLM, and LiteLLM's Bedrock and Vertex AI Claude models): three
  breakpoints, where the request's stable prefixes end: the end of tools + system (a mark on the
  system message), the end of the request before (the message before the last assistant message,
  which the request before ended on) and the end of the last message. The last two move forward
  with the turn: each request finds what the one before wrote at its own second breakpoint, however
  many blocks the last step added (Anthropic looks back only 20 blocks from a breakpoint; a reply
  with 11 or more parallel calls adds more than that), and writes its own prefix at the last. The
  TTL is the provider's default (5 minutes) or ``"1h"`` (``"1h"``/``"24h"``). Natively this is
  DSPy's own setting, ``prompt_cache`` with an lm15 ``CacheConfig(prefix="history")`` (the system
  and the last message), and the middle mark added to lm15's Messages body (``install``); on
  LiteLLM, ``cache_control`` on those three messages (LiteLLM puts it on their last content block,
  and turns it into Bedrock's ``cachePoint``). Three of Anthropic's four.
- **OpenRouter**'s Claude and Gemini models: the same three marks in the content parts (OpenRouter
  passes them through); natively, the ``_routes.chat_extras`` writer adds them.
- **OpenAI** models (Chat Completions and the Responses API): ``prompt_cache_key`` from the
  conversation (``conversation_key``), and ``prompt_cache_retention="24h"`` for ``"24h"`` where
  the model takes it (``model_facts``: ``takes_cache_retention``); elsewhere it is dropped, with
  one warning per model (gpt-4o-mini and gpt-5-mini refuse it: every request would fail).
- **Nothing** to Gemini (implicit caching), DeepSeek (automatic), Groq, a server of your own,
  Gemini's OpenAI-compatible endpoint, or a custom engine: they refuse or ignore the fields.

A user's own ``prompt_cache`` (on the LM or in ``config``), or their own ``prompt_cache_key``,
wins: nothing of ours is added beside it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import re
from collections.abc import Iterator, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from dspy.lm15 import CacheConfig

from dspy_imp._routes import dspy_private, local_servers
from dspy_imp._routes.model_facts import model_facts
from dspy_imp._routes.route import Route

logger = logging.getLogger(__name__)
_ANTHROPIC_ROUTES = frozenset({"anthropic", "bedrock", "bedrock_converse", "vertex_ai"})
_OPENAI_ROUTES = frozenset({"openai", "openai-chat", "openai-responses"})
# OpenAI's own model names (a server of your own or Gemini's compatible endpoint also use ``openai/``).
_OPENAI_MODEL = re.compile(r"^(gpt-|o\d|chatgpt-|codex-|computer-use-)")
_OPENROUTER_FAMILIES = ("anthropic/", "google/")


def cache_mark(ttl: str | None) -> dict[str, str]:
    """Anthropic's ``cache_control``: ephemeral, with ``"1h"`` where the long lifetime is asked for."""
    return {"type": "ephemeral", "ttl": "1h"} if ttl in ("1h", "24h") else {"type": "ephemeral"}


def family(lm: Any, route: Route) -> str | None:
    """``"anthropic"``, ``"openrouter"``, ``"openai"`` or ``None`` (nothing to send on this route)."""
    model = str(getattr(lm, "model", "")).lower()
    name = model.rsplit("/", 1)[-1]
    if route.engine == "custom" or route.provider is None:
        return None
    if route.provider in _ANTHROPIC_ROUTES and "claude" in model:
        return "anthropic"
    if route.provider == "openrouter":
        rest = model.removeprefix("openrouter/")
        return "openrouter" if rest.startswith(_OPENROUTER_FAMILIES) else None
    if route.provider in _OPENAI_ROUTES and _OPENAI_MODEL.match(name) and not _open_weights(lm, name):
        return "openai"
    return None


def _open_weights(lm: Any, name: str) -> bool:
    """An open-weight model (``gpt-oss-*``) at a server of your own: OpenAI's API does not serve
    these names. Another OpenAI name at a local ``api_base`` is taken as a proxy to OpenAI (a LiteLLM
    proxy) and keeps its fields."""
    return name.startswith("gpt-oss") and local_servers.reads_reasoning_back(lm)


def rereads_messages_on_choice(model: str) -> bool:
    """Whether a new ``tool_choice`` (and with it, on a forced request, new thinking settings) makes
    the provider's cache re-read the messages: Claude on Anthropic, Bedrock, Vertex AI and through
    OpenRouter ("Changes to tool_choice parameter only affect message blocks": Anthropic's
    prompt-caching guide; the tools and system stay cached). ``model`` as the LM names it.

    Not a model that refuses a forced choice (``model_facts``: Claude 5.x): its forced requests go
    out with ``tool_choice: auto`` and the steps' thinking, so its cache holds through the turn."""
    if model_facts(model).refuses_forced_tool_choice:
        return False
    model = model.lower()
    provider, slash, rest = model.partition("/")
    if not slash:
        return model.startswith("claude")
    if provider == "openrouter":
        return rest.startswith("anthropic/")
    return provider in _ANTHROPIC_ROUTES and "claude" in rest


@dataclass(frozen=True)
class Caching:
    """What a request's prompt cache still needs once its options are set (``cache_options``):
    ``mark``, the ``cache_control`` to place on its messages (LiteLLM's Anthropic routes, OpenRouter);
    ``native``, DSPy's own ``prompt_cache`` setting to add once the messages are known (``native_cache``)."""

    mark: dict[str, str] | None = None
    native: CacheConfig | None = None
    previous: dict[str, str] | None = None  # natively to Anthropic: the mark on the request before's end


NOTHING = Caching()


def cache_options(lm: Any, route: Route, options: dict[str, Any], setting: bool | str, key: str) -> Caching:
    """Put this route's cache options into ``options`` (a request's keyword options); what is left
    to do with the messages is returned. ``setting`` is the call's ``prompt_cache``.

    OpenAI's key and retention are ordinary options on both engines (DSPy's native conversion reads
    them as its own cache setting). Natively, Anthropic's marks are DSPy's ``prompt_cache``.
    """
    kin = family(lm, route)
    own = (getattr(lm, "kwargs", None) or {}).get("prompt_cache") is not None or options.get("prompt_cache")
    if setting is False or kin is None or own:
        return NOTHING
    ttl = setting if isinstance(setting, str) else None
    if kin == "openai":
        if "prompt_cache_key" not in options and "prompt_cache_key" not in (getattr(lm, "kwargs", None) or {}):
            options["prompt_cache_key"] = key
        if ttl == "24h":
            _retention(lm, options)
        return NOTHING
    if kin == "anthropic" and route.engine == "native":
        native = CacheConfig(prefix="history", retention="long" if ttl in ("1h", "24h") else None)
        return Caching(native=native, previous=cache_mark(ttl))
    return Caching(mark=cache_mark(ttl))  # natively to OpenRouter, the ``chat_extras`` writer places it


def _retention(lm: Any, options: dict[str, Any]) -> None:
    model = str(getattr(lm, "model", ""))
    if model_facts(model).takes_cache_retention:
        options.setdefault("prompt_cache_retention", "24h")
    elif model not in _WARNED:
        _WARNED.add(model)
        logger.warning(
            "dspy_imp: prompt_cache='24h' sends no prompt_cache_retention to %r: the model does not take it "
            "(dspy_imp.register_model_facts(..., ModelFacts(takes_cache_retention=True)) if it does)",
            model,
        )


_WARNED: set[str] = set()


def native_cache(lm: Any, caching: Caching, messages: Sequence[Mapping[str, Any]]) -> CacheConfig | None:
    """DSPy's ``prompt_cache`` for these messages, or ``None``.

    With it set, DSPy's ``engine="auto"`` no longer dry-runs a request to move one the native
    engine cannot carry to LiteLLM (where DSPy refuses ``prompt_cache``). An audio part is such a
    request on Anthropic's route, so it goes out uncached, as before.
    """
    if caching.native is None:
        return None
    if getattr(lm, "_engine_spec", None) == "auto" and any(_has_audio(m) for m in messages):
        return None
    return caching.native


def _has_audio(message: Mapping[str, Any]) -> bool:
    content = message.get("content")
    return isinstance(content, list) and any(isinstance(p, Mapping) and p.get("type") == "input_audio" for p in content)


_MARK: ContextVar[dict[str, str] | None] = ContextVar("dspy_imp_cache_mark", default=None)
_PREVIOUS: ContextVar[dict[str, str] | None] = ContextVar("dspy_imp_cache_previous", default=None)


@contextlib.contextmanager
def marking_previous(mark: Mapping[str, str] | None) -> Iterator[None]:
    """Native requests to Anthropic sent in this block get ``mark`` on the end of the request before."""
    token = _PREVIOUS.set(dict(mark) if mark is not None else None)
    try:
        yield
    finally:
        _PREVIOUS.reset(token)


def install() -> None:
    """Wrap lm15's Anthropic Messages body writer once per process (idempotent): inside
    ``marking_previous``, the body gets the middle breakpoint DSPy's ``CacheConfig`` has no slot for."""

    def wrap(original: Any) -> Any:
        def payload(self: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
            body = original(self, *args, **kwargs)
            mark = _PREVIOUS.get()
            if mark is not None and isinstance(body, dict) and isinstance(body.get("messages"), list):
                body["messages"] = mark_previous(body["messages"], mark)
            return body

        return payload

    dspy_private.wrap_once(dspy_private.lm15_anthropic().AnthropicLM, "_payload", wrap)


def mark_previous(messages: list[Any], mark: Mapping[str, str]) -> list[Any]:
    """Messages API ``messages`` with ``mark`` on the last block of ``previous_end`` (unless it is
    empty text, or already marked); the rest as they were."""
    index = previous_end(messages)
    if index is None:
        return messages
    message = messages[index]
    content = message.get("content")
    if isinstance(content, str):
        content = [{"type": "text", "text": content}]
    if not isinstance(content, list) or not content or not isinstance(content[-1], Mapping):
        return messages
    last = dict(content[-1])
    if "cache_control" in last or (last.get("type") == "text" and not str(last.get("text") or "").strip()):
        return messages
    out = list(messages)
    out[index] = {**message, "content": [*content[:-1], {**last, "cache_control": dict(mark)}]}
    return out


@contextlib.contextmanager
def marking(mark: Mapping[str, str] | None) -> Iterator[None]:
    """Native requests to OpenRouter sent in this block get ``mark`` (``chat_extras`` writes it)."""
    token = _MARK.set(dict(mark) if mark is not None else None)
    try:
        yield
    finally:
        _MARK.reset(token)


def current_mark() -> dict[str, str] | None:
    return _MARK.get()


def conversation_key(model: str, instructions: str, first: Mapping[str, Any]) -> str:
    """OpenAI's ``prompt_cache_key`` for a conversation: the same on every request of a turn and
    on every turn of one conversation (it hashes what stays first: the program's instructions and
    the conversation's first inputs), never a random value."""
    text = json.dumps([model, instructions, dict(first)], sort_keys=True, default=str, ensure_ascii=False)
    return "dspy-imp-" + hashlib.sha256(text.encode(errors="surrogatepass")).hexdigest()[:24]


def previous_end(messages: Sequence[Mapping[str, Any]]) -> int | None:
    """Where the request before this one ended: the message before the last assistant message (the
    user's input, or the last tool result, of the request that asked for that reply); ``None``
    when no assistant message follows a user's."""
    last = next((i for i in range(len(messages) - 1, -1, -1) if messages[i].get("role") == "assistant"), None)
    if last is None or last < 1 or messages[last - 1].get("role") in ("system", "assistant"):
        return None
    return last - 1


def marked(messages: Sequence[Mapping[str, Any]], mark: Mapping[str, str], openrouter: bool = False) -> list[Any]:
    """``messages`` (new dicts) with ``mark`` on the system message, the end of the request before
    (``previous_end``) and the last message.

    LiteLLM's Anthropic routes take a message-level ``cache_control``; OpenRouter takes it on a
    content part, so a string content becomes one text part there. A message that is not text
    (an assistant's calls alone) is marked at the message level, which LiteLLM puts on its last
    block. Never on an empty text (Anthropic refuses it).
    """
    out = [dict(m) for m in messages]
    targets = {len(out) - 1}
    if out and out[0].get("role") == "system":
        targets.add(0)
    before = previous_end(out)
    if before is not None:
        targets.add(before)
    for index in sorted(targets):
        if index < 0:
            continue
        out[index] = _mark(out[index], dict(mark), openrouter)
    return out


def _mark(message: dict[str, Any], mark: dict[str, str], openrouter: bool) -> dict[str, Any]:
    content = message.get("content")
    if isinstance(content, str):
        if not content.strip():
            return message
        if not openrouter:
            return {**message, "cache_control": mark}
        return {**message, "content": [{"type": "text", "text": content, "cache_control": mark}]}
    if isinstance(content, list) and content and isinstance(content[-1], Mapping):
        last = dict(content[-1])
        if last.get("type") == "text" and not str(last.get("text") or "").strip():
            return message
        return {**message, "content": [*content[:-1], {**last, "cache_control": mark}]}
    return message if openrouter else {**message, "cache_control": mark}
