"""What the app lets in and what it lets out: only its own page drives it, bodies are bounded, and
every string it sends can be encoded.

- **Host**: every request's ``Host`` names the address the app is served on (``scope["server"]``;
  ``localhost``, ``127.0.0.1`` and ``[::1]`` for one another on a loopback address) or one of the
  configured ``hosts``. A DNS-rebinding page (``Host: evil.example``) is refused, the page and
  ``/api/info`` too.
- **Origin**: a ``POST`` a browser sends carries ``Origin``; it must be the page's own origin (its
  host the ``Host``) or one of the configured ``origins``. Another site's page cannot drive the
  agent. A client that is not a browser sends none and is let in (``auth`` is for it).
- **Content type**: a ``POST`` body is ``application/json`` (a form cannot send it without CORS).
- **CORS** is off unless ``origins`` are configured (then those origins only).
- **Bodies**: at most ``MAX_BODY`` bytes and ``MAX_DEPTH`` levels of nesting; a lone surrogate
  (``"\\ud800"``, valid JSON, not valid text) becomes U+FFFD, so nothing read can break a stream.
- **Out**: ``encodable`` makes each encoded event or part UTF-8 safe (a tool result naming a
  non-UTF-8 file holds lone surrogates).
"""

from __future__ import annotations

import inspect
import ipaddress
import json
import logging
import re
from collections.abc import Awaitable, Callable, Sequence
from typing import Any
from urllib.parse import urlsplit

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import BaseRoute, Match, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from dspy_imp._records.errors import ConfigurationError

MAX_BODY = 1_000_000
"""The largest request body read, in bytes (a bigger one is refused with 413)."""
MAX_DEPTH = 64
"""The deepest nesting of a request body's JSON (deeper is refused with 422)."""

LOOPBACK = frozenset({"localhost", "127.0.0.1", "::1"})
_SURROGATE = re.compile("[\ud800-\udfff]")

Auth = Callable[[Request], "str | Awaitable[str | None] | None"]


class Refused(Exception):
    """A request refused before any turn: its HTTP status and what the client is told.

    ``retry_after``: whole seconds after which the same request may succeed (a busy conversation,
    a full instance, a draining one), sent as the ``Retry-After`` header and in the body;
    ``details``: more of the body (the limit that refused it).
    """

    def __init__(self, status: int, message: str, *, retry_after: int | None = None, **details: Any):
        super().__init__(message)
        self.status = status
        self.message = message
        self.retry_after = retry_after
        self.details = details

    def response(self) -> JSONResponse:
        body: dict[str, Any] = {"error": self.message, **self.details}
        headers = None
        if self.retry_after is not None:
            body["retry_after"] = self.retry_after
            headers = {"retry-after": str(self.retry_after)}
        return JSONResponse(body, status_code=self.status, headers=headers)


class BeforeStream(Refused):
    """A refusal a stream answers as an HTTP status before its first event, with REST's body
    (``{"error": ...}``): a conversation of another user, or one a decision is sent for that does
    not exist (404); one that waits for none of the decisions sent, answered already (409); one
    running a turn, here or on another instance (409 with ``Retry-After``); an instance at its
    ``max_turns`` or whose event loop runs late (429, ``max_loop_lag``) or draining (503), with
    ``Retry-After``."""


MAX_ID = 500
"""The longest conversation id, in characters (the store's column)."""
_CONTROL = re.compile("[\x00-\x1f\x7f]")


def conversation_id(value: Any, field: str) -> str:
    """``value`` as a conversation id: a non-empty string of at most ``MAX_ID`` characters with no
    NUL or other control character; else refused (422) naming ``field``."""
    if not isinstance(value, str) or not value or len(value) > MAX_ID or _CONTROL.search(value):
        shown = value[:40] + "..." if isinstance(value, str) and len(value) > 40 else value
        raise Refused(
            422,
            f"`{field}` must be a conversation id of 1 to {MAX_ID} characters without control characters, "
            f"got {shown!r}",
        )
    return value


def encodable(text: str) -> str:
    """``text`` with each lone surrogate replaced by U+FFFD (a joined pair is one code point already)."""
    return _SURROGATE.sub("\ufffd", text)


