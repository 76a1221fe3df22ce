"""Cache busts: the requests of a turn that do not extend the one before, and why.

Each request of a turn is normally a byte-exact extension of the previous one, so the provider's
prompt cache serves everything but the new part. A request breaks that when the turn changes what
earlier requests sent (``CacheBustReason``); the turn says so in ``metadata.cache_busts``, on the
request's span and in the status line, so an expensive request is never a mystery. Decided here,
from the request alone; nothing is measured.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from dspy_imp._prompt.render import replay_drops_last_turn
from dspy_imp._records.kinds import CacheBustReason
from dspy_imp._routes.caching import rereads_messages_on_choice
from dspy_imp._turn.effects import ModelRequest


class CacheWatch:
    """Notes each step request as it leaves; ``busts`` lists ``{"request", "kind", "reason"}``
    (``request``: its index in ``metadata.usage.calls``)."""

    def __init__(self, history_edited: bool = False, models: Sequence[str] = ()):
        self.history_edited = history_edited  # the call's history is not the one this conversation last had
        self.keyed = tuple(rereads_messages_on_choice(m) for m in models)  # per LM of the chain
        self.choices: dict[int, Any] = {}  # the LMs a request of this call went to: their last ``tool_choice``
        self.omitted = 0
        self.busts: list[dict[str, Any]] = []

    def note(self, request: ModelRequest, index: int) -> ModelRequest:
        reason = self._reason(request)
        self.choices[request.model] = request.config.get("tool_choice")
        self.omitted = request.guidance.omitted
        if reason is None:
            return request
        self.busts.append({"request": index, "kind": request.guidance.kind, "reason": reason})
        return replace(request, cache_bust=reason)

    def _reason(self, request: ModelRequest) -> CacheBustReason | None:
        context = request.context or {}
        if (
            any(not tier.get("failed") for tier in context.get("applied", ()))
            or request.guidance.omitted > self.omitted
        ):
            return "context_policy"
        if self.choices and request.model not in self.choices:
            return "fallback"
        if request.guidance.kind == "required_retry":
            return "tools_changed"
        if not self.choices and self.history_edited:
            return "history_edited"
        if not self.choices and replay_drops_last_turn(request.guidance):
            return "history_replay"  # the turn before, replayed as its actions: its thoughts go
        keyed = request.model < len(self.keyed) and self.keyed[request.model]
        if keyed and request.model in self.choices and request.config.get("tool_choice") != self.choices[request.model]:
            return "tool_choice_changed"  # the forced submit on Claude: the messages are read again
        return None
