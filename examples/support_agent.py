"""A customer-support agent that acts only through `send` and `decline` (finish="tools").

The agent's answer is an action: the turn ends when it sends a reply to the customer or declines
the request, never on text it writes along the way. A `finish_on` hook on each ending tool turns
what was sent into the prediction's outputs.

    python examples/support_agent.py          # offline, scripted model
    python examples/support_agent.py --live   # DSPY_IMP_MODEL, e.g. openai/gpt-4o-mini
"""

from __future__ import annotations

import dspy
from _shared import choose_model, show_turn

import dspy_imp
from dspy_imp.testing import call, reply

ORDERS = {"42": "shipped on Monday, arriving Wednesday", "43": "refunded"}
SENT: list[str] = []


def lookup_order(order_id: str) -> str:
    """Look up an order's status by its number."""
    return ORDERS.get(order_id, f"no order {order_id}")


def send(text: str) -> str:
    """Send `text` to the customer. This ends the conversation turn."""
    SENT.append(text)
    return "delivered"


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
    tools=[lookup_order, send, decline],
    finish="tools",
    finish_on={
        "send": lambda args, result, inputs: dspy_imp.Finish(reply=args["text"], declined=False),
        "decline": lambda args, result, inputs: dspy_imp.Finish(reply=args["reason"], declined=True),
    },
    unsent_note="Nothing you write reaches the customer: use `send` to reply or `decline` to refuse.",
)

SCRIPT = [
    reply("I'll check the order first."),  # a thought: not sent, the loop continues once
    reply(calls=[call("lookup_order", {"order_id": "42"}, id="c1")]),
    reply(calls=[call("send", {"text": "Your order 42 shipped on Monday and arrives Wednesday."}, id="c2")]),
]


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
