"""A value as the text the model reads: strings as they are, containers as compact JSON."""

from __future__ import annotations

import json
from typing import Any

from dspy.adapters.utils import serialize_for_json


def result_text(value: Any) -> str:
    """The text a successful result is shown as (``render_result`` without a renderer)."""
    if isinstance(value, str):
        return value
    if value is None or isinstance(value, bool):  # as stock DSPy shows them: JSON's null, true, false
        return json.dumps(value)
    if isinstance(value, dict | list):
        return to_json(value)
    jsonable = serialize_for_json(value)
    return to_json(jsonable) if isinstance(jsonable, dict | list) else str(jsonable)


def to_json(value: Any) -> str:
    """Compact JSON with ``", "``/``": "`` separators, non-ASCII kept; DSPy's serializer for other values."""
    try:
        return json.dumps(value, ensure_ascii=False)
    except TypeError:
        return json.dumps(serialize_for_json(value), ensure_ascii=False)
