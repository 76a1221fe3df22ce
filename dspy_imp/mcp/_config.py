"""``from_config(path)``: the servers of an ``mcpServers`` JSON file (Claude Desktop, Cursor, VS Code).

The file holds ``{"mcpServers": {name: server}}`` (Claude Desktop, Cursor) or ``{"servers": {name:
server}}`` (VS Code's ``mcp.json``). A server is ``{"command", "args", "env", "cwd"}`` (stdio) or
``{"url", "headers"}`` (HTTP: streamable HTTP, falling back to SSE as ``mcp.http`` does); VS Code's
``"type"`` (``"stdio"``, ``"http"``, ``"sse"``: a legacy server's HTTP+SSE transport, no fallback;
``"streamable-http"``: that one only) is read,
``"disabled": true`` leaves a server out. Every string may use ``${VAR}`` and ``${VAR:-default}``,
read from the environment when the file is read; a variable that is not set and has no default is
a ``ConfigurationError`` naming the field (``mcpServers.github.env.GITHUB_TOKEN``). VS Code's
``${input:...}`` prompts are refused, naming the field.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dspy_imp._records.errors import ConfigurationError
from dspy_imp.mcp._server import Server
from dspy_imp.mcp._servers import http, stdio

_VARIABLE = re.compile(r"\$\{([^}]*)\}")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_STDIO_KEYS = frozenset({"type", "command", "args", "env", "cwd", "disabled", "envFile"})
_HTTP_KEYS = frozenset({"type", "url", "headers", "disabled"})
_TRANSPORTS = {"sse": "sse", "streamable-http": "streamable-http", "streamableHttp": "streamable-http"}
"""The ``mcp.http(transport=)`` of a ``"type"``; ``"http"`` (or none) is ``None``: either, by the fallback."""


def from_config(
    path: str | os.PathLike[str],
    *,
    environ: Mapping[str, str] | None = None,
    auth: Mapping[str, Any] | None = None,
    **options: Any,
) -> list[Server]:
    """The servers of the file at ``path``, in its order (see the module).

    Args:
        path: An ``mcpServers`` (or VS Code ``servers``) JSON file.
        environ: Where ``${VAR}`` is read (by default ``os.environ``).
        auth: ``{name: mcp.OAuth(...) or an httpx2.Auth}``: the ``auth=`` of the HTTP servers of
            the file so named (the file holds no secrets or callbacks). A name the file has no
            HTTP server for is a ``ConfigurationError``.
        **options: Given to every server (``prefix=``, ``needs_approval=``, ``timeout=``, ...);
            a server is named by its key in the file.
    """
    if auth is not None and (not isinstance(auth, Mapping) or not all(isinstance(k, str) for k in auth)):
        raise ConfigurationError(f"mcp.from_config: `auth` must be a dict of server names to auth, got {auth!r}")
    signs_in = dict(auth or {})
    file = Path(path)
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except OSError as error:
        raise ConfigurationError(f"mcp.from_config: cannot read {str(file)!r}: {error.strerror or error}") from None
    except json.JSONDecodeError as error:
        raise ConfigurationError(f"mcp.from_config: {str(file)!r} is not JSON: {error}") from None
    key = "mcpServers" if isinstance(data, dict) and "mcpServers" in data else "servers"
    servers = data.get(key) if isinstance(data, dict) else None
    if not isinstance(servers, dict):
        raise ConfigurationError(f"mcp.from_config: {str(file)!r} holds no `mcpServers` (or `servers`) object")
    variables = os.environ if environ is None else environ
    found = []
    for name, spec in servers.items():
        at = f"{key}.{name}"
        if not isinstance(spec, dict):
            raise ConfigurationError(f"mcp.from_config: `{at}` must be an object")
        if spec.get("disabled") is True:
            continue
        found.append(_server(name, expand(spec, at, variables), at, options, signs_in.pop(name, None)))
    if signs_in:
        raise ConfigurationError(
            f"mcp.from_config: `auth` names {sorted(signs_in)!r}, which {str(file)!r} holds no enabled server for"
        )
    return found


def _server(name: str, spec: dict[str, Any], at: str, options: dict[str, Any], auth: Any) -> Server:
    kind = spec.get("type")
    if "url" in spec or kind in ("http", "streamable-http", "streamableHttp", "sse"):
        _known(spec, _HTTP_KEYS, at)
        if "url" not in spec:
            raise ConfigurationError(f"mcp.from_config: `{at}` is an HTTP server without a `url`")
        if kind not in (None, "http", "streamable-http", "streamableHttp", "sse"):
            raise ConfigurationError(f"mcp.from_config: `{at}.type` must be 'stdio', 'http' or 'sse', got {kind!r}")
        # "http" or no type: streamable HTTP falling back to SSE (``mcp.http``'s default; VS Code does the same)
        transport = _TRANSPORTS.get(kind) if isinstance(kind, str) else None
        return http(spec["url"], headers=spec.get("headers"), auth=auth, transport=transport, name=name, **options)
    if kind not in (None, "stdio"):
        raise ConfigurationError(f"mcp.from_config: `{at}.type` must be 'stdio', 'http' or 'sse', got {kind!r}")
    _known(spec, _STDIO_KEYS, at)
    if auth is not None:
        raise ConfigurationError(f"mcp.from_config: `auth` names {name!r}, a stdio server (auth is for HTTP servers)")
    if "envFile" in spec:
        raise ConfigurationError(f"mcp.from_config: `{at}.envFile` is not supported; give the variables in `env`")
    if "command" not in spec:
        raise ConfigurationError(f"mcp.from_config: `{at}` has neither a `command` nor a `url`")
    return stdio(spec["command"], spec.get("args", ()), env=spec.get("env"), cwd=spec.get("cwd"), name=name, **options)


def _known(spec: Mapping[str, Any], keys: frozenset[str], at: str) -> None:
    unknown = sorted(set(spec) - keys)
    if unknown:
        raise ConfigurationError(f"mcp.from_config: `{at}` has unknown field(s) {unknown!r}")


def expand(value: Any, at: str, variables: Mapping[str, str]) -> Any:
    """``value`` with ``${VAR}`` and ``${VAR:-default}`` replaced in every string (see the module)."""
    if isinstance(value, str):
        return _VARIABLE.sub(lambda match: _variable(match.group(1), at, variables), value)
    if isinstance(value, list):
        return [expand(item, f"{at}[{index}]", variables) for index, item in enumerate(value)]
    if isinstance(value, dict):
        return {key: expand(item, f"{at}.{key}", variables) for key, item in value.items()}
    return value


def _variable(body: str, at: str, variables: Mapping[str, str]) -> str:
    name, has_default, default = body.partition(":-")
    if not _NAME.fullmatch(name):
        raise ConfigurationError(
            f"mcp.from_config: `{at}` uses ${{{body}}}; only ${{VAR}} and ${{VAR:-default}} are supported"
        )
    value = variables.get(name)
    if value:
        return value
    if has_default:
        return default
    if value is not None:
        return value
    raise ConfigurationError(f"mcp.from_config: `{at}` uses ${{{name}}}, which is not set (and has no default)")
