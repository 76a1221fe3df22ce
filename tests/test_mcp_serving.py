"""A program served as an MCP server (``as_mcp_server``, ``python -m dspy_imp.mcp serve``), driven by
the ``mcp`` SDK's client: in memory, over stdio and over streamable HTTP on loopback."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import subprocess
import sys
import threading
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import mcp_types as types
import pytest
from mcp import Client, StdioServerParameters

from dspy_imp.mcp._serving import MAX_WAITING, META_KEY, ProgramServer
from tests import mcp_served_program as served_module

pytestmark = pytest.mark.block_network(allowed_hosts=[r"127\.0\.0\.1$"])

ROOT = Path(__file__).parent.parent


@pytest.fixture(autouse=True)
def fresh_events() -> Iterator[None]:
    served_module.events.clear()
    served_module.release.clear()
    yield
    served_module.release.set()  # a sync tool left blocked by a cancel returns


def serve(sync: bool = False) -> ProgramServer:
    program = served_module.sync_program if sync else served_module.program
    return program.as_mcp_server("repeat", sync=sync)


async def accept(context: Any, params: Any) -> types.ElicitResult:
    return types.ElicitResult(action="accept", content={})


async def decline(context: Any, params: Any) -> types.ElicitResult:
    return types.ElicitResult(action="decline")


async def until(condition: Any) -> None:
    """Wait (in loop turns, no clock) until ``condition()`` holds."""
    while not condition():
        await asyncio.sleep(0.01)


def busy_threads(before: set[threading.Thread]) -> list[str]:
    """The threads started since ``before`` that run this package's code or the served program's
    tools now (an AnyIO worker idle in its pool runs neither: it waits for work)."""
    frames = sys._current_frames()
    found = []
    for thread in set(threading.enumerate()) - before:
        frame = frames.get(thread.ident or -1)
        files = [f.filename for f in traceback.extract_stack(frame)] if frame is not None else []
        if any(f"{os.sep}dspy_imp{os.sep}" in f or f.endswith("mcp_served_program.py") for f in files):
            found.append(f"{thread.name}: {' < '.join(f.name for f in traceback.extract_stack(frame)[-3:])}")
    return found


async def until_no_busy_thread(before: set[threading.Thread]) -> None:
    """Until no thread started since ``before`` runs our code; bounded, so one that stays fails the
    test rather than hanging it (a bound, not an assertion)."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(60):
            await until(lambda: not busy_threads(before))
    assert busy_threads(before) == []


async def test_the_tool_has_the_signatures_inputs_and_outputs_as_schemas() -> None:
    async with Client(serve().server, mode="legacy") as client:
        (tool,) = (await client.list_tools()).tools
    assert tool.name == "repeat"
    assert tool.description == "Repeat the question."
    assert tool.input_schema["required"] == ["question", "times"]
    assert tool.input_schema["properties"]["question"] == {
        "description": "what to repeat",
        "title": "Question",
        "type": "string",
    }
    assert tool.input_schema["properties"]["times"]["type"] == "integer"
    assert tool.input_schema["additionalProperties"] is False
    assert tool.output_schema is not None
    assert tool.output_schema["properties"]["length"]["type"] == "integer"
    assert tool.output_schema["required"] == ["answer", "length"]


@pytest.mark.parametrize("sync", [False, True], ids=["async", "sync"])
async def test_a_call_is_a_turn_whose_outputs_are_structured_content(sync: bool) -> None:
    lines: list[str | None] = []

    async def progress(done: float, total: float | None, message: str | None) -> None:
        lines.append(message)

    async with Client(serve(sync).server, mode="legacy") as client:
        result = await client.call_tool("repeat", {"question": "hi", "times": 3}, progress_callback=progress)
    assert result.is_error is False
    assert result.structured_content == {"answer": "hi hi hi", "length": 8}
    assert [c.text for c in result.content if isinstance(c, types.TextContent)] == [
        '{"answer": "hi hi hi", "length": 8}'
    ]
    assert result.meta is not None
    assert result.meta[META_KEY]["reason"] == "submit"
    assert lines[0] == "Request 1"
    assert lines[-1] == "Turn ended: submit"


