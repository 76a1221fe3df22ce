"""Durable turns with MCP servers (DBOS, embedded SQLite): each MCP call a recorded step, the tool list
recorded with the workflow.

A turn that made two MCP calls is replayed from the step after them (``DBOS.fork_workflow``: what a
recovery does after a crash there) on both drivers: the server counts each call once, and the
replayed turn offers the tools it started with although the server's list changed meanwhile. The
SIGKILL of a real process with a stdio server is ``test_a_killed_durable_turn_...`` below.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import mcp_elicit_program
import mcp_types as types
import pytest
from dbos import DBOS
from mcp.server.mcpserver import MCPServer

import dspy_imp
from dspy_imp import durable, mcp
from dspy_imp._program.toolsets import Listing, Toolset
from dspy_imp.testing import ScriptedLM, call, reply

CALLS: Counter[str] = Counter()
LISTED: list[int] = []


class Desk(MCPServer):
    """Counts its listings (``LISTED``) and, by argument, its tool calls (``CALLS``)."""

    async def list_tools(self) -> list[types.Tool]:
        LISTED.append(1)
        return await super().list_tools()


def desk(instructions: str | None = None) -> Desk:
    server = Desk("desk", instructions=instructions)

    @server.tool()
    def look(thing: str) -> str:
        """Look at a thing."""
        CALLS[thing] += 1
        return f"nothing on the {thing}"

    return server


SERVERS = {"sync": mcp.memory(desk()), "async": mcp.memory(desk())}
PROGRAMS = {
    how: dspy_imp.ReActV2("question -> answer", tools=[server], finish="submit") for how, server in SERVERS.items()
}
GUARDED = mcp.memory(desk(), needs_approval=True)
INSTRUCTED = {how: mcp.memory(desk("Look under the mat first."), add_instructions=True) for how in ("sync", "async")}
PROGRAMS.update(
    {f"instructed-{how}": dspy_imp.ReActV2("question -> answer", tools=[server], finish="submit")
     for how, server in INSTRUCTED.items()}
)  # fmt: skip
PROGRAMS["approve"] = dspy_imp.ReActV2("question -> answer", tools=[GUARDED], finish="submit")
ASKING = {mode: mcp.memory(mcp_elicit_program.booking(), mode=mode, elicit="pause") for mode in ("auto", "legacy")}
PROGRAMS.update(
    {f"elicit-{mode}": dspy_imp.ReActV2("question -> answer", tools=[server]) for mode, server in ASKING.items()}
)
AGENTS: dict[str, durable.DurableAgent] = {}


@pytest.fixture(scope="module", autouse=True)
def dbos(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    folder = tmp_path_factory.mktemp("dbos")
    url = f"sqlite:///{folder}/sys.sqlite"
    DBOS(config=durable.config("dspy-imp-mcp-tests", system_database_url=url, log_level="ERROR"))
    AGENTS.update({how: durable.DurableAgent(program, name=f"mcp-{how}") for how, program in PROGRAMS.items()})
    DBOS.launch()
    yield
    DBOS.destroy(destroy_registry=True)
    for server in [*SERVERS.values(), GUARDED, *ASKING.values(), *INSTRUCTED.values()]:
        server.close()


def script() -> list[Any]:
    return [
        reply(calls=[call("look", {"thing": "shelf"}, id="c1")]),
        reply(calls=[call("look", {"thing": "desk"}, id="c2")]),
        reply(calls=[call("submit", {"answer": "not here"}, id="c3")]),
    ]


def _start(how: str, workflow_id: str) -> Any:
    agent = AGENTS[how]
    if not how.endswith("async"):
        return agent.start(question="Where is the key?", workflow_id=workflow_id).result(polling_interval_sec=0.1)

    async def go() -> Any:
        handle = await agent.astart(question="Where is the key?", workflow_id=workflow_id)
        return await handle.aresult(polling_interval_sec=0.1)

    return asyncio.run(go())


@pytest.mark.parametrize("how", ["sync", "async"])
def test_a_turn_replayed_after_two_mcp_calls_calls_neither_again_and_keeps_its_tools(how: str) -> None:
    CALLS.clear()
    LISTED.clear()
    program, server = PROGRAMS[how], SERVERS[how]
    program.set_lm(ScriptedLM(script()))
    first = _start(how, f"mcp-{how}")
    assert first.answer == "not here"
    assert CALLS == {"shelf": 1, "desk": 1}
    steps = [step["function_name"] for step in DBOS.list_workflow_steps(f"mcp-{how}")]
    assert steps[:3] == ["dspy_imp.clock", "dspy_imp.toolsets", "dspy_imp.request.step"]
    assert steps.count("dspy_imp.tool.look") == 2  # each MCP call a step of its own

    @server.connects_to.tool()  # the server's tool list changes after the turn started
    def peek(thing: str) -> str:
        """Peek at a thing."""
        return thing

    server._changed()  # what its ``notifications/tools/list_changed`` does
    # Replayed from the step after the second MCP call, as a recovery after a crash there is.
    after_calls = max(i for i, name in enumerate(steps) if name == "dspy_imp.tool.look") + 1
    lm = ScriptedLM([reply(calls=[call("submit", {"answer": "still not here"}, id="c3")])])
    program.set_lm(lm)
    replayed = durable.TurnHandle(DBOS.fork_workflow(f"mcp-{how}", after_calls + 1)).result(polling_interval_sec=0.1)
    assert replayed.answer == "still not here"
    assert CALLS == {"shelf": 1, "desk": 1}  # counted at the server: neither call sent again
    assert len(LISTED) == 1  # the replay lists nothing: the recorded list is the turn's
    assert [t["function"]["name"] for t in lm.requests[0].tools] == ["look", "submit"]  # not `peek`
    results = [m["content"] for m in lm.requests[0].messages if m["role"] == "tool"]
    assert results == ["nothing on the shelf", "nothing on the desk"]  # the recorded results

    program.set_lm(ScriptedLM([reply(calls=[call("submit", {"answer": "x"})])]))
    _start(how, f"mcp-{how}-next")
    assert "peek" in {t["function"]["name"] for t in program.react.lm.requests[0].tools}  # the next turn sees it


@pytest.mark.parametrize("how", ["sync", "async"])
def test_a_turn_recovered_before_its_server_reopens_keeps_the_servers_instructions(how: str) -> None:
    """With ``add_instructions=True`` the server's instructions are recorded with the tool list: a turn
    recovered after the MCP calls, while no session is open (as in a new process), writes the
    requests the first run wrote, instructions and all."""
    CALLS.clear()
    program, server = PROGRAMS[f"instructed-{how}"], INSTRUCTED[how]
    first_lm = ScriptedLM(script())
    program.set_lm(first_lm)
    assert _start(f"instructed-{how}", f"mcp-instructed-{how}").answer == "not here"
    system = first_lm.requests[2].messages[0]
    assert system["role"] == "system" and "Look under the mat first." in system["content"]
    assert "The MCP server 'desk' sent the instructions below." in system["content"]
    steps = [step["function_name"] for step in DBOS.list_workflow_steps(f"mcp-instructed-{how}")]
    server.close()  # no session now: the recovered turn must not need one to write its prompt
    after_calls = max(i for i, name in enumerate(steps) if name == "dspy_imp.tool.look") + 1
    lm = ScriptedLM([reply(calls=[call("submit", {"answer": "still not here"}, id="c3")])])
    program.set_lm(lm)
    workflow = DBOS.fork_workflow(f"mcp-instructed-{how}", after_calls + 1)
    assert durable.TurnHandle(workflow).result(polling_interval_sec=0.1).answer == "still not here"
    assert lm.requests[0].messages == first_lm.requests[2].messages  # the same request, instructions and all
    assert CALLS == {"shelf": 1, "desk": 1}
    assert not server.connected  # nothing was sent to the server


def test_the_record_holds_the_tools_and_the_added_instructions_and_an_older_record_still_revives() -> None:
    server = mcp.memory(desk("Look under the mat first."), add_instructions=True)
    try:
        record = server.record(server.listing())
    finally:
        server.close()
    assert [tool["name"] for tool in record["tools"]] == ["look"]
    ((whose, text),) = record["instructions"]
    assert (whose, text) == ("MCP server 'desk'", "Look under the mat first.")
    revived = server.revive(record)  # no session: the recorded instructions
    assert (list(revived.tools), revived.instructions) == (["look"], (("MCP server 'desk'", text),))
    older = server.revive(record["tools"])  # a record of the tools alone, as earlier versions wrote
    assert (list(older.tools), older.instructions) == (["look"], ())  # no session open: none to add
    assert not server.connected


class Opaque(Toolset):
    label = "toolset 'opaque'"

    def listing(self) -> Listing:
        return Listing()


def test_a_durable_agent_refuses_a_toolset_whose_list_it_cannot_record() -> None:
    agent = dspy_imp.ReActV2("question -> answer", tools=[Opaque()])
    with pytest.raises(dspy_imp.ConfigurationError, match="cannot record the tool list of toolset 'opaque'"):
        durable.DurableAgent(agent, name="opaque")


PROGRAM = Path(__file__).with_name("mcp_durable_program.py")


def _program(db: str, folder: Path, *args: str) -> tuple[int, str]:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent)}
    command = [sys.executable, str(PROGRAM), "--db", db, "--dir", str(folder), *args]
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        output, _ = process.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        process.kill()
        output, _ = process.communicate()
    return process.returncode, output.decode(errors="replace")


def test_a_killed_durable_turn_with_a_stdio_server_resumes_without_calling_it_again(tmp_path: Path) -> None:
    """Two turns (sync and async drivers) make two calls to a stdio server each, then their process is
    SIGKILLed; the next process recovers them: the server (a new process) is not called again for
    them, counted in the file the servers write."""
    db = f"sqlite:///{tmp_path}/sys.sqlite"
    code, output = _program(db, tmp_path, "--doomed")
    assert code == -signal.SIGKILL, f"the doomed process was to be killed, exit {code}:\n{output}"
    code, output = _program(db, tmp_path, "--recover")
    assert code == 0, output
    calls = Counter((tmp_path / "marks").read_text().split())
    assert calls == {"sync-1": 1, "sync-2": 1, "async-1": 1, "async-2": 1}
    assert sorted((tmp_path / "results").read_text().split()) == ["async:done", "sync:done"]


def test_a_tool_calls_sampling_usage_is_recorded_with_its_outcome() -> None:
    from dspy_imp._durable.codec import decode_outcome, encode_outcome
    from dspy_imp._records.outcomes import Raised, Returned
    from dspy_imp._records.usage import RequestUsage

    used = (RequestUsage("sampling", 7, 3),)
    assert decode_outcome(encode_outcome(Returned("x", "t", used))) == Returned("x", "t", used)
    raised = decode_outcome(encode_outcome(Raised(ValueError("no"), "t", used)))
    assert raised.usage == used
    assert "usage" not in encode_outcome(Returned("x", "t"))  # the records of other tools as they were


def test_a_paused_durable_turn_resumes_with_its_mcp_tools_and_calls_the_approved_one_once() -> None:
    CALLS.clear()
    program = PROGRAMS["approve"]
    program.set_lm(
        ScriptedLM(
            [reply(calls=[call("look", {"thing": "safe"}, id="a1")]), reply(calls=[call("submit", {"answer": "ok"})])]
        )
    )
    handle = AGENTS["approve"].start(question="Open?", workflow_id="mcp-approve")
    for _ in range(600):
        found = durable.pending("mcp-approve")
        if found:
            break
        time.sleep(0.05)
    assert [p["name"] for p in found] == ["look"] and CALLS == {}
    AGENTS["approve"].decide("mcp-approve", approvals={"a1": True})
    assert handle.result(polling_interval_sec=0.1).answer == "ok"
    assert CALLS == {"safe": 1}
    steps = [step["function_name"] for step in DBOS.list_workflow_steps("mcp-approve")]
    assert steps.count("dspy_imp.toolsets") == 1  # the resumed part keeps the tools the turn started with


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_a_durable_turn_paused_on_a_servers_question_resumes_with_the_answer(mode: str) -> None:
    """``elicit="pause"``: the question pauses the workflow like an approval; ``decide`` answers it."""
    mcp_elicit_program.RECEIVED.clear()
    mcp_elicit_program.RAN.clear()
    program, workflow = PROGRAMS[f"elicit-{mode}"], f"mcp-elicit-{mode}"
    booking = reply("booking", calls=[call("book", {"flight": "LH1"}, id="c1")])
    program.set_lm(ScriptedLM([booking, mcp_elicit_program.answer("booked")]))
    handle = AGENTS[f"elicit-{mode}"].start(question="A seat?", workflow_id=workflow)
    for _ in range(600):
        found = durable.pending(workflow)
        if found:
            break
        time.sleep(0.05)
    assert [(p["id"], p["kind"], p["message"]) for p in found] == [("c1", "elicitation", "Which row?")]
    with pytest.raises(dspy_imp.ConfigurationError, match=r"field `row`: 'x' is not of type 'integer'"):
        AGENTS[f"elicit-{mode}"].decide(workflow, approvals={"c1": {"row": "x"}})
    AGENTS[f"elicit-{mode}"].decide(workflow, approvals={"c1": {"row": 4}})
    assert handle.result(polling_interval_sec=0.1).answer == "booked"
    assert mcp_elicit_program.RAN == ["LH1: row 4, window True"]
    assert len(mcp_elicit_program.RECEIVED) == 2  # the question's call, then its retry (or, older: the call again)
