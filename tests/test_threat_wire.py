"""Issue 9, holes 5 and 8 on the wire: what the server receives, on both ``dspy.LM`` engines.

A result with a lone surrogate reaches the server as readable UTF-8; a history dumped and
loaded back sends exactly the bytes the live history sent (non-UTF-8 bytes, tuple keys, NaN).
"""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Iterator
from typing import Any

import dspy
import pytest
from fake_openai_server import FakeOpenAIServer, text_completion, tool_calls_completion
from helpers import TA

import dspy_imp

pytestmark = pytest.mark.block_network(allowed_hosts=[r"127\.0\.0\.1$"])

ENGINES = ["auto", "litellm"]


@contextlib.contextmanager
def serving(script: list[Any], engine: str) -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer(script) as server:
        lm = dspy.LM(
            "openai/gpt-4o-mini", api_base=server.base_url, api_key="sk-test", cache=False, num_retries=0, engine=engine
        )
        with dspy.context(lm=lm):
            yield server


def fetching(value: Any) -> dspy_imp.ReActV2:
    def fetch() -> Any:
        """Fetch the record."""
        return value

    return dspy_imp.ReActV2(TA, tools=[fetch])


@pytest.mark.parametrize("engine", ENGINES)
def test_a_lone_surrogate_result_reaches_the_server_readable(run, engine):
    script = [tool_calls_completion([("f1", "fetch", {})]), text_completion("Read it.")]
    with serving(script, engine) as server:
        pred = run(fetching({"name": "caf\udce9"}), intent="Fetch.")
    assert pred.answer == "Read it."
    tool_message = server.requests[1].body["messages"][-1]
    assert tool_message == {"role": "tool", "tool_call_id": "f1", "content": '{"name": "caf\ufffd"}'}


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize(
    "value",
    [
        pytest.param(b"\xff\xfe", id="non-utf8-bytes"),
        pytest.param({(1, 2): "pair"}, id="tuple-keys"),
        pytest.param({"v": math.nan, "w": math.inf}, id="nan-inf"),
    ],
)
def test_a_reloaded_history_sends_the_same_bytes_over_http(run, engine, value):
    agent = fetching(value)
    script = [tool_calls_completion([("f1", "fetch", {})]), text_completion("Done.")]
    with serving(script, engine):
        pred = run(agent, intent="Fetch.")

    live = pred.metadata.history
    reloaded = dspy_imp.load_history(json.loads(json.dumps(dspy_imp.dump_history(live), allow_nan=False)))
    sent = []
    for history in (live, reloaded):
        with serving([text_completion("Again.")], engine) as server:
            run(agent, history=history, intent="Again.")
        sent.append(server.requests[0].body["messages"])
    assert sent[0] == sent[1]
    assert sent[0][3]["role"] == "tool"