async def test_progress_names_each_tool_call_of_the_turn() -> None:
    lines: list[str | None] = []

    async def progress(done: float, total: float | None, message: str | None) -> None:
        lines.append(message)

    async with Client(serve().server, mode="legacy", elicitation_callback=accept) as client:
        await client.call_tool("repeat", {"question": "refund it", "times": 1}, progress_callback=progress)
    assert 'Calling refund({"amount": 5})' in lines
    assert "refund returned: refunded 5" in lines
    assert lines[-1] == "Turn ended: submit"


@pytest.mark.parametrize(
    ("arguments", "named"),
    [
        ({"question": "hi", "times": "many"}, "argument `times`: Input should be a valid integer"),
        ({"question": "hi"}, "argument `times`: Field required"),
        ({"question": "hi", "times": 1, "extra": 1}, "argument `extra`: Extra inputs are not permitted"),
        ({"question": "x" * 1_000_001, "times": 1}, "at most 1000000 are read"),
    ],
    ids=["type", "missing", "extra", "too-big"],
)
async def test_bad_arguments_are_an_error_result_before_any_model_request(arguments: Any, named: str) -> None:
    lm = served_module.program.react.lm
    before = len(lm.requests)
    async with Client(serve().server, mode="legacy") as client:
        result = await client.call_tool("repeat", arguments)
    assert result.is_error is True
    assert named in result.content[0].text  # type: ignore[union-attr]
    assert len(lm.requests) == before


@pytest.mark.parametrize("sync", [False, True], ids=["async", "sync"])
async def test_an_approval_pause_is_an_elicitation_the_client_accepts(sync: bool) -> None:
    asked: list[str] = []

    async def elicit(context: Any, params: Any) -> types.ElicitResult:
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={})

    async with Client(serve(sync).server, mode="legacy", elicitation_callback=elicit) as client:
        result = await client.call_tool("repeat", {"question": "refund it", "times": 1})
    assert asked == ['Approve the call refund({"amount": 5})?']
    assert served_module.events == ["refund 5"]
    assert result.structured_content == {"answer": "refund it: refunded 5", "length": 21}


async def test_a_declined_elicitation_refuses_the_call() -> None:
    async with Client(serve().server, mode="legacy", elicitation_callback=decline) as client:
        result = await client.call_tool("repeat", {"question": "refund it", "times": 1})
    assert served_module.events == []
    assert result.is_error is False
    assert result.structured_content is not None
    assert "refund" in result.structured_content["answer"]
    assert "refunded" not in result.structured_content["answer"]


@pytest.mark.parametrize("sync", [False, True], ids=["async", "sync"])
async def test_on_2026_07_28_an_approval_is_asked_in_the_result_and_answered_on_the_retry(sync: bool) -> None:
    asked: list[str] = []

    async def elicit(context: Any, params: Any) -> types.ElicitResult:
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={})

    async with Client(serve(sync).server, elicitation_callback=elicit) as client:  # no handshake: 2026-07-28
        assert client.session.protocol_version == "2026-07-28"
        result = await client.call_tool("repeat", {"question": "refund it", "times": 1})
    assert asked == ['Approve the call refund({"amount": 5})?']
    assert served_module.events == ["refund 5"]
    assert result.structured_content == {"answer": "refund it: refunded 5", "length": 21}


async def test_on_2026_07_28_a_declined_approval_refuses_the_call() -> None:
    async with Client(serve().server, elicitation_callback=decline) as client:
        result = await client.call_tool("repeat", {"question": "refund it", "times": 1})
    assert served_module.events == []
    assert result.is_error is False and result.structured_content is not None
    assert "refunded" not in result.structured_content["answer"]


