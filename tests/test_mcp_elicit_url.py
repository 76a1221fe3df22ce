"""URL elicitation (MCP 2025-11-25, ``mode: "url"``): a server asks for a person to open a URL,
mid-call (``elicitation/create``) or by refusing a call with ``URLElicitationRequiredError``
(-32042). Answered by ``elicit_url=`` or, under ``elicit="pause"``, by the caller through
``approvals`` like a form. The URL is untrusted: only ``http``/``https`` URLs with a host and no
credentials are shown; it is never fetched.

The server (``tests/mcp_url_program.py``) is an in-process ``MCPServer`` (``mcp.memory``); a
question mid-call needs a JSON-RPC session (``mode="legacy"``), a -32042 refusal is tried on both.
Every turn runs through both drivers (``run``); what the server received is asserted whole.
"""

from __future__ import annotations

import json
from typing import Any

import dspy
import mcp_url_program as served
import pytest
from mcp_url_program import DRIVE

import dspy_imp
from dspy_imp import mcp
from dspy_imp._records.steps import from_entry
from dspy_imp._turn.elicitation import MAX_URL_CHARS, url_problem
from dspy_imp.testing import ScriptedLM, call, reply

MODES = ["auto", "legacy"]
CONNECT = {"name": "connect", "arguments": {"service": "drive"}}
FILES = {"name": "files", "arguments": {"folder": "docs"}}
FILES_LISTED = "docs: a.txt, b.txt"


@pytest.fixture(autouse=True)
def _fresh() -> None:
    served.clear()


def answer(text: str) -> Any:
    return reply(f"[[ ## answer ## ]]\n{text}\n\n[[ ## completed ## ]]")


def calling(name: str, args: dict[str, Any]) -> ScriptedLM:
    return ScriptedLM([reply("calling", calls=[call(name, args, id="c1")]), answer("done")])


def tool_content(lm: ScriptedLM, request: int = 1) -> str:
    (message,) = [m for m in lm.requests[request].messages if m["role"] == "tool"]
    assert message["tool_call_id"] == "c1"
    content: str = message["content"]
    return content


def turn(run: Any, server: mcp.Server, name: str, args: dict[str, Any]) -> tuple[Any, ScriptedLM]:
    lm = calling(name, args)
    with dspy.context(lm=lm):
        pred = run(dspy_imp.ReActV2("question -> answer", tools=[server]), question="q")
    return pred, lm


def shown(name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"id": "c1", "name": name, "args": args, "kind": "elicitation", "server": "drive", "mode": "url",
            "message": "Sign in to Drive", "url": DRIVE, "elicitation_id": "el-1"}  # fmt: skip


def opens(asked: list[tuple[str, str]], answer: Any = True, sign_in: bool = True) -> Any:
    """An ``elicit_url`` callback: the person opens the URL (and signs in, out of band)."""

    def callback(message: str, url: str) -> Any:
        asked.append((message, url))
        served.SIGNED_IN[0] = sign_in
        return answer

    return callback


# -- what the client declares ------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    ("options", "declared"),
    [
        ({"elicit_url": lambda message, url: True}, {"url": {}}),
        ({"elicit": lambda message, schema: None}, {"form": {}}),
        ({"elicit": lambda message, schema: None, "elicit_url": lambda message, url: True}, {"form": {}, "url": {}}),
        ({"elicit": "pause"}, {"form": {}, "url": {}}),
        ({}, None),
    ],
)
def test_the_url_capability_is_declared_only_when_the_host_can_answer_it(
    run: Any, mode: str, options: dict[str, Any], declared: Any
) -> None:
    server = mcp.memory(served.drive(), mode=mode, **options)
    _, lm = turn(run, server, "declared", {})
    assert json.loads(tool_content(lm)) == declared
    server.close()


# -- answered by ``elicit_url`` ----------------------------------------------------------------


@pytest.mark.parametrize("asynchronous", [False, True])
def test_a_url_request_is_answered_by_the_callback(run: Any, asynchronous: bool) -> None:
    asked: list[tuple[str, str]] = []
    sync = opens(asked)

    async def async_callback(message: str, url: str) -> Any:
        return sync(message, url)

    server = mcp.memory(served.drive(), mode="legacy", elicit_url=async_callback if asynchronous else sync)
    pred, lm = turn(run, server, "connect", {"service": "drive"})
    assert pred.metadata.termination_reason == "answered"
    assert tool_content(lm) == "drive: accept"
    assert asked == [("Sign in to Drive", DRIVE)]
    assert (served.RECEIVED, served.ANSWERS) == ([CONNECT], ["accept"])
    server.close()


