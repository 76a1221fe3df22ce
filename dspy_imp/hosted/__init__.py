"""Tools the provider runs: web search, code execution, URL fetch, remote MCP and file search.

Given in ``ReActV2(..., tools=[...])`` beside function tools (``docs/hosted-tools.md``). The loop
never runs them: each is translated for the route the request takes, the provider runs it inside
its reply, and the call and result blocks it serves are recorded verbatim and sent back as served
on the next request to the same provider. A route without the tool is a ``ConfigurationError``
naming the model and the tool, before any request.

What the provider ran is shown like a tool call (``docs/hosted-tools.md``, *What people see*):
``calls_in(entry)`` lists a history entry's hosted calls as ``HostedCall`` values.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dspy_imp._records.hosted import CodeExecution, FileSearch, HostedTool, RemoteMCP, WebFetch, WebSearch
from dspy_imp._routes.hosted import calls_of
from dspy_imp._routes.hosted_types import HostedCall

__all__ = ["CodeExecution", "FileSearch", "HostedCall", "HostedTool", "RemoteMCP", "WebFetch", "WebSearch", "calls_in"]


def calls_in(entry: Mapping[str, Any]) -> list[HostedCall]:
    """The calls the provider ran in one history entry's reply, in the order served.

    Read from the entry's recorded served block (its ``reasoning_details``), for any provider:
    ``[c.name for c in calls_in(pred.metadata.history.messages[0])]`` is ``["web_search"]`` after a
    turn whose first reply searched the web. An entry without one has none.
    """
    return calls_of(entry.get("reasoning_details")) if isinstance(entry, Mapping) else []
