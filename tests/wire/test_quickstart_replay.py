"""``make demo REPLAY=1``: the quickstart replayed from ``cassettes/quickstart.yaml`` over LiteLLM's HTTP stack.

``make record`` rewrites the cassette from the emulator (gpt-4o-mini's two answers below).
"""

from __future__ import annotations

import importlib.util
import json
import sys
from contextlib import nullcontext
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from emulator import Emulator
from provider_rules import assert_accepted
from responses import chat

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = [
    chat(calls=[("call_1", "get_weather", {"city": "Paris"})], model="gpt-4o-mini-2024-07-18"),
    chat("It is sunny and 21°C in Paris.", model="gpt-4o-mini-2024-07-18"),
]

pytestmark = pytest.mark.block_network(allowed_hosts=[r"127\.0\.0\.1$"])


def _quickstart() -> ModuleType:
    spec = importlib.util.spec_from_file_location("quickstart", ROOT / "examples" / "quickstart.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("quickstart", module)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def vcr_cassette_dir() -> str:
    return str(ROOT / "cassettes")


@pytest.fixture
def default_cassette_name() -> str:
    return "quickstart"


@pytest.mark.vcr
def test_the_quickstart_replays_from_its_cassette(request: pytest.FixtureRequest, vcr: Any) -> None:
    quickstart = _quickstart()
    recording = request.config.getoption("--record-mode") not in ("none", None)
    with Emulator(SCRIPT, port=18089) if recording else nullcontext():
        pred = quickstart.ask(quickstart.replay_model())
    assert pred.answer == "It is sunny and 21°C in Paris."
    assert pred.metadata.termination_reason == "answered"
    if not recording:
        assert vcr.all_played
    for r in vcr.requests:
        assert_accepted("openai", json.loads(r.body), r.path)
