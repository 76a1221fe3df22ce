"""``elicit="pause"``: an MCP server's request for input pauses the turn, the caller answers it like
an approval, and the resumed turn finishes the call with the answer, on both protocol eras.

The server (``tests/mcp_elicit_program.py``) is an in-process ``MCPServer`` (``mcp.memory``): in
``"auto"`` mode a 2026-07-28 session (the question is an input-required round, the resumed call is
its retry with the answer), in ``"legacy"`` mode JSON-RPC over memory streams (the question is a
request mid-call; the call is cancelled at the pause and called again on resume). Every turn runs
through both drivers (the ``run`` fixture); what the server received is asserted whole.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import dspy
import mcp_elicit_program as served
import pytest
from mcp_elicit_program import agent, answer, calling_book

import dspy_imp
from dspy_imp import mcp
from dspy_imp.testing import ScriptedLM, call, reply

ROOT = Path(__file__).resolve().parent.parent
MODES = ["auto", "legacy"]
KEY = "mcp_elicit_program:ask_seat"
CALL = {"name": "book", "arguments": {"flight": "LH1"}}


@pytest.fixture(autouse=True)
def _fresh() -> None:
    served.RECEIVED.clear()
    served.RAN.clear()


def schema(mode: str) -> dict[str, Any]:
    """The form the server sends (an older session's carries the model's title too)."""
    form: dict[str, Any] = {
        "properties": {
            "row": {"title": "Row", "type": "integer"},
            "window": {"default": True, "title": "Window", "type": "boolean"},
        },
        "required": ["row"],
        "type": "object",
    }
    return {**form, "title": "Seat"} if mode == "legacy" else form


def shown(mode: str, call_id: str = "c1") -> dict[str, Any]:
    return {"id": call_id, "name": "book", "args": {"flight": "LH1"}, "kind": "elicitation", "server": "booking",
            "message": "Which row?", "schema": schema(mode)}  # fmt: skip


def retried(mode: str, content: dict[str, Any] | None, action: str = "accept") -> dict[str, Any]:
    """What the resumed call sends: on 2026-07-28 the round's retry with the answer, else the call again."""
    if mode == "legacy":
        return CALL
    response: dict[str, Any] = {"action": action} if content is None else {"action": action, "content": content}
    return {**CALL, "inputResponses": {KEY: response}, "requestState": "<sealed>"}


def paused(run: Any, mode: str) -> tuple[dspy_imp.ReActV2, mcp.Server, Any]:
    program, server = agent(mode)
    with dspy.context(lm=calling_book()):
        pred = run(program, question="Book me a seat")
    return program, server, pred


def tool_messages(lm: ScriptedLM) -> list[dict[str, Any]]:
    return [m for m in lm.requests[0].messages if m["role"] == "tool"]


@pytest.mark.parametrize("mode", MODES)
def test_a_question_pauses_the_turn_and_the_answer_finishes_the_call(run: Any, mode: str) -> None:
    program, server, pred = paused(run, mode)
    assert pred.metadata.termination_reason == "paused"
    assert pred.metadata.pending_calls == (shown(mode),)
    entry = pred.metadata.history.messages[-1]
    assert entry["tool_calls"] == [{"id": "c1", "name": "book", "args": {"flight": "LH1"}}]
    assert entry["tool_call_results"] == []
    ((pending,),) = [entry["pending_calls"]]
    assert {k: pending[k] for k in ("id", "name", "args", "kind")} == {
        k: shown(mode)[k] for k in ("id", "name", "args", "kind")
    }
    assert pending["elicitation"]["message"] == "Which row?" and pending["elicitation"]["schema"] == schema(mode)
    assert served.RECEIVED == [CALL] and served.RAN == []  # the tool asked before it did anything

    lm = ScriptedLM([answer("booked")])
    with dspy.context(lm=lm):
        done = run(program, history=pred.metadata.history, approvals={"c1": {"row": 7}})
    assert (done.metadata.termination_reason, done.answer) == ("answered", "booked")
    assert tool_messages(lm) == [{"role": "tool", "tool_call_id": "c1", "content": "LH1: row 7, window True"}]
    assert [CALL, retried(mode, {"window": True, "row": 7})] == served.RECEIVED  # the schema's default filled in
    assert served.RAN == ["LH1: row 7, window True"]
    (result,) = done.metadata.history.messages[-2]["tool_call_results"]
    assert (result["id"], result["result"], result["error"]) == ("c1", "LH1: row 7, window True", False)
    assert "pending_calls" not in done.metadata.history.messages[-2]
    server.close()


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(("verdict", "action"), [(False, "decline"), ("cancel", "cancel")])
def test_a_question_declined_or_cancelled(run: Any, mode: str, verdict: Any, action: str) -> None:
    program, server, pred = paused(run, mode)
    lm = ScriptedLM([answer("not booked")])
    with dspy.context(lm=lm):
        run(program, history=pred.metadata.history, approvals={"c1": verdict})
    assert tool_messages(lm) == [{"role": "tool", "tool_call_id": "c1", "content": f"not booked: {action}"}]
    assert [CALL, retried(mode, None, action)] == served.RECEIVED
    assert [f"LH1: {action}"] == served.RAN
    server.close()


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ({"row": "seven"}, r"`approvals\['c1'\]` field `row`: 'seven' is not of type 'integer'"),
        ({"row": {"a": 1}}, r"`approvals\['c1'\]` field `row`: a form's field holds a string, number, boolean"),
        (True, r"`approvals\['c1'\]`: 'row' is a required property \(the form of booking\)"),
        ("maybe", r"`approvals\['c1'\]` answers a request for input \(book\): give a dict of the form's fields"),
    ],
)
def test_an_answer_the_form_refuses_is_refused_before_anything_is_sent(run: Any, given: Any, said: str) -> None:
    program, server, pred = paused(run, "auto")
    lm = ScriptedLM([answer("booked")])
    with dspy.context(lm=lm), pytest.raises(dspy_imp.ConfigurationError, match=said):
        run(program, history=pred.metadata.history, approvals={"c1": given})
    assert lm.requests == [] and served.RECEIVED == [CALL] and served.RAN == []
    server.close()


