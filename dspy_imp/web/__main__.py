"""``python -m dspy_imp.web module:agent``: serve an agent's chat page on 127.0.0.1.

The agent is ``module:attribute`` (imported with the current directory on the path). Its LM is the
one set on it, else the one ``--model`` names (or ``DSPY_IMP_MODEL``), else, when the module has
one, the LM its ``offline_lm()`` returns (the examples' scripted model). The port is printed
once the server listens: ``--port 0`` (the default) takes a free one. It binds 127.0.0.1 only:
behind a reverse proxy, keep it there and name the proxy's public host with ``--allow-host``
(requests for any other ``Host`` are refused, see ``docs/web.md``). Each turn is logged in one
line on standard error (conversation, ending, requests, duration, and the error of a failed turn).
On SIGTERM (or Ctrl-C) it drains before it exits: new turns are refused (503, ``Retry-After``),
running ones may end for ``--drain-seconds``, then those left are stopped with their history saved.
"""

from __future__ import annotations

import argparse
import logging
import os
import socket
import sys
from typing import Any

import dspy

from dspy_imp._program.targets import load_target


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m dspy_imp.web", description=__doc__.split("\n\n")[0])
    parser.add_argument("agent", help="the agent to serve, as module:attribute (e.g. examples.support_agent:agent)")
    parser.add_argument("--port", type=int, default=0, help="the port on 127.0.0.1 (0: a free one)")
    parser.add_argument("--model", default=os.environ.get("DSPY_IMP_MODEL"), help="a dspy.LM model name")
    parser.add_argument("--sync", action="store_true", help="run turns with the sync call in worker threads")
    parser.add_argument(
        "--allow-host",
        action="append",
        default=[],
        metavar="NAME",
        help="a host name to answer for besides 127.0.0.1 (behind a proxy: its public name); repeatable",
    )
    parser.add_argument(
        "--max-turns", type=int, default=None, help="the most turns run at once (default: 200); beyond: 429"
    )
    parser.add_argument(
        "--drain-seconds",
        type=float,
        default=30.0,
        help="on SIGTERM, how long running turns may go on before they are stopped (history saved)",
    )
    options = parser.parse_args(argv)
    # One line per turn (dspy_imp.web._log) on standard error; everything else at WARNING.
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("dspy_imp.web").setLevel(logging.INFO)
    module, agent = load_target(options.agent)
    _check_agent(options.agent, agent)
    _choose_lm(module, agent, options.model)

    import uvicorn

    from dspy_imp.web.app import app

    listener = socket.socket()
    listener.bind(("127.0.0.1", options.port))
    listener.listen(128)  # connections made once the address is printed wait for the server
    port = listener.getsockname()[1]
    print(f"dspy-imp web: serving {options.agent} on http://127.0.0.1:{port}/", flush=True)
    served = app(
        agent,
        sync=options.sync,
        hosts=options.allow_host,
        max_turns=options.max_turns,
        drain_seconds=options.drain_seconds,
    )

    class Draining(uvicorn.Server):
        """Drains (``App.drain``) while still listening, so that a new turn is told 503 and
        ``Retry-After`` and ``/readyz`` 503, then closes as uvicorn does."""

        async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
            await served.drain()
            print("dspy-imp web: drained, stopping", flush=True)
            await super().shutdown(sockets)

    Draining(uvicorn.Config(served, log_level="warning")).run(sockets=[listener])


def _check_agent(target: str, agent: Any) -> None:
    """Exit with one line unless ``agent`` is what the app serves (a ``ReActV2`` or a ``DurableAgent``)."""
    from dspy_imp._program.module import ReActV2

    durable = sys.modules.get("dspy_imp.durable")
    if isinstance(agent, ReActV2) or (durable is not None and isinstance(agent, durable.DurableAgent)):
        return
    sys.exit(f"{target} is {type(agent).__name__} {agent!r:.80}: expected a dspy_imp.ReActV2 or a DurableAgent")


def _choose_lm(module: Any, agent: Any, model: str | None) -> None:
    if (getattr(agent, "react", None) is not None and agent.react.lm is not None) or dspy.settings.lm is not None:
        return
    if model:
        dspy.configure(lm=dspy.LM(model))
        print(f"model: {model}", flush=True)
    elif callable(getattr(module, "offline_lm", None)):
        dspy.configure(lm=module.offline_lm())
        print("model: scripted (offline; --model or DSPY_IMP_MODEL for a real one)", flush=True)
    else:
        sys.exit("the agent has no LM: set one on it, pass --model, or set DSPY_IMP_MODEL")


if __name__ == "__main__":
    main()
