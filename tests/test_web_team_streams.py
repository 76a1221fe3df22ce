"""A team in the streams: serving a triage agent that calls a researcher sub-agent.

Both streams tell the researcher's call as the served agent's tool call (its start, arguments and
result) and the researcher's own turn nested under it: in AG-UI as a subagent segment
(``SUBAGENT_STARTED`` … events carrying its ``subagentRunId`` … ``SUBAGENT_FINISHED``), in the AI
SDK stream as ``data-agent*`` parts naming the call. Two clients written here read the streams as
front ends do: a CopilotKit-shaped one reduces AG-UI events into messages (an attributed event
belongs to its subagent, as the AG-UI 1.0 spec says), a ``useChat``-shaped one reduces AI SDK parts
into a ``UIMessage`` (an approval request for a call it has no tool part of is an error, as in
``processUIMessageStream``). The final reply is the served agent's answer, never the
researcher's findings; no id repeats; a sub-agent's pause names a call the client was shown.
Every turn runs on both drivers (``sync``); the team's pause and resume on a ``DurableAgent``
too; a Stop while the researcher works on the async one (whose task Stop cancels).
"""

from __future__ import annotations

import asyncio
import itertools
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from dbos import DBOS
from dspy.utils.exceptions import LMAuthError
from web_helpers import agui_events, vercel_parts, verify_agui, verify_vercel
from web_scenarios import ANSWER, FINDINGS, client, run_input, script, team, three_deep

import dspy_imp
import dspy_imp.web
from dspy_imp import durable
from dspy_imp.testing import ScriptedLM, call, fail, reply

ABOUT = {"agent": "researcher", "toolCallId": "p1"}  # what each data part of the researcher's segment names


async def agui(app: Any, body: dict[str, Any]) -> list[dict[str, Any]]:
    async with client(app) as http:
        response = await http.post("/ag-ui", json=body, headers={"accept": "text/event-stream"})
    assert response.status_code == 200, response.text
    return agui_events(response.text)


async def chat(app: Any, messages: list[dict[str, Any]], chat_id: str = "chat-1") -> list[dict[str, Any]]:
    async with client(app) as http:
        response = await http.post("/api/chat", json={"id": chat_id, "messages": messages})
    assert response.status_code == 200, response.text
    return vercel_parts(response.text)


# -- a CopilotKit-shaped client: AG-UI events reduced into messages ----------------------------------


@dataclass
class Thread:
    """The messages of one producer: the served agent's, or one subagent invocation's."""

    messages: list[dict[str, Any]] = field(default_factory=list)

    def message(self, message_id: str, role: str = "assistant") -> dict[str, Any]:
        for message in self.messages:
            if message["id"] == message_id:
                return message
        made = {"id": message_id, "role": role, "content": "", "toolCalls": []}
        self.messages.append(made)
        return made

    def texts(self) -> list[str]:
        return [m["content"] for m in self.messages if m["role"] == "assistant" and m["content"]]

    def calls(self) -> list[dict[str, Any]]:
        return [c for m in self.messages if m["role"] == "assistant" for c in m["toolCalls"]]

    def results(self) -> dict[str, str]:
        return {m["toolCallId"]: m["content"] for m in self.messages if m["role"] == "tool"}


