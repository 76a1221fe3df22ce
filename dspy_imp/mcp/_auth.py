"""OAuth 2.1 for ``mcp.http(url, auth=OAuth(...))``, through the ``mcp`` SDK's client auth.

The SDK's ``OAuthClientProvider`` does the protocol: it reads the server's protected-resource
metadata (RFC 9728, from the ``WWW-Authenticate`` header or the well-known paths), the authorization
server's metadata (RFC 8414 or OpenID discovery), registers the client (a pre-registered
``client_id``, a Client ID Metadata Document URL, or dynamic registration, RFC 7591), picks the
scope, sends the person to the authorization endpoint with PKCE and ``resource`` (RFC 8707),
exchanges the code with the token endpoint's auth method, refreshes, and steps up the scope on a
``403 insufficient_scope``. What the SDK cannot know is where the person's browser is: that is the
one hook here, ``authorize(url) -> the URL the browser was sent back to``, sync or async.

One provider per server, made on first use and kept by the ``Server``: its tokens outlive a
session (a restarted connection does not ask the person again), and ``storage=`` keeps them across
processes. The time ``authorize`` takes (a person signing in) is not counted against the
session's opening bound.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx2
from mcp.client.auth import OAuthClientProvider, OAuthFlowError, TokenStorage
from mcp.client.auth.utils import is_valid_client_metadata_url
from mcp.shared.auth import AuthorizationCodeResult, OAuthClientInformationFull, OAuthClientMetadata, OAuthToken
from pydantic import AnyUrl, ValidationError

from dspy_imp._records.errors import ConfigurationError
from dspy_imp.mcp._transport import waiting_on_a_person

Authorize = Callable[[str], str | Awaitable[str]]
"""What ``OAuth(authorize=)`` takes: ``authorize(authorization_url)`` returning the URL the
authorization server redirected the browser to (``redirect_uri?code=...&state=...``)."""

_STORAGE_METHODS = ("get_tokens", "set_tokens", "get_client_info", "set_client_info")


@dataclass(frozen=True)
class OAuth:
    """OAuth 2.1 (the authorization code flow with PKCE) for ``mcp.http(url, auth=OAuth(...))``.

    The ``mcp`` SDK runs the flow when the server first answers ``401``: discovery, registration,
    scope, PKCE, the token exchange, refresh and scope step-up. You supply where the person signs in.

    Args:
        authorize: ``authorize(authorization_url) -> redirected_url``: show the person the URL (open
            a browser, print it), wait for the authorization server to send their browser back to
            ``redirect_uri``, and return that URL (with its ``code`` and ``state``; a bare query
            string works too). Sync (run in a worker thread) or async. It runs on the first
            request, and again only when the tokens can no longer be refreshed or a wider scope is
            needed.
        redirect_uri: Where the authorization server sends the browser back (your callback: a
            loopback port you listen on, or a page that shows the code).
        client_id: A client registered beforehand with the authorization server (then no dynamic
            registration); ``client_secret`` with it for a confidential client
            (``client_secret_basic``), else a public one (``none``).
        client_secret: The pre-registered client's secret.
        client_metadata_url: An HTTPS URL where your client's metadata document is published (a
            Client ID Metadata Document): used as the ``client_id`` by servers that accept it,
            instead of registering.
        scope: The scope asked for (space-separated). By default the server's: the
            ``WWW-Authenticate`` challenge's, else its metadata's ``scopes_supported``, else none.
        client_name: The name a dynamic registration gives the client.
        storage: Where tokens and the registration are kept: an object with the SDK's
            ``mcp.client.auth.TokenStorage`` methods (``get_tokens``, ``set_tokens``,
            ``get_client_info``, ``set_client_info``, all async). By default in memory, for the
            life of the ``Server``.
    """

    authorize: Callable[[str], str | Awaitable[str]]
    redirect_uri: str
    client_id: str | None = None
    client_secret: str | None = field(default=None, repr=False)
    client_metadata_url: str | None = None
    scope: str | None = None
    client_name: str = "dspy-imp"
    storage: TokenStorage | None = None

    def __post_init__(self) -> None:
        if not callable(self.authorize):
            raise ConfigurationError(
                f"OAuth `authorize` must be callable(authorization_url) -> redirected_url, got {self.authorize!r}"
            )
        parts = urlsplit(self.redirect_uri) if isinstance(self.redirect_uri, str) else None
        if parts is None or parts.scheme not in ("http", "https") or not parts.netloc:
            raise ConfigurationError(
                f"OAuth `redirect_uri` must be an http:// or https:// URL, got {self.redirect_uri!r}"
            )
        for name in ("client_id", "client_secret", "scope", "client_name"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value.strip()):
                raise ConfigurationError(f"OAuth `{name}` must be a non-blank string, got {value!r}")
        if self.client_secret is not None and self.client_id is None:
            raise ConfigurationError("OAuth `client_secret` needs the `client_id` it was issued with")
        url = self.client_metadata_url
        if url is not None and (not isinstance(url, str) or not is_valid_client_metadata_url(url)):
            raise ConfigurationError(
                f"OAuth `client_metadata_url` must be an https:// URL with a path (not just /), got {url!r}"
            )
        storage = self.storage
        if storage is not None and not all(callable(getattr(storage, m, None)) for m in _STORAGE_METHODS):
            raise ConfigurationError(
                "OAuth `storage` must have the async methods of mcp.client.auth.TokenStorage "
                f"({', '.join(_STORAGE_METHODS)}), got {storage!r}"
            )

    def provider(self, server_url: str) -> OAuthClientProvider:
        """The SDK's provider for the server at ``server_url`` (one per ``Server``: it holds the tokens)."""
        storage = self.storage if self.storage is not None else MemoryStorage()
        redirect = [AnyUrl(self.redirect_uri)]
        try:
            metadata = OAuthClientMetadata(
                client_name=self.client_name,
                redirect_uris=redirect,
                grant_types=["authorization_code", "refresh_token"],
                response_types=["code"],
                scope=self.scope,
            )
        except ValidationError as error:  # the checks above should have caught it
            raise ConfigurationError(f"OAuth settings refused by the mcp SDK: {error}") from None
        landing = _Landing(self.authorize)
        return OAuthClientProvider(
            server_url=server_url,
            client_metadata=metadata,
            storage=_Preregistered(storage, self) if self.client_id is not None else storage,
            redirect_handler=landing.redirect,
            callback_handler=landing.callback,
            client_metadata_url=self.client_metadata_url,
        )


