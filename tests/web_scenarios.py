"""The turns the web tests play through both protocols: a tool turn, a text turn, a paused turn
(and its resume), a failed turn, and a team (an agent calling a sub-agent). Each reply of the
single-agent turns states its usage, so their streams are the same on every run."""

from __future__ import annotations

from typing import Any

import dspy
import httpx
from dspy.utils.exceptions import LMAuthError

import dspy_imp
import dspy_imp.web
from dspy_imp.testing import ScriptedLM, call, fail, reply

SENT: list[str] = []


def lookup_order(order_id: str) -> str:
    """Look up an order."""
    return {"42": "shipped <b>Monday</b>"}.get(order_id, "no such order")


def refund(order_id: str) -> str:
    """Refund an order."""
    return f"order {order_id} refunded"


def send(text: str) -> str:
    """Send `text` to the customer; this ends the turn."""
    SENT.append(text)
    return "delivered"


class Support(dspy.Signature):
    """Answer the customer."""

    message: str = dspy.InputField()
    reply: str = dspy.OutputField()
    declined: bool = dspy.OutputField()


def support_agent() -> dspy_imp.ReActV2:
    return dspy_imp.ReActV2(
        Support,
        tools=[lookup_order, refund, send],
        finish="tools",
        finish_on={"send": lambda args, result, inputs: dspy_imp.Finish(reply=args["text"], declined=False)},
        needs_approval=["refund"],
    )


def text_agent() -> dspy_imp.ReActV2:
    return dspy_imp.ReActV2("question -> answer", tools=[lookup_order])


def tool_script() -> list[Any]:
    return [
        reply("I'll check the order first.", calls=[call("lookup_order", {"order_id": "42"}, id="c1")], usage=(20, 5)),
        reply(calls=[call("send", {"text": "Order 42 shipped Monday."}, id="c2")], usage=(30, 5)),
    ]


def text_script() -> list[Any]:
    return [reply("Hello! How can I help?", reasoning="A greeting.", usage=(12, 6))]


def paused_script() -> list[Any]:
    return [
        reply("A refund needs approval.", calls=[call("refund", {"order_id": "42"}, id="c9")], usage=(20, 5)),
        reply(calls=[call("send", {"text": "Order 42 is refunded."}, id="c10")], usage=(40, 5)),
    ]


def failed_script() -> list[Any]:
    return [
        reply(calls=[call("lookup_order", {"order_id": "42"}, id="c1")], usage=(20, 5)),
        fail.raises(LMAuthError("bad key", status=401)),
    ]


FINDINGS = "Order 42 shipped Monday."
ANSWER = "Your order shipped on Monday."


def team(pause: bool = False) -> dspy_imp.ReActV2:
    """A triage agent calling a researcher sub-agent (call ``p1``) that looks the order up (``c1``;
    with ``pause``, the lookup waits for an approval)."""
    researcher = dspy_imp.ReActV2(
        "question -> findings", tools=[lookup_order], needs_approval=["lookup_order"] if pause else []
    )
    script(researcher, triage := dspy_imp.ReActV2("message -> reply", tools=[researcher.as_tool(name="researcher")]))
    return triage


def script(researcher: dspy_imp.ReActV2, triage: dspy_imp.ReActV2) -> None:
    researcher.react.lm = ScriptedLM(
        [reply("Let me look it up.", calls=[call("lookup_order", {"order_id": "42"}, id="c1")]), reply(FINDINGS)]
    )
    triage.react.lm = ScriptedLM(
        [reply("Asking the researcher.", calls=[call("researcher", {"question": "order 42?"}, id="p1")]), reply(ANSWER)]
    )


def three_deep() -> dspy_imp.ReActV2:
    """Triage calls a researcher (``p1``) that calls a coder (``r1``) that looks the order up (``c1``)."""
    coder = dspy_imp.ReActV2("task -> code", tools=[lookup_order])
    researcher = dspy_imp.ReActV2("question -> findings", tools=[coder.as_tool(name="coder")])
    triage = dspy_imp.ReActV2("message -> reply", tools=[researcher.as_tool(name="researcher")])
    coder.react.lm = ScriptedLM([reply(calls=[call("lookup_order", {"order_id": "42"}, id="c1")]), reply("print(42)")])
    researcher.react.lm = ScriptedLM([reply(calls=[call("coder", {"task": "42"}, id="r1")]), reply(FINDINGS)])
    triage.react.lm = ScriptedLM([reply(calls=[call("researcher", {"question": "42?"}, id="p1")]), reply(ANSWER)])
    return triage


def client(app: Any) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test")


def run_input(text: str | None = None, *, thread: str = "t1", run: str = "r1", **extra: Any) -> dict[str, Any]:
    messages = [{"id": f"{run}-u", "role": "user", "content": text}] if text is not None else []
    return {"threadId": thread, "runId": run, "messages": messages, **extra}


def normalized(value: Any) -> Any:
    """``returned_at`` times replaced: they are the clock's, not the protocol's."""
    if isinstance(value, dict):
        return {k: "<time>" if k == "returned_at" else normalized(v) for k, v in value.items()}
    if isinstance(value, list):
        return [normalized(v) for v in value]
    return value


def with_lm(agent: dspy_imp.ReActV2, script: list[Any]) -> ScriptedLM:
    lm = ScriptedLM(script)
    agent.set_lm(lm)
    return lm
