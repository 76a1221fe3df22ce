"""Agents that call agents: a triage agent hands work to a researcher and a billing agent.

`agent.as_tool(name=...)` turns an agent into a tool another agent calls. The sub-agent's turn runs
inside the caller's: within its deadline and usage limits, its usage counted in the caller's and
shown under its name, its history kept in the caller's record of the call. When the billing
agent's refund needs a person's approval, the whole conversation pauses; approving the
namespaced call (`"<triage call>/<billing call>"`) resumes billing, then triage.

    python examples/triage_agents.py          # offline, scripted model
    python examples/triage_agents.py --live   # DSPY_IMP_MODEL, e.g. openai/gpt-4o-mini
"""

from __future__ import annotations

import dspy
from _shared import choose_model

import dspy_imp
from dspy_imp.testing import call, reply

LEDGER: list[str] = []


def lookup_order(order_id: str) -> dict:
    """Look an order up: its charges and status."""
    return {"order_id": order_id, "charges": [19.90, 19.90], "status": "delivered"}


def refund(order_id: str, amount: float) -> str:
    """Refund an amount on an order."""
    LEDGER.append(f"refund {order_id} {amount}")
    return f"refunded {amount:.2f} on {order_id}"


researcher = dspy_imp.ReActV2("question -> findings", tools=[lookup_order])
billing = dspy_imp.ReActV2("order_id, amount: float -> outcome", tools=[refund], needs_approval=[refund])
triage = dspy_imp.ReActV2(
    "ticket -> reply",
    tools=[
        researcher.as_tool(name="researcher", description="Find out the facts of a customer's case."),
        billing.as_tool(name="billing", description="Refund an amount on an order."),
    ],
    usage_limits=dspy_imp.UsageLimits(requests=12),  # bounds the sub-agents too
)

SCRIPT = [  # the requests in the order they are sent: triage, researcher, researcher, triage, billing, ...
    reply(calls=[call("researcher", {"question": "Was order A-42 charged twice?"}, id="t1")]),
    reply(calls=[call("lookup_order", {"order_id": "A-42"}, id="r1")]),
    reply("Yes: order A-42 was charged 19.90 twice."),
    reply(calls=[call("billing", {"order_id": "A-42", "amount": 19.9}, id="t2")]),
    reply(calls=[call("refund", {"order_id": "A-42", "amount": 19.9}, id="b1")]),
    reply("Refunded 19.90 on A-42."),
    reply("You were charged twice for order A-42; we refunded the duplicate 19.90."),
]


def show_usage(label: str, usage: dspy_imp.Usage) -> None:
    """The call's requests, and how many of them each sub-agent sent (``usage.agents``)."""
    own = usage.total_requests - sum(agent.total_requests for agent in usage.agents.values())
    by_agent = "".join(f", {name} {agent.total_requests}" for name, agent in usage.agents.items())
    print(f"  {label} requests: {usage.total_requests} (triage {own}{by_agent})")


def main() -> None:
    lm, live = choose_model(__doc__, SCRIPT)
    with dspy.context(lm=lm), dspy_imp.deadline(seconds=120):  # one deadline for all three agents
        pred = triage(ticket="I was charged twice for order A-42.")
        meta = pred.metadata
        print(f"termination_reason: {meta.termination_reason}")
        show_usage("first call's", meta.usage)
        for pending in meta.pending_calls:
            print(f"  pending: {pending['id']} {pending['name']} {pending['args']}")
        approvals = {pending["id"]: True for pending in meta.pending_calls}  # a person approves
        if approvals:
            pred = triage(history=dspy_imp.load_history(dspy_imp.dump_history(meta.history)), approvals=approvals)
    meta = pred.metadata
    print(f"reply: {pred.reply}")
    print(f"termination_reason: {meta.termination_reason}")
    print(f"ledger: {LEDGER}")
    show_usage("resumed call's", meta.usage)
    for entry in meta.history.messages:
        for call_id, run in entry.get("agent_runs", {}).items():
            print(f"  {call_id}: {run['agent']} ended {run['termination_reason']}, {len(run['history'])} steps kept")
    if not live:
        print(f"  requests sent in all: {len(lm.requests)}")


if __name__ == "__main__":
    main()
