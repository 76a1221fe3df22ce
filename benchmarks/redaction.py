"""Redaction: seconds to redact 1 MB of each adversarial shape (linear time; target under 1 s each).

The shapes are the inputs a backtracking pattern is slow on: runs of name characters broken by
dots or dashes (where every word boundary could start a secret key's name), UUIDs, repeated key
words with and without separators, JWT-looking prefixes without their dots, auth schemes, URL
authorities, and long whitespace after a key word. Run: ``python -m benchmarks.redaction``.
"""

from __future__ import annotations

import json
import sys
import time

from dspy_imp._records.redact import redact_text

SIZE = 1_000_000
TARGET_S = 1.0


def shapes(size: int = SIZE) -> dict[str, str]:
    """Adversarial texts of about ``size`` characters each."""
    units = {
        "dotted": "a.",
        "dashed": "a-",
        "uuid": "123e4567-e89b-12d3-a456-426614174000",
        "uuid_spaced": "123e4567-e89b-12d3-a456-426614174000 ",
        "key_words": "password token secret ",
        "key_colons": "password:",
        "jwt_prefixes": "eyJ-",
        "schemes": "Bearer ",
        "url_authorities": "://a:",
        "key_prefixes": "sk-",
        "aws_prefixes": "AKIA",
    }
    texts = {name: unit * (size // len(unit)) for name, unit in units.items()}
    texts["space_after_key"] = "token" + " " * (size - 5)
    return texts


def measure(size: int = SIZE) -> list[dict[str, float | str]]:
    rows: list[dict[str, float | str]] = []
    for name, text in shapes(size).items():
        started = time.perf_counter()
        redact_text(text)
        rows.append({"shape": name, "chars": len(text), "seconds": time.perf_counter() - started})
    return rows


def main() -> int:
    rows = measure()
    for row in rows:
        print(f"{row['shape']:>16}  {row['chars']:>9,} chars  {row['seconds']:.3f} s")
    slow = [row for row in rows if float(row["seconds"]) >= TARGET_S]
    print(json.dumps({"target_s": TARGET_S, "over_target": [row["shape"] for row in slow]}))
    return 1 if slow else 0


if __name__ == "__main__":
    sys.exit(main())
