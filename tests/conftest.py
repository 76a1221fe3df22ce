"""Shared fixtures: every behavioural test runs through the sync and the async driver."""

from __future__ import annotations

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import asyncio
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import dspy
import pytest
from hypothesis import HealthCheck, settings
from hypothesis.database import DirectoryBasedExampleDatabase

dspy.configure_cache(enable_disk_cache=False, enable_memory_cache=False)

# Hypothesis profiles (docs/fuzzing.md). ``ci``, the default: derandomized (the same examples on
# every run and machine), no example database (derandomize implies none; the regressions are
# explicit ``@example``s), each suite's small budget (``fuzz_helpers.budget``). ``fuzz`` (``make
# fuzz``, or ``HYPOTHESIS_PROFILE=fuzz``): a random seed each run (printed with a failure), many
# examples, and failures kept in .hypothesis/fuzz to be replayed first on the next run. No deadline
# in either: a hang is caught by each property's own generous bound (``fuzz_helpers.bounded``).
_SLOW = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example]
settings.register_profile("ci", derandomize=True, deadline=None, print_blob=True, suppress_health_check=_SLOW)
settings.register_profile(
    "fuzz",
    deadline=None,
    print_blob=True,
    max_examples=int(os.environ.get("DSPY_IMP_FUZZ_EXAMPLES", "2000")),
    database=DirectoryBasedExampleDatabase(os.path.join(os.path.dirname(__file__), "..", ".hypothesis", "fuzz")),
    suppress_health_check=_SLOW,
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture(params=["sync", "async"])
def run(request: pytest.FixtureRequest) -> Callable[..., Any]:
    """``run(agent, **kwargs)``: call the agent through ``forward`` or ``acall``."""

    def call(agent: dspy.Module, **kwargs: Any) -> Any:
        if request.param == "sync":
            return agent(**kwargs)
        return asyncio.run(agent.acall(**kwargs))

    call.mode = request.param  # type: ignore[attr-defined]
    return call


@pytest.fixture(params=["sync", "async"])
def how(request: pytest.FixtureRequest) -> str:
    """Streaming: ``"sync"`` streams a sync program to a sync generator (``async_streaming=False``),
    ``"async"`` streams ``acall`` to an async generator."""
    return request.param


@pytest.fixture(autouse=True)
def _fresh_settings() -> Any:
    """Each test starts with no LM, adapter or callbacks configured."""
    with dspy.context(lm=None, adapter=None, callbacks=[]):
        yield


@pytest.fixture(autouse=True)
def _close_litellm_event_loop() -> Iterator[None]:
    """Close the event loop LiteLLM's sync path leaves installed in the main thread.

    ``litellm._service_logger`` calls ``asyncio.get_event_loop()``, which creates and installs
    a loop that nothing closes; the next ``asyncio.run`` uninstalls it and the garbage
    collector then reports an unclosed loop (a ResourceWarning: an error here).
    """
    yield
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            loop = asyncio.get_event_loop_policy().get_event_loop()
        except RuntimeError:  # no loop installed
            return
    if not loop.is_running():
        loop.close()
        asyncio.set_event_loop(None)


@pytest.fixture
def fake_clock(monkeypatch: pytest.MonkeyPatch) -> Any:
    """The deadline's clock, moved by the test (``helpers.FakeClock``), never by the machine's speed."""
    from helpers import FakeClock

    return FakeClock().install(monkeypatch)


@pytest.fixture(scope="session")
def postgres() -> Iterator[Any]:
    """A throwaway Postgres server on 127.0.0.1 for this test process (``postgres_server.py``);
    each test takes a fresh database of its own with ``postgres.database(name)``."""
    from postgres_server import start

    server, reason = start()
    if server is None:
        pytest.skip(f"Postgres tests skipped: {reason}")
    yield server
    server.stop()
