"""MCP servers over stdio, real child processes: ``mcp-server-time`` from PyPI and ``mcp_test_server.py``.

Both drivers (the ``run`` fixture). No test waits on the machine's speed: a hang is bounded by
``tool_timeouts`` (a bound, never an assertion), and what the server saw is read from its marks
file, polled under a generous guard.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import dspy
import pytest

import dspy_imp
from dspy_imp import mcp
from dspy_imp.mcp._stdio import MAX_MESSAGE_BYTES
from dspy_imp.testing import ScriptedLM, call, reply

HERE = Path(__file__).parent
GUARD = 60.0  # a hang guard, never a measure


def answer(text: str) -> Any:
    return reply(f"[[ ## answer ## ]]\n{text}\n\n[[ ## completed ## ]]")


def children() -> set[int]:
    """This process's child processes now."""
    found: set[int] = set()
    for task in Path("/proc/self/task").iterdir():
        try:
            text = (task / "children").read_text()
        except FileNotFoundError:  # a thread that ended since the listing: it has no children
            continue
        found.update(int(pid) for pid in text.split())
    return found


def test_server(marks: Path, **options: Any) -> mcp.Server:
    return mcp.stdio(
        sys.executable, [str(HERE / "mcp_test_server.py")], env={"MCP_TEST_MARKS": str(marks)}, name="test", **options
    )


test_server.__test__ = False  # type: ignore[attr-defined]


def results(pred: Any) -> list[dict[str, Any]]:
    return [r for e in pred.metadata.history.messages for r in e.get("tool_call_results") or ()]


def test_mcp_server_time_from_pypi_through_a_turn(run: Any) -> None:
    time_server = mcp.stdio(sys.executable, ["-m", "mcp_server_time", "--local-timezone=UTC"], name="time")
    agent = dspy_imp.ReActV2("question -> answer", tools=[time_server])
    lm = ScriptedLM(
        [reply("converting", calls=[call("convert_time", {"source_timezone": "UTC", "time": "12:00",
                                                          "target_timezone": "Asia/Tokyo"}, id="c1")]),
         answer("21:00")]
    )  # fmt: skip
    before = children()
    with dspy.context(lm=lm):
        pred = run(agent, question="noon UTC in Tokyo?")
    assert set(lm.requests[0].tool_names) == {"get_current_time", "convert_time"}
    converted = results(pred)[0]["result"]
    assert converted["target"]["timezone"] == "Asia/Tokyo" and converted["target"]["datetime"].endswith(
        "21:00:00+09:00"
    )
    assert len(children() - before) == 1  # the server's process, kept for the next turn
    time_server.close()
    assert children() - before == set()


def test_a_server_killed_mid_call_is_an_error_observation_and_the_next_call_restarts_it(
    run: Any, tmp_path: Path
) -> None:
    server = test_server(tmp_path / "marks")
    agent = dspy_imp.ReActV2("question -> answer", tools=[server])
    lm = ScriptedLM(
        [
            reply("pid", calls=[call("pid", {}, id="c1")]),
            reply("die", calls=[call("die", {}, id="c2")]),
            reply("pid again", calls=[call("pid", {}, id="c3")]),
            answer("done"),
        ]
    )
    before = children()
    with dspy.context(lm=lm):
        pred = run(agent, question="q")
    first, died, second = results(pred)
    assert died["error"] is True and "closed its session during the call" in died["result"]
    assert first["error"] is False and second["error"] is False
    assert first["result"] != second["result"]  # another process
    assert server.sessions_opened == 2
    server.close()
    assert children() - before == set()


def test_a_server_that_died_between_turns_is_started_again_for_the_next_call(run: Any, tmp_path: Path) -> None:
    server = test_server(tmp_path / "marks")
    agent = dspy_imp.ReActV2("question -> answer", tools=[server])
    with dspy.context(lm=ScriptedLM([reply("pid", calls=[call("pid", {}, id="c1")]), answer("x")])):
        first = results(run(agent, question="q"))[0]["result"]
    os.kill(first, signal.SIGKILL)  # killed while idle, between turns
    end = time.monotonic() + GUARD
    while server.connected and time.monotonic() < end:  # until its stream's end is read
        time.sleep(0.05)
    assert not server.connected
    with dspy.context(lm=ScriptedLM([reply("pid", calls=[call("pid", {}, id="c2")]), answer("x")])):
        second = results(run(agent, question="q"))[0]
    assert second["error"] is False and second["result"] != first
    assert server.sessions_opened == 2
    server.close()


def read_marks(path: Path, expected: int) -> list[str]:
    """The server's marks once it has written ``expected`` lines (polled under a hang guard)."""
    end = time.monotonic() + GUARD
    while time.monotonic() < end:
        lines = path.read_text().splitlines() if path.exists() else []
        if len(lines) >= expected:
            return lines
        time.sleep(0.05)
    raise AssertionError(f"the server wrote {path.read_text() if path.exists() else 'nothing'!r}")


