"""Golden requests: ``finish="auto"`` is byte-for-byte unchanged by the other endings (seeds 000, 002, 003).

Each scenario below runs representative ``"auto"`` turns on a scripted LM and records every
request the model would receive: its messages, tools, ``tool_choice`` and options. The result
is compared, as ``json.dumps(..., sort_keys=True)`` text, with ``tests/golden/auto_requests.json``,
so a change to the ``"submit"``/``"tools"`` rendering cannot silently change an ``"auto"`` request.

The golden file was generated once from the code and lives beside the tests; regenerate it only on
purpose, after reviewing the diff::

    DSPY_IMP_REGEN_GOLDEN=1 .venv/bin/pytest tests/test_auto_requests_unchanged.py -k byte_for_byte

(the sync run writes each scenario; the async run of the same scenario is compared with it).

Nothing in these requests is nondeterministic: call ids are scripted, ``returned_at`` is
recorded in the history but never rendered, and no deadline is set (so no ``timeout``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import dspy
import pytest
from helpers import TA, Look, SubmitSig

import dspy_imp
from dspy_imp.testing import ScriptedLM, call, reply

GOLDEN = Path(__file__).parent / "golden" / "auto_requests.json"
REGENERATE = os.environ.get("DSPY_IMP_REGEN_GOLDEN") == "1"

EXTRACTED = (
    "[[ ## reasoning ## ]]\nThe history settles it.\n\n[[ ## answer ## ]]\nParis\n\n"
    "[[ ## confidence ## ]]\n0.9\n\n[[ ## completed ## ]]"
)


def _submit(answer: str, confidence: float, id: str) -> Any:
    return call("submit", {"answer": answer, "confidence": confidence}, id=id)


def ta_answered_after_a_tool_step(run: Callable[..., Any]) -> tuple[ScriptedLM, list[Any]]:
    lm = ScriptedLM([reply("look first", calls=[call("look", {"where": "shelf"}, id="c1")]), reply("It is a cat.")])
    agent = dspy_imp.ReActV2(TA, tools=[Look()], config={"temperature": 0.2})
    with dspy.context(lm=lm):
        pred = run(agent, intent="what is on the shelf?")
    return lm, [pred]


def ta_last_text_after_max_iters_with_a_note(run: Callable[..., Any]) -> tuple[ScriptedLM, list[Any]]:
    lm = ScriptedLM(
        [reply(calls=[call("look", {"where": "shelf"}, id="c1")]), reply("The thing is there.", finish_reason="length")]
    )
    agent = dspy_imp.ReActV2(
        TA, tools=[Look()], max_iters=1, last_request_note="You have used every step. Answer now, in your own words."
    )
    with dspy.context(lm=lm):
        pred = run(agent, intent="is it there?")
    return lm, [pred]


def submit_signature_forced_submit_after_a_thought(run: Callable[..., Any]) -> tuple[ScriptedLM, list[Any]]:
    lm = ScriptedLM([reply("I already know this one."), reply(calls=[_submit("Paris", 0.9, "s1")])])
    agent = dspy_imp.ReActV2(SubmitSig, tools=[Look()], config={"reasoning_effort": "high", "temperature": 0.3})
    with dspy.context(lm=lm):
        pred = run(agent, intent="capital of France?")
    return lm, [pred]


def submit_signature_extraction_then_a_continued_call(run: Callable[..., Any]) -> tuple[ScriptedLM, list[Any]]:
    lm = ScriptedLM(
        [
            reply(calls=[call("look", {"where": "map"}, id="c1")]),
            reply("I think it is Paris."),
            reply("Paris, surely."),
            reply(EXTRACTED),
            reply("Still Paris."),
            reply(calls=[_submit("Paris", 1.0, "s2")]),
        ]
    )
    agent = dspy_imp.ReActV2(SubmitSig, tools=[Look()])
    with dspy.context(lm=lm):
        first = run(agent, intent="capital of France?")
        second = run(agent, intent="are you sure?", history=first.metadata.history)
    return lm, [first, second]


def ta_continued_conversation_with_history(run: Callable[..., Any]) -> tuple[ScriptedLM, list[Any]]:
    lm = ScriptedLM(
        [
            reply(calls=[call("look", {"where": "shelf"}, id="c1")]),
            reply("It is a cat."),
            reply("Still a cat."),
            reply("Checking again.", calls=[call("look", {}, id="c2")]),
            reply("A dog now."),
        ]
    )
    agent = dspy_imp.ReActV2(TA, tools=[Look()])
    with dspy.context(lm=lm):
        first = run(agent, intent="what is it?")
        second = run(agent, intent="and now?", history=first.metadata.history)
        third = run(agent, intent="and that one?", history=second.metadata.history)
    return lm, [first, second, third]


def ta_replaying_a_submit_era_history(run: Callable[..., Any]) -> tuple[ScriptedLM, list[Any]]:
    history = [
        {"intent": "what is it?", "next_thought": "Let me check.", "tool_calls": [], "tool_call_results": []},
        {
            "next_thought": "again",
            "tool_calls": [{"id": "s1", "name": "submit", "args": {"answer": "A cat."}}],
            "tool_call_results": [
                {
                    "id": "s1",
                    "name": "submit",
                    "result": {"answer": "A cat."},
                    "error": False,
                    "returned_at": "2026-01-02T03:04:05.000Z",
                }
            ],
            "answer": "A cat.",
        },
    ]
    lm = ScriptedLM([reply("Still a cat.")])
    agent = dspy_imp.ReActV2(TA, tools=[Look()])
    with dspy.context(lm=lm):
        pred = run(agent, intent="and now?", history=dspy.History(messages=history))
    return lm, [pred]


SCENARIOS: dict[str, Callable[[Callable[..., Any]], tuple[ScriptedLM, list[Any]]]] = {
    "ta_answered_after_a_tool_step": ta_answered_after_a_tool_step,
    "ta_last_text_after_max_iters_with_a_note": ta_last_text_after_max_iters_with_a_note,
    "submit_signature_forced_submit_after_a_thought": submit_signature_forced_submit_after_a_thought,
    "submit_signature_extraction_then_a_continued_call": submit_signature_extraction_then_a_continued_call,
    "ta_continued_conversation_with_history": ta_continued_conversation_with_history,
    "ta_replaying_a_submit_era_history": ta_replaying_a_submit_era_history,
}

# What each scenario must end as, so the golden file cannot pin a scenario that went wrong.
ENDINGS = {
    "ta_answered_after_a_tool_step": [("answered", None)],
    "ta_last_text_after_max_iters_with_a_note": [("last_text", "max_iters")],
    "submit_signature_forced_submit_after_a_thought": [("forced_submit", "empty_tool_calls")],
    "submit_signature_extraction_then_a_continued_call": [
        ("extracted", "empty_tool_calls"),
        ("forced_submit", "empty_tool_calls"),
    ],
    "ta_continued_conversation_with_history": [("answered", None)] * 3,
    "ta_replaying_a_submit_era_history": [("answered", None)],
}


def record(run: Callable[..., Any], name: str) -> list[dict[str, Any]]:
    lm, preds = SCENARIOS[name](run)
    lm.assert_complete()
    assert [(p.metadata.termination_reason, p.metadata.termination_cause) for p in preds] == ENDINGS[name]
    return [
        {"messages": r.messages, "tools": r.tools, "tool_choice": r.tool_choice, "options": r.options}
        for r in lm.requests
    ]


def dumps(data: Any) -> str:
    return json.dumps(data, sort_keys=True, indent=1, ensure_ascii=False) + "\n"


def test_the_golden_file_covers_every_scenario():
    assert sorted(json.loads(GOLDEN.read_text(encoding="utf-8"))) == sorted(SCENARIOS)


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_auto_requests_are_byte_for_byte_the_golden_ones(run, name):
    requests = record(run, name)
    if REGENERATE and run.mode == "sync":
        golden = json.loads(GOLDEN.read_text(encoding="utf-8")) if GOLDEN.exists() else {}
        golden[name] = requests
        GOLDEN.parent.mkdir(exist_ok=True)
        GOLDEN.write_text(dumps(golden), encoding="utf-8")

    golden = json.loads(GOLDEN.read_text(encoding="utf-8"))
    assert name in golden, f"no golden requests for {name}; regenerate with DSPY_IMP_REGEN_GOLDEN=1"
    assert dumps(requests) == dumps(golden[name])
