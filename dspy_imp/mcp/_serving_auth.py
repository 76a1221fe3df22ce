"""A served program's OAuth over streamable HTTP: the bearer token every MCP request must carry.

MCP's authorization (2025-11-25) has an HTTP server be an OAuth 2.1 resource server. ``BearerAuth``
holds what that takes; ``ProgramServer.http_app(auth=...)`` hands it to the ``mcp`` SDK, whose
pieces do the work:

- **Tokens**: the SDK's ``BearerAuthBackend`` reads ``Authorization: Bearer ...`` and asks the
  ``TokenVerifier`` given here; a token it refuses, an expired one (``expires_at``), or, with
  ``check_resource``, one whose ``resource`` (RFC 8707) is not this server's, counts as none.
- **Answers**: the SDK's ``RequireAuthMiddleware`` answers a request without a valid token 401
  ``invalid_token`` and one whose token lacks a required scope 403 ``insufficient_scope``, each
  with ``WWW-Authenticate: Bearer ... resource_metadata="..."``; ``_Challenge`` adds the
  ``scope`` parameter the spec asks of both (RFC 6750 section 3), the scopes required.
- **Discovery**: the SDK's Protected Resource Metadata route (RFC 9728) at
  ``/.well-known/oauth-protected-resource`` plus the resource's path, listing every authorization
  server, the scopes and the server's name.
- **Identity**: the SDK's ``AuthContextMiddleware`` keeps the verified token for the request, so
  the program's tools read it with ``mcp.server.auth.middleware.auth_context.get_access_token()``
  (its context reaches the turn's task, a sync turn's thread and a task's turn); the SDK binds
  each streamable-HTTP session to the principal that opened it.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

import pydantic
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import TokenVerifier, principal_components
from mcp.server.auth.routes import build_resource_metadata_url, create_protected_resource_routes, validate_issuer_url
from mcp.server.auth.settings import AuthSettings
from pydantic import AnyHttpUrl
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from dspy_imp._records.errors import ConfigurationError

_LOOPBACK = ("localhost", "127.0.0.1", "[::1]")
_URL = pydantic.TypeAdapter(AnyHttpUrl, config=pydantic.ConfigDict(url_preserve_empty_path=True))
"""URLs as given: no ``/`` added to an empty path (RFC 8414 compares an issuer as a string)."""
_REQUIRED = {
    "authorization_servers": "the issuer URLs of the authorization servers whose tokens this server takes",
    "resource": "this server's URL as clients reach it (https://host/mcp), the resource its tokens are for",
    "scopes": "the scopes every request's token must have",
}


class BearerAuth:
    """What a served program's HTTP app requires of a request: an OAuth bearer token, verified.

    ``agent.as_mcp_server(name).http_app(auth=BearerAuth(...))`` (or ``run_http(auth=...)``, or
    ``serve ... --http --auth module:attribute``): every request to the MCP endpoint needs
    ``Authorization: Bearer <token>``; without a valid one it is answered 401, with one that lacks
    a scope 403, and the Protected Resource Metadata document is served for clients to discover
    the authorization server. Checked here, each bad option a ``ConfigurationError`` naming it.

    ``authorization_servers``, ``resource`` and ``scopes`` are required (keywords).

    Args:
        verifier: The ``mcp`` SDK's ``TokenVerifier``: an object whose ``async verify_token(token)``
            returns the token's ``AccessToken`` (``client_id``, ``scopes``, ``expires_at``,
            ``resource``, ``subject``, ``claims``), or ``None`` for a token it does not accept
            (introspection, a JWT library: yours).
        authorization_servers: The issuer URLs of the authorization servers whose tokens this
            server takes (at least one; the metadata's ``authorization_servers``). Each is https
            (http only on a loopback name), with no query or fragment, as RFC 8414 has an issuer.
        resource: This server's URL as clients reach it (``https://mcp.example.com/mcp``): the
            resource a token must be issued for (RFC 8707) and the metadata's ``resource``. The
            metadata is served at ``/.well-known/oauth-protected-resource`` plus its path, so its
            path is the app's path as the app sees it. https, or http on a loopback name.
        scopes: The scopes every request's token must have, all of them (at least one); the
            metadata's ``scopes_supported`` and the challenge's ``scope``.
        check_resource: Refuse a token whose ``AccessToken.resource`` is not ``resource`` (default).
            ``False`` when the verifier checks the token's audience itself (a JWT library given the
            expected audience): the spec has the server check it one way or the other.
        resource_name: The metadata's ``resource_name`` (default: the served program's name).
    """

    def __init__(
        self,
        verifier: TokenVerifier,
        *,
        authorization_servers: Sequence[str] | None = None,
        resource: str | None = None,
        scopes: Sequence[str] | None = None,
        check_resource: bool = True,
        resource_name: str | None = None,
    ):
        verify = getattr(verifier, "verify_token", None)
        if verify is None or not inspect.iscoroutinefunction(verify):
            raise ConfigurationError(
                f"`verifier` must be an mcp TokenVerifier (an object with `async def verify_token(token)`), "
                f"got {verifier!r:.80}"
            )
        given_options = {"authorization_servers": authorization_servers, "resource": resource, "scopes": scopes}
        for option, given in given_options.items():
            if given is None:
                raise ConfigurationError(f"`{option}` is required: {_REQUIRED[option]}")
        assert authorization_servers is not None and resource is not None and scopes is not None
        if isinstance(authorization_servers, str) or not isinstance(authorization_servers, Sequence):
            raise ConfigurationError(
                f"`authorization_servers` must be a list of issuer URLs, got {authorization_servers!r:.80}"
            )
        if not authorization_servers:
            raise ConfigurationError("`authorization_servers` must name at least one authorization server (its issuer)")
        self.authorization_servers = tuple(_issuer(url) for url in authorization_servers)
        self.resource = _resource(resource)
        if isinstance(scopes, str) or not isinstance(scopes, Sequence):
            raise ConfigurationError(f"`scopes` must be a list of scope names, got {scopes!r:.80}")
        if not scopes:
            raise ConfigurationError("`scopes` must name at least one scope every request's token must have")
        for scope in scopes:
            if not isinstance(scope, str) or not scope or any(c.isspace() or c in '"\\' for c in scope):
                raise ConfigurationError(f"`scopes`: {scope!r} is not a scope name (a non-empty token, no spaces)")
        self.scopes = tuple(dict.fromkeys(scopes))
        if not isinstance(check_resource, bool):
            raise ConfigurationError(f"`check_resource` must be True or False, got {check_resource!r}")
        if resource_name is not None and (not isinstance(resource_name, str) or not resource_name.strip()):
            raise ConfigurationError(f"`resource_name` must be a non-empty string or None, got {resource_name!r}")
        self.verifier = verifier
        self.check_resource = check_resource
        self.resource_name = resource_name

    @property
    def metadata_url(self) -> str:
        """Where the Protected Resource Metadata is served (the challenges' ``resource_metadata``)."""
        return str(build_resource_metadata_url(_URL.validate_python(self.resource)))

    def settings(self) -> AuthSettings:
        """The SDK's ``AuthSettings`` for its streamable-HTTP app (the first authorization server as
        its issuer; ``protect`` lists them all in the metadata)."""
        return AuthSettings(
            issuer_url=_URL.validate_python(self.authorization_servers[0]),
            resource_server_url=_URL.validate_python(self.resource),
            required_scopes=list(self.scopes),
            validate_token_resource=self.check_resource,
        )

    def __repr__(self) -> str:
        return (
            f"BearerAuth(authorization_servers={list(self.authorization_servers)!r}, resource={self.resource!r}, "
            f"scopes={list(self.scopes)!r})"
        )


Principal = tuple[str, str | None, str | None]
"""Who a verified token speaks for: its client, issuer and subject (the SDK's ``principal_components``)."""


def principal() -> Principal | None:
    """The principal of the request being handled (its verified token's), or ``None`` when the
    server takes requests without a token."""
    token = get_access_token()
    return principal_components(token) if token is not None else None


def protect(app: Any, auth: BearerAuth, path: str, name: str) -> Any:
    """The SDK's app built with ``auth.settings()``, its MCP route's challenges given ``scope`` and
    its metadata route listing every authorization server and the resource's name."""
    metadata_path = urlsplit(auth.metadata_url).path
    metadata = create_protected_resource_routes(
        resource_url=_URL.validate_python(auth.resource),
        authorization_servers=[_URL.validate_python(url) for url in auth.authorization_servers],
        scopes_supported=list(auth.scopes),
        resource_name=auth.resource_name or name,
    )
    routes = app.router.routes
    found = set()
    for index, route in enumerate(routes):
        if isinstance(route, Route) and route.path == path:
            routes[index] = Route(path, endpoint=_Challenge(route.endpoint, auth.scopes))
            found.add("mcp")
        elif isinstance(route, Route) and route.path == metadata_path:
            routes[index] = metadata[0]
            found.add("metadata")
    if found != {"mcp", "metadata"}:  # the SDK's app changed its shape: refuse to serve it unprotected
        raise RuntimeError(f"the mcp SDK's app has no {sorted({'mcp', 'metadata'} - found)} route to protect")
    return app


class _Challenge:
    """The SDK's ``RequireAuthMiddleware``, its ``WWW-Authenticate`` challenges (401, 403) given
    the ``scope`` parameter MCP asks (RFC 6750 section 3): the scopes a request needs."""

    def __init__(self, app: ASGIApp, scopes: Sequence[str]):
        self.app = app
        self.scope_param = f', scope="{" ".join(scopes)}"'.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start" and message.get("status") in (401, 403):
                headers = [
                    (key, value + self.scope_param)
                    if key.lower() == b"www-authenticate" and value.startswith(b"Bearer ")
                    else (key, value)
                    for key, value in message.get("headers", [])
                ]
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, sending)


def _url(option: str, value: Any) -> AnyHttpUrl:
    if not isinstance(value, str) or not value.strip():
        raise ConfigurationError(f"`{option}` must be an http(s) URL, got {value!r:.80}")
    try:
        return _URL.validate_python(value.strip())
    except pydantic.ValidationError as invalid:
        raise ConfigurationError(
            f"`{option}`: {value!r:.80} is not an http(s) URL ({invalid.errors()[0]['msg']})"
        ) from None


def _issuer(value: Any) -> str:
    url = _url("authorization_servers", value)
    try:
        validate_issuer_url(url)  # the SDK's RFC 8414 rule: https (http on loopback), no query or fragment
    except ValueError as invalid:
        raise ConfigurationError(f"`authorization_servers`: {value!r:.80}: {invalid}") from None
    return value.strip()


def _resource(value: Any) -> str:
    url = _url("resource", value)
    if url.scheme != "https" and url.host not in _LOOPBACK:
        raise ConfigurationError(f"`resource` must be an https URL (http only on a loopback name), got {value!r:.80}")
    if url.query or url.fragment:
        raise ConfigurationError(f"`resource` must have no query and no fragment (RFC 8707), got {value!r:.80}")
    return value.strip()
