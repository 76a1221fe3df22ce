"""A tiny shop for the evals tests: a triage agent, a researcher and a billing sub-agent, recorded turns.

Each ``SCRIPTS`` entry is the model's side of one recorded turn of ``triage()`` on the ticket
"I was charged twice for order A-42.", in the order the requests are sent (triage, then the
sub-agent it calls, then triage again).
"""

from __future__ import annotations

from typing import Any

import dspy

import dspy_imp
from dspy_imp import evals
from dspy_imp.testing import ScriptedLM, call, reply

TICKET = "I was charged twice for order A-42."


def lookup_order(order_id: str) -> dict:
    """Look an order up: its charges and status."""
    return {"order_id": order_id, "charges": [19.90, 19.90], "status": "delivered"}


def refund(order_id: str, amount: float) -> str:
    """Refund an amount on an order."""
    return f"refunded {amount:.2f} on {order_id}"


def triage(*, approval: bool = False, requests: int | None = None) -> dspy_imp.ReActV2:
    researcher = dspy_imp.ReActV2("question -> findings", tools=[lookup_order])
    billing = dspy_imp.ReActV2(
        "order_id, amount: float -> outcome", tools=[refund], needs_approval=[refund] if approval else None
    )
    return dspy_imp.ReActV2(
        "ticket -> reply",
        tools=[
            researcher.as_tool(name="researcher", description="Find out the facts of a customer's case."),
            billing.as_tool(name="billing", description="Refund an amount on an order."),
        ],
        usage_limits=dspy_imp.UsageLimits(requests=requests),
    )


def _research(call_id: str = "t1") -> list[Any]:
    return [
        reply(calls=[call("researcher", {"question": "Was A-42 charged twice?"}, id=call_id)]),
        reply(calls=[call("lookup_order", {"order_id": "A-42"}, id="r1")]),
        reply("Yes: A-42 was charged 19.90 twice."),
    ]


def _billing(amount: float, call_id: str = "t2") -> list[Any]:
    return [
        reply(calls=[call("billing", {"order_id": "A-42", "amount": amount}, id=call_id)]),
        reply(calls=[call("refund", {"order_id": "A-42", "amount": amount}, id="b1")]),
        reply(f"Refunded {amount} on A-42."),
    ]


SCRIPTS = {
    "right": [*_research(), *_billing(19.9), reply("We refunded the duplicate 19.90.")],
    "wrong_amount": [*_research(), *_billing(99.0), reply("We refunded 99.00.")],
    "refund_first": [*_billing(19.9, "t1"), *_research("t2"), reply("We refunded the duplicate 19.90.")],
    "no_refund": [*_research(), reply("You were charged twice; someone will call you.")],
    # With needs_approval on refund: billing pauses the whole turn after its first request.
    "paused": [*_research(), *_billing(19.9)[:2]],
    # usage_limits=UsageLimits(requests=3): the researcher's two requests use the budget up.
    "incomplete": _research(),
}

EXPECTED = [
    evals.Call("lookup_order", {"order_id": "A-42"}, agent="researcher"),
    evals.Call("refund", {"order_id": "A-42", "amount": 19.9}, agent="billing"),
]


def example(**labels: Any) -> dspy.Example:
    fields = {"ticket": TICKET, "expected_calls": EXPECTED, "reply": "We refunded the duplicate 19.90.", **labels}
    return dspy.Example(**fields).with_inputs("ticket")


def recorded(name: str, run: Any, clock: Any = None) -> dspy.Prediction:
    """The prediction of one recorded turn, through the sync or the async driver (``run``); with the
    test's ``clock`` (``fake_clock``), each request takes 1.5 s on it."""
    agent = triage(approval=name == "paused", requests=3 if name == "incomplete" else None)
    script = SCRIPTS[name] if clock is None else [clock.after(1.5, item) for item in SCRIPTS[name]]
    lm = ScriptedLM(script)
    with dspy.context(lm=lm):
        pred = run(agent, ticket=TICKET)
    lm.assert_complete()
    return pred
