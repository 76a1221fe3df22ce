"""``make demo REPLAY=1``: the quickstart replayed from ``cassettes/quickstart.yaml`` over LiteLLM's HTTP stack.

``make record`` rewrites the cassette from the emulator (gpt-4o-mini's answers below: two for the
weather turn, three for the research turn, whose first reply is a thought).
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
    chat("I should check the current height rather than rely on memory.", model="gpt-4o-mini-2024-07-18"),
    chat(calls=[("call_2", "search", {"query": "Eiffel Tower height"})], model="gpt-4o-mini-2024-07-18"),
    chat(calls=[("call_3", "submit", {"answer": "330 m", "confident": True})], model="gpt-4o-mini-2024-07-18"),
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
        weather, research = quickstart.ask(quickstart.replay_model())
    assert weather.answer == "It is sunny and 21°C in Paris."
    assert weather.metadata.termination_reason == "answered"
    assert (research.answer, research.confident) == ("330 m", True)
    assert research.metadata.termination_reason == "submit"
    assert research.metadata.history.messages[0]["next_thought"].startswith("I should check")
    if not recording:
        assert vcr.all_played
    for r in vcr.requests:
        assert_accepted("openai", json.loads(r.body), r.path)