@pytest.mark.parametrize(("given", "action"), [(False, "decline"), (None, "decline"), ("cancel", "cancel")])
def test_a_url_request_declined_or_cancelled_by_the_callback(run: Any, given: Any, action: str) -> None:
    asked: list[tuple[str, str]] = []
    server = mcp.memory(served.drive(), mode="legacy", elicit_url=opens(asked, given, sign_in=False))
    _, lm = turn(run, server, "connect", {"service": "drive"})
    assert tool_content(lm) == f"drive: {action}"
    assert (asked, served.RECEIVED, served.ANSWERS) == ([("Sign in to Drive", DRIVE)], [CONNECT], [action])
    server.close()


def test_a_callback_answering_something_else_is_refused_to_the_server(run: Any) -> None:
    server = mcp.memory(served.drive(), mode="legacy", elicit_url=lambda message, url: "yes")
    _, lm = turn(run, server, "connect", {"service": "drive"})
    assert tool_content(lm) == (
        "Error: connect failed: the URL elicitation answered neither True, False, None nor 'cancel'"
    )
    assert (served.RECEIVED, served.ANSWERS) == ([CONNECT], [])
    server.close()


@pytest.mark.parametrize("mode", MODES)
def test_a_call_refused_until_a_url_is_opened_is_made_again_once_it_is(run: Any, mode: str) -> None:
    asked: list[tuple[str, str]] = []
    server = mcp.memory(served.drive(), mode=mode, elicit_url=opens(asked))
    _, lm = turn(run, server, "files", {"folder": "docs"})
    assert tool_content(lm) == FILES_LISTED
    assert (asked, served.RECEIVED) == ([("Sign in to Drive", DRIVE)], [FILES, FILES])
    server.close()


@pytest.mark.parametrize("mode", MODES)
def test_a_call_refused_until_a_url_is_opened_and_the_person_declines(run: Any, mode: str) -> None:
    asked: list[tuple[str, str]] = []
    server = mcp.memory(served.drive(), mode=mode, elicit_url=opens(asked, False, sign_in=False))
    _, lm = turn(run, server, "files", {"folder": "docs"})
    assert tool_content(lm) == (
        "Error: files failed: MCP server 'drive' needs a URL opened to make this call, and the person did not (decline)"
    )
    assert (asked, served.RECEIVED) == ([("Sign in to Drive", DRIVE)], [FILES])
    server.close()


@pytest.mark.parametrize("mode", MODES)
def test_a_call_refused_again_after_the_url_was_opened_is_not_made_a_third_time(run: Any, mode: str) -> None:
    asked: list[tuple[str, str]] = []
    server = mcp.memory(served.drive(), mode=mode, elicit_url=opens(asked, True, sign_in=False))
    _, lm = turn(run, server, "files", {"folder": "docs"})
    assert tool_content(lm) == "Error: files failed: URL elicitation required"
    assert (asked, served.RECEIVED) == ([("Sign in to Drive", DRIVE)], [FILES, FILES])
    server.close()


def test_without_elicit_url_a_refusal_is_the_calls_error(run: Any) -> None:
    server = mcp.memory(served.drive(), elicit=lambda message, schema: None)
    _, lm = turn(run, server, "files", {"folder": "docs"})
    assert tool_content(lm) == "Error: files failed: URL elicitation required"
    assert served.RECEIVED == [FILES]
    server.close()


# -- the URL is untrusted ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "said"),
    [
        ("javascript:alert(1)", "its url's scheme must be http or https, got 'javascript'"),
        ("data:text/html,<b>hi</b>", "its url's scheme must be http or https, got 'data'"),
        ("file:///etc/passwd", "its url's scheme must be http or https, got 'file'"),
        ("ftp://example.com/a", "its url's scheme must be http or https, got 'ftp'"),
        ("//example.com/a", "its url's scheme must be http or https, got 'none'"),
        ("https:///path-only", "its url names no host"),
        ("https://bank.example@evil.example/", "its url holds credentials (user@host)"),
        ("https://example.com/a b", "its url holds spaces or control characters"),
        ("https://example.com/\x00", "its url holds spaces or control characters"),
        ("https://example.com:99999/", "its url is not a valid URL"),
        ("https://example.com/" + "a" * MAX_URL_CHARS, f"its url is not a text of 1 to {MAX_URL_CHARS} characters"),
        ("", f"its url is not a text of 1 to {MAX_URL_CHARS} characters"),
        (None, f"its url is not a text of 1 to {MAX_URL_CHARS} characters"),
    ],
)
def test_a_url_that_may_not_be_shown_is_refused(url: Any, said: str) -> None:
    assert url_problem(url) == said


@pytest.mark.parametrize("url", ["https://auth.example.com/drive?state=s1", "http://localhost:8000/cb", "HTTPS://A.B"])
def test_an_http_or_https_url_may_be_shown(url: str) -> None:
    assert url_problem(url) is None


