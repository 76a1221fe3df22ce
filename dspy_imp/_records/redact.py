"""Credential-shaped values hidden from text meant for logs and metadata.

Two kinds of detectors, both offline and deterministic:

- *Key names*: ``is_secret_key`` reads a name in any common spelling (``client_secret``,
  ``clientSecret``, ``client-secret``, ``X-Api-Key``, ``aws_secret_access_key``) by its last
  words; ``redact_text`` finds ``name=value``, ``name: value`` and ``"name": "value"``
  (also inside JSON written into a string, escaped quotes included) and hides the value.
- *Value shapes*: provider key prefixes (``sk-``, ``AKIA``, ``ghp_``, ``xox?-``), JWTs,
  HTTP auth schemes (``Bearer``, ``Basic``, ``Digest``, ``Token``...) followed by a credential,
  and the password of a URL (``postgresql://app:secret@db``).

Linear time, by construction. Redaction runs inside a turn (on failed requests' error texts,
which echo the prompt) and on results of any size, so no pattern may backtrack over its input.
Each detector is a ``_Shape``: a *finder* regex whose repeats are all bounded (``{m,n}``, never
``*``, ``+`` or ``{m,}``), so trying it at one position costs a constant, and then plain runs of
one character class read forward from the match (``extend``, ``tails``), which never backtrack.
A run that fails a tail is skipped whole: every finder match inside it would fail the same way.
The name before a secret key's tail (``client_`` in ``client_secret``) is never matched at all:
the finder starts at the tail, so a long run of name characters is read once.
``tests/test_threat_history.py`` checks the bound on every finder; ``benchmarks/redaction.py``
measures 1 MB of each adversarial shape.

detect-secrets (Yelp) was considered: its detectors report findings per line for a scanner,
behind process-wide plugin settings, not a redactor for values embedded in arbitrary text,
so the few shapes that matter here are kept as the patterns below (see docs/decisions.md).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

REDACTED = "[REDACTED]"

# The last words of a name that holds a secret: ``access_token``, ``accessToken``, ``secret_key``,
# ``private-key``, ``aws_secret_access_key``, ``Authorization``. ``max_tokens`` (plural) is not one.
_SECRET_TAIL = (
    r"api[_\-]?key|apikey|token|secret|secret[_\-]?key|password|passwd|passphrase|pwd|authorization|"
    r"credentials?|private[_\-]?key|access[_\-]?key|session[_\-]?key|cookie"
)
# The same words as a prefix tree, lower case: the assignment finder runs on the lowered text,
# where a case-sensitive alternation that branches on its first letter is an order faster.
_TAIL_TREE = (
    r"a(?:pi[_\-]?key|pikey|uthorization|ccess[_\-]?key)|token|"
    r"se(?:cret(?:[_\-]?key)?|ssion[_\-]?key)|p(?:ass(?:word|wd|phrase)|wd|rivate[_\-]?key)|c(?:redentials?|ookie)"
)
_SECRET_NAME = re.compile(rf"(?:^|[_\-.\s]|(?<=[a-z0-9]))(?:{_SECRET_TAIL})$", re.IGNORECASE)
_AUTH_SCHEMES = r"Bearer|bearer|Basic|Digest|Token|Negotiate|NTLM|ApiKey|AWS4-HMAC-SHA256"  # as headers spell them
_KEY_CHAR = r"[A-Za-z0-9_\-]"
_VALUE_CHAR = r"[^\s\"'\\,;&}\]]"  # a value runs up to a quote, a space or a delimiter
_SCHEME_CHAR = r"[A-Za-z0-9._~+/=\-:]"


@dataclass(frozen=True)
class _Shape:
    """One detector: the secret is group ``secret`` of the finder, extended by ``extend`` and ``tails``.

    ``extend`` is one character class read forward from the finder's end; each tail is a
    separator, then at least ``n`` characters of a class, read forward the same way.
    ``lower``: the finder runs on the lowered text (same offsets), for case-blind names.
    """

    finder: re.Pattern[str]
    extend: re.Pattern[str] | None = None
    tails: tuple[tuple[str, re.Pattern[str], re.Pattern[str]], ...] = ()
    lower: bool = False
    needles: tuple[str, ...] = ()
    """Literals every match holds: a text holding none is skipped at ``str.find`` speed."""

    def sub(self, text: str, lowered: str | None) -> str:
        scanned = lowered if self.lower and lowered is not None else text
        if self.needles and not any(needle in scanned for needle in self.needles):
            return text
        out: list[str] = []
        pos = last = 0
        while (match := self.finder.search(scanned, pos)) is not None:
            end = self._end(text, match.end())
            if end is None:
                pos = max(self._run_end(text, match.end()), match.start() + 1)
                continue
            out += [text[last : match.start("secret")], REDACTED]
            last = pos = end
        return text if not out else "".join([*out, text[last:]])

    def _end(self, text: str, end: int) -> int | None:
        if self.extend is not None:
            end = _run(self.extend, text, end)
        for separator, first, rest in self.tails:
            if not text.startswith(separator, end) or first.match(text, end + len(separator)) is None:
                return None
            end = _run(rest, text, end + len(separator))
        return end

    def _run_end(self, text: str, end: int) -> int:
        """Where the run a failed match read ends: no finder match before it can succeed."""
        if self.extend is not None:
            end = _run(self.extend, text, end)
        for separator, _first, rest in self.tails:
            if not text.startswith(separator, end):
                break
            end = _run(rest, text, end + len(separator))
        return end


def _run(pattern: re.Pattern[str], text: str, start: int) -> int:
    found = pattern.match(text, start)
    return start if found is None else found.end()


def _shape(
    finder: str,
    extend: str = "",
    tails: tuple[tuple[str, str, int], ...] = (),
    lower: bool = False,
    needles: tuple[str, ...] = (),
) -> _Shape:
    return _Shape(
        re.compile(finder),
        re.compile(f"{extend}*") if extend else None,
        tuple((sep, re.compile(f"{cls}{{{n}}}"), re.compile(f"{cls}*")) for sep, cls, n in tails),
        lower,
        needles,
    )


_LOWER_SCHEMES = _AUTH_SCHEMES.lower()
SHAPES: tuple[_Shape, ...] = (
    _shape(rf"\b(?P<secret>(?:sk|pk|rk|ak)-{_KEY_CHAR}{{8}})", _KEY_CHAR, needles=("sk-", "pk-", "rk-", "ak-")),
    _shape(r"\b(?P<secret>(?:AKIA|ASIA)[A-Z0-9]{12})", "[A-Z0-9]", needles=("AKIA", "ASIA")),
    _shape(r"\b(?P<secret>gh[pousr]_[A-Za-z0-9]{20})", "[A-Za-z0-9]", needles=tuple(f"gh{c}_" for c in "pousr")),
    _shape(r"\b(?P<secret>xox[abprs]-[A-Za-z0-9\-]{10})", r"[A-Za-z0-9\-]", needles=("xox",)),
    _shape(
        rf"\b(?P<secret>eyJ{_KEY_CHAR}{{8}})", _KEY_CHAR, ((".", _KEY_CHAR, 8), (".", _KEY_CHAR, 8)), needles=("eyJ",)
    ),
    _shape(
        rf"\b(?P<secret>(?:{_AUTH_SCHEMES})\s{{1,16}}(?!\[REDACTED\]){_SCHEME_CHAR}{{8}})",
        _SCHEME_CHAR,
        needles=tuple(_AUTH_SCHEMES.split("|")),
    ),
    # name tail, closing quote(s), separator, opening quote(s), then the value (not a scheme's word).
    _shape(
        rf"(?:{_TAIL_TREE})\\?[\"']?\s{{0,16}}[=:]\s{{0,16}}\\?[\"']?(?!\[redacted\])(?!(?:{_LOWER_SCHEMES})\s)"
        rf"(?P<secret>{_VALUE_CHAR}{{4}})",
        _VALUE_CHAR,
        lower=True,
        needles=("=", ":"),
    ),
    _shape(r"://[^\s:/@]{0,128}:(?P<secret>[^\s/@]{1,128})(?=@)", needles=("://",)),  # scheme://user:password@host
)


def is_secret_key(name: str) -> bool:
    """Whether a dict key names a secret, in snake, camel or kebab case."""
    return bool(_SECRET_NAME.search(name.strip()))


def redact_text(text: str) -> str:
    """``text`` with credential-looking substrings replaced by ``[REDACTED]``; linear in ``len(text)``."""
    for shape in SHAPES:
        lowered = None
        if shape.lower and ("=" in text or ":" in text):
            lowered = text.lower()
            if len(lowered) != len(text):  # a character whose lower case is longer: offsets would shift
                lowered = _ascii_lower(text)
        text = shape.sub(text, lowered)
    return text


def _ascii_lower(text: str) -> str:
    return text.translate(_ASCII_LOWER)


_ASCII_LOWER = {code: code + 32 for code in range(ord("A"), ord("Z") + 1)}