def test_a_hanging_call_is_bounded_by_tool_timeouts_and_cancelled_on_the_wire(run: Any, tmp_path: Path) -> None:
    marks = tmp_path / "marks"
    server = test_server(marks)
    agent = dspy_imp.ReActV2("question -> answer", tools=[server], tool_timeouts=0.5)
    lm = ScriptedLM(
        [
            reply("hang", calls=[call("hang", {"tag": "first"}, id="c1")]),
            reply("echo", calls=[call("echo", {"text": "still here"}, id="c2")]),
            answer("done"),
        ]
    )
    # Per call, the MCP tool by its name: only the hanging tool gets the short bound, so the echo after
    # it may take as long as a slow machine needs (the test must not depend on the machine's speed).
    with dspy.context(lm=lm):
        pred = run(agent, question="q", tool_timeouts={"hang": 0.5, "*": 60})
    hung, echoed = results(pred)
    assert hung["error"] is True and "timed out after 0.5 s" in hung["result"]
    # The handler was cancelled while the process lived on: only `notifications/cancelled` does that.
    assert read_marks(marks, 2) == ["started first", "cancelled first"]
    assert echoed["result"] == "still here"
    assert server.sessions_opened == 1
    server.close()


def test_the_server_timeout_bounds_its_own_tools(run: Any, tmp_path: Path) -> None:
    marks = tmp_path / "marks"
    server = test_server(marks, timeout=0.5)
    agent = dspy_imp.ReActV2("question -> answer", tools=[server])
    lm = ScriptedLM([reply("hang", calls=[call("hang", {"tag": "own"}, id="c1")]), answer("done")])
    with dspy.context(lm=lm):
        pred = run(agent, question="q")
    assert "timed out after 0.5 s" in results(pred)[0]["result"]
    assert read_marks(marks, 2) == ["started own", "cancelled own"]
    server.close()


def test_a_line_that_is_not_json_rpc_and_a_flood_of_notifications_end_nothing(run: Any, tmp_path: Path) -> None:
    server = test_server(tmp_path / "marks", mode="legacy")  # a 2025 session: the server's logs reach us
    agent = dspy_imp.ReActV2("question -> answer", tools=[server])
    lm = ScriptedLM(
        [
            reply("garbage", calls=[call("garbage", {}, id="c1")]),
            reply("echo", calls=[call("echo", {"text": "after"}, id="c2")]),
            answer("done"),
        ]
    )
    with dspy.context(lm=lm):
        pred = run(agent, question="q")
    assert [r["result"] for r in results(pred)] == ["survived", "after"]
    assert server.sessions_opened == 1
    server.close()


def test_stop_cancels_the_request_on_the_wire(tmp_path: Path) -> None:
    marks = tmp_path / "marks"
    server = test_server(marks)
    agent = dspy_imp.ReActV2("question -> answer", tools=[server])
    lm = ScriptedLM([reply("hang", calls=[call("hang", {"tag": "stopped"}, id="c1")]), answer("never")])

    async def main() -> None:
        with dspy.context(lm=lm):
            turn = asyncio.create_task(agent.acall(question="q"))
            end = time.monotonic() + GUARD
            while not marks.exists() and time.monotonic() < end:  # until the server runs the call
                await asyncio.sleep(0.05)
            turn.cancel()  # what Stop does to an async turn
            with pytest.raises(asyncio.CancelledError):
                await turn

    asyncio.run(main())
    assert read_marks(marks, 2) == ["started stopped", "cancelled stopped"]
    server.close()


def test_evaluate_with_eight_threads_and_two_servers_leaves_no_child(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(HERE / "mcp_evaluate_program.py"), str(tmp_path / "marks")],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE.parent), os.environ.get("PYTHONPATH", "")])},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["score"] == 100.0
    assert report["sessions"] == [1, 1]  # one session per server for all eight threads
    assert len(report["children"]) == 2
    for pid in report["children"]:  # closed at the program's exit, none left running
        assert not Path(f"/proc/{pid}").exists()


def test_a_server_closed_by_with_leaves_no_child(tmp_path: Path) -> None:
    before = children()
    with test_server(tmp_path / "marks") as server:
        assert [t.name for t in server.list_tools()] == ["echo", "pid", "die", "garbage", "hang"]
        assert len(children() - before) == 1
    assert children() - before == set()


