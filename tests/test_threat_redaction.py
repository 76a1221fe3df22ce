"""Redaction is linear time by construction, and hides URL passwords (issue 23, point 5).

No timing is asserted: the finders' repeats are checked to be bounded (trying one at a position
costs a constant), and adversarial inputs that a backtracking pattern takes minutes on are
redacted here correctly. ``benchmarks/redaction.py`` measures 1 MB of each shape.
"""

from __future__ import annotations

import re
from re import _constants as sre_constants  # type: ignore[attr-defined]
from re import _parser as sre_parse  # type: ignore[attr-defined]
from typing import Any

import dspy
import pytest

import dspy_imp
from benchmarks.redaction import shapes
from dspy_imp._records import redact
from dspy_imp.testing import ScriptedLM, fail

_REPEATS = {sre_constants.MAX_REPEAT, sre_constants.MIN_REPEAT, sre_constants.POSSESSIVE_REPEAT}


def _unbounded(parsed: Any) -> list[str]:
    """Every repeat without an upper bound in a parsed pattern (nested groups, branches, lookarounds)."""
    found = []
    for op, av in parsed:
        if op in _REPEATS:
            low, high, sub = av
            if high == sre_constants.MAXREPEAT:
                found.append(f"{op} {{{low},}}")
            found += _unbounded(sub)
        elif op == sre_constants.SUBPATTERN:
            found += _unbounded(av[3])
        elif op == sre_constants.BRANCH:
            for branch in av[1]:
                found += _unbounded(branch)
        elif op in (sre_constants.ASSERT, sre_constants.ASSERT_NOT):
            found += _unbounded(av[1])
    return found


@pytest.mark.parametrize("index", range(len(redact.SHAPES)))
def test_every_finder_has_only_bounded_repeats_and_reads_runs_without_backtracking(index):
    shape = redact.SHAPES[index]
    assert _unbounded(sre_parse.parse(shape.finder.pattern, shape.finder.flags)) == []
    runs = [shape.extend] if shape.extend is not None else []
    runs += [rest for _sep, _first, rest in shape.tails]
    for run in runs:  # one character class, read forward: nothing after it to backtrack for
        ((op, av),) = sre_parse.parse(run.pattern)
        assert op == sre_constants.MAX_REPEAT and av[0] == 0 and len(av[2]) == 1
        assert av[2][0][0] in (sre_constants.IN, sre_constants.NOT_LITERAL, sre_constants.LITERAL)


def test_the_key_name_reader_has_no_repeat_at_all():
    assert _unbounded(sre_parse.parse(redact._SECRET_NAME.pattern, redact._SECRET_NAME.flags)) == []


def test_adversarial_texts_that_backtracking_patterns_take_minutes_on_are_redacted_correctly():
    # 64 KB each: the patterns before issue 23 took ~6 s on 8 KB of "a." and four times as long per doubling.
    whole = {"key_colons": "password:[REDACTED]", "key_prefixes": "[REDACTED]", "aws_prefixes": "[REDACTED]"}
    for name, text in shapes(64_000).items():  # sk-sk-... and AKIAAKIA... are one key-shaped run each
        assert redact.redact_text(text) == whole.get(name, text), name


def test_a_long_secret_is_hidden_whole_not_only_its_first_characters():
    secret = "sk-" + "A" * 100_000
    assert redact.redact_text(f"key {secret} end") == "key [REDACTED] end"
    token = "eyJ" + "a" * 5000 + "." + "b" * 5000 + "." + "c" * 5000
    assert redact.redact_text(f"jwt {token}.") == "jwt [REDACTED]."
    assert redact.redact_text("password=" + "x" * 50_000 + " next") == "password=[REDACTED] next"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("postgresql://app:secret@db:5432/orders", "postgresql://app:[REDACTED]@db:5432/orders"),
        ("dsn=redis://:hunter2@cache/0 ok", "dsn=redis://:[REDACTED]@cache/0 ok"),
        ("https://user@example.com/path", "https://user@example.com/path"),  # a user, no password
        ("see https://example.com:8080/x", "see https://example.com:8080/x"),  # a port is not a password
    ],
)
def test_passwords_in_urls_are_hidden(text, expected):
    assert redact.redact_text(text) == expected


def test_an_uppercase_key_and_text_whose_lowercase_is_longer_still_redact_at_the_right_place():
    assert redact.redact_text("İ CLIENT_SECRET=abcdef İ") == "İ CLIENT_SECRET=[REDACTED] İ"


def test_a_failed_request_echoing_a_url_password_is_redacted_in_the_termination_error(run):
    def done() -> str:
        """Finish."""
        return "done"

    agent = dspy_imp.ReActV2("intent -> answer", finish="tools", tools=[done], finish_on={"done": lambda *_: None})
    text = "could not reach postgresql://app:s3cret-pw@db/x; " + "a." * 1000
    lm = ScriptedLM([fail.invalid_request(text), fail.invalid_request(text)])
    with dspy.context(lm=lm):
        pred = run(agent, intent="hello")
    errors = " ".join(pred.metadata.termination_error.values())
    assert "s3cret-pw" not in errors
    assert re.search(r"app:\[REDACTED\]@db", errors)


def test_the_benchmark_measures_every_shape():
    from benchmarks.redaction import measure

    rows = measure(2_000)  # tiny: the benchmark itself runs 1 MB each (no timing asserted here)
    assert [row["shape"] for row in rows] == list(shapes(2_000))
    assert all(float(row["seconds"]) >= 0 for row in rows)
