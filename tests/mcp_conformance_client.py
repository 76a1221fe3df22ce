"""The client the MCP conformance suite runs (``tests/test_mcp_conformance.py``, ``make mcp-conformance``).

The suite starts a server for one scenario and runs ``python tests/mcp_conformance_client.py URL``
with ``MCP_CONFORMANCE_SCENARIO`` set (and ``MCP_CONFORMANCE_CONTEXT``, a JSON object, for a
scenario that gives the client something: a pre-registered client's id and secret). What it checks
is the client's behaviour on the wire, so this is an ordinary user of ``dspy_imp.mcp``: a
``ReActV2`` with a scripted model, whose turn lists the server's tools and calls one through
``mcp.http(url, auth=mcp.OAuth(...), elicit=...)``. Nothing here speaks the protocol itself.

The only thing a real deployment would do differently is ``authorize``: a person's browser would
follow the authorization URL; here the suite's authorization server redirects at once, so the
redirect is read with one ``GET``.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import dspy
import httpx2

import dspy_imp
from dspy_imp import mcp
from dspy_imp.testing import RecordedRequest, Reply, ScriptedLM, call, reply

CALLS: dict[str, tuple[str, dict[str, Any]]] = {
    "tools_call": ("add_numbers", {"a": 5, "b": 3}),
    "sse-retry": ("test_reconnection", {}),
    "elicitation-sep1034-client-defaults": ("test_client_elicitation_defaults", {}),
}
"""The tool each scenario wants called (an ``auth/*`` scenario: the first tool it lists)."""

REDIRECT_URI = "http://localhost:3000/callback"
CLIENT_METADATA_URL = "https://conformance-test.local/client-metadata.json"


def authorize(authorization_url: str) -> str:
    """Follow the authorization URL as a browser would, and return where it was sent back to."""
    response = httpx2.get(authorization_url, follow_redirects=False, timeout=10.0)
    location = response.headers.get("location")
    if response.status_code not in (301, 302, 303, 307, 308) or not location:
        raise RuntimeError(f"the authorization endpoint answered {response.status_code}, not a redirect")
    return str(location)


def accept_defaults(message: str, schema: dict[str, Any]) -> dict[str, Any]:
    """Accept every elicitation, filling nothing in: the client applies the schema's defaults."""
    return {}


def oauth(context: dict[str, Any]) -> mcp.OAuth:
    return mcp.OAuth(
        authorize=authorize,
        redirect_uri=REDIRECT_URI,
        client_id=context.get("client_id"),
        client_secret=context.get("client_secret"),
        client_metadata_url=CLIENT_METADATA_URL,
        client_name="dspy-imp conformance client",
    )


def main(url: str, scenario: str) -> None:
    context = json.loads(os.environ.get("MCP_CONFORMANCE_CONTEXT") or "{}")
    auth = oauth(context) if scenario.startswith("auth/") else None
    server = mcp.http(url, auth=auth, elicit=accept_defaults, name="conformance")
    wanted = CALLS.get(scenario)

    def first(request: RecordedRequest) -> Reply:
        if scenario == "initialize" or not request.tool_names:
            return reply("Listed the tools.")
        name, arguments = wanted if wanted is not None else (request.tool_names[0], {})
        return reply(calls=[call(name, arguments, id="c1")])

    agent = dspy_imp.ReActV2("task -> answer", tools=[server])
    with server, dspy.context(lm=ScriptedLM([first, reply("Done.")])):
        pred = agent(task=f"Run the {scenario} scenario.")
    for step in pred.metadata.history.messages:
        for result in step.get("tool_call_results", ()):
            print(f"{result['name']}: {result['result']!r} (error: {result['error']})", file=sys.stderr)
    if wanted is not None and not any(s.get("tool_call_results") for s in pred.metadata.history.messages):
        raise SystemExit(f"{scenario}: the turn called no tool")


if __name__ == "__main__":
    main(sys.argv[-1], os.environ.get("MCP_CONFORMANCE_SCENARIO", ""))
