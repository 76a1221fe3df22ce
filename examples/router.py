"""A router with a `Literal` output: which team gets the ticket.

A signature whose output is a `Literal` is a *submit signature*: the answer arrives through
`submit`, whose schema only allows the listed teams. Under the default `finish="auto"` a reply in
plain text interrupts the turn, and the forced submit (`tool_choice` naming `submit`) makes the
model pick a team anyway: the turn ends `"forced_submit"` with a valid team, never free text.

    python examples/router.py          # offline, scripted model
    python examples/router.py --live   # DSPY_IMP_MODEL, e.g. openai/gpt-4o-mini
"""

from __future__ import annotations

from typing import Literal

import dspy
from _shared import choose_model, show_turn

import dspy_imp
from dspy_imp.testing import call, reply

CUSTOMERS = {"acme": "enterprise plan, invoice billing", "bob": "free plan"}


def lookup_customer(name: str) -> str:
    """Look up a customer's plan and billing."""
    return CUSTOMERS.get(name.lower(), "unknown customer")


class Route(dspy.Signature):
    """Route the support ticket to the team that handles it."""

    ticket: str = dspy.InputField()
    team: Literal["billing", "technical", "sales"] = dspy.OutputField()


agent = dspy_imp.ReActV2(Route, tools=[lookup_customer])

TICKETS = {
    "ACME: our invoice for May is wrong.": [
        reply(calls=[call("lookup_customer", {"name": "acme"}, id="c1")]),
        reply(calls=[call("submit", {"team": "billing"}, id="c2")]),
    ],
    "The API returns 502 since this morning.": [
        reply("This is clearly a technical problem."),  # text, not a call: the forced submit follows
        reply(calls=[call("submit", {"team": "technical"}, id="c3")]),
    ],
}


def main() -> None:
    lm, _ = choose_model(__doc__, [item for script in TICKETS.values() for item in script])
    for ticket in TICKETS:
        print(f"ticket: {ticket}")
        with dspy.context(lm=lm):
            pred = agent(ticket=ticket)
        show_turn(pred)


if __name__ == "__main__":
    main()