class CopilotKitClient:
    """Reduces AG-UI runs into messages as a CopilotKit front end does: text messages by id, a tool
    call into the message its ``parentMessageId`` names (a new one otherwise), a result as a tool
    message; an event carrying a ``subagentRunId`` into that subagent's own thread."""

    def __init__(self) -> None:
        self.main = Thread()
        self.subagents: dict[str, dict[str, Any]] = {}
        self.interrupts: list[dict[str, Any]] = []
        self.snapshot: list[dict[str, Any]] = []
        self.seen_calls: set[str] = set()
        self.fresh = itertools.count()

    def run(self, events: list[dict[str, Any]]) -> None:
        for event in events:
            self.apply(event)

    def apply(self, event: dict[str, Any]) -> None:
        kind = event["type"]
        if kind == "SUBAGENT_STARTED":
            found = self.subagents.setdefault(event["subagentRunId"], {"thread": Thread(), "ends": []})
            found.update(start=event, open=True)
            return
        if kind in ("SUBAGENT_FINISHED", "SUBAGENT_ERROR"):
            found = self.subagents[event["subagentRunId"]]
            assert found["open"], f"{kind} for a subagent that is not running"
            found["open"] = False
            found["ends"].append(event)
            return
        owner = event.get("subagentRunId")
        if owner is not None:
            assert self.subagents.get(owner, {}).get("open"), f"{kind} of subagent {owner!r}, which is not running"
        thread = self.subagents[owner]["thread"] if owner is not None else self.main
        if kind == "TEXT_MESSAGE_START":
            thread.message(event["messageId"])
        elif kind == "TEXT_MESSAGE_CONTENT":
            thread.message(event["messageId"])["content"] += event["delta"]
        elif kind == "TOOL_CALL_START":
            holder = event.get("parentMessageId") or f"fresh-{next(self.fresh)}"
            call = {"id": event["toolCallId"], "name": event["toolCallName"], "arguments": ""}
            thread.message(holder)["toolCalls"].append(call)
            self.seen_calls.add(event["toolCallId"])
        elif kind == "TOOL_CALL_ARGS":
            next(c for c in thread.calls() if c["id"] == event["toolCallId"])["arguments"] += event["delta"]
        elif kind == "TOOL_CALL_RESULT":
            thread.messages.append(
                {
                    "id": event["messageId"],
                    "role": "tool",
                    "toolCallId": event["toolCallId"],
                    **{"content": event["content"]},
                }
            )
        elif kind == "MESSAGES_SNAPSHOT":
            self.snapshot = event["messages"]
        elif kind == "RUN_FINISHED":
            self.interrupts = list((event.get("outcome") or {}).get("interrupts") or [])

    def reply(self) -> str:
        """What the user reads as the agent's reply: its last assistant text."""
        return self.main.texts()[-1]


def unique_ids(events: list[dict[str, Any]], steps: bool = True) -> None:
    """No message id or call id is opened twice (in a run or in a thread's runs), nor a step name in a run."""
    kinds = ("TEXT_MESSAGE_START", "REASONING_MESSAGE_START", "TOOL_CALL_START", *(("STEP_STARTED",) if steps else ()))
    opened = Counter(
        (event["type"], event.get("messageId") or event.get("toolCallId") or event.get("stepName"))
        for event in events
        if event["type"] in kinds
    )
    assert [key for key, count in opened.items() if count > 1] == []
    results = Counter(e["messageId"] for e in events if e["type"] == "TOOL_CALL_RESULT")
    assert [key for key, count in results.items() if count > 1] == []


@pytest.mark.parametrize("sync", [False, True], ids=["async", "sync"])
async def test_agui_tells_the_researcher_call_as_the_agents_and_its_turn_nested(sync: bool) -> None:
    events = await agui(dspy_imp.web.app(team(), sync=sync), run_input("Where is order 42?"))
    verify_agui(events)
    unique_ids(events)
    front = CopilotKitClient()
    front.run(events)
    assert front.reply() == ANSWER
    assert FINDINGS not in front.main.texts() and "Let me look it up." not in front.main.texts()
    assert [(c["id"], c["name"], c["arguments"]) for c in front.main.calls()] == [
        ("p1", "researcher", '{"question": "order 42?"}')
    ]
    assert front.main.results() == {"p1": FINDINGS}
    researcher = front.subagents["p1"]
    assert researcher["start"]["name"] == "researcher" and researcher["start"]["parentToolCallId"] == "p1"
    holder = next(m["id"] for m in front.main.messages if m["role"] == "assistant" and m["toolCalls"])
    assert researcher["start"]["parentMessageId"] == holder  # the message holding the researcher call
    assert researcher["thread"].texts() == ["Let me look it up.", FINDINGS]
    assert [(c["id"], c["name"]) for c in researcher["thread"].calls()] == [("p1/c1", "lookup_order")]
    assert researcher["thread"].results() == {"p1/c1": "shipped <b>Monday</b>"}
    assert [(e["type"], e.get("result")) for e in researcher["ends"]] == [("SUBAGENT_FINISHED", FINDINGS)]
    finished = next(i for i, e in enumerate(events) if e["type"] == "SUBAGENT_FINISHED")
    result = next(i for i, e in enumerate(events) if e["type"] == "TOOL_CALL_RESULT" and e["toolCallId"] == "p1")
    assert finished < result  # the segment is inside the call: its end comes before the call's result


