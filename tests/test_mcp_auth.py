"""``mcp.http(auth=)`` (``mcp.OAuth`` or any ``httpx2.Auth``), ``transport="sse"``, and the
elicitation answer's checks. The OAuth flow itself (discovery, registration, PKCE, scopes, token
endpoint auth) is the ``mcp`` SDK's, checked against the conformance suite's authorization servers
in ``tests/test_mcp_conformance.py``; here: what the user supplies, and that it reaches the wire."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import dspy
import httpx2
import mcp_types as types
import pytest
from local_process import listening
from mcp.client.auth import OAuthClientProvider, OAuthFlowError
from mcp.server.mcpserver import MCPServer
from mcp.shared.auth import OAuthToken

import dspy_imp
from dspy_imp import mcp
from dspy_imp.mcp._auth import MemoryStorage
from dspy_imp.testing import ScriptedLM, call, reply

pytestmark = pytest.mark.block_network(allowed_hosts=[r"127\.0\.0\.1$"])

HERE = Path(__file__).parent
CLOSED = "http://127.0.0.1:9/mcp"  # nothing listens: a request would fail, not hang


def served(transport: str) -> Iterator[str]:
    argv = lambda port: [sys.executable, str(HERE / "mcp_http_server.py"), str(port), transport]  # noqa: E731
    with listening(argv) as port:
        yield f"http://127.0.0.1:{port}/{'sse' if transport == 'sse' else 'mcp'}"


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    yield from served("streamable-http")


@pytest.fixture(scope="module")
def sse_url() -> Iterator[str]:
    yield from served("sse")


def whoami(run: Callable[..., Any], server: mcp.Server) -> Any:
    """The Authorization header the server saw, read through a turn."""
    agent = dspy_imp.ReActV2("question -> answer", tools=[server])
    lm = ScriptedLM([reply(calls=[call("whoami", {}, id="c1")]), reply("done")])
    with dspy.context(lm=lm):
        pred = run(agent, question="who am I?")
    entry = next(e for e in pred.metadata.history.messages if e.get("tool_call_results"))
    return entry["tool_call_results"][0]["result"]


def never(url: str) -> str:
    raise AssertionError("the person was asked to sign in")


# -- what the user supplies, checked before any request ---------------------------------------


@pytest.mark.parametrize(
    ("options", "said"),
    [
        ({"authorize": "https://as/authorize"}, r"OAuth `authorize` must be callable"),
        ({"redirect_uri": "localhost:3000/callback"}, r"OAuth `redirect_uri` must be an http:// or https:// URL"),
        ({"redirect_uri": None}, r"OAuth `redirect_uri`"),
        ({"client_secret": "s3cret"}, r"OAuth `client_secret` needs the `client_id`"),
        ({"client_id": " "}, r"OAuth `client_id` must be a non-blank string"),
        ({"scope": 7}, r"OAuth `scope` must be a non-blank string"),
        ({"client_metadata_url": "http://client.example/meta.json"}, r"OAuth `client_metadata_url` must be an https://"),
        ({"client_metadata_url": "https://client.example/"}, r"OAuth `client_metadata_url` must be an https://"),
        ({"storage": {}}, r"OAuth `storage` must have the async methods of mcp.client.auth.TokenStorage"),
    ],
)  # fmt: skip
def test_bad_oauth_settings_name_the_option(options: dict[str, Any], said: str) -> None:
    given = {"authorize": never, "redirect_uri": "http://127.0.0.1:8765/callback", **options}
    with pytest.raises(dspy_imp.ConfigurationError, match=said):
        mcp.OAuth(**given)


@pytest.mark.parametrize(
    ("options", "said"),
    [
        ({"auth": "Bearer t0ken"}, r"MCP server `auth` must be a dspy_imp.mcp.OAuth\(\.\.\.\) or an httpx2.Auth"),
        ({"auth": ("user", "pass")}, r"MCP server `auth`"),
        ({"transport": "websocket"}, r"MCP server `transport` must be one of \('streamable-http', 'sse'\)"),
    ],
)  # fmt: skip
def test_bad_http_options_name_the_option(options: dict[str, Any], said: str) -> None:
    with pytest.raises(dspy_imp.ConfigurationError, match=said):
        mcp.http(CLOSED, **options)


# -- the authorization hook ---------------------------------------------------------------------


def landing(authorize: Any) -> OAuthClientProvider:
    return mcp.OAuth(authorize=authorize, redirect_uri="http://127.0.0.1:8765/callback").provider(CLOSED)


async def test_authorize_returns_where_the_browser_landed_sync_or_async() -> None:
    seen: list[str] = []

    def sync(url: str) -> str:
        seen.append(url)
        return "http://127.0.0.1:8765/callback?code=c0de&state=s1&iss=https%3A%2F%2Fas.example"

    async def asynchronous(url: str) -> str:
        seen.append(url)
        return "?code=other&state=s2"

    for authorize, (code, state, iss) in ((sync, ("c0de", "s1", "https://as.example")),
                                          (asynchronous, ("other", "s2", None))):  # fmt: skip
        context = landing(authorize).context
        assert context.redirect_handler is not None and context.callback_handler is not None
        await context.redirect_handler("https://as.example/authorize?client_id=x")
        result = await context.callback_handler()
        assert (result.code, result.state, result.iss) == (code, state, iss)
    assert seen == ["https://as.example/authorize?client_id=x"] * 2


async def test_a_refused_authorization_says_why() -> None:
    context = landing(lambda url: "http://127.0.0.1:8765/callback?error=access_denied&state=s").context
    assert context.redirect_handler is not None and context.callback_handler is not None
    await context.redirect_handler("https://as.example/authorize")
    with pytest.raises(OAuthFlowError, match=r"not granted \(access_denied\)"):
        await context.callback_handler()
    context = landing(lambda url: None).context
    assert context.redirect_handler is not None
    with pytest.raises(OAuthFlowError, match="must return the URL the browser landed on"):
        await context.redirect_handler("https://as.example/authorize")


async def test_a_pre_registered_client_is_used_instead_of_registering() -> None:
    storage = MemoryStorage()
    oauth = mcp.OAuth(
        authorize=never, redirect_uri="http://127.0.0.1:8765/callback", client_id="app", client_secret="s3cret",
        storage=storage,
    )  # fmt: skip
    held = await oauth.provider(CLOSED).context.storage.get_client_info()
    assert held is not None
    assert (held.client_id, held.client_secret, held.token_endpoint_auth_method) == (
        "app",
        "s3cret",
        "client_secret_basic",
    )
    public = mcp.OAuth(authorize=never, redirect_uri="http://127.0.0.1:8765/callback", client_id="app")
    held = await public.provider(CLOSED).context.storage.get_client_info()
    assert held is not None and (held.client_secret, held.token_endpoint_auth_method) == (None, "none")


# -- on the wire ----------------------------------------------------------------------------------


def test_stored_tokens_are_sent_and_kept_across_sessions(run: Any, url: str) -> None:
    storage = MemoryStorage()
    asyncio.run(storage.set_tokens(OAuthToken(access_token="t0ken", token_type="Bearer")))
    server = mcp.http(url, auth=mcp.OAuth(authorize=never, redirect_uri="http://127.0.0.1:8765/cb", storage=storage))
    assert whoami(run, server) == "Bearer t0ken"
    server.close()  # a new session: the same provider, no new sign-in
    assert whoami(run, server) == "Bearer t0ken"
    assert server.sessions_opened == 2
    server.close()


def test_any_httpx_auth_is_used_as_given(run: Any, url: str) -> None:
    server = mcp.http(url, auth=httpx2.BasicAuth("user", "pass"))
    assert whoami(run, server) == "Basic dXNlcjpwYXNz"
    server.close()


def test_a_legacy_sse_server(run: Any, sse_url: str, tmp_path: Path) -> None:
    server = mcp.http(sse_url, transport="sse", headers={"Authorization": "Bearer sse"})
    assert whoami(run, server) == "Bearer sse"
    server.close()
    config = {"mcpServers": {"old": {"type": "sse", "url": sse_url, "headers": {"Authorization": "Bearer cfg"}}}}
    (tmp_path / "mcp.json").write_text(json.dumps(config))
    (listed,) = mcp.from_config(tmp_path / "mcp.json", environ={})
    assert whoami(run, listed) == "Bearer cfg"
    listed.close()


# -- elicitation answers --------------------------------------------------------------------------


async def test_an_elicitation_answer_of_none_takes_the_default_and_a_bad_value_is_refused() -> None:
    schema = {"type": "object", "properties": {"row": {"type": "integer", "default": 3}, "meal": {"type": "string"}}}
    params = types.ElicitRequestFormParams(message="m", requested_schema=schema)
    server = mcp.memory(MCPServer("x"), elicit=lambda message, schema: {"row": None, "meal": "veg"})
    assert await server._on_elicit(None, params) == types.ElicitResult(
        action="accept", content={"row": 3, "meal": "veg"}
    )
    server = mcp.memory(MCPServer("x"), elicit=lambda message, schema: {"row": 1, "meal": {"main": "veg"}})
    refused = await server._on_elicit(None, params)
    assert isinstance(refused, types.ErrorData)
    assert "['meal']" in refused.message and "not a string, number, boolean or list of strings" in refused.message


def test_from_config_gives_auth_to_the_http_servers_it_names(run: Any, url: str, tmp_path: Path) -> None:
    config = {"mcpServers": {"crm": {"url": url}, "time": {"command": sys.executable, "args": ["-m", "x"]}}}
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps(config))
    crm, _ = mcp.from_config(path, environ={}, auth={"crm": httpx2.BasicAuth("user", "pass")})
    assert whoami(run, crm) == "Basic dXNlcjpwYXNz"
    crm.close()
    with pytest.raises(dspy_imp.ConfigurationError, match=r"`auth` names 'time', a stdio server"):
        mcp.from_config(path, environ={}, auth={"time": httpx2.BasicAuth("user", "pass")})
    with pytest.raises(dspy_imp.ConfigurationError, match=r"`auth` names \['erp'\], which .* holds no enabled server"):
        mcp.from_config(path, environ={}, auth={"erp": httpx2.BasicAuth("user", "pass")})
    with pytest.raises(dspy_imp.ConfigurationError, match=r"MCP server `auth` must be"):
        mcp.from_config(path, environ={}, auth={"crm": "Bearer x"})


def test_a_person_signing_in_is_not_counted_against_the_opening_bound(run: Any) -> None:
    """A sign-in (``authorize``) longer than ``connect_timeout`` does not fail the opening; the rest does."""
    from contextlib import asynccontextmanager

    from mcp.client._memory import InMemoryTransport

    from dspy_imp.mcp._server import Server, waiting_on_a_person

    backend = MCPServer("slow-sign-in")

    @backend.tool(name="whoami")
    def signed_in() -> str:
        """Who."""
        return "signed in"

    def opening(person: float, machine: float) -> Any:
        @asynccontextmanager
        async def transport() -> Any:
            with waiting_on_a_person():
                await asyncio.sleep(person)  # the person at the browser
            await asyncio.sleep(machine)  # the machines
            async with InMemoryTransport(backend) as streams:
                yield streams

        return transport

    patient = Server("patient", opening(person=2.5, machine=0.0), connect_timeout=2.0)
    assert whoami(run, patient) == "signed in"
    patient.close()
    stuck = Server("stuck", opening(person=0.0, machine=30.0), connect_timeout=1.0)
    with pytest.raises(mcp.ServerUnavailable, match="did not open within 1 s"):
        stuck.list_tools()
    stuck.close()