def test_a_bad_url_never_reaches_the_callback(run: Any) -> None:
    asked: list[tuple[str, str]] = []
    server = mcp.memory(served.drive(), mode="legacy", elicit_url=opens(asked))
    _, lm = turn(run, server, "phish", {})
    assert tool_content(lm) == (
        "Error: phish failed: the URL elicitation is refused: its url's scheme must be http or https, got 'javascript'"
    )
    assert (asked, served.RECEIVED, served.ANSWERS) == ([], [{"name": "phish", "arguments": {}}], [])
    server.close()


def test_a_bad_url_does_not_pause_the_turn(run: Any) -> None:
    server = mcp.memory(served.drive(), mode="legacy", elicit="pause")
    pred, lm = turn(run, server, "phish", {})
    assert pred.metadata.termination_reason == "answered"
    assert tool_content(lm) == (
        "Error: phish failed: MCP server 'drive' asked to open a URL that cannot be shown: its url's scheme must be "
        "http or https, got 'javascript'"
    )
    assert (served.RECEIVED, served.ANSWERS) == ([{"name": "phish", "arguments": {}}], [])
    server.close()


# -- under ``elicit="pause"`` ------------------------------------------------------------------


def paused(run: Any, name: str, args: dict[str, Any], mode: str = "legacy") -> tuple[Any, mcp.Server, Any]:
    server = mcp.memory(served.drive(), mode=mode, elicit="pause")
    program = dspy_imp.ReActV2("question -> answer", tools=[server])
    with dspy.context(lm=ScriptedLM([reply("calling", calls=[call(name, args, id="c1")])])):
        pred = run(program, question="q")
    return program, server, pred


def resumed(run: Any, program: Any, pred: Any, verdict: Any) -> ScriptedLM:
    lm = ScriptedLM([answer("done")])
    with dspy.context(lm=lm):
        run(program, history=pred.metadata.history, approvals={"c1": verdict})
    return lm


def test_a_url_request_mid_call_pauses_the_turn_and_opening_it_finishes_the_call(run: Any) -> None:
    program, server, pred = paused(run, "connect", {"service": "drive"})
    assert pred.metadata.termination_reason == "paused"
    assert pred.metadata.pending_calls == (shown("connect", {"service": "drive"}),)
    ((pending,),) = [pred.metadata.history.messages[-1]["pending_calls"]]
    assert pending == {
        "id": "c1", "name": "connect", "args": {"service": "drive"}, "kind": "elicitation",
        "elicitation": {"server": "drive", "mode": "url", "message": "Sign in to Drive", "url": DRIVE,
                        "elicitation_id": "el-1", "resume": {"era": "mid_call", "answered": []}},
    }  # fmt: skip
    assert (served.RECEIVED, served.ANSWERS) == ([CONNECT], [])  # the paused call was cancelled, unanswered
    lm = resumed(run, program, pred, True)
    assert tool_content(lm, 0) == "drive: accept"
    assert (served.RECEIVED, served.ANSWERS) == ([CONNECT, CONNECT], ["accept"])
    server.close()


@pytest.mark.parametrize(("verdict", "action"), [(False, "decline"), ("cancel", "cancel")])
def test_a_url_request_mid_call_declined_or_cancelled(run: Any, verdict: Any, action: str) -> None:
    program, server, pred = paused(run, "connect", {"service": "drive"})
    lm = resumed(run, program, pred, verdict)
    assert tool_content(lm, 0) == f"drive: {action}"
    assert ([CONNECT, CONNECT], [action]) == (served.RECEIVED, served.ANSWERS)
    server.close()


@pytest.mark.parametrize("mode", MODES)
def test_a_call_refused_until_a_url_is_opened_pauses_and_is_made_again(run: Any, mode: str) -> None:
    program, server, pred = paused(run, "files", {"folder": "docs"}, mode)
    assert pred.metadata.termination_reason == "paused"
    assert pred.metadata.pending_calls == (shown("files", {"folder": "docs"}),)
    ((pending,),) = [pred.metadata.history.messages[-1]["pending_calls"]]
    assert pending["elicitation"]["resume"] == {
        "era": "url_required", "answered": [], "message": "Sign in to Drive", "url": DRIVE
    }  # fmt: skip
    assert served.RECEIVED == [FILES]
    served.SIGNED_IN[0] = True  # the person opened the URL and signed in
    lm = resumed(run, program, pred, True)
    assert tool_content(lm, 0) == FILES_LISTED
    assert served.RECEIVED == [FILES, FILES]
    server.close()


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(("verdict", "action"), [(False, "decline"), ("cancel", "cancel")])
def test_a_call_refused_until_a_url_is_opened_declined(run: Any, mode: str, verdict: Any, action: str) -> None:
    program, server, pred = paused(run, "files", {"folder": "docs"}, mode)
    lm = resumed(run, program, pred, verdict)
    assert tool_content(lm, 0) == (
        "Error: files failed: MCP server 'drive' needs a URL opened to make this call, and the person did not"
    )
    assert served.RECEIVED == [FILES]  # not made again
    server.close()


