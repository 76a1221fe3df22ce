"""Credential-shaped values hidden from text meant for logs and metadata."""

from __future__ import annotations

import re

_PATTERNS = (
    re.compile(r"\b(sk|pk|rk|ak)-[A-Za-z0-9_\-]{8,}"),
    re.compile(r"\bBearer\s+[A-Za-z0-9._\-]{8,}", re.IGNORECASE),
    re.compile(r"\b(AKIA|ASIA)[A-Z0-9]{12,}\b"),
    re.compile(r"\bgh[pousr]_[A-Za-z0-9]{20,}\b"),
    re.compile(r"\bxox[abprs]-[A-Za-z0-9\-]{10,}"),
    re.compile(r"(?i)\b(api[_-]?key|token|secret|password|authorization)\b(\s*[=:]\s*)(\"?)[^\s\"',;]{6,}"),
)
REDACTED = "[REDACTED]"


def redact_text(text: str) -> str:
    """``text`` with credential-looking substrings replaced by ``[REDACTED]``."""
    for pattern in _PATTERNS[:-1]:
        text = pattern.sub(REDACTED, text)
    return _PATTERNS[-1].sub(lambda m: f"{m.group(1)}{m.group(2)}{m.group(3)}{REDACTED}", text)