async def test_a_request_state_is_answered_once_with_the_arguments_that_paused() -> None:
    served = serve()
    arguments = {"question": "refund it", "times": 1}
    accepted = {"approval-0": types.ElicitResult(action="accept", content={})}
    async with Client(served.server, elicitation_callback=accept) as client:
        paused = await client.session.call_tool("repeat", arguments, allow_input_required=True)
        assert isinstance(paused, types.InputRequiredResult)
        assert paused.input_requests is not None and list(paused.input_requests) == ["approval-0"]
        state = paused.request_state
        assert isinstance(state, str) and len(state) >= 32 and state not in json.dumps(arguments)
        other = await client.session.call_tool(
            "repeat", {**arguments, "times": 2}, input_responses=accepted, request_state=state
        )
        assert other.is_error is True and "not those of the call that paused" in other.content[0].text  # type: ignore[union-attr]
        assert served_module.events == []  # a mistaken retry ran nothing, and did not spend the state
        done = await client.session.call_tool("repeat", arguments, input_responses=accepted, request_state=state)
        assert done.structured_content == {"answer": "refund it: refunded 5", "length": 21}
        again = await client.session.call_tool("repeat", arguments, input_responses=accepted, request_state=state)
        forged = await client.session.call_tool("repeat", arguments, input_responses=accepted, request_state="x")
    for refused in (again, forged):
        assert refused.is_error is True
        assert "no turn waits under this requestState" in refused.content[0].text  # type: ignore[union-attr]
    assert served_module.events == ["refund 5"]  # approved once, run once


async def test_at_most_max_waiting_paused_turns_are_kept() -> None:
    served = serve()
    arguments = {"question": "refund it", "times": 1}
    async with Client(served.server, elicitation_callback=accept) as client:
        states = []
        for _ in range(MAX_WAITING + 1):
            paused = await client.session.call_tool("repeat", arguments, allow_input_required=True)
            assert isinstance(paused, types.InputRequiredResult)
            states.append(paused.request_state)
        accepted = {"approval-0": types.ElicitResult(action="accept", content={})}
        oldest = await client.session.call_tool("repeat", arguments, input_responses=accepted, request_state=states[0])
        newest = await client.session.call_tool("repeat", arguments, input_responses=accepted, request_state=states[-1])
    assert oldest.is_error is True and newest.structured_content is not None
    assert len(served._waiting) == MAX_WAITING - 1


async def test_a_client_without_elicitation_gets_an_error_result_for_an_approval() -> None:
    async with Client(serve().server, mode="legacy") as client:
        result = await client.call_tool("repeat", {"question": "refund it", "times": 1})
    assert result.is_error is True
    assert "needs approval of refund" in result.content[0].text  # type: ignore[union-attr]
    assert "does not take elicitation requests" in result.content[0].text  # type: ignore[union-attr]
    assert result.meta is not None and result.meta[META_KEY]["reason"] == "paused"
    assert served_module.events == []


@pytest.mark.parametrize("sync", [False, True], ids=["async", "sync"])
async def test_a_cancelled_call_ends_the_turn(sync: bool, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="dspy_imp.mcp")
    before = set(threading.enumerate())
    async with Client(serve(sync).server, mode="legacy") as client:
        call = asyncio.ensure_future(client.call_tool("repeat", {"question": "wait now", "times": 1}))
        await until(lambda: "wait started" in served_module.events)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        await until(lambda: any("cancelled the call" in r.getMessage() for r in caplog.records))
        if not sync:
            await until(lambda: "wait cancelled" in served_module.events)
        # The session still answers: the cancel ended only that turn.
        result = await client.call_tool("repeat", {"question": "hi", "times": 1})
    assert result.structured_content == {"answer": "hi", "length": 2}
    assert "wait released" not in served_module.events  # the sync turn stopped without its tool returning
    if sync:  # the tool's own thread was left behind, blocked in the tool: it is the only one
        (left,) = busy_threads(before)
        assert "wait_sync" in left
        served_module.release.set()  # the tool returns (what it returns is dropped): its thread is free
        await until(lambda: "wait released" in served_module.events)
    await until_no_busy_thread(before)  # nothing of the cancelled call stays behind


def test_a_program_with_a_history_input_is_refused() -> None:
    import dspy

    import dspy_imp
    from dspy_imp import ConfigurationError

    agent = dspy_imp.ReActV2("question: str, chat: dspy.History -> answer", tools=[])
    with pytest.raises(ConfigurationError, match=r"`chat` is a dspy\.History"):
        agent.as_mcp_server("chat")
    assert dspy.History is not None


def test_a_bad_tool_name_is_refused() -> None:
    from dspy_imp import ConfigurationError

    with pytest.raises(ConfigurationError, match="the tool's name must be"):
        served_module.program.as_mcp_server("my server")


