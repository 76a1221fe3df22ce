"""A customer-support agent that acts only through `send` and `decline` (finish="tools").

The agent's answer is an action: the turn ends when it sends a reply to the customer or declines
the request, never on text it writes along the way. A `finish_on` hook on each ending tool turns
what was sent into the prediction's outputs. A refund waits for a person's approval
(`needs_approval`): the turn pauses, and the approval resumes it.

    python examples/support_agent.py          # offline, scripted model
    python examples/support_agent.py --live   # DSPY_IMP_MODEL, e.g. openai/gpt-4o-mini
    python -m dspy_imp.web examples.support_agent:agent   # in a browser (offline_lm() below)
"""

from __future__ import annotations

import re

import dspy

if __package__:  # imported as examples.support_agent (python -m dspy_imp.web)
    from ._shared import choose_model, show_turn
else:
    from _shared import choose_model, show_turn

import dspy_imp
from dspy_imp.testing import RecordedRequest, Reply, ScriptedLM, call, reply

ORDERS = {"42": "shipped on Monday, arriving Wednesday", "43": "delivered last Friday"}
SENT: list[str] = []


def lookup_order(order_id: str) -> str:
    """Look up an order's status by its number."""
    return ORDERS.get(order_id, f"no order {order_id}")


def send(text: str) -> str:
    """Send `text` to the customer. This ends the conversation turn."""
    SENT.append(text)
    return "delivered"


def refund(order_id: str) -> str:
    """Refund an order in full. A person approves every refund before it is made."""
    return f"order {order_id} refunded"


def decline(reason: str) -> str:
    """Decline the request, telling the customer why. This ends the conversation turn."""
    SENT.append(f"(declined) {reason}")
    return "declined"


class Support(dspy.Signature):
    """Answer the customer's message about their order. Be brief and friendly."""

    message: str = dspy.InputField()
    reply: str = dspy.OutputField()
    declined: bool = dspy.OutputField()


agent = dspy_imp.ReActV2(
    Support,
    tools=[lookup_order, refund, send, decline],
    finish="tools",
    finish_on={
        "send": lambda args, result, inputs: dspy_imp.Finish(reply=args["text"], declined=False),
        "decline": lambda args, result, inputs: dspy_imp.Finish(reply=args["reason"], declined=True),
    },
    unsent_note="Nothing you write reaches the customer: use `send` to reply or `decline` to refuse.",
    needs_approval=["refund"],
)

SCRIPT = [
    reply("I'll check the order first."),  # a thought: not sent, the loop continues once
    reply(calls=[call("lookup_order", {"order_id": "42"}, id="c1")]),
    reply(calls=[call("send", {"text": "Your order 42 shipped on Monday and arrives Wednesday."}, id="c2")]),
]


def offline_lm() -> ScriptedLM:
    """A stand-in for a model, for offline runs in a browser: it answers any order question the way
    the agent should (look the order up; a refund asked for is proposed and waits for approval)."""
    return ScriptedLM(_stand_in)


def _stand_in(request: RecordedRequest) -> Reply:
    messages = request.messages
    customer = next((m["content"] for m in reversed(messages) if m["role"] == "user"), "") or ""
    customer = str(customer).split("[[ ## message ## ]]")[-1]
    last = messages[-1]
    if last["role"] != "tool":
        number = re.search(r"\d+", customer)
        if number is None:
            return reply(calls=[call("send", {"text": "Could you tell me your order number?"})])
        return reply("Let me look that order up.", calls=[call("lookup_order", {"order_id": number.group()})])
    name, args = _answered_call(messages, last["tool_call_id"])
    order = args.get("order_id", "?")
    if name == "lookup_order" and "refund" in customer.lower():
        return reply("A refund needs a person's approval.", calls=[call("refund", {"order_id": order})])
    if name == "lookup_order":
        return reply(calls=[call("send", {"text": f"Your order {order}: {last['content']}."})])
    return reply(calls=[call("send", {"text": f"About the refund of order {order}: {last['content']}"})])


def _answered_call(messages: list[dict], call_id: str) -> tuple[str, dict]:
    import json

    for message in reversed(messages):
        for tool_call in message.get("tool_calls") or []:
            if tool_call["id"] == call_id:
                return tool_call["function"]["name"], json.loads(tool_call["function"]["arguments"] or "{}")
    return "", {}


def main() -> None:
    lm, _ = choose_model(__doc__, SCRIPT)
    message = "Hi, where is my order 42?"
    print(f"customer: {message}")
    with dspy.context(lm=lm):
        pred = agent(message=message)
    show_turn(pred)
    print(f"sent to the customer: {SENT}")
    print(f"finished_by_tool: {pred.metadata.finished_by_tool}")


if __name__ == "__main__":
    main()