@pytest.mark.parametrize("sync", [False, True], ids=["async", "sync"])
async def test_agui_a_sub_agents_pause_names_a_call_it_streamed_and_the_resume_finishes(sync: bool) -> None:
    app = dspy_imp.web.app(team(pause=True), sync=sync)
    paused = await agui(app, run_input("Where is order 42?"))
    verify_agui(paused)
    unique_ids(paused)
    front = CopilotKitClient()
    front.run(paused)
    [asked] = front.interrupts
    assert asked["toolCallId"] in front.seen_calls
    assert (asked["id"], asked["toolCallId"], asked["subagentRunId"]) == ("p1/c1", "p1/c1", "p1")
    researcher = front.subagents["p1"]
    assert [(c["id"], c["name"]) for c in researcher["thread"].calls()] == [("p1/c1", "lookup_order")]
    assert researcher["ends"][-1]["outcome"] == {"type": "suspended", "interruptIds": ["p1/c1"]}
    assert [c["id"] for c in front.main.calls()] == ["p1"] and front.main.results() == {}

    approve = {"interruptId": asked["id"], "status": "resolved", "payload": {"approved": True}}
    resumed = await agui(app, run_input(None, run="r2", resume=[approve]))
    verify_agui(resumed, known_calls=front.seen_calls)
    unique_ids(resumed)
    unique_ids(paused + resumed, steps=False)
    front.run(resumed)
    assert [e["type"] for e in resumed].count("TOOL_CALL_START") == 0  # every call was told in the paused run
    assert front.reply() == ANSWER
    assert front.main.results() == {"p1": FINDINGS}
    assert researcher["thread"].results() == {"p1/c1": "shipped <b>Monday</b>"}
    assert researcher["thread"].texts()[-1] == FINDINGS
    assert researcher["ends"][-1]["result"] == FINDINGS


@pytest.mark.parametrize("sync", [False, True], ids=["async", "sync"])
async def test_agui_a_grandchilds_segment_is_nested_in_its_callers(sync: bool) -> None:
    events = await agui(dspy_imp.web.app(three_deep(), sync=sync), run_input("Where is order 42?"))
    verify_agui(events)
    unique_ids(events)
    front = CopilotKitClient()
    front.run(events)
    assert front.reply() == ANSWER and [c["id"] for c in front.main.calls()] == ["p1"]
    coder = front.subagents["p1/r1"]["start"]
    assert (coder["name"], coder["parentSubagentRunId"], coder["parentToolCallId"]) == ("coder", "p1", "p1/r1")
    assert [c["id"] for c in front.subagents["p1"]["thread"].calls()] == ["p1/r1"]
    assert [c["id"] for c in front.subagents["p1/r1"]["thread"].calls()] == ["p1/r1/c1"]
    assert front.subagents["p1"]["thread"].results() == {"p1/r1": "print(42)"}


def failing_team() -> dspy_imp.ReActV2:
    """The researcher's model fails after its lookup: its call's result is the error the triage reads."""
    triage = team()
    researcher = triage.tools["researcher"].program
    lookup = reply(calls=[call("lookup_order", {"order_id": "42"}, id="c1")])
    researcher.react.lm = ScriptedLM([lookup, fail.raises(LMAuthError("bad key", status=401))])
    return triage


