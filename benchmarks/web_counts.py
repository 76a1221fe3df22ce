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
    """``text`` on one line with its numbers as ``N`` (one kind of error is then one count)."""
    return re.sub(r"\d+(\.\d+)?", "N", " ".join(str(text).split()))[:limit]


def error_kind(status: int, text: str, retry_after: str | None) -> str:
    """``"429 Retry-After: <message>"``: the status, whether it said when to retry, and its message."""
    message = text
    try:
        body = json.loads(text)
        if isinstance(body, dict):
            found = body.get("detail") or body.get("error") or body.get("message") or body
            message = found if isinstance(found, str) else json.dumps(found)
    except ValueError:
        pass
    return f"{status}{' Retry-After' if retry_after is not None else ''}: {without_numbers(message)}"
