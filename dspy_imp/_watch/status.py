"""Status messages for a turn: what each step of it is doing, in one short line.

``StatusMessageProvider`` extends DSPy's (``dspy.streaming.StatusMessageProvider``): its
tool messages name the tool and show its arguments and result shortened, and it adds one
method per event of a ``dspy_imp`` turn (a request of each kind, a context-window
recovery, a retry under the deadline, an MCP server's progress and log messages, the end of
the turn). Pass it, or a subclass, to
``dspy.streamify(..., status_message_provider=...)``. A plain DSPy provider works too: its
tool messages are used, and the ``dspy_imp`` events get this class's default lines.
A method returning ``None`` (or ``""``) sends nothing.
"""

from __future__ import annotations

import json
from contextvars import ContextVar
from typing import Any

import dspy

from dspy_imp._routes.hosted_types import HostedCall
from dspy_imp._turn.effects import Ending, Failure

_SHORT = 80


_TOOLS: ContextVar[tuple[str, ...]] = ContextVar("dspy_imp_status_tools", default=())
"""The tools called and not yet ended, innermost last: a sub-agent's own tools run inside its call."""


def short(value: Any, limit: int = _SHORT) -> str:
    """One line of at most ``limit`` characters (JSON where it can be, ``…`` when cut)."""
    try:
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        text = repr(value)
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


class StatusMessageProvider(dspy.streaming.StatusMessageProvider):
    """Status lines for every step of a ``dspy_imp`` turn.

    Example:
        ```python
        stream = dspy.streamify(agent, status_message_provider=dspy_imp.StatusMessageProvider())
        ```
    """

    def tool_start_status_message(self, instance: Any, inputs: dict[str, Any]) -> str | None:
        _TOOLS.set((*_TOOLS.get(), instance.name))  # on_tool_end runs in the same context, without the tool
        args = inputs.get("kwargs", inputs) if isinstance(inputs, dict) else inputs
        return f"Calling {instance.name}({short(args)})"

    def tool_end_status_message(self, outputs: Any) -> str | None:
        """A sub-agent's call shows what the caller's model reads: its one output, or all of them."""
        called = _TOOLS.get()
        _TOOLS.set(called[:-1])
        name = called[-1] if called else "Tool"
        if outputs is None:  # DSPy passes no outputs for a call that raised or was refused
            return f"{name} finished with no result"
        meta = getattr(outputs, "metadata", None)
        if meta is not None and hasattr(outputs, "items"):  # a sub-agent's prediction
            if not meta.complete:
                return f"{name} ended {meta.termination_reason} without an answer"
            values = dict(outputs.items())
            return f"{name} returned: {short(next(iter(values.values())) if len(values) == 1 else values)}"
        return f"{name} returned: {short(outputs)}"

    def request_status_message(self, kind: str, omitted: int) -> str | None:
        """Before a request other than an ordinary step (``kind``: a ``RequestKind``)."""
        return {
            "step": None,
            "last_text": "Asking for a last text answer",
            "forced_submit": "Asking the model to submit its answer (forced submit)",
            "required_retry": "Asking again for submit (tool_choice=required)",
            "extraction": "Extracting the outputs from the conversation",
            "summary": "Summarizing the earlier conversation to save context",
        }.get(kind)

    def context_status_message(self, record: dict[str, Any]) -> str | None:
        """Before a request a context policy shortened (``record``: its ``metadata.context`` entry)."""
        done = [_TIER_WORDS[a["tier"]](a) for a in record.get("applied", ()) if not a.get("failed")]
        if not done:
            return None
        return f"Context: {', '.join(done)} ({record['tokens_before']:,} -> {record['tokens']:,} tokens)"

    def context_window_status_message(self, omitted: int) -> str | None:
        """Before a request resent after a context-window refusal."""
        return f"Context window exceeded: resending with {omitted} earlier entries left out"

    def retry_status_message(self, seconds: float, error: BaseException | None) -> str | None:
        """Before the pause of a retry under the deadline."""
        why = f" after {type(error).__name__}" if error is not None else ""
        return f"Retrying in {seconds:.3g}s{why}"

    def fallback_status_message(self, model: str, error: BaseException | None) -> str | None:
        """Before a request sent on to the next LM of the chain (``fallback=``)."""
        why = f" after {type(error).__name__}" if error is not None else ""
        return f"Trying {model}{why}"

    def cache_bust_status_message(self, reason: str) -> str | None:
        """Before a request that does not extend the one before (``reason``: a ``CacheBustReason``):
        the provider's prompt cache serves only what the two share."""
        return f"Prompt cache: this request starts a new prefix ({_BUST_WORDS.get(reason, reason)})"

    def tool_timeout_status_message(self, name: str, seconds: float) -> str | None:
        """When the loop stopped waiting for a tool (its timeout, or the deadline)."""
        return f"{name} timed out after {seconds:.3g} s"

    def guardrail_status_message(self, stage: str, name: str, reason: str) -> str | None:
        """When a guardrail trips (``stage``: ``"input"`` or ``"output"``)."""
        return f"Blocked by {name} ({stage} guardrail): {reason}"

    def hosted_tool_status_message(self, call: HostedCall) -> str | None:
        """After a reply in which the provider ran a tool (``call``: a ``HostedCall``, with its ``name``,
        ``input``, ``result`` and ``error``): what it did, in one line (``Searched the web for "…"``)."""
        return hosted_line(call)

    def mcp_progress_status_message(
        self, tool: str, progress: float, total: float | None, message: str | None
    ) -> str | None:
        """While a call of an MCP server's tool runs, for each progress notification it sends
        (``tool``: the server's name of the tool; ``total``: ``None`` when unknown; ``message``: on
        one line, cut, or ``None``): ``crunch: 1/2 first half``."""
        return progress_line(tool, progress, total, message)

    def mcp_log_status_message(self, tool: str, level: str, logger: str | None, text: str) -> str | None:
        """For a log message an MCP server sent during a call of its tool (``level``: MCP's,
        ``"debug"`` to ``"emergency"``; ``logger``: the name the server gives, or ``None``;
        ``text``: on one line, cut): ``crunch: [warning] disk: almost full``. The line saying how
        many messages a call's bound left out comes here too (``"warning"``, logger ``"dspy_imp"``)."""
        return log_line(tool, level, logger, text)

    def turn_end_status_message(self, reason: str, cause: str | None) -> str | None:
        """At the end of the turn (``reason``: the termination reason, ``"error"`` for a ``StepError``).
        A sub-agent's line is prefixed with its path (``researcher: Turn ended: answered``)."""
        return f"Turn ended: {reason}" + (f" ({cause})" if cause else "")


