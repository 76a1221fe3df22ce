"""``python -m dspy_imp.mcp serve module:program``: serve a program as an MCP server (stdio by default).

``module:program`` names a ``dspy_imp.ReActV2`` (imported with the current directory on the path).
The module configures the program's LM itself (``program.set_lm(...)`` or ``dspy.configure``): no
argument or saved file chooses a model or credentials here, so whoever starts the server with
arguments cannot point it at another account. ``--http`` serves streamable HTTP on
``--host`` (127.0.0.1) and ``--port`` (0: a free one, printed once it listens) with Host and Origin
checked (``--allow-host`` for a proxy's public name); ``--auth module:attribute`` names a
``dspy_imp.mcp.BearerAuth`` every request's OAuth bearer token is checked with (its verifier is
code, so it comes from a module as the program does). ``--no-tasks`` serves no MCP tasks: every
call runs inline.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import dspy

from dspy_imp._program.targets import load_target


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m dspy_imp.mcp", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="serve a program as an MCP server")
    serve.add_argument("program", help="the program to serve, as module:attribute")
    serve.add_argument("--name", default=None, help="the server's and tool's name (default: the attribute's)")
    serve.add_argument("--http", action="store_true", help="serve streamable HTTP instead of stdio")
    serve.add_argument("--host", default="127.0.0.1", help="the address to listen on with --http (127.0.0.1)")
    serve.add_argument("--port", type=int, default=0, help="the port with --http (0: a free one)")
    serve.add_argument("--sync", action="store_true", help="run turns with the sync call in worker threads")
    serve.add_argument(
        "--no-tasks", action="store_true", help="declare no tasks capability: every call runs inline, as a plain call"
    )
    serve.add_argument(
        "--allow-host", action="append", default=[], metavar="NAME", help="another Host name to answer for"
    )
    serve.add_argument(
        "--auth",
        default=None,
        metavar="MODULE:ATTRIBUTE",
        help="with --http: a dspy_imp.mcp.BearerAuth; every request then needs a valid OAuth bearer token",
    )
    options = parser.parse_args(argv)
    if options.auth is not None and not options.http:
        parser.error("--auth needs --http (a stdio server takes its credentials from its environment)")
    auth = load_auth(options.auth) if options.auth is not None else None
    program = load(options.program)
    name = options.name or options.program.partition(":")[2]
    served = program.as_mcp_server(name, sync=options.sync, tasks=not options.no_tasks)
    if options.http:
        served.run_http(options.host, options.port, hosts=options.allow_host, auth=auth)
    else:
        import anyio

        anyio.run(served.run_stdio)


def load(target: str) -> Any:
    """The program ``module:attribute`` names, checked; else exit with one line saying what is wrong."""
    _, program = load_target(target, "program")
    from dspy_imp._program.module import ReActV2

    if not isinstance(program, ReActV2):
        sys.exit(f"{target} is {type(program).__name__} {program!r:.80}: expected a dspy_imp.ReActV2")
    if program.react.lm is None and dspy.settings.lm is None:
        sys.exit(
            f"{target} has no LM: its module must set one (program.set_lm(...) or dspy.configure(lm=...)); "
            "no argument chooses the model or its credentials"
        )
    return program


def load_auth(target: str) -> Any:
    """The ``BearerAuth`` ``module:attribute`` names; else exit with one line saying what it is."""
    _, auth = load_target(target, "auth")
    from dspy_imp.mcp._serving_auth import BearerAuth

    if not isinstance(auth, BearerAuth):
        sys.exit(f"--auth {target} is {type(auth).__name__} {auth!r:.80}: expected a dspy_imp.mcp.BearerAuth")
    return auth


if __name__ == "__main__":
    main()
