"""The turns the web tests play through both protocols: a tool turn, a text turn, a paused turn
(and its resume), a failed turn. Each reply states its usage, so the streams are the same on every
run."""

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