def scrubbed(value: Any) -> Any:
    """``value`` (JSON-like) with every string made ``encodable``, keys too."""
    if isinstance(value, str):
        return encodable(value)
    if isinstance(value, dict):
        return {scrubbed(k): scrubbed(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [scrubbed(v) for v in value]
    return value


class Guard:
    """The checks of one app (its ``hosts``, ``origins`` and ``auth``), validated when it is made."""

    def __init__(self, hosts: Sequence[str], origins: Sequence[str], auth: Auth | None):
        self.hosts = frozenset(_names("hosts", hosts, lambda h: h.lower().strip("[]")))
        self.origins = frozenset(_names("origins", origins, lambda o: o.rstrip("/").lower()))
        if auth is not None and not callable(auth):
            raise ConfigurationError(f"`auth` must be a function of the request returning the user, got {auth!r}")
        self.auth = auth

    def refusal(self, scope: Scope) -> Refused | None:
        """Why this request may not reach the app (``None``: it may)."""
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope.get("headers") or []}
        host = headers.get("host", "")
        if not self._host_allowed(_hostname(host), scope.get("server")):
            return Refused(403, f"this server does not answer for the host {host!r}")
        if scope.get("method") in ("GET", "HEAD", "OPTIONS"):
            return None
        origin = headers.get("origin")
        if origin is not None and not self._origin_allowed(origin, host):
            return Refused(403, f"requests from the origin {origin!r} are not allowed")
        if (
            scope.get("method") == "DELETE"
            and headers.get("content-length", "0") == "0"
            and ("transfer-encoding" not in headers)
        ):
            return None  # a DELETE with no body (``curl -X DELETE``) needs no content type
        media = headers.get("content-type", "").split(";")[0].strip().lower()
        if media != "application/json":
            return Refused(415, f"the body must be application/json, got {media or 'no content type'!r}")
        return None

    def _host_allowed(self, name: str, server: Any) -> bool:
        if not name:
            return False
        served = str(server[0]).lower().strip("[]") if server else ""
        return name in self.hosts or name == served or (served in LOOPBACK and name in LOOPBACK)

    def _origin_allowed(self, origin: str, host: str) -> bool:
        if origin.rstrip("/").lower() in self.origins:
            return True
        parts = urlsplit(origin)
        return parts.scheme in ("http", "https") and parts.netloc.lower() == host.lower()

    async def user(self, request: Request) -> str | None:
        """The user ``auth`` names for the request (``None`` without ``auth``); refused when it names none."""
        if self.auth is None:
            return None
        user = self.auth(request)
        if inspect.isawaitable(user):
            user = await user
        if user is None or user == "":
            raise Refused(401, "not signed in")
        if not isinstance(user, str):
            raise TypeError(f"`auth` must return the user as a string (or None to refuse), got {user!r}")
        return user


class Guarded:
    """The ASGI app behind ``Guard.refusal``: a refused request never reaches a route.

    ``routes``: the app's routes. A request that none of them takes (an unknown path, a method the
    path does not answer) is the router's to answer (404, 405 with ``Allow``) whatever its content
    type: it reaches no route, so its body is never read. ``Host`` and ``Origin`` are checked first all
    the same."""

    def __init__(self, app: ASGIApp, guard: Guard, routes: Sequence[BaseRoute] = ()):
        self.app = app
        self.guard = guard
        self.routes = tuple(routes)
        self.warned = False

    def _taken(self, scope: Scope) -> bool:
        """Whether a route takes this request (its path and its method)."""
        return any(isinstance(r, Route) and r.matches(scope)[0] is Match.FULL for r in self.routes)

    def _warn_if_open(self, server: Any) -> None:
        """Once, at the first request: served beyond loopback with no ``auth``, anyone who reaches
        it may list, read and delete every conversation."""
        if self.warned or self.guard.auth is not None or not server:
            return
        self.warned = True
        if _beyond_loopback(str(server[0])):
            logging.getLogger("dspy_imp.web").warning(
                "served on %s without `auth=`: anyone who can reach it may list, read and delete every "
                "conversation (GET /api/conversations); pass auth= to dspy_imp.web.app",
                server[0],
            )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            self._warn_if_open(scope.get("server"))
            refused = self.guard.refusal(scope)
            if refused is not None and refused.status == 415 and self.routes and not self._taken(scope):
                refused = None  # no route takes it: the router answers (404, 405)
            if refused is not None:
                await refused.response()(scope, receive, send)
                return
        await self.app(scope, receive, send)


async def read_json(request: Request) -> Any:
    """The request's JSON body, bounded (``MAX_BODY``, ``MAX_DEPTH``), lone surrogates made U+FFFD."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > MAX_BODY:
        raise Refused(413, f"the body is larger than {MAX_BODY} bytes")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_BODY:
            raise Refused(413, f"the body is larger than {MAX_BODY} bytes")
    try:
        value = json.loads(body)
    except RecursionError:
        raise Refused(422, f"the body nests deeper than {MAX_DEPTH} levels") from None
    except ValueError as error:
        raise Refused(400, f"the body is not JSON: {error}") from None
    return _clean(value)


def _clean(value: Any) -> Any:
    """``value`` with its strings made encodable, refused when it nests deeper than ``MAX_DEPTH``."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:  # a walk without recursion: the depth is what is being checked
        item, depth = stack.pop()
        if isinstance(item, dict | list) and depth > MAX_DEPTH:
            raise Refused(422, f"the body nests deeper than {MAX_DEPTH} levels")
        if isinstance(item, dict):
            for key in list(item):
                child = item.pop(key)
                item[encodable(key)] = encodable(child) if isinstance(child, str) else child
                stack.append((item[encodable(key)], depth + 1))
        elif isinstance(item, list):
            for index, child in enumerate(item):
                if isinstance(child, str):
                    item[index] = encodable(child)
                stack.append((item[index], depth + 1))
    return encodable(value) if isinstance(value, str) else value


def _hostname(host: str) -> str:
    """The name of a ``Host`` header: no port, no IPv6 brackets, lower case."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1 : host.find("]")] if "]" in host else ""
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def _names(option: str, values: Sequence[str], normal: Callable[[str], str]) -> list[str]:
    if isinstance(values, str) or not all(isinstance(v, str) and v for v in values):
        raise ConfigurationError(f"`{option}` must be a list of non-empty strings, got {values!r}")
    return [normal(v) for v in values]


def _beyond_loopback(host: str) -> bool:
    """Whether the socket the server listens on is reachable beyond this machine.

    An ASGI server puts the socket's own address in ``scope["server"]``; a name there that is not
    an IP address (an in-process test client's ``test``) names no socket, so it is not warned of."""
    try:
        address = ipaddress.ip_address(host.strip("[]").split("%")[0])
    except ValueError:
        return False
    return not address.is_loopback
