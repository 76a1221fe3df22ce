"""Our history, in the entry shape ``dspy.ReActV2`` records, for code written against it.

Our entries keep ``tool_calls`` and ``tool_call_results`` as two plain lists (JSON-safe, ids
kept). ``dspy.ReActV2`` keeps one ``dspy.ToolCalls`` per entry with its results nested
(``entry["tool_calls"].tool_calls[0].id``), and reads nothing else. ``to_dspy_history``
converts: pass its result to ``dspy.ReActV2`` or to code that reads stock entries. Task
inputs and outputs, ``next_thought`` and keys the loop does not know stay as they are.
(The other way needs nothing: ``dspy_imp.ReActV2`` accepts a stock history as it is.)
"""

from __future__ import annotations

from typing import Any

import dspy

from dspy_imp._records.steps import Step, coerce_history, from_entry, make_history


def to_dspy_history(history: Any) -> dspy.History:
    """A new ``dspy.History`` whose entries are shaped as ``dspy.ReActV2`` records them.

    Example:
        ```python
        stock = dspy_imp.to_dspy_history(pred.metadata.history)
        stock.messages[0]["tool_calls"].tool_calls[0].id
        ```
    """
    entries = []
    for position, entry in enumerate(coerce_history(history)):
        converted = _stock_entry(from_entry(entry, (), (), position))
        if converted:
            entries.append(converted)
    return make_history(entries)


def _stock_entry(step: Step) -> dict[str, Any]:
    event: dict[str, Any] = dict(step.extra)  # task inputs and outputs, unknown keys
    if step.thought is not None:
        event["next_thought"] = step.thought
    if step.calls:
        calls = [
            dspy.ToolCalls.ToolCall(id=c.id, name=c.name or "unreadable_call", args=dict(c.args)) for c in step.calls
        ]
        results = dspy.ToolCallResults(
            tool_call_results=[
                dspy.ToolCallResults.ToolCallResult(
                    call_id=r.id, name=r.name or "unreadable_call", value=r.value, is_error=r.error
                )
                for r in step.results
            ]
        )
        event["tool_calls"] = dspy.ToolCalls(
            tool_calls=calls, tool_call_results=results if results.tool_call_results else None
        )
    if step.reasoning_content is not None:
        event["reasoning_content"] = step.reasoning_content
    if step.reasoning_details is not None:
        event["reasoning_details"] = step.reasoning_details
    return event
