"""Nameless tool calls on DSPy's native engine: the one patch of lm15 (a private DSPy API).

lm15's Chat Completions reader refuses a whole reply when one of its tool calls has no
name ("lm15 does not guess which tool the model meant"), so the valid calls beside it are
lost and the step fails. The loop never guesses either: it records a nameless call as a
malformed call (an observation the model reads) and runs its valid siblings. To get
there, the reader is wrapped so that, *only while a dspy_imp step request is in flight*
(``in_step`` says so), a nameless call is read under the placeholder name ``UNNAMED``,
which the adapter turns back into "no name". Every other caller of lm15 sees the reader
unchanged.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import Any

from dspy_imp._routes import dspy_private

UNNAMED = "dspy_imp_unnamed_call"


def install(in_step: Callable[[], bool]) -> None:
    """Wrap lm15's Chat Completions body reader once per process (idempotent)."""

    def wrap(original: Any) -> Any:
        def read(provider: str, data: Any, *args: Any, **kwargs: Any) -> Any:
            if in_step():
                data = _named(data)
            return original(provider, data, *args, **kwargs)

        return read

    dspy_private.wrap_once(dspy_private.lm15_openai_chat(), "_response_from_chat_body", wrap)


def as_received(value: Any) -> Any:
    """A call as the provider sent it: the placeholder name back to ``""``."""
    if isinstance(value, dict):
        return {k: ("" if k == "name" and v == UNNAMED else as_received(v)) for k, v in value.items()}
    return value


def _named(data: Any) -> Any:
    """``data`` with every nameless function call given the placeholder name (a copy)."""
    if not isinstance(data, Mapping) or not any(_nameless(c) for c in _calls(data)):
        return data
    data = copy.deepcopy(dict(data))
    for call in _calls(data):
        if _nameless(call):
            call.setdefault("function", {})
            if not isinstance(call["function"], dict):
                call["function"] = {}
            call["function"]["name"] = UNNAMED
    return data


def _calls(data: Mapping[str, Any]) -> list[Any]:
    calls: list[Any] = []
    for choice in data.get("choices") or []:
        message = choice.get("message") if isinstance(choice, Mapping) else None
        if isinstance(message, Mapping) and isinstance(message.get("tool_calls"), list):
            calls.extend(message["tool_calls"])
    return calls


def _nameless(call: Any) -> bool:
    if not isinstance(call, Mapping) or (call.get("type") or "function") != "function":
        return False
    function = call.get("function")
    return not (isinstance(function, Mapping) and function.get("name"))
