"""``Window``: a slice of an append-only list that is never copied.

A turn's recorded steps only ever grow (the machine appends, never edits), so what a request
saw of them, ``steps[start:stop]`` at that moment, stays true for as long as anyone holds it.
A ``Window`` is that slice without the copy: O(1) to make and to slice again, where copying
the history a few times per request cost each request in proportion to the history.

Two windows on the same list from the same start share their common prefix by construction,
which is what lets the render memo check "these are the steps I rendered" in O(1)
(``same_prefix``).
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Iterator, Sequence
from typing import Any, Generic, TypeVar, overload

T = TypeVar("T")


class Window(Sequence[T], Generic[T]):
    """``items[start:stop]`` of a list that is only ever appended to, as an immutable sequence."""

    __slots__ = ("items", "start", "stop")

    def __init__(self, items: list[T], start: int = 0, stop: int | None = None) -> None:
        self.items = items
        self.start = start
        self.stop = len(items) if stop is None else stop

    def __len__(self) -> int:
        return self.stop - self.start

    @overload
    def __getitem__(self, index: int) -> T: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[T]: ...

    def __getitem__(self, index: int | slice) -> T | Sequence[T]:
        if isinstance(index, slice):
            start, stop, stride = index.indices(len(self))
            if stride != 1:
                return tuple(self)[index]
            return Window(self.items, self.start + start, self.start + max(start, stop))
        position = index + len(self) if index < 0 else index
        if not 0 <= position < len(self):
            raise IndexError("Window index out of range")
        return self.items[self.start + position]

    def __iter__(self) -> Iterator[T]:
        return itertools.islice(self.items, self.start, self.stop)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence) or isinstance(other, str | bytes):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __repr__(self) -> str:
        return f"Window({list(self)!r})"


def same_prefix(steps: Sequence[Any], known: Sequence[Any], source: Any) -> bool:
    """Whether ``steps`` starts with exactly the objects of ``known``.

    ``source`` is the ``(list, start)`` of the window ``known`` was taken from, if it was one:
    a window on the same list from the same start holds the same objects, in O(1). Anything
    else is compared object by object.
    """
    if len(steps) < len(known):
        return False
    if same_source(source_of(steps), source):
        return True
    return all(map(operator.is_, steps, known))


def source_of(steps: Sequence[Any]) -> tuple[list[Any], int] | None:
    """The ``(list, start)`` of a window, which later windows on the same list share; else None."""
    return (steps.items, steps.start) if isinstance(steps, Window) else None


def same_source(a: tuple[list[Any], int] | None, b: tuple[list[Any], int] | None) -> bool:
    """Two windows on the very same list from the same start (so one's prefix is the other's)."""
    return a is not None and b is not None and a[0] is b[0] and a[1] == b[1]
