"""Human approval and external tools: a reply that needs a decision pauses the turn; the caller resumes it.

Every request must pair each assistant tool call with its tool result before anything else.
Issue 8 is building the shared provider-rules checker (``tests/wire/provider_rules.py``);
until it lands, ``assert_paired`` below checks the pairing rule locally.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import dspy
import pytest
from helpers import assistant, inputs, settled, tool

import dspy_imp
from dspy_imp.testing import ScriptedLM, call, reply

SENT: list[str] = []


def lookup(query: str) -> str:
    """Look something up."""
    return f"found {query}"


def send(text: str) -> str:
    """Send a message to the customer."""
    SENT.append(text)
    return f"sent {text}"


def render(chart: str) -> str:
    """Render a chart in the user's browser."""
    raise AssertionError("an external tool is never run here")


def assert_paired(messages: list[dict[str, Any]]) -> None:
    """Each assistant message's tool calls are answered, in order, by the tool messages right after it."""
    for index, message in enumerate(messages):
        if message["role"] == "tool":
            assert index > 0 and messages[index - 1]["role"] in ("assistant", "tool"), messages
        if message["role"] != "assistant" or not message.get("tool_calls"):
            continue
        ids = [c["id"] for c in message["tool_calls"]]
        answers = [m.get("tool_call_id") for m in messages[index + 1 : index + 1 + len(ids)]]
        assert answers == ids, (ids, answers)


def paused_turn(run, lm: ScriptedLM, **options: Any) -> tuple[dspy_imp.ReActV2, Any]:
    agent = dspy_imp.ReActV2("message -> reply", tools=[lookup, send, render], **options)
    with dspy.context(lm=lm):
        return agent, run(agent, message="refund me")


TWO_CALLS = reply(
    "checking, then telling",
    calls=[call("lookup", {"query": "order"}, id="c1"), call("send", {"text": "done"}, id="c2")],
)


@pytest.fixture(autouse=True)
def _no_sent() -> Any:
    SENT.clear()
    yield


def test_a_call_that_needs_approval_pauses_before_any_call_runs(run):
    lm = ScriptedLM([TWO_CALLS])
    _, pred = paused_turn(run, lm, needs_approval=["send"])
    meta = pred.metadata
    assert (meta.termination_reason, meta.termination_cause, meta.complete) == ("paused", None, False)
    assert not dspy_imp.is_complete(pred) and pred.reply is None
    assert meta.pending_calls == ({"id": "c2", "name": "send", "args": {"text": "done"}, "kind": "approval"},)
    assert meta.history.messages == [
        {
            "message": "refund me",
            "next_thought": "checking, then telling",
            "tool_calls": [
                {"id": "c1", "name": "lookup", "args": {"query": "order"}},
                {"id": "c2", "name": "send", "args": {"text": "done"}},
            ],
            "tool_call_results": [],
            "pending_calls": [{"id": "c2", "name": "send", "args": {"text": "done"}, "kind": "approval"}],
        }
    ]
    assert SENT == []
    lm.assert_complete()


APPROVED_REQUEST = [
    inputs(message="refund me"),
    assistant(
        "checking, then telling",
        [("c1", "lookup", '{"query":"order"}'), ("c2", "send", '{"text":"done"}')],
    ),
    tool("c1", "found order"),
]


@pytest.mark.parametrize(
    ("verdict", "observation"),
    [
        (True, "sent done"),
        (False, "Error: send is not allowed."),
        ("a person declined: wrong customer", "Error: send is not allowed: a person declined: wrong customer"),
    ],
)
def test_resume_answers_every_pending_call_before_the_next_request(run, verdict, observation):
    lm = ScriptedLM([TWO_CALLS, reply("All done.")])
    agent, pred = paused_turn(run, lm, needs_approval=["send"])
    with dspy.context(lm=lm):
        resumed = run(agent, history=pred.metadata.history, approvals={"c2": verdict})
    assert (resumed.reply, resumed.metadata.termination_reason) == ("All done.", "answered")
    second = lm.requests[1]
    assert second.messages[0] == lm.requests[0].messages[0]
    assert second.messages[1:] == [*APPROVED_REQUEST, tool("c2", observation)]
    assert_paired(second.messages)
    assert ["done"] * (verdict is True) == SENT
    first = settled(resumed.metadata.history.messages)[0]
    assert "pending_calls" not in first and [r["id"] for r in first["tool_call_results"]] == ["c1", "c2"]
    assert pred.metadata.history.messages[0]["tool_call_results"] == []  # the caller's history is untouched


