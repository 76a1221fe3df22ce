"""Wire tests: LiteLLM's traffic is replayed from ``cassettes/wire`` (recorded by ``make record``)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # emulator, responses, scenarios, provider_rules

import media_rules
import provider_rules

media_rules.register(provider_rules.RULES)  # every wire request is checked against the media rules too

CASSETTES = Path(__file__).resolve().parents[2] / "cassettes" / "wire"


_KEPT_HEADERS = ("content-type", "anthropic-beta")


def _scrub(request: Any) -> Any:
    """Keep only what matters for matching and review: no credentials, no client version headers
    (Anthropic's beta header is kept: it changes what the request asks for)."""
    request.headers = {k: v for k, v in request.headers.items() if k.lower() in _KEPT_HEADERS}
    return request


def beta_of(request: Any) -> str | None:
    """A (recorded or live) request's ``anthropic-beta`` header."""
    return next((v for k, v in request.headers.items() if k.lower() == "anthropic-beta"), None)


def _same_beta(live: Any, recorded: Any) -> None:
    assert beta_of(live) == beta_of(recorded), f"anthropic-beta {beta_of(live)!r} != {beta_of(recorded)!r}"


def pytest_recording_configure(config: Any, vcr: Any) -> None:
    vcr.register_matcher("anthropic_beta", _same_beta)


@pytest.fixture(scope="module")
def vcr_config() -> dict[str, Any]:
    return {
        "match_on": ["method", "path", "body", "anthropic_beta"],
        "before_record_request": _scrub,
        "filter_query_parameters": ["key"],
        "allow_playback_repeats": False,
    }


@pytest.fixture(scope="module")
def vcr_cassette_dir() -> str:
    return str(CASSETTES)


@pytest.fixture
def default_cassette_name(request: pytest.FixtureRequest) -> str:
    """One cassette per scenario, shared by the sync and the async run (their requests are the same)."""
    return str(request.node.callspec.params["scenario"].name)
