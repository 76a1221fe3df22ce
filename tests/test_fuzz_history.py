"""Histories from outside, fuzzed: ``dspy_imp.load_history`` (a dumped history, from a file or a
database) and ``dspy_imp.web.from_messages`` (AG-UI messages a client kept).

Each example is a valid document (a real turn's dump, its AG-UI messages) with a few nodes
replaced by hostile values (wrong types, NaN, lone surrogates, nesting past the recursion limit),
deleted, inserted or nested. The property: the parser raises ``ConfigurationError`` naming what
it refused, or returns a history that ``dump_history`` dumps and an agent continues (a
prediction, or a ``ConfigurationError`` before any request); never another exception or a hang.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import dspy
from fuzz_helpers import HOSTILE, Deep, bounded, budget, mutated, realize
from helpers import TA, Look
from hypothesis import example, given
from hypothesis import strategies as st

import dspy_imp
from dspy_imp.testing import ScriptedLM, call, reply
from dspy_imp.web import from_messages, to_messages


def _turn() -> dspy.History:
    lm = ScriptedLM(
        [
            reply("Looking.", calls=[call("look", {"where": "shelf"}, id="c1")], reasoning="Check the shelf."),
            reply("The key is on the shelf."),
        ]
    )
    agent = dspy_imp.ReActV2(TA, tools=[Look()])
    with dspy.context(lm=lm):
        return agent(intent="Where is the key?").metadata.history


HISTORY = _turn()
MEDIA_ENTRY = {
    "intent": {"__imp_type__": "media", "class": "dspy.Image", "fields": {"url": "https://example.com/k.png"}},
    "tool_calls": [{"id": "p1", "name": "look", "args": {"where": "door"}}],
    "tool_call_results": [],
    "pending_calls": [{"id": "p1", "name": "look", "args": {"where": "door"}, "kind": "approval"}],
}
SUBAGENT_ENTRY = {
    "intent": "Ask the helper.",
    "tool_calls": [{"id": "a1", "name": "look", "args": {}}],
    "tool_call_results": [
        {"id": "a1", "name": "look", "result": {"seen": True}, "error": False, "returned_at": "2026-01-01T00:00:00Z"}
    ],
    "agent_runs": {"a1": {"agent": "helper", "termination_reason": "answered", "history": [{"intent": "x"}]}},
    "reasoning_details": [{"type": "thinking", "thinking": "hm", "signature": "s"}],
    "answer": "Done.",
}


def one_entry(**fields: Any) -> dict[str, Any]:
    return {"type": "history", "messages": [{"intent": "Where?", "tool_calls": [], "tool_call_results": [], **fields}]}


LOOKED = {
    "tool_calls": [{"id": "c1", "name": "look", "args": {}}],
    "tool_call_results": [{"id": "c1", "name": "look", "result": "seen", "error": False, "returned_at": ""}],
}
DUMPS = [
    dspy_imp.dump_history(HISTORY),
    {"type": "history", "messages": [MEDIA_ENTRY]},
    {"type": "history", "messages": [SUBAGENT_ENTRY]},
]


def continues(history: Any) -> None:
    """``history`` dumps, and an agent takes it: a prediction, or a ``ConfigurationError``."""
    dspy_imp.dump_history(history)
    lm = ScriptedLM([reply("Fine.")] * 3)
    agent = dspy_imp.ReActV2(TA, tools=[Look()])
    with dspy.context(lm=lm):
        try:
            agent(intent="And now?", history=history)
        except dspy_imp.ConfigurationError as refused:
            assert str(refused) and lm.requests == [], refused


def loads(data: Any) -> None:
    try:
        history = dspy_imp.load_history(data)
    except dspy_imp.ConfigurationError as refused:
        assert str(refused)
        return
    continues(history)


@budget(60)
@given(st.sampled_from(DUMPS).flatmap(mutated) | HOSTILE)
@example({"type": "history", "messages": [Deep(5000, "list")]})  # its repr in the error recursed
@example({"type": "history", "messages": [{"intent": "x", "answer": Deep(1200, "list")}]})  # revive recursed
@example(one_entry(tool_calls=[{"id": "p1", "name": ["look"], "args": {}}]))  # sent to the provider
@example(one_entry(tool_calls=[{"id": "p1", "name": "", "args": {}}]))  # sent to the provider
@example(one_entry(intent=[None], answer="a"))  # DSPy's formatter raised (a list of non-text for a str field)
@example(one_entry(tool_call_results=[{"result": "seen"}]))  # a result with no id sent to the provider
@example(one_entry(**{**LOOKED, "tool_calls": [{"id": "c1", "name": "look", "args": {"n": float("nan")}}]}))  # lm15
@example(one_entry(note="caf\udce9"))  # UnicodeEncodeError in the conversation's digest
@example(one_entry(intent="caf\udce9", **LOOKED))  # UnicodeEncodeError in the prompt cache's conversation key
@example(one_entry(reasoning_content={"a": "Check the shelf."}, **LOOKED))  # sent to the provider
@example(one_entry(reasoning_details=[{"type": ["thinking"], "thinking": "hm"}], **LOOKED))  # TypeError: unhashable
def test_a_loaded_history_is_refused_naming_the_field_or_continues(data: Any) -> None:
    bounded(lambda: loads(realize(data)))


def as_namespaces(value: Any) -> Any:
    """Messages as the attribute objects ``from_messages`` reads (AG-UI's pydantic models are such),
    each ``Deep`` made real."""
    if isinstance(value, Deep):
        return realize(value)
    if isinstance(value, list):
        return [as_namespaces(v) for v in value]
    if isinstance(value, dict) and ("role" in value or "function" in value or "arguments" in value):
        return SimpleNamespace(**{k: as_namespaces(v) if k != "metadata" else realize(v) for k, v in value.items()})
    return realize(value)


MESSAGES = [
    [m.model_dump() for m in to_messages(HISTORY, TA)],
    [m.model_dump() for m in to_messages(dspy_imp.load_history(DUMPS[2]), TA)],
    [
        {"role": "user", "content": "Where?", "metadata": None},
        {
            "role": "assistant",
            "content": "Looking.",
            "metadata": None,
            "tool_calls": [{"id": "c1", "function": {"name": "look", "arguments": '{"where": "shelf"}'}}],
        },
        {"role": "tool", "content": "seen", "tool_call_id": "c1", "error": None, "metadata": None},
        {"role": "user", "content": "And now?", "metadata": None},
    ],
]


def reads(messages: Any) -> None:
    try:
        entries, inputs = from_messages(messages, TA)
    except dspy_imp.ConfigurationError as refused:
        assert "messages" in str(refused), refused
        return
    assert isinstance(entries, list) and isinstance(inputs, dict)
    continues(entries)


def calling(arguments: Any) -> list[dict[str, Any]]:
    function = {"name": "look", "arguments": arguments}
    return [*MESSAGES[2][:1], {**MESSAGES[2][1], "tool_calls": [{"id": "c1", "function": function}]}]


@budget(60)
@given(st.sampled_from(MESSAGES).flatmap(mutated))
@example(calling("[" * 5000 + "]" * 5000))  # json.loads recursed
@example(calling({"where": Deep(1200, "dict")}))  # the continued turn recursed
@example([{**MESSAGES[0][0], "metadata": {"dspy_imp": {"alone": True, "inputs": {"intent": Deep(1200, "list")}}}}])
def test_client_messages_are_refused_naming_the_message_or_continue(messages: Any) -> None:
    bounded(lambda: reads(as_namespaces(messages)))
