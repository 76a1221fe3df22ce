"""A context variable set for one block: the one shape of ``observing``, ``calling`` and the like."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar
from typing import TypeVar

T = TypeVar("T")


@contextlib.contextmanager
def scoped(variable: ContextVar[T], value: T) -> Iterator[None]:
    """Set ``variable`` to ``value`` for the block (and the tasks and copied contexts it starts)."""
    token = variable.set(value)
    try:
        yield
    finally:
        variable.reset(token)
