"""Whether a call's history is the one its conversation last returned (a cache bust if not).

A conversation continued with the ``metadata.history`` its last call returned sends a first
request that extends that call's last one: the provider's prompt cache serves it. A history
whose entries were edited, or trimmed at the start, does not. (One cut at the end, going back to
an earlier point of the conversation, still extends a prefix an earlier request sent.) The
process remembers, for the most recent conversations, a digest of each entry a call returned,
found again by the history's first entry or by its last one (so an edit of either is still
found by the other); a history this process never returned is not judged.
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
_LAST: OrderedDict[str, tuple[tuple[str, ...], int]] = OrderedDict()  # key -> (entry digests, when)
_STAMPS = itertools.count()
_LOCK = threading.Lock()


def _digest(entry: Mapping[str, Any]) -> str:
    try:
        text = json.dumps(entry, sort_keys=True, default=str, ensure_ascii=False)
    except (TypeError, ValueError):  # keys JSON cannot write (a tuple): the entry as Python shows it
        text = repr(sorted(entry.items(), key=repr))
    return hashlib.sha256(text.encode(errors="surrogatepass")).hexdigest()[:24]


def edited(entries: Sequence[Mapping[str, Any]]) -> bool:
    """The history's entries differ from those its conversation's last call returned."""
    if not entries:
        return False
    digests = [_digest(entry) for entry in entries]
    with _LOCK:
        found = [(0, _LAST.get("first:" + digests[0]))]
        found += [(i, _LAST.get("last:" + d)) for i, d in enumerate(digests)]
    known = [(i, k) for i, k in found if k is not None]
    if not known:
        return False
    at, (returned, _) = max(known, key=lambda k: k[1][1])  # the conversation's latest call
    if at not in (0, len(returned) - 1):  # found by its last entry, moved: the start was trimmed
        return True
    shared = min(len(returned), len(digests))
    return tuple(digests[:shared]) != returned[:shared]


def remember(entries: Sequence[Mapping[str, Any]]) -> None:
    """The history a call returned, as its conversation's latest."""
    if not entries:
        return
    digests = tuple(_digest(entry) for entry in entries)
    value = (digests, next(_STAMPS))
    with _LOCK:
        for key in ("first:" + digests[0], "last:" + digests[-1]):
            _LAST[key] = value
            _LAST.move_to_end(key)
        while len(_LAST) > _KEPT:
            _LAST.popitem(last=False)
