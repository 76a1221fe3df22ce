"""Anthropic's code execution container over HTTP, both drivers.

The reply is pydantic-ai's recording (``hosted_recordings.CODE_REPLY_1``): its code ran in
``container_011CTCwceSoRxi8Pf16Fb7Tn``, which the reply says expires at ``2025-09-17T00:24:43Z``.
What the turn must do (Anthropic's code execution docs: a response's ``container.id`` sent as the
request's ``container`` reuses the container, its files with it): name the container on the next
request of the turn and of a later turn of the same history while it has not expired, send none once
it has (the recording as served, long expired) or when asked to (``CodeExecution(reuse_container=False)``).
Where a test needs a live container, the recorded reply's ``expires_at`` is moved to 2999.
"""

from __future__ import annotations

import json
from typing import Any

import dspy
import pytest
from emulator import Emulator, Scripted
from hosted_recordings import CODE_REPLY_1
from provider_rules import assert_accepted
from test_hosted_anthropic import MODEL, _assistant, _reply, _same_bytes, _use

import dspy_imp
from dspy_imp.hosted import CodeExecution

pytestmark = pytest.mark.block_network(allowed_hosts=[r"127\.0\.0\.1$"])

CONTAINER = CODE_REPLY_1["container"]["id"]
LIVE = {**CODE_REPLY_1, "container": {**CODE_REPLY_1["container"], "expires_at": "2999-01-01T00:00:00Z"}}
LATER = _reply([{"type": "text", "text": "4 * 12390 = 49560"}])


def _lm(emulator: Emulator) -> dspy.LM:  # thinking on, as recorded
    return dspy.LM(MODEL, api_base=emulator.base_url + "/v1", api_key="sk-test", cache=False, num_retries=0)


def _two_turns(run: Any, tool: CodeExecution, reply: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    agent = dspy_imp.ReActV2("question -> answer", tools=[tool])
    with Emulator([Scripted(200, reply), LATER]) as emulator, dspy.context(lm=_lm(emulator)):
        first = run(agent, question="How much is 3 * 12390?")
        saved = json.loads(json.dumps(dspy_imp.dump_history(first.metadata.history)))
        later = run(agent, question="How about 4 * 12390?", history=dspy_imp.load_history(saved))
    assert later.answer == "4 * 12390 = 49560", later.metadata.termination_error
    record = [d for m in first.metadata.history.messages for d in m.get("reasoning_details") or ()]
    assert [d.get("container") for d in record if d.get("type") == "anthropic_served"] == [reply["container"]]
    for sent in emulator.requests:
        assert_accepted("anthropic", sent.body, sent.path)
    before, after = (r.body for r in emulator.requests)
    _same_bytes(_assistant(after)["content"], reply["content"])  # thinking, call, result, text: as served
    return before, after


def _besides_messages(body: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in body.items() if k != "messages"}


def test_a_later_turn_names_the_container_while_it_lives(run: Any) -> None:
    before, after = _two_turns(run, CodeExecution(), LIVE)
    assert "container" not in before
    assert _besides_messages(after) == {**_besides_messages(before), "container": CONTAINER}


@pytest.mark.parametrize(
    ("tool", "reply"), [(CodeExecution(), CODE_REPLY_1), (CodeExecution(reuse_container=False), LIVE)]
)
def test_an_expired_container_or_an_opt_out_sends_none(run: Any, tool: CodeExecution, reply: dict[str, Any]) -> None:
    before, after = _two_turns(run, tool, reply)
    assert _besides_messages(after) == _besides_messages(before)
    assert "container" not in after


def test_the_next_step_of_the_turn_names_the_container(run: Any) -> None:
    agent = dspy_imp.ReActV2("question -> answer", tools=[CodeExecution()], finish="submit")
    submit = _reply([_use("toolu_02Submit", "submit", {"answer": "37170"})])
    with Emulator([Scripted(200, LIVE), submit]) as emulator, dspy.context(lm=_lm(emulator)):
        pred = run(agent, question="How much is 3 * 12390?")
    assert pred.metadata.termination_reason == "submit", pred.metadata.termination_error
    first, second = (r.body for r in emulator.requests)
    assert "container" not in first
    assert _besides_messages(second) == {**_besides_messages(first), "container": CONTAINER}
    assert second["messages"][: len(first["messages"])] == first["messages"]
    _same_bytes(_assistant(second)["content"], LIVE["content"])
    for sent in emulator.requests:
        assert_accepted("anthropic", sent.body, sent.path)