def test_a_policy_may_ask_for_approval(run):
    def policy(name: str, args: dict[str, Any]) -> Any:
        return dspy_imp.NeedsApproval() if name == "send" and args["text"] == "done" else True

    lm = ScriptedLM([TWO_CALLS])
    _, pred = paused_turn(run, lm, tool_policy=policy)
    assert [c["id"] for c in pred.metadata.pending_calls] == ["c2"]
    assert repr(dspy_imp.NeedsApproval()) == "NeedsApproval()"


def test_external_tools_pause_and_take_the_hosts_result_or_error(run):
    lm = ScriptedLM(
        [
            reply(calls=[call("render", {"chart": "bar"}, id="r1"), call("render", {"chart": "pie"}, id="r2")]),
            reply("Rendered."),
        ]
    )
    agent, pred = paused_turn(run, lm, external_tools=[render])
    assert pred.metadata.pending_calls == (
        {"id": "r1", "name": "render", "args": {"chart": "bar"}, "kind": "external"},
        {"id": "r2", "name": "render", "args": {"chart": "pie"}, "kind": "external"},
    )
    with dspy.context(lm=lm):
        resumed = run(
            agent,
            history=pred.metadata.history,
            results={"r1": {"png": "bar.png"}, "r2": RuntimeError("browser closed")},
        )
    assert resumed.reply == "Rendered."
    assert lm.requests[1].messages[-2:] == [
        tool("r1", '{"png": "bar.png"}'),
        tool("r2", "Error: render failed: browser closed"),
    ]
    assert_paired(lm.requests[1].messages)


def test_an_external_tool_may_finish_the_turn(run):
    lm = ScriptedLM([reply(calls=[call("send", {"text": "hi"}, id="s1")])])
    agent = dspy_imp.ReActV2(
        "message -> reply",
        tools=[send],
        finish="tools",
        finish_on={"send": lambda args, result, inputs: dspy_imp.Finish(reply=result)},
        external_tools=["send"],
    )
    with dspy.context(lm=lm):
        pred = run(agent, message="m")
        done = run(agent, history=pred.metadata.history, results={"s1": "delivered"})
    assert (done.reply, done.metadata.finished_by_tool) == ("delivered", "send")
    assert SENT == [] and len(lm.requests) == 1


def test_parallel_calls_pause_the_same_way(run):
    lm = ScriptedLM([TWO_CALLS, reply("ok")])
    agent, pred = paused_turn(run, lm, needs_approval=["send"], parallel_tools=True)
    assert pred.metadata.termination_reason == "paused" and SENT == []
    with dspy.context(lm=lm):
        resumed = run(agent, history=pred.metadata.history, approvals={"c2": True})
    assert resumed.reply == "ok" and SENT == ["done"]


@pytest.mark.parametrize(
    ("decisions", "message"),
    [
        ({}, r"undecided pending call\(s\): 'c2' \(send, via `approvals`\)"),
        ({"approvals": {"c1": True, "c2": True}}, r"`approvals` names call 'c1', which is not pending"),
        ({"results": {"c2": "x"}}, r"call 'c2' \(send\) is answered through `approvals`"),
        ({"approvals": {"c2": " "}}, r"`approvals\['c2'\]` must be True, False or a non-blank reason"),
        ({"approvals": ["c2"]}, r"`approvals` must be a dict of call id"),
        ({"approvals": {"c2": True}, "results": {"c2": 1}}, r"call 'c2' is in both `approvals` and `results`"),
    ],
)
def test_a_resume_that_leaves_a_call_undecided_is_refused_before_any_request(run, decisions, message):
    lm = ScriptedLM([TWO_CALLS])
    agent, pred = paused_turn(run, lm, needs_approval=["send"])
    with dspy.context(lm=lm), pytest.raises(dspy_imp.ConfigurationError, match=message):
        run(agent, history=pred.metadata.history, **decisions)
    assert len(lm.requests) == 1 and SENT == []