class MemoryStorage:
    """Tokens and the client's registration kept in memory (``OAuth``'s default ``storage``)."""

    def __init__(self) -> None:
        self.tokens: OAuthToken | None = None
        self.client_info: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client_info

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client_info = client_info


class _Preregistered:
    """A user's storage, with the pre-registered client answered when it holds none: the SDK then
    skips registration (a ``client_id`` given in ``OAuth`` wins over dynamic registration)."""

    def __init__(self, storage: TokenStorage, oauth: OAuth):
        self._storage = storage
        self._oauth = oauth

    async def get_tokens(self) -> OAuthToken | None:
        return await self._storage.get_tokens()

    async def set_tokens(self, tokens: OAuthToken) -> None:
        await self._storage.set_tokens(tokens)

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        held = await self._storage.get_client_info()
        if held is not None and held.client_id == self._oauth.client_id:
            return held
        oauth = self._oauth
        assert oauth.client_id is not None
        return OAuthClientInformationFull(
            client_id=oauth.client_id,
            client_secret=oauth.client_secret,
            redirect_uris=[AnyUrl(oauth.redirect_uri)],
            scope=oauth.scope,
            token_endpoint_auth_method="client_secret_basic" if oauth.client_secret else "none",
        )

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        await self._storage.set_client_info(client_info)


class _Landing:
    """The SDK's two hooks (send the person to a URL; read where they came back) as one: the
    ``authorize`` callback's answer is kept by ``redirect`` and read by ``callback``."""

    def __init__(self, authorize: Authorize):
        self._authorize = authorize
        self._landed: str | None = None

    async def redirect(self, authorization_url: str) -> None:
        authorize = self._authorize
        with waiting_on_a_person():  # a person signing in: not counted against opening the session
            if inspect.iscoroutinefunction(authorize):
                landed = await authorize(authorization_url)
            else:
                landed = await asyncio.to_thread(authorize, authorization_url)
                if inspect.isawaitable(landed):
                    landed = await landed
        if not isinstance(landed, str) or not landed.strip():
            raise OAuthFlowError(f"OAuth `authorize` must return the URL the browser landed on, got {landed!r}")
        self._landed = landed

    async def callback(self) -> AuthorizationCodeResult:
        landed, self._landed = self._landed, None
        if landed is None:
            raise OAuthFlowError("OAuth: the authorization callback came before `authorize` answered")
        query = urlsplit(landed).query if "://" in landed else landed.lstrip("?")
        values = {key: items[0] for key, items in parse_qs(query).items() if items}
        if "code" not in values:
            reason = values.get("error_description") or values.get("error") or "no `code` in it"
            raise OAuthFlowError(f"OAuth: the authorization was not granted ({reason}): {landed!r}")
        return AuthorizationCodeResult(code=values["code"], state=values.get("state"), iss=values.get("iss"))


def http_auth(auth: Any) -> Callable[[str], httpx2.Auth] | None:
    """What ``mcp.http(auth=)`` takes, checked: ``None``, an ``OAuth``, or any ``httpx2.Auth`` (the
    SDK's ``ClientCredentialsOAuthProvider``, say); a factory of the ``httpx2.Auth`` for a URL."""
    if auth is None:
        return None
    if isinstance(auth, OAuth):
        return auth.provider
    if isinstance(auth, httpx2.Auth):
        return lambda url: auth
    raise ConfigurationError(
        "MCP server `auth` must be a dspy_imp.mcp.OAuth(...) or an httpx2.Auth "
        f"(an mcp.client.auth provider), got {auth!r}"
    )
