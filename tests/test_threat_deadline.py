"""Issue 9, holes 3, 9, 11, 12: no request leaves after the deadline; the last faults of the wire.

The deadline is read again right before a request leaves (after rendering, a slow
``tool_result_renderer``, LiteLLM's cold import, and for DSPy's JSON fallback request), so
every request arrives before the deadline's end. Each HTTP test runs on both ``dspy.LM``
engines against ``tests/fake_openai_server.py`` and compares the server's recorded arrival
times with the deadline's end (recorded timestamps, never wall time).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import dspy
import pytest
from fake_openai_server import FakeOpenAIServer, HTTPReply, error_body, text_completion, tool_calls_completion
from helpers import TA, Look, SubmitSig

import dspy_imp
import dspy_imp._records.clock as deadline_state
import dspy_imp._routes.warmup as warmup
from dspy_imp.testing import ScriptedLM, call, fail, reply

pytestmark = pytest.mark.block_network(allowed_hosts=[r"127\.0\.0\.1$"])

WITHIN = 0.5
SLOW = 1.2  # on the test's clock (``fake_clock``): it passes the deadline however busy the machine is
ENGINES = ["auto", "litellm"]


@contextlib.contextmanager
def serving(script: list[Any], engine: str, model: str = "openai/gpt-4o-mini") -> Iterator[FakeOpenAIServer]:
    """The fake server, with a ``dspy.LM`` on ``engine`` pointed at it configured."""
    with FakeOpenAIServer(script) as server:
        lm = dspy.LM(model, api_base=server.base_url, api_key="sk-test", cache=False, num_retries=0, engine=engine)
        with dspy.context(lm=lm):
            yield server


@pytest.fixture(autouse=True, scope="module")
def _litellm_imported() -> None:
    """LiteLLM's cold import (seconds) is paid once here, so that these deadlines measure the loop.

    ``test_litellms_cold_import_happens_before_the_last_deadline_check`` measures the cold import
    itself, in a fresh process.
    """
    warmup.warm_litellm()


@pytest.fixture
def sleeps(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[float]]:
    """The loop's own retry pauses (the ``Sleep`` effects the drivers perform), recorded, not slept."""
    seen: list[float] = []

    async def asleep(seconds: float) -> None:
        seen.append(seconds)

    monkeypatch.setattr(deadline_state, "sleep", seen.append)
    monkeypatch.setattr(deadline_state, "asleep", asleep)
    yield seen


