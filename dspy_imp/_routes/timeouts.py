"""A deadline's per-request timeout, sent where no HTTP client is keyed on it.

Under ``dspy_imp.deadline`` a request may wait only the time left (``_turn.sending`` puts a
``timeout`` in its options). Both engines key their HTTP clients on that setting: DSPy's native
engine store builds an engine, with its own connection pool, per distinct ``timeout``
(``dspy.clients.execution``), and LiteLLM caches its SDK clients under a key that includes it. A
new number at each request was a new connection at each request, kept for the LM's lifetime. So:

- **native engine**: the option is taken out, and the request's reads and writes are bounded per
  request instead (``dspy_private.request_seconds``): by the time left when it is sent, or by the
  LM's own ``timeout`` where that is shorter. The LM keeps the one engine it has without a deadline.
- **LiteLLM**: the option stays, on the turn's ladder (``clock.rung``): one timeout while it fits
  in the time left, so a turn moves to a new client only once a tenth of its time left has gone.
- **custom engine**: no timeout at all (it owns its connection), as before.
"""

from __future__ import annotations

from typing import Any

from dspy_imp._records import clock
from dspy_imp._routes.route import Route


def native_seconds(lm: Any, route: Route, options: dict[str, Any]) -> float | None:
    """The seconds a native request's reads and writes may wait, its ``timeout`` option taken out of
    ``options``; ``None`` (``options`` unchanged) on another engine or without a numeric timeout."""
    timeout = _seconds(options.get("timeout"))
    if route.engine != "native" or timeout is None:
        return None
    del options["timeout"]
    left = clock.time_left()
    seconds = timeout if left is None else max(left, 0.001)  # the deadline's: the time left now
    own = _seconds((getattr(lm, "kwargs", None) or {}).get("timeout"))
    return seconds if own is None else min(seconds, own)


def _seconds(value: Any) -> float | None:
    """A positive number of seconds, else ``None`` (an ``httpx.Timeout`` is left to the engine)."""
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) and value > 0 else None
