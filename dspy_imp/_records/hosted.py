"""Tools the provider runs: web search, code execution, URL fetch, remote MCP and file search.

Given in ``ReActV2(..., tools=[...])`` beside function tools. The loop never runs them: each is
translated for the route the request takes (``dspy_imp._routes.hosted``), the provider runs it
inside its reply, and the call and result blocks it serves are recorded verbatim and sent back as
served on the next request to the same provider (as text to another). A route without the tool is
a ``ConfigurationError`` naming the model and the tool, before any request. Approvals cannot apply
to them (the provider runs them within one request).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dspy_imp._records.errors import ConfigurationError

CONTEXT_SIZES = ("low", "medium", "high")  # OpenAI's search_context_size values


@dataclass(frozen=True)
class HostedTool:
    """A tool the provider runs. ``kind`` names it in errors and in the per-route tables."""

    kind = "hosted"

    @property
    def label(self) -> str:
        return type(self).__name__


@dataclass(frozen=True)
class WebSearch(HostedTool):
    """The provider's web search. ``max_uses``: the most searches one request may run (the provider
    counts them); ``user_location``: ``{"type": "approximate", "city": ..., "country": ...}``;
    ``search_context_size``: how much of what the search found the model reads, ``"low"``,
    ``"medium"`` or ``"high"`` (OpenAI's; the provider's default, ``"medium"``, when unset). A
    provider without the option refuses it: Gemini's Google Search takes none of them, Anthropic's
    web search no ``search_context_size``; OpenRouter's web search server tool each only where the
    engine it searches with keeps it (its web plugin, when the LM was given one, no ``max_uses`` or
    ``user_location``)."""

    max_uses: int | None = None
    allowed_domains: Sequence[str] = ()
    blocked_domains: Sequence[str] = ()
    user_location: Mapping[str, Any] | None = None
    search_context_size: str | None = None
    kind = "web_search"

    def __post_init__(self) -> None:
        if self.search_context_size is not None and self.search_context_size not in CONTEXT_SIZES:
            raise ConfigurationError(
                f"WebSearch(search_context_size={self.search_context_size!r}): give one of {', '.join(CONTEXT_SIZES)}"
            )


@dataclass(frozen=True)
class CodeExecution(HostedTool):
    """Code run in the provider's sandbox (Anthropic's and Gemini's code execution, OpenAI's code interpreter).

    ``reuse_container``: on OpenAI and Anthropic, each request after a code run names the container
    that code ran in, so the files and variables it made are there for the next step and for a later
    turn of the same history. On OpenAI an expired container (20 minutes unused) is replaced by a new
    one once; on Anthropic a container past the ``expires_at`` its reply gave is not named. ``False``:
    every request gets a new container. Gemini's code execution keeps no state between requests.
    """

    reuse_container: bool = True
    kind = "code_execution"

    def __post_init__(self) -> None:
        if not isinstance(self.reuse_container, bool):
            raise ConfigurationError(f"CodeExecution(reuse_container={self.reuse_container!r}): give True or False")


@dataclass(frozen=True)
class WebFetch(HostedTool):
    """The provider fetching URLs the conversation names (Anthropic's web fetch, Gemini's URL context).
    ``max_uses``: the most fetches one request may run."""

    max_uses: int | None = None
    kind = "web_fetch"


@dataclass(frozen=True)
class RemoteMCP(HostedTool):
    """An MCP server the provider connects to itself (not ``dspy_imp.mcp``, which the loop runs)."""

    url: str = ""
    allowed_tools: Sequence[str] | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    kind = "remote_mcp"


@dataclass(frozen=True)
class FileSearch(HostedTool):
    """Search over the provider's stores of your files (OpenAI's vector stores, Gemini's File Search
    stores: ``fileSearchStores/...`` names)."""

    store_ids: Sequence[str] = ()
    kind = "file_search"


__all__ = ["CodeExecution", "FileSearch", "HostedTool", "RemoteMCP", "WebFetch", "WebSearch"]
