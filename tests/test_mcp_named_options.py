"""The constructor's per-tool options may name an MCP server's tools (``tool_timeouts``,
``tool_retries``, ``max_result_chars``, ``needs_approval``, ``finish_on``, ``last_request_tools``):
checked when a turn lists the tools."""

from __future__ import annotations

from typing import Any

import anyio
import dspy
import pytest
from helpers import settled
from mcp.server.mcpserver import MCPServer

import dspy_imp
from dspy_imp import mcp
from dspy_imp.testing import ScriptedLM, call, reply


def answer(text: str) -> Any:
    return reply(f"[[ ## answer ## ]]\n{text}\n\n[[ ## completed ## ]]")


def workshop() -> MCPServer:
    server = MCPServer("workshop")

    @server.tool()
    async def slow() -> str:
        """Take a long time."""
        await anyio.sleep(600)
        return "never"

    @server.tool()
    def big() -> str:
        """A long text."""
        return "y" * 5_000

    @server.tool()
    def drill(hole: str) -> str:
        """Drill a hole."""
        return f"drilled {hole}"

    return server


def results(pred: Any) -> list[dict[str, Any]]:
    return [r for e in pred.metadata.history.messages for r in e.get("tool_call_results") or []]


def test_constructor_options_name_a_servers_tools_by_their_turn_names(run: Any) -> None:
    server = mcp.memory(workshop(), prefix="w")
    agent = dspy_imp.ReActV2(
        "question -> answer",
        tools=[server],
        tool_timeouts={"w_slow": 0.5, "*": 60},
        max_result_chars={"w_big": 100},
        needs_approval=["w_drill"],
    )
    lm = ScriptedLM(
        [
            reply("both", calls=[call("w_slow", {}, id="c1"), call("w_big", {}, id="c2")]),
            reply("drill", calls=[call("w_drill", {"hole": "h1"}, id="c3")]),
        ]
    )
    with dspy.context(lm=lm):
        pred = run(agent, question="q")
    slow, big = results(pred)
    assert slow["error"] is True and "timed out after 0.5 s" in slow["result"]
    told = [m for m in lm.requests[1].messages if m["role"] == "tool"][-1]["content"]
    assert told.startswith("y" * 100) and "y" * 101 not in told  # cut for the model at 100
    assert big["result"] == "y" * 5_000  # the record keeps it whole
    assert pred.metadata.termination_reason == "paused"
    assert [(c["id"], c["name"], c["kind"]) for c in pred.metadata.pending_calls] == [("c3", "w_drill", "approval")]
    server.close()


@pytest.mark.parametrize(
    "options",
    [
        {"tool_timeouts": {"drill": 1}},
        {"max_result_chars": {"w_nope": 10}},
        {"needs_approval": ["drill"]},
        {"tool_retries": {"w_none": 2}},
        {"finish_on": {"w_nope": lambda args, result, inputs: None}},
        {"last_request_tools": ["drill"]},
    ],
)
def test_a_name_no_toolset_offers_is_refused_when_the_turn_lists_them(run: Any, options: dict[str, Any]) -> None:
    server = mcp.memory(workshop(), prefix="w")
    agent = dspy_imp.ReActV2("question -> answer", tools=[server], **options)  # not known yet: accepted
    ((where, value),) = options.items()
    name = next(iter(value))
    lm = ScriptedLM([answer("never")])
    with dspy.context(lm=lm), pytest.raises(dspy_imp.ConfigurationError) as refused:
        run(agent, question="q")
    assert str(refused.value) == (
        f"`{where}` names a tool that neither the program nor its toolsets (MCP server 'workshop') offer: "
        f"{name!r}; a toolset's tools are named as the model calls them (after the server's `prefix_`)"
    )
    assert lm.requests == []  # before any model call
    server.close()


