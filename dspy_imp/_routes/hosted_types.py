"""The values of a route's hosted-tool translation (``_routes.hosted`` holds the table of them)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

Block = dict[str, Any]


@dataclass(frozen=True)
class HostedRequest:
    """What one request carries for its hosted tools.

    ``builtins``: lm15 ``BuiltinTool`` entries (natively); ``tools``: tool dicts joining
    ``lm_kwargs["tools"]`` after the function tools (LiteLLM: OpenRouter's server tool); ``betas``:
    ``anthropic-beta`` values the tools need;
    ``include``: Responses ``include`` values that ask for the tools' results in the reply;
    ``options``: top-level request fields (Chat Completions' ``web_search_options``), natively
    in the ``Request``'s ``config.extensions``, on LiteLLM among the call's options;
    ``continued``: natively, the ``Request`` as it goes given the history its messages carry (OpenAI's
    code interpreter naming the container of the last call), None: as built.
    """

    builtins: tuple[Any, ...] = ()
    tools: tuple[dict[str, Any], ...] = ()
    betas: tuple[str, ...] = ()
    include: tuple[str, ...] = ()
    options: Mapping[str, Any] = field(default_factory=dict)
    continued: Callable[[Any], Any] | None = None


@dataclass(frozen=True)
class HostedUsage:
    """The hosted calls one response counted, by the provider's names, and their fees in USD.

    ``input_tokens``: prompt tokens the provider's tool use added beside its prompt count (Gemini's
    ``toolUsePromptTokenCount``, billed as input), added to the call's input tokens. ``charged``: what the
    provider says it charged for the whole call (OpenRouter's ``usage.cost``: tokens and tools), the call's
    cost where DSPy priced none (its native engine prices no tokens on a request carrying a builtin tool);
    where DSPy priced the tokens, ``fee`` is added to them instead.
    """

    counts: Mapping[str, int] = field(default_factory=dict)
    fee: float = 0.0
    input_tokens: int = 0
    charged: float | None = None


HOSTED_CALL_NAMES = frozenset({"web_search", "code_execution", "web_fetch", "file_search", "mcp_call"})
"""The names a ``HostedCall`` is shown by (a status line, a tool card, a span)."""


@dataclass(frozen=True)
class HostedCall:
    """One call the provider ran inside a reply, as people see it (a status line, a tool card, a span).

    ``name``: what ran, one spelling across providers (``web_search``, ``code_execution``,
    ``web_fetch``, ``file_search``, ``mcp_call``); ``id``: the provider's id of the call (one made
    from the call itself where the provider gives none, stable across reads); ``input``: what it was
    asked, as served (``{"query": ...}``, ``{"code": ...}``, ``{"url": ...}``, ``{"server", "tool",
    "arguments"}``); ``result``: what came back, summarized (``{"results": [{"title", "url"}]}``, a
    code run's ``output`` and ``return_code``, an MCP tool's ``output``); ``error``: the provider's
    error code or message when the call failed, else None; ``provider``: ``anthropic``, ``openai``,
    ``gemini`` or ``openrouter``.
    """

    id: str
    name: str
    input: Mapping[str, Any]
    result: Mapping[str, Any]
    error: str | None = None
    provider: str = ""

    def as_dict(self) -> dict[str, Any]:
        """The call as JSON-ready values (``id``, ``name``, ``input``, ``result``, ``error``, ``provider``)."""
        return {
            "id": self.id,
            "name": self.name,
            "input": dict(self.input),
            "result": dict(self.result),
            "error": self.error,
            "provider": self.provider,
        }


@dataclass(frozen=True)
class HostedRoute:
    """One route's translation of hosted tools (see the module docstring)."""

    kind: str
    tools: frozenset[str]
    request: Callable[[Sequence[Any], Any], HostedRequest]
    served: Callable[[Any], Block | None]
    citations: Callable[[Mapping[str, Any]], list[dict[str, Any]]] = field(default=lambda block: [])
    usage: Callable[[Any], HostedUsage | None] = field(default=lambda response: None)
    as_text: Callable[[Mapping[str, Any]], str] = field(default=lambda block: "")
    # The hosted calls a recorded block holds, in the order served (what people see of them).
    calls: Callable[[Mapping[str, Any]], list[HostedCall]] = field(default=lambda block: [])
    # Why this request cannot carry these tools (an option the provider has no field for, a combination
    # the model refuses), given the tools, the LM and the request's function tool names; None: it can.
    refuse: Callable[[Sequence[Any], Any, Sequence[str]], str | None] = field(default=lambda tools, lm, functions: None)
    # Whether the request may carry function tools beside these; False (OpenAI's search models on Chat
    # Completions): ``refuse`` keeps them out, and the request goes with no ``tools`` and no ``tool_choice``.
    functions: bool = True
    # Whether a raw response is a reply the provider paused mid-turn (Anthropic's ``pause_turn``): the loop
    # sends it back at once so the provider goes on with it (``_turn.paused``).
    paused: Callable[[Any], bool] = field(default=lambda response: False)
    # The recorded block of a paused reply, continued by a raw response: one block holding both, as served.
    joined: Callable[[Block, Any], Block] | None = None
    # The request again, when the provider refused it for something a second request fixes (OpenAI: the
    # code interpreter's container expired, so a new one), given the request and the error; None: it stands.
    renewed: Callable[[Any, BaseException], Any] = field(default=lambda request, error: None)