@pytest.mark.parametrize("sync", [False, True], ids=["async", "sync"])
async def test_a_sub_agent_that_fails_ends_its_segment_with_the_error_its_call_returns(sync: bool) -> None:
    events = await agui(dspy_imp.web.app(failing_team(), sync=sync), run_input("Where is order 42?"))
    verify_agui(events)
    front = CopilotKitClient()
    front.run(events)
    error = front.main.results()["p1"]
    assert "bad key" in error and front.reply() == ANSWER
    assert [(e["type"], e.get("message")) for e in front.subagents["p1"]["ends"]] == [("SUBAGENT_ERROR", error)]
    chat_front = UseChatClient()
    chat_front.user("Where is order 42?")
    parts = await chat(dspy_imp.web.app(failing_team(), sync=sync), chat_front.messages)
    verify_vercel(parts)
    chat_front.run(parts)
    assert (chat_front.tools()["p1"]["state"], chat_front.tools()["p1"]["errorText"]) == ("output-error", error)
    assert chat_front.data("agent") == [{**ABOUT, "state": "failed", "errorText": error}]
    assert chat_front.reply() == ANSWER


async def test_a_stop_while_the_researcher_works_ends_its_segment_before_the_run() -> None:
    waiting = asyncio.Event()

    async def inventory(item: str) -> str:
        """Count an item in the warehouse (it waits until the turn is stopped)."""
        waiting.set()
        await asyncio.Event().wait()
        return "never"

    researcher = dspy_imp.ReActV2("question -> findings", tools=[inventory])
    researcher.react.lm = ScriptedLM([reply("Counting.", calls=[call("inventory", {"item": "chairs"}, id="c1")])])
    triage = dspy_imp.ReActV2("message -> reply", tools=[researcher.as_tool(name="researcher")])
    triage.react.lm = ScriptedLM([reply(calls=[call("researcher", {"question": "chairs?"}, id="p1")])])
    async with client(dspy_imp.web.app(triage)) as http:
        body = run_input("How many chairs?", thread="s1")
        running = asyncio.ensure_future(http.post("/ag-ui", json=body, headers={"accept": "text/event-stream"}))
        await asyncio.wait_for(waiting.wait(), 30)  # a hang guard, not a timing assertion
        stopped = await http.post("/api/conversations/s1/stop", json={})
        events = agui_events((await asyncio.wait_for(running, 30)).text)
    assert stopped.status_code == 200
    verify_agui(events)
    front = CopilotKitClient()
    front.run(events)
    assert events[-1]["type"] == "RUN_ERROR" and events[-1]["code"] == "StreamClosed"
    ends = front.subagents["p1"]["ends"]
    assert [(e["type"], e["message"]) for e in ends] == [("SUBAGENT_ERROR", "StreamClosed: the turn was stopped")]
    assert [c["id"] for c in front.subagents["p1"]["thread"].calls()] == ["p1/c1"]
    assert front.main.results() == {}  # the researcher call never returned


# -- a useChat-shaped client: AI SDK parts reduced into a UIMessage ---------------------------------


