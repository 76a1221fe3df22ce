"""Whether a call's history is the one its conversation last returned (a cache bust if not).

A conversation continued with the ``metadata.history`` its last call returned sends a first
request that extends that call's last one: the provider's prompt cache serves it. An edited,
trimmed or rebuilt history does not. The process remembers, for the most recent conversations,
how many entries a call returned and a digest of them, found again by the history's first entry
or by its last one (so an edit of either is still found by the other); a history this process
never returned is not judged.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

_KEPT = 1024
_LAST: OrderedDict[str, tuple[int, str, int]] = OrderedDict()  # key -> (entries, digest, when)
_STAMPS = itertools.count()
_LOCK = threading.Lock()


def _digest(entries: Sequence[Mapping[str, Any]]) -> str:
    text = json.dumps(list(entries), sort_keys=True, default=str, ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


def edited(entries: Sequence[Mapping[str, Any]]) -> bool:
    """The history does not begin with the entries its conversation's last call returned."""
    if not entries:
        return False
    with _LOCK:
        known = [_LAST.get("first:" + _digest(entries[:1]))]
        known += [_LAST.get(f"last:{i}:" + _digest(entries[i : i + 1])) for i in range(len(entries))]
    found = [k for k in known if k is not None]
    if not found:
        return False
    count, digest, _ = max(found, key=lambda k: k[2])  # the conversation's latest call
    return len(entries) < count or _digest(entries[:count]) != digest


def remember(entries: Sequence[Mapping[str, Any]]) -> None:
    """The history a call returned, as its conversation's latest."""
    if not entries:
        return
    value = (len(entries), _digest(entries), next(_STAMPS))
    keys = ("first:" + _digest(entries[:1]), f"last:{len(entries) - 1}:" + _digest(entries[-1:]))
    with _LOCK:
        for key in keys:
            _LAST[key] = value
            _LAST.move_to_end(key)
        while len(_LAST) > _KEPT:
            _LAST.popitem(last=False)
