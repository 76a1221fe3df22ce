"""Fields written in any of DSPy's formats, read leniently from a reply's text.

A model does not always answer in the format it was asked for: shown ``ChatAdapter``
demos it may write ``[[ ## tool_calls ## ]]`` in a JSON request, or leave out the text
field and write only its calls. ``find_fields`` reads the step's fields from whichever
format the reply uses (DSPy's ``[[ ## name ## ]]`` markers, ``<name>...</name>`` tags, or
one JSON object), so calls in any readable shape run and markup never becomes an answer.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import json_repair
from dspy.adapters.chat_adapter import field_header_pattern


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
    """``<name>...</name>`` fields, in a reply that opens with a tag (prose that quotes a tag is prose).

    Each is the text between the first ``<name>`` and the first ``</name>`` after it: what
    ``re.search(r"<name>(.*?)</name>", completion, re.DOTALL)`` finds, found with ``str.find``
    (that search tries every ``<name>`` against the rest of the reply: quadratic in a reply of
    many unclosed tags, which a model can write).
    """
    if not completion.lstrip().startswith("<"):
        return {}
    found = {}
    for name in names:
        opening, closing = f"<{name}>", f"</{name}>"
        start = completion.find(opening)
        end = completion.find(closing, start + len(opening)) if start >= 0 else -1
        if end >= 0:
            found[name] = completion[start + len(opening) : end].strip()
    return found


def fenced(text: str) -> str | None:
    r"""The content of a stripped reply that is one ```` ```json ```` (or ```` ``` ````) fence, else ``None``.

    What ``re.match(r"^```(?:json)?\s*\n(.*?)\n```\s*$", text, re.DOTALL)`` finds (its group,
    up to the whitespace that ``strip`` takes off), read in one pass: the fence closes on the
    reply's last non-blank characters, and opens on a newline in the whitespace after its
    ```` ``` ```` (and ``json``). That pattern backtracks through its leading whitespace against
    the rest of the reply: quadratic in a reply of many blank lines.
    """
    if not text.startswith("```"):
        return None
    for after in ([text[7:]] if text.startswith("```json") else []) + [text[3:]]:
        lead = len(after) - len(after.lstrip())
        newline = after.find("\n", 0, lead)
        body = after.rstrip()
        close = len(body) - 4
        if newline >= 0 and body.endswith("\n```") and newline + 1 <= close:
            return after[newline + 1 : close]
    return None


def _json_object(completion: str, names: Sequence[str]) -> dict[str, Any]:
    text = completion.strip()
    content = fenced(text)
    if content is not None:
        text = content.strip()
    if not text.startswith("{"):
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        value = json_repair.loads(text)
    if not isinstance(value, dict):
        return {}
    return {name: value[name] for name in names if name in value}