class UseChatClient:
    """Reduces AI SDK UI message streams into ``UIMessage``s as ``processUIMessageStream`` does."""

    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []

    def user(self, text: str) -> None:
        self.messages.append(
            {"id": f"u{len(self.messages)}", "role": "user", "parts": [{"type": "text", "text": text}]}
        )

    def run(self, parts: list[dict[str, Any]]) -> None:
        message: dict[str, Any] = {}
        for part in parts:
            kind = part["type"]
            if kind == "start":
                last = self.messages[-1] if self.messages else None
                if last is not None and last["role"] == "assistant" and last["id"] == part.get("messageId"):
                    message = last  # a resumed stream continues its message
                else:
                    message = {"id": part.get("messageId"), "role": "assistant", "parts": []}
                    self.messages.append(message)
            elif kind == "start-step":
                message["parts"].append({"type": "step-start"})
            elif kind in ("text-start", "reasoning-start"):
                message["parts"].append(
                    {"type": kind.split("-")[0], "id": part["id"], "text": "", "state": "streaming"}
                )
            elif kind in ("text-delta", "reasoning-delta"):
                self._by_id(message, kind.split("-")[0], part["id"])["text"] += part["delta"]
            elif kind in ("text-end", "reasoning-end"):
                self._by_id(message, kind.split("-")[0], part["id"])["state"] = "done"
            elif kind.startswith("tool-") or kind.startswith("data-"):
                self._tool_or_data(message, part)
            elif kind == "error":
                raise AssertionError(f"the stream ended with an error: {part['errorText']}")  # useChat's error

    def _tool_or_data(self, message: dict[str, Any], part: dict[str, Any]) -> None:
        kind = part["type"]
        if kind.startswith("data-"):
            existing = [p for p in message["parts"] if p["type"] == kind and "id" in part and p.get("id") == part["id"]]
            if existing:
                existing[0]["data"] = part["data"]  # reconciled by type and id
            elif not part.get("transient"):
                message["parts"].append({k: v for k, v in part.items() if k != "transient"})
        elif kind == "tool-input-start":
            message["parts"].append(
                {"type": f"tool-{part['toolName']}", "toolCallId": part["toolCallId"], "state": "input-streaming"}
            )
        elif kind == "tool-input-available":
            self._tool(message, part["toolCallId"]).update(state="input-available", input=part["input"])
        elif kind == "tool-output-available":
            self._tool(message, part["toolCallId"]).update(state="output-available", output=part["output"])
        elif kind == "tool-output-error":
            self._tool(message, part["toolCallId"]).update(state="output-error", errorText=part["errorText"])
        elif kind == "tool-output-denied":
            self._tool(message, part["toolCallId"])["state"] = "output-denied"
        elif kind == "tool-approval-request":
            self._tool(message, part["toolCallId"]).update(
                state="approval-requested", approval={"id": part["approvalId"]}
            )

    @staticmethod
    def _by_id(message: dict[str, Any], kind: str, part_id: str) -> dict[str, Any]:
        return next(p for p in message["parts"] if p["type"] == kind and p.get("id") == part_id)

    @staticmethod
    def _tool(message: dict[str, Any], call_id: str) -> dict[str, Any]:
        for part in message["parts"]:
            if part["type"].startswith("tool-") and part.get("toolCallId") == call_id:
                return part
        raise AssertionError(f"no tool invocation found for tool call {call_id!r}")  # as the AI SDK throws

    def approve(self, approval_id: str) -> None:
        """``addToolApprovalResponse({id, approved: true})``."""
        for part in self.messages[-1]["parts"]:
            if (part.get("approval") or {}).get("id") == approval_id:
                part.update(state="approval-responded", approval={"id": approval_id, "approved": True})
                return
        raise AssertionError(f"no approval {approval_id!r} asked")

    def last(self) -> dict[str, Any]:
        return self.messages[-1]

    def reply(self) -> str:
        texts = [p["text"] for p in self.last()["parts"] if p["type"] == "text"]
        return texts[-1]

    def tools(self) -> dict[str, dict[str, Any]]:
        return {p["toolCallId"]: p for p in self.last()["parts"] if p["type"].startswith("tool-")}

    def data(self, kind: str) -> list[dict[str, Any]]:
        return [p["data"] for p in self.last()["parts"] if p["type"] == f"data-{kind}"]


def unique_part_ids(parts: list[dict[str, Any]]) -> None:
    starts = Counter(p["id"] for p in parts if p["type"] in ("text-start", "reasoning-start"))
    calls = Counter(p["toolCallId"] for p in parts if p["type"] == "tool-input-start")
    assert [k for k, n in (starts + calls).items() if n > 1] == []


