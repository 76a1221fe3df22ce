"""Traces of real tracers: MLflow autolog (read back from a local file store) and
OpenInference's instrumentor (an in-memory OpenTelemetry exporter), with ``dspy_imp``
imported before and after the tracer is set up.

Each (tracer, order) runs ``tests/tracing_scenario.py`` once in a fresh interpreter (import
order can only be tested there); the tests read the span trees it prints.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from dspy_imp._watch import tracing as _tracing
from dspy_imp._watch.genai_facts import GENAI_ATTRIBUTES, WAIT_DURATION

ROOT = Path(__file__).resolve().parent.parent
SCENARIO = Path(__file__).with_name("tracing_scenario.py")
SETUPS = [("mlflow", "before"), ("mlflow", "after"), ("openinference", "before"), ("openinference", "after")]

READ_ONLY = "Error: delete is not allowed: notes are read-only"
BAD_ARGUMENT = "Error: invalid arguments: topic 7 is not of type 'string'"
UNKNOWN = "Error: there is no tool named peek."


@pytest.fixture(scope="module", params=SETUPS, ids=[f"{t}-{o}" for t, o in SETUPS])
def traced(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tracer, order = request.param
    env = {
        **os.environ,
        "MLFLOW_ALLOW_FILE_STORE": "true",  # MLflow 3 wants a database store; a file store is enough here
        "MLFLOW_ENABLE_ASYNC_TRACE_LOGGING": "false",
        "MLFLOW_DISABLE_TELEMETRY": "true",
        "DO_NOT_TRACK": "true",
    }
    store = [str(tmp_path_factory.mktemp("mlflow"))] if tracer == "mlflow" else []
    done = subprocess.run(
        [sys.executable, str(SCENARIO), tracer, order, *store],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    turns = json.loads(done.stdout)
    return {"tracer": tracer, "turns": {f"{t['turn']}-{t['mode']}": t for t in turns}}


# -- reading a span tree ---------------------------------------------------------------------------


def root(turn: dict[str, Any]) -> dict[str, Any]:
    (span,) = [s for s in turn["spans"] if s["parent"] is None]
    return span


def children(turn: dict[str, Any], parent: dict[str, Any]) -> list[dict[str, Any]]:
    index = turn["spans"].index(parent)
    return [s for s in turn["spans"] if s["parent"] == index]


def label(span: dict[str, Any]) -> str:
    """``request:<kind>`` for a request span, ``tool:<name>`` for a tool span."""
    kind = span["attributes"].get("dspy_imp.request.kind")
    if kind is not None:
        return f"request:{kind}"
    if span["type"] == "TOOL":
        name = span["name"]
        return "tool:" + (name.removeprefix("Tool.") if name.startswith("Tool.") else name.rsplit(".", 1)[0])
    return span["name"]


def story(turn: dict[str, Any]) -> list[tuple[str, str]]:
    return [(label(s), s["status"]) for s in children(turn, root(turn))]


RECOVERED = [
    ("request:step", "OK"),
    ("tool:lookup", "OK"),
    ("tool:delete", "ERROR"),  # refused by the policy
    ("tool:lookup", "ERROR"),  # rejected: bad argument
    ("tool:peek", "ERROR"),  # unknown tool
    ("request:step", "ERROR"),  # the failed step
    ("request:forced_submit", "ERROR"),  # the provider refuses the named tool choice
    ("request:required_retry", "OK"),
    ("tool:submit", "OK"),
]


# -- the recovered turn ------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["sync", "async", "streamed"])
def test_every_request_and_every_call_is_a_child_of_the_turn(traced: dict[str, Any], mode: str) -> None:
    turn = traced["turns"][f"recovered-{mode}"]
    assert turn["termination_reason"] == "forced_submit"
    assert story(turn) == RECOVERED
    suffix = "aforward" if traced["tracer"] == "openinference" and mode == "async" else "forward"
    assert root(turn)["name"] == f"ReActV2.{suffix}"
    assert {s["name"] for s in children(turn, root(turn)) if s["type"] != "TOOL"} == {f"StepPredictor.{suffix}"}


@pytest.mark.parametrize("mode", ["sync", "async", "streamed"])
def test_the_turn_span_says_how_the_turn_ended(traced: dict[str, Any], mode: str) -> None:
    span = root(traced["turns"][f"recovered-{mode}"])
    attributes = span["attributes"]
    assert span["status"] == "OK"
    assert attributes["dspy_imp.termination.reason"] == "forced_submit"
    assert attributes["dspy_imp.termination.cause"] == "prediction_error"
    assert attributes["dspy_imp.termination.complete"] is True
    assert "dspy_imp.termination.error" not in attributes
    assert attributes["dspy_imp.turn.failed_requests"] == {
        "initial": "LMServerError: [openai/scripted] The server had an error while processing your request. "
        "Sorry about that!",
        "forced_submit": "LMInvalidRequestError: [openai/scripted] Invalid tool_choice type: 'object'. "
        "Supported string values: none, auto, required",
    }
    usage = attributes["dspy_imp.usage"]
    assert usage["requests"] == {"step": 2, "forced_submit": 1, "required_retry": 1}
    assert (usage["input_tokens"], usage["output_tokens"], usage["total_tokens"]) == (250, 30, 280)
    if traced["tracer"] == "mlflow":
        assert attributes["mlflow.chat.tokenUsage"] == {"input_tokens": 250, "output_tokens": 30, "total_tokens": 280}
    else:
        assert [attributes[f"llm.token_count.{k}"] for k in ("prompt", "completion", "total")] == [250, 30, 280]
    assert span["outputs"] == {"answer": "Under the mat.", "confidence": 0.9}


def test_refused_rejected_and_unknown_calls_carry_the_observation_the_model_read(traced: dict[str, Any]) -> None:
    turn = traced["turns"]["recovered-sync"]
    tools = [s for s in children(turn, root(turn)) if s["type"] == "TOOL"]
    assert [s["error"] for s in tools] == [None, READ_ONLY, BAD_ARGUMENT, UNKNOWN, None]
    arguments = [s["inputs"] if traced["tracer"] == "mlflow" else s["inputs"]["kwargs"] for s in tools]
    assert arguments == [
        {"topic": "keys"},
        {"topic": "keys"},
        {"topic": 7},
        {},
        {"answer": "Under the mat.", "confidence": 0.9},
    ]
    submit = tools[-1]
    assert submit["outputs"] == {"answer": "Under the mat.", "confidence": 0.9}


def test_request_spans_carry_inputs_without_plumbing_and_lm_children_carry_what_was_sent(
    traced: dict[str, Any],
) -> None:
    turn = traced["turns"]["recovered-sync"]
    requests = [s for s in children(turn, root(turn)) if "dspy_imp.request.kind" in s["attributes"]]
    assert requests[0]["inputs"].keys() == {"question", "history", "tools"}
    assert all(s["inputs"].keys() == {"history", "tools"} for s in requests[1:])
    for request in requests:
        lm_spans = [s for s in turn["spans"] if s["name"].startswith("ScriptedLM.") and _under(turn, s, request)]
        assert len(lm_spans) == 1
        sent = lm_spans[0]["inputs"]
        options = sent if traced["tracer"] == "mlflow" else sent["kwargs"]
        assert sent["messages"][0]["role"] == "system"
        names = [t["function"]["name"] for t in options["tools"]]
        assert names == (["submit"] if request is requests[-1] else ["lookup", "delete", "submit"])
    tool_choices = [_options(turn, r, traced["tracer"])["tool_choice"] for r in requests]
    assert tool_choices == ["auto", "auto", {"type": "function", "function": {"name": "submit"}}, "required"]


def _under(turn: dict[str, Any], span: dict[str, Any], ancestor: dict[str, Any]) -> bool:
    index, target = span["parent"], turn["spans"].index(ancestor)
    while index is not None:
        if index == target:
            return True
        index = turn["spans"][index]["parent"]
    return False


def _options(turn: dict[str, Any], request: dict[str, Any], tracer: str) -> dict[str, Any]:
    (lm_span,) = [s for s in turn["spans"] if s["name"].startswith("ScriptedLM.") and _under(turn, s, request)]
    return lm_span["inputs"] if tracer == "mlflow" else lm_span["inputs"]["kwargs"]


# -- turns that are not a clean answer ----------------------------------------------------------------


def test_an_incomplete_turn_is_marked_incomplete(traced: dict[str, Any]) -> None:
    turn = traced["turns"]["incomplete-sync"]
    span = root(turn)
    assert turn["termination_reason"] == "incomplete"
    assert story(turn) == [
        ("request:step", "OK"),
        ("request:forced_submit", "OK"),
        ("tool:submit", "ERROR"),  # refused by the policy
        ("tool:lookup", "ERROR"),  # not run: the forced submit runs only submit
    ]
    assert span["status"] == "OK"  # the program returned; the attributes say it has no answer
    assert span["attributes"]["dspy_imp.termination.reason"] == "incomplete"
    assert span["attributes"]["dspy_imp.termination.complete"] is False
    assert span["attributes"]["dspy_imp.termination.cause"] == "empty_tool_calls"
    unexecuted = [{"id": "s2", "name": "lookup", "args": {"topic": "keys"}}]
    assert span["attributes"]["dspy_imp.termination.unexecuted_tool_calls"] == unexecuted  # decoded JSON under OTel
    assert [s["error"] for s in children(turn, span)[-2:]] == [
        "Error: submit is not allowed: notes are read-only",
        "lookup was not run: the forced submit request runs only submit.",
    ]


def test_a_step_error_is_an_error_span_with_its_reason(traced: dict[str, Any]) -> None:
    turn = traced["turns"]["step_error-sync"]
    span = root(turn)
    assert turn["raised"] == "StepError"
    assert story(turn) == [("request:step", "ERROR"), ("request:forced_submit", "ERROR")]
    assert span["status"] == "ERROR"
    assert span["attributes"]["dspy_imp.termination.reason"] == "step_error"
    assert span["attributes"]["dspy_imp.termination.complete"] is False
    assert span["attributes"]["dspy_imp.termination.error"].startswith("LMServerError: ")
    assert set(span["attributes"]["dspy_imp.turn.failed_requests"]) == {"initial", "forced_submit"}


def test_docs_list_exactly_the_attributes_we_set():
    """The attributes, and our one metric of our own (the web app's wait for a model slot)."""
    text = (ROOT / "docs" / "observability.md").read_text()
    documented = set(re.findall(r"`(dspy_imp\.[a-z_.]+[a-z_])`", text))
    assert documented == set(_tracing.ATTRIBUTES) | set(GENAI_ATTRIBUTES) | {WAIT_DURATION}