@pytest.fixture
def clocked(fake_clock: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The test's clock, which the fake server reads too (arrival times, a reply's delay)."""
    import fake_openai_server

    monkeypatch.setattr(fake_openai_server, "time", fake_clock)
    return fake_clock


def slow_renderer(clock: Any) -> Any:
    def render(call: Any, result: Any) -> str:
        clock.advance(SLOW)
        return str(result.value)

    return render


def assert_out_of_time(pred: Any) -> None:
    meta = pred.metadata
    assert (meta.termination_reason, meta.termination_cause) == ("incomplete", "deadline_exceeded")


# -- hole 11: the deadline's bounds ------------------------------------------------------------------


@pytest.mark.parametrize(
    "bounds",
    [
        pytest.param({"seconds": math.nan}, id="seconds-nan"),
        pytest.param({"seconds": math.inf}, id="seconds-inf"),
        pytest.param({"seconds": -math.inf}, id="seconds-minus-inf"),
        pytest.param({"seconds": 1e308}, id="seconds-1e308"),
        pytest.param({"at": math.nan}, id="at-nan"),
        pytest.param({"at": math.inf}, id="at-inf"),
        pytest.param({"at": time.monotonic() + 1e12}, id="at-monotonic-far"),
        pytest.param({"at": datetime.now(UTC) + timedelta(days=365 * 50)}, id="at-datetime-far"),
    ],
)
def test_a_deadline_that_is_not_a_usable_time_is_refused_at_deadline(bounds):
    name = next(iter(bounds))
    refused = pytest.raises(dspy_imp.ConfigurationError, match=f"deadline `{name}` must be a finite time")
    with refused, dspy_imp.deadline(**bounds):
        pass  # pragma: no cover - never entered


# -- hole 3: checked right before the send ---------------------------------------------------------


def test_a_slow_tool_result_renderer_uses_up_the_time_and_no_request_leaves(run, fake_clock):
    arrivals: list[float] = []

    def answer(item: Any) -> Any:
        return lambda request: (arrivals.append(fake_clock.now), item)[1]

    lm = ScriptedLM([answer(reply(calls=[call("look", {}, id="c1")])), answer(reply("late"))])
    agent = dspy_imp.ReActV2(TA, tools=[Look()], tool_result_renderer=slow_renderer(fake_clock))
    with dspy.context(lm=lm), dspy_imp.deadline(seconds=WITHIN):
        end = deadline_state._end()
        pred = run(agent, intent="Look.")

    assert_out_of_time(pred)
    assert len(lm.requests) == 1 and arrivals[0] <= end  # type: ignore[operator]
    assert pred.metadata.history.messages[0]["tool_call_results"][0]["result"] == {"seen": True}


@pytest.mark.parametrize("engine", ENGINES)
def test_a_slow_renderer_over_http_sends_nothing_after_the_deadline(run, engine, clocked):
    script = [tool_calls_completion([("c1", "look", {"where": "desk"})]), text_completion("late")]
    agent = dspy_imp.ReActV2(TA, tools=[Look()], tool_result_renderer=slow_renderer(clocked))
    with serving(script, engine) as server, dspy_imp.deadline(seconds=WITHIN):
        end = deadline_state._end()
        pred = run(agent, intent="Look.")
    assert_out_of_time(pred)
    assert len(server.requests) == 1
    assert all(r.received_at <= end for r in server.requests)  # type: ignore[operator]


UNREADABLE = "[[ ## answer ## ]]\nhm\n\n[[ ## tool_calls ## ]]\n42\n\n[[ ## completed ## ]]"


def test_dspys_json_fallback_request_never_leaves_after_the_deadline(run, fake_clock):
    late = reply('{"answer": "late", "tool_calls": []}')
    lm = ScriptedLM([fake_clock.after(SLOW, reply(UNREADABLE)), late], native=False)
    with dspy.context(lm=lm), dspy_imp.deadline(seconds=WITHIN):
        pred = run(dspy_imp.ReActV2(TA, tools=[Look()]), intent="what?")
    assert_out_of_time(pred)
    assert len(lm.requests) == 1  # the fallback was not sent, and no answer of it was used
    assert pred.answer is None


@pytest.mark.parametrize("engine", ENGINES)
def test_dspys_json_fallback_over_http_never_leaves_after_the_deadline(run, engine, clocked):
    script = [HTTPReply(text_completion(UNREADABLE), delay=SLOW), text_completion('{"answer": "late"}')]
    written = "openai/local-model"  # no native function calling: calls are written, and can be unreadable
    with serving(script, engine, written) as server, dspy_imp.deadline(seconds=WITHIN):
        end = deadline_state._end()
        pred = run(dspy_imp.ReActV2(TA, tools=[Look()]), intent="what?")
    assert_out_of_time(pred)
    assert len(server.requests) == 1
    assert server.requests[0].received_at <= end  # type: ignore[operator]


COLD_IMPORT = textwrap.dedent(
    """
    import json, sys, time
    sys.path.insert(0, "tests")
    import dspy, dspy_imp
    import dspy_imp._records.clock as state
    from fake_openai_server import FakeOpenAIServer, text_completion
    dspy.configure_cache(enable_disk_cache=False, enable_memory_cache=False)
    assert "litellm" not in sys.modules or not hasattr(sys.modules["litellm"], "completion")
    with FakeOpenAIServer([text_completion("hi")]) as server:
        lm = dspy.LM("openai/gpt-4o-mini", api_base=server.base_url, api_key="sk-test", cache=False,
                     num_retries=0, engine="litellm")
        with dspy.context(lm=lm), dspy_imp.deadline(seconds=0.5):
            end = state._end()
            pred = dspy_imp.ReActV2("question -> answer")(question="hi")
        print(json.dumps({"arrivals": [r.received_at for r in server.requests], "end": end,
                          "reason": pred.metadata.termination_reason, "cause": pred.metadata.termination_cause}))
    """
)


def test_litellms_cold_import_happens_before_the_last_deadline_check(tmp_path: Path):
    """A fresh process: the first ``engine="litellm"`` call pays LiteLLM's import (seconds)."""
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    done = subprocess.run(
        [sys.executable, "-c", COLD_IMPORT], capture_output=True, text=True, env=env, timeout=600, check=False
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert all(arrival <= seen["end"] for arrival in seen["arrivals"])
    if seen["arrivals"]:  # a fast machine imported LiteLLM in time: the request left before the end
        assert seen["reason"] == "answered"
    else:
        assert (seen["reason"], seen["cause"]) == ("incomplete", "deadline_exceeded")


# -- hole 9: a content-filtered extraction reply ----------------------------------------------------


def forced_then_extraction(extraction: Any) -> list[Any]:
    return [reply(calls=[call("look", {}, id="c1")]), reply("I would rather explain."), extraction]


def test_a_content_filtered_extraction_reply_raises_step_error(run):
    lm = ScriptedLM(forced_then_extraction(reply("", finish_reason="content_filter")))
    agent = dspy_imp.ReActV2(SubmitSig, tools=[Look()], max_iters=1)
    with dspy.context(lm=lm), pytest.raises(dspy_imp.StepError) as caught:
        run(agent, intent="hello")
    assert "content filter stopped the extraction reply" in str(caught.value.reason)
    assert len(lm.requests) == 3
    entries = caught.value.history.messages
    assert entries[0]["intent"] == "hello" and entries[0]["tool_call_results"][0]["result"] == {"seen": True}


@pytest.mark.parametrize("engine", ENGINES)
def test_a_content_filtered_extraction_reply_over_http_raises_step_error(run, engine):
    script = [
        tool_calls_completion([("c1", "look", {"where": "desk"})]),
        text_completion("I would rather explain."),
        text_completion("", finish_reason="content_filter"),
    ]
    agent = dspy_imp.ReActV2(SubmitSig, tools=[Look()], max_iters=1)
    refused = pytest.raises(dspy_imp.StepError, match="content filter")
    with serving(script, engine) as server, refused:
        run(agent, intent="hello")
    assert len(server.requests) == 3
    assert "tools" not in server.requests[2].body  # the extractor's request


# -- hole 12: Retry-After: 0 and nameless calls -------------------------------------------------------


def test_retry_after_zero_is_honoured(run, sleeps):
    lm = ScriptedLM([fail.rate_limit(retry_after=0), reply("Here.")])
    with dspy.context(lm=lm), dspy_imp.deadline(seconds=60):
        pred = run(dspy_imp.ReActV2(TA, tools=[Look()]), intent="hello")
    assert pred.answer == "Here."
    assert sleeps == [0.0]


@pytest.mark.parametrize("engine", ENGINES)
def test_retry_after_zero_over_http_is_honoured(run, sleeps, engine):
    limited = HTTPReply(error_body("Rate limit reached", "requests", "rate_limit_exceeded"), 429, {"Retry-After": "0"})
    with serving([limited, text_completion("Here.")], engine) as server, dspy_imp.deadline(seconds=60):
        pred = run(dspy_imp.ReActV2(TA, tools=[Look()]), intent="hello")
    assert pred.answer == "Here."
    assert sleeps == [0.0]
    assert server.requests[0].body == server.requests[1].body


@pytest.mark.parametrize("engine", ENGINES)
def test_a_nameless_call_keeps_its_valid_siblings_and_is_an_observation(run, engine):
    look = Look()
    script = [
        tool_calls_completion([("c1", "look", {"where": "desk"}), ("c2", "", {"x": 1})]),
        text_completion("On the desk."),
    ]
    with serving(script, engine) as server:
        pred = run(dspy_imp.ReActV2(TA, tools=[look]), intent="Where?")

    assert look.runs == [{"where": "desk"}]
    assert (pred.answer, pred.metadata.termination_reason) == ("On the desk.", "answered")
    first, second = (r.body["messages"] for r in server.requests)
    call_message, *results = second[len(first) :]
    assert [c["function"]["name"] for c in call_message["tool_calls"]] == ["look", "unreadable_call"]
    assert results == [
        {"role": "tool", "tool_call_id": "c1", "content": '{"seen": true}'},
        {"role": "tool", "tool_call_id": "c2", "content": "Error: the tool call could not be read."},
    ]
    recorded = pred.metadata.history.messages[0]["tool_calls"][1]
    assert recorded["name"] is None and recorded["id"] == "c2"