@pytest.mark.parametrize("sync", [False, True], ids=["async", "sync"])
async def test_ai_sdk_tells_the_researcher_call_as_the_agents_and_its_turn_as_data_parts(sync: bool) -> None:
    front = UseChatClient()
    front.user("Where is order 42?")
    parts = await chat(dspy_imp.web.app(team(), sync=sync), front.messages)
    verify_vercel(parts)
    unique_part_ids(parts)
    front.run(parts)
    assert front.reply() == ANSWER
    texts = [p["text"] for p in front.last()["parts"] if p["type"] == "text"]
    assert FINDINGS not in texts and "Let me look it up." not in texts
    tools = front.tools()
    assert list(tools) == ["p1"]
    assert (tools["p1"]["type"], tools["p1"]["state"], tools["p1"]["output"]) == (
        "tool-researcher",
        "output-available",
        FINDINGS,
    )
    assert tools["p1"]["input"] == {"question": "order 42?"}
    assert [d["text"] for d in front.data("agent-text")] == ["Let me look it up.", FINDINGS]
    assert all(d["agent"] == "researcher" and d["toolCallId"] == "p1" for d in front.data("agent-text"))
    live = [p["data"] for p in parts if p["type"] == "data-agent-delta"]  # for onData: never in the message
    assert all(p.get("transient") is True for p in parts if p["type"] == "data-agent-delta")
    assert "".join(d["delta"] for d in live) == "Let me look it up." + FINDINGS
    assert front.data("agent-delta") == []
    assert front.data("agent-call") == [
        {**ABOUT, "callId": "p1/c1", "toolName": "lookup_order", "input": {"order_id": "42"}}
    ]
    assert front.data("agent-result") == [
        {**ABOUT, "callId": "p1/c1", "state": "output-available", "output": "shipped <b>Monday</b>"}
    ]
    assert front.data("agent") == [{**ABOUT, "state": "finished", "output": FINDINGS}]  # reconciled by its id


@pytest.mark.parametrize("sync", [False, True], ids=["async", "sync"])
async def test_ai_sdk_a_sub_agents_pause_asks_for_a_tool_part_it_streamed_and_the_resume_finishes(sync: bool) -> None:
    app = dspy_imp.web.app(team(pause=True), sync=sync)
    front = UseChatClient()
    front.user("Where is order 42?")
    paused = await chat(app, front.messages)
    verify_vercel(paused)
    front.run(paused)  # raises if the approval request names a call the message has no tool part of
    asked = front.tools()["p1/c1"]
    assert (asked["type"], asked["state"], asked["approval"]) == (
        "tool-researcher/lookup_order",
        "approval-requested",
        {"id": "p1/c1"},
    )
    assert front.tools()["p1"]["state"] == "input-available"
    assert front.data("agent")[-1]["state"] == "suspended"

    front.approve("p1/c1")
    resumed = await chat(app, front.messages)
    verify_vercel(resumed, known_calls={"p1", "p1/c1"})
    unique_part_ids(paused + resumed)
    front.run(resumed)
    assert len(front.messages) == 2  # the same assistant message went on
    assert front.reply() == ANSWER
    assert front.tools()["p1"]["output"] == FINDINGS
    assert (front.tools()["p1/c1"]["state"], front.tools()["p1/c1"]["output"]) == (
        "output-available",
        "shipped <b>Monday</b>",
    )
    assert front.data("agent")[-1] == {
        "agent": "researcher",
        "toolCallId": "p1",
        "state": "finished",
        "output": FINDINGS,
    }


@pytest.mark.parametrize("sync", [False, True], ids=["async", "sync"])
async def test_ai_sdk_a_sub_agent_that_pauses_again_is_answered_beside_its_done_call(sync: bool) -> None:
    """The second resume sends the message with the first paused call done (``output-available``):
    the client's copy of a call the server recorded, not an answer to a call it never saw."""
    triage = team(pause=True)
    researcher = triage.tools["researcher"].program
    researcher.react.lm = ScriptedLM(
        [
            reply(calls=[call("lookup_order", {"order_id": "42"}, id="c1")]),
            reply(calls=[call("lookup_order", {"order_id": "43"}, id="c2")]),
            reply(FINDINGS),
        ]
    )
    app = dspy_imp.web.app(triage, sync=sync)
    front = UseChatClient()
    front.user("Where are orders 42 and 43?")
    front.run(await chat(app, front.messages))
    front.approve("p1/c1")
    again = await chat(app, front.messages)
    verify_vercel(again, known_calls={"p1", "p1/c1"})
    front.run(again)
    assert front.tools()["p1/c1"]["state"] == "output-available"
    assert front.tools()["p1/c2"]["state"] == "approval-requested"
    front.approve("p1/c2")
    last = await chat(app, front.messages)
    verify_vercel(last, known_calls={"p1", "p1/c1", "p1/c2"})
    front.run(last)
    assert front.reply() == ANSWER
    assert front.tools()["p1/c2"]["output"] == "no such order"


