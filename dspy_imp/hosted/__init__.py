"""Tools the provider runs: web search, code execution, URL fetch, remote MCP and file search.

Given in ``ReActV2(..., tools=[...])`` beside function tools (``docs/hosted-tools.md``). The loop
never runs them: each is translated for the route the request takes, the provider runs it inside
its reply, and the call and result blocks it serves are recorded verbatim and sent back as served
on the next request to the same provider. A route without the tool is a ``ConfigurationError``
naming the model and the tool, before any request.
"""

from __future__ import annotations

from dspy_imp._records.hosted import CodeExecution, FileSearch, HostedTool, RemoteMCP, WebFetch, WebSearch

__all__ = ["CodeExecution", "FileSearch", "HostedTool", "RemoteMCP", "WebFetch", "WebSearch"]
