"""What the web load benchmark's processes share (stdlib only, no Locust: importing Locust patches
the process with gevent): percentiles, and how a refused or failed turn is counted."""

from __future__ import annotations

import json
import re


def percentile(values: list[float], share: float) -> float | None:
    """The nearest-rank percentile (``share`` in 0..1) of ``values``, ``None`` when empty."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(share * len(ordered) + 0.5) - 1))]


def without_numbers(text: str, limit: int = 80) -> str:
    """``text`` on one line with its numbers as ``N`` and quoted names (conversation ids) as ``'…'``:
    one kind of error is then one count, whichever conversation it hit."""
    one_line = " ".join(str(text).split())
    return re.sub(r"\d+(\.\d+)?", "N", re.sub(r"'[^']{0,200}'", "'…'", one_line))[:limit]


def stream_error(text: str) -> str | None:
    """The message of the error event in an SSE body (AG-UI ``RUN_ERROR`` ``message``, the AI SDK's
    ``error`` part's ``errorText``), or None when the body holds none: a refusal answered as a stream
    is then counted by what it says, not by the ids of the events before it."""
    for line in text.splitlines():
        if not line.startswith("data:"):
            continue
        try:
            event = json.loads(line[5:])
        except ValueError:
            continue
        found = event_error(event)
        if found is not None:
            return found
    return None


def event_error(event: object) -> str | None:
    """The message of one stream event that is an error (AG-UI ``RUN_ERROR``'s ``message``, the AI
    SDK's ``error`` part's ``errorText``), else None: the one place that knows those names."""
    if not isinstance(event, dict):
        return None
    found = {"RUN_ERROR": event.get("message"), "error": event.get("errorText")}.get(str(event.get("type")))
    return found if isinstance(found, str) else None


def error_kind(status: int, text: str, retry_after: str | None) -> str:
    """``"429 Retry-After: <message>"``: the status, whether it said when to retry, and its message."""
    message = stream_error(text) or text
    try:
        body = json.loads(text)
        if isinstance(body, dict):
            found = body.get("detail") or body.get("error") or body.get("message") or body
            message = found if isinstance(found, str) else json.dumps(found)
    except ValueError:
        pass
    return f"{status}{' Retry-After' if retry_after is not None else ''}: {without_numbers(message)}"


_KEPT = 62


def regrouped(errors: dict[str, int]) -> dict[str, int]:
    """Counts saved by an earlier run, keyed again by today's rules: quoted ids folded, and a refusal
    whose key kept the stream's first events (ids and all, cut before its message) one row."""
    out: dict[str, int] = {}
    for kind, n in errors.items():
        key = re.sub(r"^(\d+( Retry-After)?): data: .*", r"\1: refused as an error event in the stream", kind)
        folded = re.sub(r"'[^']*('|$)", "'…'", key)
        # the saved key was cut at 80 characters *with* its id, so the message after it ends at a
        # different place for each id: keep the part every one of them still holds
        key = folded if folded == key or len(folded) <= _KEPT else folded[:_KEPT].rstrip() + "…"
        out[key] = out.get(key, 0) + n
    return out