def test_a_forked_child_opens_its_own_session(tmp_path: Path) -> None:
    server = test_server(tmp_path / "marks")
    parents = server.listing().tools["pid"]
    parent_server = asyncio.run(parents.acall())
    with warnings.catch_warnings():  # Python 3.12 warns of fork() in a process with threads: that is the case
        warnings.simplefilter("ignore", DeprecationWarning)
        child = os.fork()
    if child == 0:  # pragma: no cover - the child reports by its exit status only
        try:
            own = asyncio.run(server.listing().tools["pid"].acall())
            code = 0 if own != parent_server and server.sessions_opened == 2 else 1
            server.close()
        except BaseException:
            code = 2
        os._exit(code)
    end = time.monotonic() + GUARD  # a hang guard: a child talking on its parent's session never ends
    while (done := os.waitpid(child, os.WNOHANG))[0] == 0 and time.monotonic() < end:
        time.sleep(0.05)
    if done[0] == 0:
        os.kill(child, signal.SIGKILL)
        os.waitpid(child, 0)
        raise AssertionError("the forked child hung on its parent's session")
    assert os.waitstatus_to_exitcode(done[1]) == 0
    assert asyncio.run(parents.acall()) == parent_server  # the parent's session is untouched
    server.close()


def flood_server(**options: Any) -> mcp.Server:
    return mcp.stdio(sys.executable, [str(HERE / "mcp_flood_server.py")], name="flood", **options)


def gone(pid: int) -> bool:
    """Whether process ``pid`` has ended (polled under a hang guard)."""
    end = time.monotonic() + GUARD
    while Path(f"/proc/{pid}").exists() and time.monotonic() < end:
        time.sleep(0.05)
    return not Path(f"/proc/{pid}").exists()


def test_a_line_over_max_message_bytes_ends_the_session_and_fails_the_call_naming_the_limit(
    run: Any,
) -> None:
    server = flood_server(max_message_bytes=100_000)
    agent = dspy_imp.ReActV2("question -> answer", tools=[server], tool_timeouts=GUARD)  # a hang guard
    lm = ScriptedLM(
        [
            reply("pid", calls=[call("pid", {}, id="c1")]),
            reply("short", calls=[call("long_line", {"size": 50_000}, id="c2")]),
            reply("long", calls=[call("long_line", {"size": 300_000}, id="c3")]),
            reply("pid again", calls=[call("pid", {}, id="c4")]),
            answer("done"),
        ]
    )
    with dspy.context(lm=lm):
        pred = run(agent, question="q")
    first, short, long, second = results(pred)
    assert short == {**short, "error": False, "result": "after the long line"}  # under the bound: skipped
    assert long["error"] is True
    assert "MCP server 'flood' wrote a message longer than 100,000 bytes (`max_message_bytes`)" in long["result"]
    assert "the server's process stopped" in long["result"]
    assert gone(first["result"])  # stopped, not left running
    assert second["error"] is False and second["result"] != first["result"]  # started again
    assert server.sessions_opened == 2
    assert pred.answer == "done"  # the turn went on, its history whole
    server.close()


def test_bytes_with_no_newline_past_the_default_bound_end_the_session(run: Any) -> None:
    server = flood_server()
    agent = dspy_imp.ReActV2("question -> answer", tools=[server], tool_timeouts=GUARD)  # a hang guard
    size = 2 * MAX_MESSAGE_BYTES
    lm = ScriptedLM(
        [
            reply("pid", calls=[call("pid", {}, id="c1")]),
            reply("endless", calls=[call("endless_line", {"size": size}, id="c2")]),
            reply("echo", calls=[call("echo", {"text": "back"}, id="c3")]),
            answer("done"),
        ]
    )
    before = children()
    with dspy.context(lm=lm):
        pred = run(agent, question="q")
    first, endless, echoed = results(pred)
    assert endless["error"] is True
    assert f"longer than {MAX_MESSAGE_BYTES:,} bytes" in endless["result"]
    assert gone(first["result"])
    assert echoed["result"] == "back"
    server.close()
    assert children() - before == set()


def test_a_line_over_the_bound_before_the_session_opens_fails_the_opening_naming_it() -> None:
    server = flood_server(max_message_bytes=10_000, env={"MCP_FLOOD_AT_START": "50000"})
    before = children()
    with pytest.raises(mcp.ServerUnavailable) as raised:
        server.list_tools()
    assert str(raised.value).startswith(
        "MCP server 'flood' could not be opened: wrote a message longer than 10,000 bytes (`max_message_bytes`)"
    )
    assert children() - before == set()  # its process stopped
    assert not server.connected


def test_max_message_bytes_must_be_a_positive_number_of_bytes() -> None:
    for bad in (0, -1, 1.5, True, "big"):
        with pytest.raises(dspy_imp.ConfigurationError, match="max_message_bytes"):
            mcp.stdio(sys.executable, max_message_bytes=bad)


def test_the_stdio_bound_shown_in_the_signature_is_the_readers_default() -> None:
    import inspect

    from dspy_imp.mcp._stdio import MAX_MESSAGE_BYTES

    assert inspect.signature(mcp.stdio).parameters["max_message_bytes"].default == MAX_MESSAGE_BYTES
