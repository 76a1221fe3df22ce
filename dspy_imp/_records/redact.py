"""Credential-shaped values hidden from text meant for logs and metadata.

Two kinds of detectors, both offline and deterministic:

- *Key names*: ``is_secret_key`` reads a name in any common spelling (``client_secret``,
  ``clientSecret``, ``client-secret``, ``X-Api-Key``, ``aws_secret_access_key``) by its last
  words; ``redact_text`` finds ``name=value``, ``name: value`` and ``"name": "value"``
  (also inside JSON written into a string, escaped quotes included) and hides the value.
- *Value shapes*: provider key prefixes (``sk-``, ``AKIA``, ``ghp_``, ``xox?-``), JWTs, and
  HTTP auth schemes (``Bearer``, ``Basic``, ``Digest``, ``Token``...) followed by a credential.

detect-secrets (Yelp) was considered: its detectors report findings per line for a scanner,
behind process-wide plugin settings, not a redactor for values embedded in arbitrary text,
so the few shapes that matter here are kept as the patterns below (see docs/decisions.md).
"""

from __future__ import annotations

import re

REDACTED = "[REDACTED]"


# The last words of a name that holds a secret: ``access_token``, ``accessToken``, ``secret_key``,
# ``private-key``, ``aws_secret_access_key``, ``Authorization``. ``max_tokens`` (plural) is not one.
_SECRET_TAIL = (
    r"api[_\-]?key|apikey|token|secret|secret[_\-]?key|password|passwd|passphrase|pwd|authorization|"
    r"credentials?|private[_\-]?key|access[_\-]?key|session[_\-]?key|cookie"
)


_SECRET_NAME = re.compile(rf"(?:^|[_\-.\s]|(?<=[a-z0-9]))(?:{_SECRET_TAIL})$", re.IGNORECASE)


_AUTH_SCHEMES = r"Bearer|bearer|Basic|Digest|Token|Negotiate|NTLM|ApiKey|AWS4-HMAC-SHA256"  # as headers spell them


_SHAPES = (
    re.compile(r"\b(sk|pk|rk|ak)-[A-Za-z0-9_\-]{8,}"),
    re.compile(r"\b(AKIA|ASIA)[A-Z0-9]{12,}\b"),
    re.compile(r"\bgh[pousr]_[A-Za-z0-9]{20,}\b"),
    re.compile(r"\bxox[abprs]-[A-Za-z0-9\-]{10,}"),
    re.compile(r"\beyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}"),
)


_SCHEME = re.compile(rf"\b({_AUTH_SCHEMES})\s+(?!\[REDACTED\])[A-Za-z0-9._~+/=\-:]{{8,}}")


# name, closing quote(s), separator, opening quote(s), value (up to a quote, space or delimiter).
_ASSIGNMENT = re.compile(
    rf"(?i)\b([A-Za-z0-9_\-.]*?(?:{_SECRET_TAIL}))(\\?[\"']?\s*[=:]\s*\\?[\"']?)"
    rf"(?!\[REDACTED\])(?!(?:{_AUTH_SCHEMES})\s)([^\s\"'\\,;&}}\]]{{4,}})"
)


def is_secret_key(name: str) -> bool:
    """Whether a dict key names a secret, in snake, camel or kebab case."""
    return bool(_SECRET_NAME.search(name.strip()))


def redact_text(text: str) -> str:
    """``text`` with credential-looking substrings replaced by ``[REDACTED]``."""
    for pattern in _SHAPES:
        text = pattern.sub(REDACTED, text)
    text = _SCHEME.sub(REDACTED, text)
    return _ASSIGNMENT.sub(lambda m: f"{m.group(1)}{m.group(2)}{REDACTED}", text)