def progress_line(tool: str, progress: float, total: float | None, message: str | None) -> str:
    """An MCP progress notification as one status line: ``fetch: 2/5 reading``."""
    count = f"{progress:g}/{total:g}" if total else f"{progress:g}"
    return " ".join(part for part in (f"{tool}:", count, short(message or "", 200)) if part)


def log_line(tool: str, level: str, logger: str | None, text: str) -> str:
    """An MCP log message as one status line: ``fetch: [warning] cache: almost full``."""
    return f"{tool}: [{level}] {logger}: {text}" if logger else f"{tool}: [{level}] {text}"


def hosted_line(call: HostedCall) -> str:
    """A hosted call in one line: what the provider did, with what came back (or its error)."""
    given = call.input if isinstance(call.input, dict) else {}
    result = call.result if isinstance(call.result, dict) else {}
    found = result.get("results")
    count = f" ({len(found)} result{'' if len(found) == 1 else 's'})" if isinstance(found, list) and found else ""
    name = call.name
    if name == "web_search" and given.get("type") in ("open_page", "find"):
        line = f"Opened {short(given.get('url') or '', 60)}" if given["type"] == "open_page" else ""
        line = line or f"Searched {short(given.get('url') or 'a page', 40)} for {short(given.get('pattern') or '', 30)}"
    elif name == "web_search":
        line = f"Searched the web for {_quoted(given.get('query') or given.get('queries'))}{count}"
    elif name == "web_fetch":
        urls = given.get("urls")
        fetched = [str(u) for u in urls] if isinstance(urls, list) else [str(given.get("url") or "a page")]
        line = f"Fetched {short(', '.join(fetched), 60)}"
    elif name == "code_execution":
        code = given.get("code") or given.get("command") or given.get("path") or ""
        output = result.get("output")
        code_part = f"Ran code: {short(code, 40)}"
        returned = result.get("return_code")
        line = code_part + (f" (exit code {returned})" if returned not in (None, 0) else "")
        line += f" -> {short(output, 40)}" if output else ""
    elif name == "file_search":
        line = f"Searched files for {_quoted(given.get('queries') or given.get('stores'))}{count}"
    elif name == "mcp_call":
        where = f"{given.get('server')}.{given.get('tool')}"
        line = f"Called {where}({short(given.get('arguments') or {}, 40)}) on the provider"
        line += f": {short(result['output'], 40)}" if result.get("output") else ""
    else:
        line = f"The provider ran {name}({short(given, 40)})"
    return f"{line} (failed: {call.error})" if call.error else line


def _quoted(value: Any) -> str:
    values = value if isinstance(value, list) else [value]
    return ", ".join(f'"{short(v, 60)}"' for v in values if v) or "(no query)"


_TIER_WORDS = {
    "clear": lambda a: f"cleared {a['results_cleared']} old tool results",
    "summarize": lambda a: f"summarized {a['entries_summarized']} earlier entries",
    "leave_out": lambda a: f"left out {a['entries_left_out']} earlier entries",
}


_BUST_WORDS = {
    "context_policy": "the context policy changed earlier entries",
    "fallback": "another model",
    "tools_changed": "a different tool list",
    "history_edited": "an edited history",
    "history_replay": "the last turn replayed as its actions",
    "tool_choice_changed": "a forced tool choice",
}


_DEFAULT = StatusMessageProvider()


def status_for(provider: Any, event: str, *args: Any) -> str | None:
    """The provider's line for one event; our default for a provider without the method."""
    if event == "tool":
        name, arguments = args
        return f"Calling {name}({short(arguments)})"
    if event == "end":
        outcome = args[0]
        if isinstance(outcome, Failure):
            return _call(provider, "turn_end_status_message", "error", type(outcome.error).__name__)
        assert isinstance(outcome, Ending)
        return _call(provider, "turn_end_status_message", outcome.reason, outcome.cause)
    if event in (
        "retry",
        "fallback",
        "tool_timeout",
        "guardrail",
        "cache_bust",
        "hosted_tool",
        "mcp_progress",
        "mcp_log",
    ):
        return _call(provider, f"{event}_status_message", *args)
    if event == "context":
        return _call(provider, "context_status_message", *args)
    kind, omitted, recovered = args
    if recovered:
        return _call(provider, "context_window_status_message", omitted)
    return _call(provider, "request_status_message", kind, omitted)


def _call(provider: Any, method: str, *args: Any) -> str | None:
    handler = getattr(provider, method, None) or getattr(_DEFAULT, method)
    return handler(*args)
