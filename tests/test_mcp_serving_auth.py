"""A served program over streamable HTTP requiring OAuth bearer tokens (``http_app(auth=BearerAuth(...))``,
``serve ... --http --auth module:attribute``): the app itself through httpx's ASGI transport, and the
command's server reached by ``dspy_imp.mcp.http(url, headers=...)``."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import dspy
import httpx
import httpx2
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.auth.utils import (
    build_protected_resource_metadata_discovery_urls,
    extract_resource_metadata_from_www_auth,
    extract_scope_from_www_auth,
    handle_protected_resource_response,
)
from mcp.server.auth.middleware.auth_context import auth_context_var
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken

import dspy_imp
from dspy_imp import mcp
from dspy_imp._records.errors import ConfigurationError
from dspy_imp.mcp import BearerAuth
from dspy_imp.testing import ScriptedLM, call, reply
from tests import mcp_served_auth as served_module
from tests import mcp_served_program as tests_program

pytestmark = pytest.mark.block_network(allowed_hosts=[r"127\.0\.0\.1$"])

ROOT = Path(__file__).parent.parent
METADATA_URL = "http://localhost/.well-known/oauth-protected-resource/mcp"
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
}
ACCEPT = {"accept": "application/json, text/event-stream", "content-type": "application/json"}


def verifier() -> served_module.Verifier:
    return served_module.Verifier()


def settings(**changes: Any) -> dict[str, Any]:
    given = {
        "authorization_servers": served_module.ISSUERS,
        "resource": served_module.RESOURCE,
        "scopes": ["ask"],
    }
    return {**given, **changes}


@contextlib.asynccontextmanager
async def app(**changes: Any) -> AsyncIterator[tuple[httpx.AsyncClient, served_module.Verifier]]:
    """The app of a program served with ``auth`` (``settings(**changes)``), its lifespan running;
    an httpx client on it, and the verifier."""
    checker = verifier()
    asgi = served_module.program.as_mcp_server("program").http_app(auth=BearerAuth(checker, **settings(**changes)))
    async with asgi.router.lifespan_context(asgi):
        transport = httpx.ASGITransport(app=asgi)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
            yield client, checker


def challenge(error: str, description: str) -> str:
    return f'Bearer error="{error}", error_description="{description}", resource_metadata="{METADATA_URL}", scope="ask"'


@pytest.mark.parametrize(
    ("headers", "asked"),
    [
        ({}, []),
        ({"authorization": "Bearer unknown"}, ["unknown"]),
        ({"authorization": "Basic dXNlcjpwYXNz"}, []),
        ({"authorization": "Bearer elsewhere"}, ["elsewhere"]),  # issued for another resource (RFC 8707)
        ({"authorization": "Bearer expired"}, ["expired"]),
    ],
    ids=["no-token", "unknown-token", "not-bearer", "another-resource", "expired"],
)
async def test_a_request_without_a_valid_token_is_401_with_the_challenge(
    headers: dict[str, str], asked: list[str]
) -> None:
    async with app() as (client, checker):
        response = await client.post("/mcp", json=INITIALIZE, headers={**ACCEPT, **headers})
    assert response.status_code == 401
    assert response.headers["www-authenticate"] == challenge("invalid_token", "Authentication required")
    assert response.json() == {"error": "invalid_token", "error_description": "Authentication required"}
    assert checker.asked == asked


async def test_a_token_without_the_scope_is_403_insufficient_scope() -> None:
    async with app() as (client, _):
        response = await client.post("/mcp", json=INITIALIZE, headers={**ACCEPT, "authorization": "Bearer narrow"})
    assert response.status_code == 403
    assert response.headers["www-authenticate"] == challenge("insufficient_scope", "Required scope: ask")
    assert response.json() == {"error": "insufficient_scope", "error_description": "Required scope: ask"}


async def test_every_scope_is_required() -> None:
    async with app(scopes=["more", "ask"]) as (client, _):
        response = await client.post("/mcp", json=INITIALIZE, headers={**ACCEPT, "authorization": "Bearer narrow"})
    assert response.status_code == 403
    assert response.headers["www-authenticate"] == (
        'Bearer error="insufficient_scope", error_description="Required scope: ask", '
        f'resource_metadata="{METADATA_URL}", scope="more ask"'
    )


async def test_a_get_and_a_delete_need_the_token_too() -> None:
    async with app() as (client, _):
        for method in ("GET", "DELETE"):
            response = await client.request(method, "/mcp", headers={"accept": "text/event-stream"})
            assert response.status_code == 401, method
            assert response.headers["www-authenticate"] == challenge("invalid_token", "Authentication required")


async def test_a_good_token_opens_a_session() -> None:
    async with app() as (client, checker):
        response = await client.post("/mcp", json=INITIALIZE, headers={**ACCEPT, "authorization": "Bearer good"})
    assert response.status_code == 200, response.text
    assert '"protocolVersion":"2025-11-25"' in response.text
    assert "www-authenticate" not in response.headers
    assert checker.asked == ["good"]


async def test_the_protected_resource_metadata_is_served() -> None:
    async with app() as (client, _):
        response = await client.get("/.well-known/oauth-protected-resource/mcp")
    assert response.status_code == 200
    assert response.json() == {
        "resource": "http://localhost/mcp",
        "authorization_servers": ["https://auth.example.com", "https://login.example.org/tenant1"],
        "scopes_supported": ["ask"],
        "bearer_methods_supported": ["header"],
        "resource_name": "program",
    }


async def test_the_sdk_client_reads_the_challenge_and_the_metadata() -> None:
    """What the ``mcp`` SDK's OAuth client (``mcp.http(auth=mcp.OAuth(...))``'s) reads of them:
    where the metadata is, the scopes to ask, and the metadata itself."""
    async with app() as (client, _):
        refused = await client.post("/mcp", json=INITIALIZE, headers=ACCEPT)
        found = await client.get("/.well-known/oauth-protected-resource/mcp")
    challenged = httpx2.Response(refused.status_code, headers=dict(refused.headers))
    assert extract_resource_metadata_from_www_auth(challenged) == METADATA_URL
    assert extract_scope_from_www_auth(challenged) == "ask"
    assert build_protected_resource_metadata_discovery_urls(METADATA_URL, served_module.RESOURCE)[0] == METADATA_URL
    metadata = await handle_protected_resource_response(httpx2.Response(200, content=found.content))
    assert metadata is not None
    assert [str(url) for url in metadata.authorization_servers] == served_module.ISSUERS
    assert str(metadata.resource) == served_module.RESOURCE


async def test_the_metadata_names_the_resource_as_given() -> None:
    auth = BearerAuth(verifier(), **settings(resource_name="Support desk"))
    asgi = served_module.program.as_mcp_server("program").http_app(auth=auth)
    transport = httpx.ASGITransport(app=asgi)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
        response = await client.get("/.well-known/oauth-protected-resource/mcp")
    assert response.json()["resource_name"] == "Support desk"
    assert auth.metadata_url == METADATA_URL


async def opened(client: httpx.AsyncClient, token: str) -> str:
    """A new session opened with ``token`` (initialize, initialized): its id."""
    response = await client.post("/mcp", json=INITIALIZE, headers={**ACCEPT, "authorization": f"Bearer {token}"})
    session = response.headers["mcp-session-id"]
    headers = {**ACCEPT, "authorization": f"Bearer {token}", "mcp-session-id": session}
    initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    assert (await client.post("/mcp", json=initialized, headers=headers)).status_code == 202
    return session


async def rpc(client: httpx.AsyncClient, token: str, session: str, method: str, params: dict[str, Any]) -> Any:
    """One request on ``session`` with ``token``: its JSON-RPC answer (the SSE event's data)."""
    headers = {**ACCEPT, "authorization": f"Bearer {token}", "mcp-session-id": session}
    request = {"jsonrpc": "2.0", "id": 2, "method": method, "params": params}
    response = await client.post("/mcp", json=request, headers=headers)
    assert response.status_code == 200, response.text
    data = [line.removeprefix("data: ") for line in response.text.splitlines() if line.startswith("data: ")]
    return json.loads(data[-1])


async def test_a_task_is_found_only_with_the_token_of_its_creator() -> None:
    async with app() as (client, _):
        alice = await opened(client, "good")
        call_params = {"name": "program", "arguments": {"question": "hi"}, "task": {"ttl": 60000}}
        created = await rpc(client, "good", alice, "tools/call", call_params)
        task_id = created["result"]["task"]["taskId"]
        bob = await opened(client, "bob")
        refused = await rpc(client, "bob", bob, "tasks/get", {"taskId": task_id})
        again = await opened(client, "good")  # alice again, on a new connection
        found = await rpc(client, "good", again, "tasks/result", {"taskId": task_id})
        theirs = await client.post(
            "/mcp",
            json={"jsonrpc": "2.0", "id": 3, "method": "tasks/get", "params": {"taskId": task_id}},
            headers={**ACCEPT, "authorization": "Bearer bob", "mcp-session-id": alice},
        )
    assert refused == {
        "jsonrpc": "2.0",
        "id": 2,
        "error": {"code": -32602, "message": "Failed to retrieve task: Task not found (or its ttl elapsed)"},
    }
    assert found["result"]["structuredContent"] == {"answer": "hi"}
    assert theirs.status_code == 404  # the SDK binds the session to alice's principal


def caller(subject: str) -> AuthenticatedUser:
    return AuthenticatedUser(AccessToken(token=subject, client_id="app", scopes=["ask"], subject=subject))


async def test_a_paused_turn_is_resumed_only_with_the_token_of_the_call_that_paused() -> None:
    """On 2026-07-28 the paused turn waits under its ``requestState``; a retry carrying another
    principal's token is told no turn waits, and does not spend it. In process, the token set as the
    bearer middleware sets it (the SDK hands the request's context to the handler)."""
    served = tests_program.program.as_mcp_server("repeat")
    arguments = {"question": "refund it", "times": 1}
    accepted = {"approval-0": types.ElicitResult(action="accept", content={})}

    async def accept(context: Any, params: Any) -> types.ElicitResult:
        return types.ElicitResult(action="accept", content={})

    tests_program.events.clear()
    async with Client(served.server, elicitation_callback=accept) as client:
        auth_context_var.set(caller("alice"))
        paused = await client.session.call_tool("repeat", arguments, allow_input_required=True)
        assert isinstance(paused, types.InputRequiredResult)
        auth_context_var.set(caller("bob"))
        theirs = await client.session.call_tool(
            "repeat", arguments, input_responses=accepted, request_state=paused.request_state
        )
        auth_context_var.set(caller("alice"))
        mine = await client.session.call_tool(
            "repeat", arguments, input_responses=accepted, request_state=paused.request_state
        )
    assert theirs.is_error is True
    assert theirs.content[0].text == (  # type: ignore[union-attr]
        "no turn waits under this requestState (it was answered already, or let go): call the tool again"
    )
    assert mine.structured_content == {"answer": "refund it: refunded 5", "length": 21}
    assert tests_program.events == ["refund 5"]


async def test_without_a_resource_check_the_verifier_decides_the_audience() -> None:
    async with app(check_resource=False) as (client, _):
        response = await client.post("/mcp", json=INITIALIZE, headers={**ACCEPT, "authorization": "Bearer elsewhere"})
    assert response.status_code == 200, response.text


@pytest.mark.parametrize(
    ("changes", "said"),
    [
        ({"authorization_servers": None}, "`authorization_servers` is required"),
        ({"authorization_servers": []}, "`authorization_servers` must name at least one"),
        ({"authorization_servers": "https://auth.example.com"}, "`authorization_servers` must be a list"),
        (
            {"authorization_servers": ["http://auth.example.com"]},
            "`authorization_servers`: 'http://auth.example.com': Issuer URL must be HTTPS",
        ),
        ({"authorization_servers": ["https://auth.example.com?x=1"]}, "must not have a query string"),
        (
            {"authorization_servers": ["auth.example.com"]},
            "`authorization_servers`: 'auth.example.com' is not an http(s) URL",
        ),
        ({"resource": None}, "`resource` is required"),
        ({"resource": "http://mcp.example.com/mcp"}, "`resource` must be an https URL"),
        ({"resource": "https://mcp.example.com/mcp#top"}, "`resource` must have no query and no fragment"),
        ({"scopes": None}, "`scopes` is required"),
        ({"scopes": []}, "`scopes` must name at least one scope"),
        ({"scopes": "ask"}, "`scopes` must be a list"),
        ({"scopes": ["ask more"]}, "`scopes`: 'ask more' is not a scope name"),
        ({"check_resource": "yes"}, "`check_resource` must be True or False"),
        ({"resource_name": " "}, "`resource_name` must be a non-empty string"),
    ],
)
def test_bad_settings_are_refused_naming_the_option(changes: dict[str, Any], said: str) -> None:
    with pytest.raises(ConfigurationError) as refused:
        BearerAuth(verifier(), **settings(**changes))
    assert said in str(refused.value)


def test_a_loopback_issuer_and_resource_may_be_http() -> None:
    auth = BearerAuth(
        verifier(), authorization_servers=["http://127.0.0.1:9000", "http://localhost/t"],
        resource="http://[::1]:8000/mcp", scopes=["ask"],
    )  # fmt: skip
    assert auth.authorization_servers == ("http://127.0.0.1:9000", "http://localhost/t")
    assert auth.metadata_url == "http://[::1]:8000/.well-known/oauth-protected-resource/mcp"


def test_a_verifier_without_async_verify_token_is_refused() -> None:
    class Sync:
        def verify_token(self, token: str) -> None:
            return None

    for bad in (object(), Sync()):
        with pytest.raises(ConfigurationError, match="`verifier` must be an mcp TokenVerifier"):
            BearerAuth(bad, **settings())  # type: ignore[arg-type]


def test_http_app_refuses_an_auth_that_is_not_bearer_auth() -> None:
    served = served_module.program.as_mcp_server("program")
    with pytest.raises(ConfigurationError, match=r"`auth` must be a dspy_imp\.mcp\.BearerAuth or None"):
        served.http_app(auth={"scopes": ["ask"]})  # type: ignore[arg-type]


def command(*args: str) -> list[str]:
    return [sys.executable, "-m", "dspy_imp.mcp", "serve", "tests.mcp_served_auth:program", *args]


@pytest.fixture(scope="module", params=["async", "sync"])
def url(request: pytest.FixtureRequest) -> Iterator[str]:
    sync = ["--sync"] if request.param == "sync" else []
    server = subprocess.Popen(
        command("--http", "--auth", "tests.mcp_served_auth:auth", *sync),
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    try:
        assert server.stdout is not None
        line = server.stdout.readline()
        assert "serving program on http://127.0.0.1:" in line, line
        yield line.split(" on ", 1)[1].strip()
    finally:
        server.terminate()
        server.wait(timeout=30)
        if server.stdout is not None:
            server.stdout.close()


def asked(run: Callable[..., Any], server: mcp.Server, question: str) -> Any:
    """What the served program answered ``question``, called through a turn of ours."""
    agent = dspy_imp.ReActV2("question -> answer", tools=[server])
    lm = ScriptedLM([reply(calls=[call("program", {"question": question}, id="c1")]), reply("done")])
    with dspy.context(lm=lm):
        pred = run(agent, question=question)
    entry = next(e for e in pred.metadata.history.messages if e.get("tool_call_results"))
    return entry["tool_call_results"][0]


def test_a_good_token_calls_the_program_and_its_tools_see_who_calls(url: str) -> None:
    server = mcp.http(url, headers={"Authorization": "Bearer good"})
    with server:
        result = asked(lambda agent, **kw: agent(**kw), server, "who am I?")
    assert result["result"] == {"answer": "app for alice with ask more"}


async def test_a_task_s_turn_sees_who_calls_too(url: str) -> None:
    server = mcp.http(url, headers={"Authorization": "Bearer good"}, tasks="always")
    async with server:
        result = await asyncio.to_thread(asked, lambda agent, **kw: agent(**kw), server, "who am I?")
    assert result["result"] == {"answer": "app for alice with ask more"}


def test_a_token_without_the_scope_cannot_reach_the_program(url: str) -> None:
    server = mcp.http(url, headers={"Authorization": "Bearer narrow"})
    with pytest.raises(mcp.ServerUnavailable, match="could not be opened: Server returned an error response"), server:
        server.tools()


def test_auth_on_the_command_needs_http() -> None:
    done = subprocess.run(
        command("--auth", "tests.mcp_served_auth:auth"), cwd=ROOT, capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert done.returncode == 2
    assert "--auth needs --http" in done.stderr


def test_auth_on_the_command_must_name_bearer_auth() -> None:
    done = subprocess.run(
        command("--http", "--auth", "tests.mcp_served_auth:RESOURCE"), cwd=ROOT, capture_output=True, text=True,
        timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert done.returncode == 1
    assert done.stderr.strip() == (
        "--auth tests.mcp_served_auth:RESOURCE is str 'http://localhost/mcp': expected a dspy_imp.mcp.BearerAuth"
    )
