"""One effect's I/O as the drivers perform it: a ``Job`` run sync (``outcome``) or async (``aoutcome``)."""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

from dspy_imp._drivers.adapter import Exchange


@dataclass
class Job:
    """One effect's I/O, sync and async, and what to send back to the machine."""

    run: Callable[[], Any]
    arun: Callable[[], Awaitable[Any]]
    done: Callable[[Any], Any]
    failed: Callable[[Exception], Any]
    scope: Callable[[], AbstractContextManager[Any]] = contextlib.nullcontext
    exchange: Exchange | None = None
    catches: Callable[[BaseException], bool] = lambda error: isinstance(error, Exception)
    """Which errors of ``run`` are its failure; a tool's may be ``BaseException``s (``interrupts``)."""
    lm_calls: Callable[[], Any] = tuple
    """The LM's history entries of a request, once it ran (response model and id for its GenAI span)."""


def outcome(job: Job) -> Any:
    """What the machine is sent: ``done`` of the value, ``failed`` of a caught error."""
    with job.scope():
        try:
            value = job.run()
        except BaseException as exc:
            if not job.catches(exc):
                raise
            return job.failed(exc)  # type: ignore[arg-type]
    return job.done(value)


async def aoutcome(job: Job) -> Any:
    """``outcome``, awaiting ``arun``."""
    with job.scope():
        try:
            value = await job.arun()
        except BaseException as exc:
            if not job.catches(exc):
                raise
            return job.failed(exc)  # type: ignore[arg-type]
    return job.done(value)


def same(value: Any) -> Any:
    return value


def nothing(_: Any) -> None:
    return None


def reraise(error: Exception) -> Any:
    raise error
