"""Fallback models: a request the provider failed goes to the next LM of the program's chain.

The chain is the program's LM (``react.lm`` or the configured one), then ``fallback=[...]`` in
order. Every request starts at the first LM. A request that fails with a provider error goes to
the next LM at once (no pause); not a content filter (another model would be asked the same
thing), not a context-window refusal (the loop leaves earlier episodes out instead), not an
unreadable reply, and not a passed deadline. When the last LM fails too, the request fails as it
would without fallbacks (retries under a deadline then go to that last LM).

Each hop is recorded, ``{"kind", "model", "error", "next"}``: ``metadata.fallbacks``, the turn
span's ``dspy_imp.turn.fallbacks``; the model that answered is the last hop's ``next``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from dspy_imp._routes.failures import describe, is_provider_error


class ModelChain:
    """Which LM of the chain the current request goes to, and the hops made so far."""

    def __init__(self, names: Sequence[str]):
        self.names = tuple(names) or ("lm",)
        self.index = 0
        self.hops: list[Mapping[str, str]] = []

    def start(self) -> None:
        """A new request: back to the first LM."""
        self.index = 0

    def next(self, kind: str, error: BaseException) -> bool:
        """Move the request to the next LM after ``error``; ``False`` when it does not fall back."""
        if self.index + 1 >= len(self.names) or not is_provider_error(error):
            return False
        hop = {"kind": kind, "model": self.names[self.index], "error": describe(error)}
        self.index += 1
        self.hops.append({**hop, "next": self.names[self.index]})
        return True