def test_a_resume_takes_no_new_inputs(run):
    lm = ScriptedLM([TWO_CALLS])
    agent, pred = paused_turn(run, lm, needs_approval=["send"])
    with dspy.context(lm=lm), pytest.raises(dspy_imp.ConfigurationError, match=r"without new inputs.*\['message'\]"):
        run(agent, message="again", history=pred.metadata.history, approvals={"c2": True})
    assert len(lm.requests) == 1 and SENT == []


def test_decisions_without_a_paused_turn_are_refused(run):
    agent = dspy_imp.ReActV2("message -> reply", tools=[send])
    with pytest.raises(dspy_imp.ConfigurationError, match=r"`approvals` given, but the history has no paused turn"):
        run(agent, message="m", approvals={"c1": True})


def test_a_last_request_never_waits_for_a_person(run):
    lm = ScriptedLM([reply("Sending.", calls=[call("send", {"text": "x"}, id="s1")])])
    agent = dspy_imp.ReActV2(
        "message -> reply",
        tools=[send],
        max_iters=0,
        last_request_tools=["send"],
        tool_policy=lambda name, args: dspy_imp.NeedsApproval,  # the class is accepted too
    )
    with dspy.context(lm=lm):
        pred = run(agent, message="m")
    assert (pred.reply, pred.metadata.termination_reason) == ("Sending.", "last_text")
    [entry] = settled(pred.metadata.history.messages)
    assert entry["tool_call_results"][0]["result"] == (
        "send is not allowed: it needs a person's approval, and this last request cannot wait for one"
    )
    assert SENT == []


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"needs_approval": ["nope"]}, r"`needs_approval` names a tool the program does not hold: 'nope'"),
        ({"external_tools": "send"}, r"`external_tools` must be a list of tool names or tools"),
        ({"external_tools": ["send"], "last_request_tools": ["send"]}, r"which are in `external_tools`"),
        ({"needs_approval": ["send"], "external_tools": ["send"]}, r"in both `needs_approval` and `external_tools`"),
    ],
)
def test_approval_options_are_validated_at_construction(options, message):
    with pytest.raises(dspy_imp.ConfigurationError, match=message):
        dspy_imp.ReActV2("message -> reply", tools=[send], **options)


WORKER = textwrap.dedent(
    """
    import asyncio, json, sys
    import dspy, dspy_imp
    from dspy_imp.testing import ScriptedLM, reply
    from test_approval import lookup, send, render, SENT

    mode, path = sys.argv[1], sys.argv[2]
    history = dspy_imp.load_history(json.load(open(path)))
    lm = ScriptedLM([reply("All done.")])
    agent = dspy_imp.ReActV2("message -> reply", tools=[lookup, send, render], needs_approval=["send"])
    with dspy.context(lm=lm):
        kwargs = dict(history=history, approvals={"c2": True})
        pred = agent(**kwargs) if mode == "sync" else asyncio.run(agent.acall(**kwargs))
    print(json.dumps({
        "reply": pred.reply,
        "sent": SENT,
        "messages": lm.requests[0].messages,
        "history": dspy_imp.dump_history(pred.metadata.history),
    }))
    """
)


def test_a_paused_turn_survives_dump_and_a_new_process(run, tmp_path: Path):
    lm = ScriptedLM([TWO_CALLS])
    _, pred = paused_turn(run, lm, needs_approval=["send"])
    saved = tmp_path / "paused.json"
    saved.write_text(json.dumps(dspy_imp.dump_history(pred.metadata.history)))
    here = Path(__file__).parent
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(here), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, "-c", WORKER, run.mode, str(saved)], capture_output=True, text=True, env=env, check=True
    )
    out = json.loads(done.stdout)
    assert (out["reply"], out["sent"]) == ("All done.", ["done"])
    assert out["messages"][0] == lm.requests[0].messages[0]
    assert out["messages"][1:] == [*APPROVED_REQUEST, tool("c2", "sent done")]
    assert_paired(out["messages"])
    for request in lm.requests:
        assert_paired(request.messages)
    entries = out["history"]["messages"]
    assert [r["result"] for r in entries[0]["tool_call_results"]] == ["found order", "sent done"]
    assert entries[1]["reply"] == "All done."
