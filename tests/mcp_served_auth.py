"""A program served with OAuth bearer tokens required, by tests/test_mcp_serving_auth.py
(``python -m dspy_imp.mcp serve tests.mcp_served_auth:program --http --auth tests.mcp_served_auth:auth``).

The verifier knows a few tokens by name (``TOKENS``); the scripted model calls ``whoami`` when
the question starts with ``"who"`` (the verified token, as the program's tools read it), and
answers with the question otherwise.
"""

from __future__ import annotations

from typing import Any

import dspy
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import AccessToken

import dspy_imp
from dspy_imp.mcp import BearerAuth
from dspy_imp.testing import ScriptedLM, call, reply

RESOURCE = "http://localhost/mcp"
ISSUERS = ["https://auth.example.com", "https://login.example.org/tenant1"]
TOKENS = {
    "good": AccessToken(token="good", client_id="app", scopes=["ask", "more"], resource=RESOURCE, subject="alice"),
    "bob": AccessToken(token="bob", client_id="app", scopes=["ask"], resource=RESOURCE, subject="bob"),
    "narrow": AccessToken(token="narrow", client_id="app", scopes=["more"], resource=RESOURCE, subject="alice"),
    "elsewhere": AccessToken(token="elsewhere", client_id="app", scopes=["ask"], resource="https://other.example/mcp"),
    "expired": AccessToken(token="expired", client_id="app", scopes=["ask"], resource=RESOURCE, expires_at=1),
}
"""The tokens the verifier accepts (the bearer middleware still refuses ``elsewhere``: another
resource's, and ``expired``)."""


class Verifier:
    """An ``mcp`` SDK ``TokenVerifier`` over ``TOKENS``; what it was asked, in order."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    async def verify_token(self, token: str) -> AccessToken | None:
        self.asked.append(token)
        return TOKENS.get(token)


class Ask(dspy.Signature):
    """Answer the question."""

    question: str = dspy.InputField()
    answer: str = dspy.OutputField()


def whoami() -> str:
    """Who is calling."""
    token = get_access_token()
    return "nobody" if token is None else f"{token.client_id} for {token.subject} with {' '.join(token.scopes)}"


def respond(request: Any) -> Any:
    user = next(m["content"] for m in request.messages if m["role"] == "user")
    question = user.split("[[ ## question ## ]]")[-1].split("[[ ##")[0].strip()
    tools = [m for m in request.messages if m["role"] == "tool"]
    if question.startswith("who") and not tools:
        return reply(calls=[call("whoami", {}, id="w1")])
    return reply(tools[-1]["content"] if tools else question)


program = dspy_imp.ReActV2(Ask, tools=[whoami])
program.set_lm(ScriptedLM(respond))
auth = BearerAuth(Verifier(), authorization_servers=ISSUERS, resource=RESOURCE, scopes=["ask"])
