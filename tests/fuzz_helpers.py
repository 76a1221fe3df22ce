"""What the boundary fuzzers (``tests/test_fuzz_*.py``) share: the budget, the hang guard, hostile
JSON and the mutation of a valid document.

- ``budget(n)``: ``n`` examples under the ``ci`` Hypothesis profile (the default, derandomized:
  the same examples on every run), the ``fuzz`` profile's own large count under ``make fuzz``.
- ``bounded(fn)``: ``fn()`` in a thread, failing the example when it runs past a generous bound
  (a hang guard only: no assertion depends on the machine's speed).
- ``HOSTILE``: JSON-like values a client or a file can hold, with the shapes that break parsers:
  wrong types, huge and negative numbers, NaN, lone surrogates, keys such as ``__imp_type__``,
  and nesting deeper than Python's recursion limit (a ``Deep`` marker: ``realize`` builds it,
  ``encode`` writes it as JSON).
- ``mutated(doc)``: a valid document with a few nodes replaced, deleted, inserted or nested, so
  that most examples reach deep into a parser instead of failing its first check.
"""

from __future__ import annotations

import copy
import json
import threading
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from hypothesis import settings
from hypothesis import strategies as st

T = TypeVar("T")

HANG_BOUND = 60.0
"""Seconds one example may take before it counts as a hang (far beyond any normal run)."""


def budget(examples: int) -> settings:
    """``examples`` under the ``ci`` profile; under any other (``fuzz``), the profile's count."""
    if settings.get_current_profile_name() == "ci":
        return settings(max_examples=examples)
    return settings()


def bounded(fn: Callable[[], T], seconds: float = HANG_BOUND) -> T:
    """``fn()``, run in a daemon thread; an ``AssertionError`` when it is still running after ``seconds``."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = fn()
        except BaseException as error:  # handed to the caller as it was raised
            box["error"] = error

    thread = threading.Thread(target=target, name="fuzz-example", daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        raise AssertionError(f"the example was still running after {seconds:g} s (a hang)")
    if "error" in box:
        raise box["error"]
    return box["value"]


def nested(depth: int, leaf: Any = 0, kind: str = "list") -> Any:
    """A value ``depth`` containers deep (lists, or dicts under key ``"a"``)."""
    value = leaf
    for _ in range(depth):
        value = [value] if kind == "list" else {"a": value}
    return value


KEYS = st.sampled_from(
    ["", "type", "messages", "role", "content", "id", "name", "args", "__imp_type__", "dspy_imp", "__proto__"]
) | st.text(max_size=6)
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(-3, 3)
    | st.sampled_from([2**63, -(2**63) - 1, 10**30, 1e308, -0.0, float("nan"), float("inf")])
    | st.floats(allow_nan=False, allow_infinity=False, width=32)
    | st.text(max_size=8)
    | st.sampled_from(["", " ", "\udcff", "\x00", "{", "[1,", "null", "\u202e", "a" * 300])
)


class Deep:
    """A value nested ``depth`` deep, written out by ``encode`` (Python's own encoder would recurse)."""

    def __init__(self, depth: int, kind: str) -> None:
        self.depth, self.kind = depth, kind

    def __repr__(self) -> str:
        return f"Deep({self.depth}, {self.kind!r})"


def realize(value: Any) -> Any:
    """``value`` with each ``Deep`` made the nesting it stands for (kept as markers until here, so
    that Hypothesis can print a failing example)."""
    if isinstance(value, Deep):
        return nested(value.depth, 0, value.kind)
    if isinstance(value, dict):
        return {k: realize(v) for k, v in value.items()}
    if isinstance(value, list):
        return [realize(v) for v in value]
    return value


DEEP = st.builds(Deep, st.sampled_from([40, 1200, 5000]), st.sampled_from(["list", "dict"]))


def sometimes_deep(values: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """``values``, and one time in eight a ``Deep`` (more would stop most examples at the first check)."""
    return st.integers(0, 7).flatmap(lambda n: DEEP if n == 0 else values)


HOSTILE = sometimes_deep(
    st.recursive(
        SCALARS,
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(KEYS, inner, max_size=3),
        max_leaves=8,
    )
)
"""Any value a parsed JSON document (or a Python caller) may hand a parser."""

JSONABLE = sometimes_deep(
    st.recursive(
        st.none()
        | st.booleans()
        | st.integers(-(2**70), 2**70)
        | st.floats(allow_nan=False, allow_infinity=False)
        | st.text(st.characters(exclude_categories=["Cs"]), max_size=8)
        | st.sampled_from(["", " ", "\x00", "{", "null", "a" * 300]),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(KEYS, inner, max_size=3),
        max_leaves=8,
    )
)
"""Values strict JSON can carry (no NaN, no lone surrogate; ``Deep`` nesting), for bodies sent over HTTP."""


def encode(value: Any) -> bytes:
    """``value`` as JSON bytes, a ``Deep`` written as its nesting."""

    def text(value: Any) -> str:
        if isinstance(value, Deep):
            opening, closing = ("[", "]") if value.kind == "list" else ('{"a":', "}")
            return opening * value.depth + "0" + closing * value.depth
        if isinstance(value, dict):
            return "{" + ",".join(f"{json.dumps(str(k))}:{text(v)}" for k, v in value.items()) + "}"
        if isinstance(value, list):
            return "[" + ",".join(text(v) for v in value) + "]"
        return json.dumps(value)

    return text(value).encode()


def _slots(doc: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every place in ``doc`` a value sits, as a path of keys and indexes (the root is ``()``), down
    to 12 levels (below that, a deep value inserted by an earlier change)."""
    found = [path]
    if len(path) >= 12:
        return found
    if isinstance(doc, dict):
        for key, value in doc.items():
            found += _slots(value, (*path, key))
    elif isinstance(doc, list):
        for index, value in enumerate(doc):
            found += _slots(value, (*path, index))
    return found


def _at(doc: Any, path: Sequence[Any]) -> Any:
    for key in path:
        doc = doc[key]
    return doc


@st.composite
def mutated(draw: st.DrawFn, doc: Any, values: st.SearchStrategy[Any] = HOSTILE, most: int = 3) -> Any:
    """``doc`` (deep-copied) with one to ``most`` changes, each at a place drawn from the document."""
    holder = [copy.deepcopy(doc)]
    for _ in range(draw(st.integers(1, most))):
        path = (0, *draw(st.sampled_from(_slots(holder[0]))))
        parent, key = _at(holder, path[:-1]), path[-1]
        change = draw(st.sampled_from(["replace", "delete", "insert", "wrap", "empty"]))
        if change == "replace" or (change == "delete" and parent is holder):
            parent[key] = draw(values)
        elif change == "delete":
            del parent[key]
        elif change == "insert":
            target = parent[key]
            if isinstance(target, dict):
                target[draw(KEYS)] = draw(values)
            elif isinstance(target, list):
                target.insert(draw(st.integers(0, len(target))), draw(values))
            else:
                parent[key] = draw(values)
        elif change == "wrap":
            parent[key] = [parent[key]] if draw(st.booleans()) else {"a": parent[key]}
        else:
            parent[key] = type(parent[key])() if isinstance(parent[key], list | dict | str) else None
    return holder[0]
