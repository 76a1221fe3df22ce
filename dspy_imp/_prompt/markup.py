"""Fields written in any of DSPy's formats, read leniently from a reply's text.

A model does not always answer in the format it was asked for: shown ``ChatAdapter``
demos it may write ``[[ ## tool_calls ## ]]`` in a JSON request, or leave out the text
field and write only its calls. ``find_fields`` reads the step's fields from whichever
format the reply uses (DSPy's ``[[ ## name ## ]]`` markers, ``<name>...</name>`` tags, or
one JSON object), so calls in any readable shape run and markup never becomes an answer.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

import json_repair
from dspy.adapters.chat_adapter import field_header_pattern

_FENCE = re.compile(r"^```(?:json)?\s*\n(.*?)\n```\s*$", re.DOTALL)


def find_fields(completion: str, names: Sequence[str]) -> dict[str, Any] | None:
    """The named fields the reply writes, in the first format that holds any of them; else ``None``."""
    for reader in (_marked, _tagged, _json_object):
        fields = reader(completion, names)
        if fields:
            return fields
    return None


def without_markers(completion: str) -> str:
    """The text with every ``[[ ## name ## ]]`` header line taken out."""
    kept = []
    for line in completion.splitlines():
        match = field_header_pattern.match(line.strip())
        if match:
            rest = line.strip()[match.end() :].strip()
            if rest:
                kept.append(rest)
            continue
        kept.append(line)
    return "\n".join(kept).strip()


def _marked(completion: str, names: Sequence[str]) -> dict[str, Any]:
    sections: dict[str, list[str]] = {}
    current: str | None = None
    for line in completion.splitlines():
        match = field_header_pattern.match(line.strip())
        if match:
            current = match.group(1)
            rest = line.strip()[match.end() :].strip()
            sections.setdefault(current, [rest] if rest else [])
            continue
        if current is not None:
            sections[current].append(line)
    return {name: "\n".join(sections[name]).strip() for name in names if name in sections}


def _tagged(completion: str, names: Sequence[str]) -> dict[str, Any]:
    """``<name>...</name>`` fields, in a reply that opens with a tag (prose that quotes a tag is prose)."""
    if not completion.lstrip().startswith("<"):
        return {}
    found = {}
    for name in names:
        match = re.search(rf"<{re.escape(name)}>(.*?)</{re.escape(name)}>", completion, re.DOTALL)
        if match:
            found[name] = match.group(1).strip()
    return found


def _json_object(completion: str, names: Sequence[str]) -> dict[str, Any]:
    text = completion.strip()
    fenced = _FENCE.match(text)
    if fenced:
        text = fenced.group(1).strip()
    if not text.startswith("{"):
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        value = json_repair.loads(text)
    if not isinstance(value, dict):
        return {}
    return {name: value[name] for name in names if name in value}
