"""MLflow, OpenInference and the GenAI spans all on, in either import order: each request, each
call and the turn appear once per tracer, and the older tracers' ``dspy_imp.*`` annotations stay.

Runs ``tests/genai_coexist_scenario.py`` in a fresh interpreter per order (the tracers patch DSPy
process-wide), as ``tests/test_tracing.py`` does.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

SCENARIO = Path(__file__).with_name("genai_coexist_scenario.py")
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module", params=["before", "after"])
def turns(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        "MLFLOW_ALLOW_FILE_STORE": "true",
        "MLFLOW_ENABLE_ASYNC_TRACE_LOGGING": "false",
        "MLFLOW_DISABLE_TELEMETRY": "true",
    }
    store = tmp_path_factory.mktemp(f"mlflow-{request.param}")
    result = subprocess.run(
        [sys.executable, str(SCENARIO), request.param, str(store)],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_each_request_appears_once_per_tracer(turns: list[dict[str, Any]], mode: str) -> None:
    (turn,) = [t for t in turns if t["mode"] == mode]
    ours = [s for s in turn["otel"] if s["scope"] == "dspy_imp"]
    theirs = [s for s in turn["otel"] if s["scope"] != "dspy_imp"]
    assert Counter(s["name"] for s in ours) == {"invoke_agent ReActV2": 1, "chat scripted": 2, "execute_tool lookup": 1}
    assert [s["response_id"] for s in ours if s["name"] == "chat scripted"] == ["scripted-1", "scripted-2"]
    assert Counter(s["kind"] for s in theirs)["LLM"] == 2
    assert Counter(s["kind"] for s in theirs)["TOOL"] == 1
    assert Counter(s["type"] for s in turn["mlflow"])["CHAT_MODEL"] == 2
    assert Counter(s["type"] for s in turn["mlflow"])["TOOL"] == 1


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_the_spans_nest_and_the_module_span_keeps_its_annotations(turns: list[dict[str, Any]], mode: str) -> None:
    (turn,) = [t for t in turns if t["mode"] == mode]
    spans = turn["otel"]
    module = spans[0]
    assert module["kind"] == "CHAIN" and module["ending"] == "answered"  # OpenInference's turn span, annotated
    agent = next(i for i, s in enumerate(spans) if s["name"] == "invoke_agent ReActV2")
    assert spans[agent]["parent"] == 0 and spans[agent]["ending"] == "answered"
    for span in spans:
        if span["name"] in ("chat scripted", "execute_tool lookup"):
            assert span["parent"] == agent
        if span["kind"] in ("LLM", "TOOL"):  # OpenInference's request and tool spans sit inside ours
            ancestors = []
            parent = span["parent"]
            while parent is not None:
                ancestors.append(spans[parent]["name"])
                parent = spans[parent]["parent"]
            assert ancestors[-1] == module["name"]
            assert ("chat scripted" if span["kind"] == "LLM" else "execute_tool lookup") in ancestors
    (mlflow_root,) = [s for s in turn["mlflow"] if s["name"] == "ReActV2.forward"]
    assert mlflow_root["type"] == "CHAIN"