@pytest.mark.parametrize("sync", [False, True], ids=["async", "sync"])
async def test_ai_sdk_a_grandchilds_call_names_its_caller(sync: bool) -> None:
    front = UseChatClient()
    front.user("Where is order 42?")
    parts = await chat(dspy_imp.web.app(three_deep(), sync=sync), front.messages)
    verify_vercel(parts)
    front.run(parts)
    assert front.reply() == ANSWER and list(front.tools()) == ["p1"]
    calls = {(d["agent"], d["toolCallId"], d["callId"]) for d in front.data("agent-call")}
    assert calls == {("researcher", "p1", "p1/r1"), ("researcher/coder", "p1/r1", "p1/r1/c1")}
    ended = {d["toolCallId"]: d["state"] for d in front.data("agent")}
    assert ended == {"p1": "finished", "p1/r1": "finished"}


# -- a durable team: the researcher's turn runs inline in the triage's workflow ---------------------

DURABLE = team(pause=True)


@pytest.fixture(scope="module")
def durable_team(tmp_path_factory: pytest.TempPathFactory) -> Iterator[durable.DurableAgent]:
    folder = tmp_path_factory.mktemp("dbos")
    database = f"sqlite:///{folder}/sys.sqlite"
    DBOS(config=durable.config("dspy-imp-team", system_database_url=database, log_level="ERROR"))
    agent = durable.DurableAgent(DURABLE, name="web-team")
    DBOS.launch()
    yield agent
    DBOS.destroy(destroy_registry=True)


async def test_a_durable_teams_pause_and_resume_are_told_like_any_turns(durable_team: durable.DurableAgent) -> None:
    script(DURABLE.tools["researcher"].program, DURABLE)
    app = dspy_imp.web.app(durable_team)
    paused = await agui(app, run_input("Where is order 42?", thread="team-d1"))
    verify_agui(paused)
    front = CopilotKitClient()
    front.run(paused)
    [asked] = front.interrupts
    assert asked["toolCallId"] in front.seen_calls and asked["subagentRunId"] == "p1"
    assert [c["id"] for c in front.main.calls()] == ["p1"]
    approve = {"interruptId": asked["id"], "status": "resolved", "payload": {"approved": True}}
    resumed = await agui(app, run_input(None, thread="team-d1", run="r2", resume=[approve]))
    verify_agui(resumed, known_calls=front.seen_calls)
    unique_ids(paused + resumed, steps=False)
    front.run(resumed)
    assert front.reply() == ANSWER
    assert front.main.results() == {"p1": FINDINGS}
    assert front.subagents["p1"]["thread"].results() == {"p1/c1": "shipped <b>Monday</b>"}


async def test_a_durable_teams_turn_in_the_ai_sdk_stream(durable_team: durable.DurableAgent) -> None:
    script(DURABLE.tools["researcher"].program, DURABLE)
    app = dspy_imp.web.app(durable_team)
    front = UseChatClient()
    front.user("Where is order 42?")
    front.run(await chat(app, front.messages, chat_id="team-d2"))
    front.approve("p1/c1")
    resumed = await chat(app, front.messages, chat_id="team-d2")
    verify_vercel(resumed, known_calls={"p1", "p1/c1"})
    front.run(resumed)
    assert front.reply() == ANSWER
    assert front.tools()["p1"]["output"] == FINDINGS
    assert front.tools()["p1/c1"]["output"] == "shipped <b>Monday</b>"  # the paused call, a tool part of ours
    assert [d["text"] for d in front.data("agent-text")] == ["Let me look it up.", FINDINGS]