@pytest.mark.parametrize(
    ("options", "refusal"),
    [
        ({"tool_timeouts": {"w_slow": 1}}, "`tool_timeouts` names a tool the program does not hold: 'w_slow'"),
        ({"finish_on": {"w_drill": lambda args, result, inputs: None}}, "`finish_on` names no tool: 'w_drill'"),
        (
            {"last_request_tools": ["w_drill"]},
            "`last_request_tools` names a tool the program does not hold: 'w_drill'",
        ),
    ],
)
def test_without_toolsets_an_unknown_name_is_refused_at_construction(options: dict[str, Any], refusal: str) -> None:
    with pytest.raises(dspy_imp.ConfigurationError) as refused:
        dspy_imp.ReActV2("question -> answer", **options)
    assert str(refused.value) == refusal


def test_finish_on_names_a_servers_tool_that_ends_the_turn(run: Any) -> None:
    server = mcp.memory(workshop(), prefix="w")
    seen: list[tuple[Any, Any, Any]] = []

    def drilled(args: Any, result: Any, inputs: Any) -> dspy_imp.Finish:
        seen.append((args, result, inputs))
        return dspy_imp.Finish(answer=f"done: {result}")

    agent = dspy_imp.ReActV2("question -> answer", tools=[server], finish="tools", finish_on={"w_drill": drilled})
    lm = ScriptedLM([reply("drill", calls=[call("w_drill", {"hole": "h1"}, id="c1")])])
    with dspy.context(lm=lm):
        pred = run(agent, question="q")
    assert seen == [({"hole": "h1"}, "drilled h1", {"question": "q"})]
    assert pred.answer == "done: drilled h1"
    meta = pred.metadata
    assert (meta.termination_reason, meta.finished_by_tool) == ("finished_by_tool", "w_drill")
    # The system message names the server's tool as the one that ends the turn.
    assert lm.requests[0].messages[0]["content"] == (
        "Given the fields `question`, produce the fields `answer`.\n"
        "The turn ends only when you call `w_drill`. Text you write is not sent."
    )
    lm.assert_complete()
    server.close()


def test_last_request_tools_names_a_servers_tool_the_last_request_runs(run: Any) -> None:
    server = mcp.memory(workshop(), prefix="w")
    agent = dspy_imp.ReActV2("question -> answer", tools=[server], max_iters=1, last_request_tools=["w_drill"])
    lm = ScriptedLM(
        [
            reply(calls=[call("w_drill", {"hole": "h1"}, id="c1")]),
            reply("Drilled.", calls=[call("w_drill", {"hole": "h2"}, id="c2"), call("w_big", {}, id="c3")]),
        ]
    )
    with dspy.context(lm=lm):
        pred = run(agent, question="q")
    meta = pred.metadata
    assert (pred.answer, meta.termination_reason, meta.termination_cause) == ("Drilled.", "last_text", "max_iters")
    assert meta.unexecuted_tool_calls == ({"id": "c3", "name": "w_big", "args": {}},)
    assert settled(meta.history.messages) == [
        {
            "question": "q",
            "tool_calls": [{"id": "c1", "name": "w_drill", "args": {"hole": "h1"}}],
            "tool_call_results": [{"id": "c1", "name": "w_drill", "result": "drilled h1", "error": False}],
        },
        {
            "next_thought": "Drilled.",
            "tool_calls": [{"id": "c2", "name": "w_drill", "args": {"hole": "h2"}}],
            "tool_call_results": [{"id": "c2", "name": "w_drill", "result": "drilled h2", "error": False}],
            "answer": "Drilled.",
        },
    ]
    lm.assert_complete()
    server.close()


def test_saved_approvals_of_a_servers_tool_load_into_the_same_program() -> None:
    server = mcp.memory(workshop(), prefix="w")
    agent = dspy_imp.ReActV2("question -> answer", tools=[server], needs_approval=["w_drill"])
    state = agent.dump_state()
    again = dspy_imp.ReActV2("question -> answer", tools=[server], needs_approval=["w_drill"])
    again.load_state(state)
    assert again.react.options.needs_approval == ("w_drill",)
    server.close()