def test_a_call_still_refused_after_its_url_was_opened_is_the_calls_error(run: Any) -> None:
    program, server, pred = paused(run, "files", {"folder": "docs"})
    lm = resumed(run, program, pred, True)  # accepted, but the person never signed in
    assert tool_content(lm, 0) == (
        "Error: files failed: MCP server 'drive' still requires the URL(s) it asked to be opened: "
        "URL elicitation required"
    )
    assert served.RECEIVED == [FILES, FILES]
    server.close()


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ({"ok": True}, r"`approvals\['c1'\]` answers a request to open a URL \(files\): give True"),
        ("maybe", r"`approvals\['c1'\]` answers a request to open a URL \(files\): give True"),
    ],
)
def test_an_answer_a_url_request_cannot_take_is_refused_before_anything_is_sent(
    run: Any, given: Any, said: str
) -> None:
    program, server, pred = paused(run, "files", {"folder": "docs"})
    lm = ScriptedLM([answer("done")])
    with dspy.context(lm=lm), pytest.raises(dspy_imp.ConfigurationError, match=said):
        run(program, history=pred.metadata.history, approvals={"c1": given})
    assert lm.requests == [] and served.RECEIVED == [FILES]
    server.close()


def test_a_history_whose_url_was_edited_to_a_script_is_refused_on_resume(run: Any) -> None:
    program, server, pred = paused(run, "files", {"folder": "docs"})
    data = dspy_imp.dump_history(pred.metadata.history)
    data["messages"][-1]["pending_calls"][0]["elicitation"]["url"] = "javascript:alert(1)"
    lm = ScriptedLM([answer("done")])
    said = (
        r"`approvals\['c1'\]`: the history's request to open a URL cannot be answered: its url's scheme must be "
        r"http or https, got 'javascript'"
    )
    with dspy.context(lm=lm), pytest.raises(dspy_imp.ConfigurationError, match=said):
        run(program, history=dspy_imp.load_history(data), approvals={"c1": True})
    assert lm.requests == [] and served.RECEIVED == [FILES]
    server.close()


def test_a_recorded_url_request_must_hold_its_url() -> None:
    pending = {"id": "c1", "name": "files", "args": {}, "kind": "elicitation",
               "elicitation": {"mode": "url", "message": "Sign in"}}  # fmt: skip
    entry = {"question": "q", "tool_calls": [], "tool_call_results": [], "pending_calls": [pending]}
    with pytest.raises(dspy_imp.ConfigurationError, match='or `mode` "url" and a `url`'):
        from_entry(entry, ["question"], ["answer"])
    with_url = {**pending, "elicitation": {**pending["elicitation"], "url": DRIVE}}
    read = from_entry({**entry, "pending_calls": [with_url]}, ["question"], ["answer"])
    assert read.pending[0].elicitation == {"mode": "url", "message": "Sign in", "url": DRIVE}


def test_elicit_url_is_checked() -> None:
    with pytest.raises(dspy_imp.ConfigurationError, match=r"`elicit_url` must be callable\(message, url\)"):
        mcp.memory(served.drive(), elicit_url="yes")  # type: ignore[arg-type]
    with pytest.raises(dspy_imp.ConfigurationError, match='`elicit_url` is not taken with `elicit="pause"`'):
        mcp.memory(served.drive(), elicit="pause", elicit_url=lambda message, url: True)


def test_a_url_request_in_an_input_required_round_pauses_and_the_retry_carries_the_answer(run: Any) -> None:
    server = mcp.memory(served.rounds(), elicit="pause")  # in process: a 2026-07-28 session
    program = dspy_imp.ReActV2("question -> answer", tools=[server])
    with dspy.context(lm=ScriptedLM([reply("linking", calls=[call("link", {}, id="c1")])])):
        pred = run(program, question="q")
    assert pred.metadata.pending_calls == ({**shown("link", {}), "elicitation_id": None},)
    ((pending,),) = [pred.metadata.history.messages[-1]["pending_calls"]]
    assert pending["elicitation"]["resume"] == {"era": "input_required", "key": "sign", "request_state": "st-1",
                                                "responses": {}}  # fmt: skip
    lm = resumed(run, program, pred, True)
    assert tool_content(lm, 0) == "linked: accept"
    assert served.RECEIVED == [
        {"name": "link", "inputResponses": {}, "requestState": None},
        {"name": "link", "inputResponses": {"sign": {"action": "accept"}}, "requestState": "st-1"},
    ]
    server.close()