def command(*args: str) -> list[str]:
    return [sys.executable, "-m", "dspy_imp.mcp", "serve", *args]


def environment() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


async def test_served_over_stdio_by_the_command() -> None:
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "dspy_imp.mcp", "serve", "tests.mcp_served_program:program"],
        cwd=str(ROOT),
        env=environment(),
    )
    async with Client(params, mode="legacy", elicitation_callback=accept) as client:
        (tool,) = (await client.list_tools()).tools
        result = await client.call_tool("program", {"question": "hey", "times": 2})
        approved = await client.call_tool("program", {"question": "refund it", "times": 1})
    assert tool.name == "program"
    assert result.structured_content == {"answer": "hey hey", "length": 7}
    assert approved.structured_content == {"answer": "refund it: refunded 5", "length": 21}


@pytest.mark.parametrize(
    ("target", "said"),
    [
        ("tests.mcp_served_program:nope", "tests.mcp_served_program has no attribute 'nope'"),
        ("tests.no_such_module:program", "no module named 'tests.no_such_module'"),
        ("tests.mcp_served_program", "expected module:program"),
        ("tests.mcp_served_program:not_a_program", "expected a dspy_imp.ReActV2"),
        ("tests.mcp_served_program:no_lm", "has no LM: its module must set one"),
    ],
    ids=["attribute", "module", "no-colon", "not-a-program", "no-lm"],
)
def test_a_bad_program_is_one_clear_line(target: str, said: str) -> None:
    done = subprocess.run(
        command(target),
        cwd=ROOT,
        env=environment(),
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode != 0
    assert said in done.stderr
    assert "Traceback" not in done.stderr


def test_no_argument_chooses_the_model() -> None:
    done = subprocess.run(
        command("tests.mcp_served_program:program", "--model", "openai/gpt-4o"),
        cwd=ROOT, env=environment(), capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert done.returncode == 2
    assert "unrecognized arguments: --model" in done.stderr


@pytest.fixture(scope="module")
def http_url() -> Iterator[str]:
    server = subprocess.Popen(
        command("tests.mcp_served_program:program", "--http"),
        cwd=ROOT,
        env=environment(),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert server.stdout is not None
        line = server.stdout.readline()
        assert "serving program on http://127.0.0.1:" in line, line
        yield line.split(" on ", 1)[1].strip()
    finally:
        server.terminate()
        server.wait(timeout=30)
        if server.stdout is not None:
            server.stdout.close()


async def test_served_over_streamable_http(http_url: str) -> None:
    lines: list[str | None] = []

    async def progress(done: float, total: float | None, message: str | None) -> None:
        lines.append(message)

    async with Client(http_url, mode="legacy", elicitation_callback=accept) as client:
        result = await client.call_tool("program", {"question": "yo", "times": 2}, progress_callback=progress)
        approved = await client.call_tool("program", {"question": "refund it", "times": 1})
    assert result.structured_content == {"answer": "yo yo", "length": 5}
    assert lines[-1] == "Turn ended: submit"
    assert approved.structured_content == {"answer": "refund it: refunded 5", "length": 21}


INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
}
ACCEPT = {"accept": "application/json, text/event-stream", "content-type": "application/json"}


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        ({"host": "evil.example"}, 421),
        ({"origin": "http://evil.example"}, 403),
        ({"host": "localhost", "origin": "http://localhost"}, 200),
        ({}, 200),
    ],
    ids=["host", "origin", "loopback-name", "plain"],
)
def test_host_and_origin_are_checked_on_http(http_url: str, headers: dict[str, str], status: int) -> None:
    response = httpx.post(http_url, json=INITIALIZE, headers={**ACCEPT, **headers}, timeout=60)
    assert response.status_code == status, response.text


async def test_without_the_handshake_an_approval_is_an_input_required_round_trip_over_http(http_url: str) -> None:
    async with Client(http_url, elicitation_callback=accept) as client:  # 2026-07-28: no requests mid-call
        plain = await client.call_tool("program", {"question": "yo", "times": 1})
        approved = await client.call_tool("program", {"question": "refund it", "times": 1})
    assert plain.structured_content == {"answer": "yo", "length": 2}
    assert approved.structured_content == {"answer": "refund it: refunded 5", "length": 21}
