"""Shared fixtures: every behavioural test runs through the sync and the async driver."""

from __future__ import annotations

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import asyncio
from collections.abc import Callable
from typing import Any

import dspy
import pytest

dspy.configure_cache(enable_disk_cache=False, enable_memory_cache=False)


@pytest.fixture(params=["sync", "async"])
def run(request: pytest.FixtureRequest) -> Callable[..., Any]:
    """``run(agent, **kwargs)``: call the agent through ``forward`` or ``acall``."""

    def call(agent: dspy.Module, **kwargs: Any) -> Any:
        if request.param == "sync":
            return agent(**kwargs)
        return asyncio.run(agent.acall(**kwargs))

    call.mode = request.param  # type: ignore[attr-defined]
    return call


@pytest.fixture(autouse=True)
def _fresh_settings() -> Any:
    """Each test starts with no LM, adapter or callbacks configured."""
    with dspy.context(lm=None, adapter=None, callbacks=[]):
        yield