@pytest.mark.parametrize("parallel", [False, True])
@pytest.mark.parametrize("mode", MODES)
def test_the_calls_that_ran_beside_it_keep_their_results(run: Any, mode: str, parallel: bool) -> None:
    program, server = agent(mode, parallel)
    both = [call("add", {"a": 2, "b": 3}, id="c0"), call("book", {"flight": "LH1"}, id="c1")]
    with dspy.context(lm=ScriptedLM([reply("both", calls=both)])):
        pred = run(program, question="Add and book")
    assert pred.metadata.pending_calls == (shown(mode),)
    entry = pred.metadata.history.messages[-1]
    assert [(r["id"], r["result"]) for r in entry["tool_call_results"]] == [("c0", 5)]
    lm = ScriptedLM([answer("done")])
    with dspy.context(lm=lm):
        run(program, history=pred.metadata.history, approvals={"c1": {"row": 3, "window": False}})
    assert tool_messages(lm) == [
        {"role": "tool", "tool_call_id": "c0", "content": "5"},
        {"role": "tool", "tool_call_id": "c1", "content": "LH1: row 3, window False"},
    ]
    assert served.RAN == ["add 2 3", "LH1: row 3, window False"]  # the addition did not run again
    first, then = served.RECEIVED[:2], served.RECEIVED[2:]
    if parallel:  # the two calls of the first turn reach the server in either order
        first = sorted(first, key=lambda sent: sent["name"])
    assert first == [{"name": "add", "arguments": {"a": 2, "b": 3}}, CALL]
    assert then == [retried(mode, {"window": False, "row": 3})]
    server.close()


def test_a_pending_question_is_answered_through_approvals_only(run: Any) -> None:
    program, server, pred = paused(run, "auto")
    with pytest.raises(dspy_imp.ConfigurationError, match=r"call 'c1' \(book\) is answered through `approvals`"):
        run(program, history=pred.metadata.history, results={"c1": "row 1"})
    with pytest.raises(dspy_imp.ConfigurationError, match="undecided pending call"):
        run(program, history=pred.metadata.history)
    assert served.RECEIVED == [CALL]
    with pytest.raises(dspy_imp.ConfigurationError, match='or "pause"'):
        mcp.memory(server.connects_to, elicit="wait")  # type: ignore[arg-type]
    server.close()


def _process(action: str, mode: str, path: Path) -> Any:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")])}
    done = subprocess.run(
        [sys.executable, "-m", "mcp_elicit_program", action, mode, str(path)],
        env=env, capture_output=True, text=True, check=False, cwd=ROOT / "tests",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("mode", MODES)
def test_a_paused_history_is_resumed_by_another_process(tmp_path: Path, mode: str) -> None:
    path = tmp_path / "history.json"
    first = _process("pause", mode, path)
    assert first == {"reason": "paused", "pending": [shown(mode)]}
    then = _process("resume", mode, path)  # a new process, a new server: only the history is shared
    key = "__main__:ask_seat"  # the server's resolver, run as a script
    sent = CALL if mode == "legacy" else {
        **CALL, "inputResponses": {key: {"action": "accept", "content": {"window": False, "row": 12}}},
        "requestState": "<sealed>",
    }  # fmt: skip
    assert then == {
        "reason": "answered",
        "answer": "booked",
        "tool": [{"role": "tool", "tool_call_id": "c1", "content": "LH1: row 12, window False"}],
        "received": [sent],
        "ran": ["LH1: row 12, window False"],
    }


def test_a_sub_agents_question_pauses_its_caller(run: Any) -> None:
    child, server = agent("auto")
    clerk = child.as_tool(name="clerk", description="Books seats.")
    boss = dspy_imp.ReActV2("request -> answer", tools=[clerk])
    lm = ScriptedLM(
        [
            reply("asking the clerk", calls=[call("clerk", {"question": "Book LH1"}, id="p1")]),
            reply("booking", calls=[call("book", {"flight": "LH1"}, id="c1")]),
        ]
    )
    with dspy.context(lm=lm):
        pred = run(boss, request="A seat on LH1")
    assert pred.metadata.termination_reason == "paused"
    assert pred.metadata.pending_calls == ({**shown("auto", "p1/c1"), "name": "clerk/book"},)
    with pytest.raises(dspy_imp.ConfigurationError, match=r"`approvals\['p1/c1'\]` field `row`"):
        run(boss, history=pred.metadata.history, approvals={"p1/c1": {"row": "nine"}})
    lm = ScriptedLM([answer("booked"), answer("the clerk booked it")])
    with dspy.context(lm=lm):
        done = run(boss, history=pred.metadata.history, approvals={"p1/c1": {"row": 9}})
    assert done.answer == "the clerk booked it"
    assert served.RAN == ["LH1: row 9, window True"]
    assert [CALL, retried("auto", {"window": True, "row": 9})] == served.RECEIVED
    server.close()
