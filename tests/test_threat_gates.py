"""Issue 23, point 1: a saved file may tighten the host's gates, never loosen them.

``needs_approval`` and ``external_tools`` are the union of the host's and the file's, each usage
limit the lower of the two, and ``parallel_tools`` is on only when the host turned it on. An
untampered file saved by an older version of the program (with no gates at all) keeps the
host's gates.
"""

from __future__ import annotations

import json
from typing import Any

import dspy
import pytest

import dspy_imp
from dspy_imp.testing import ScriptedLM, call, reply

REFUNDS: list[int] = []


def refund(amount: int) -> str:
    """Refund an amount to the card."""
    REFUNDS.append(amount)
    return "refunded"


def look(where: str) -> str:
    """Look somewhere."""
    return f"nothing at {where}"


@pytest.fixture(autouse=True)
def _no_refunds() -> None:
    REFUNDS.clear()


def _older_file(tmp_path: Any, **options: Any) -> Any:
    path = tmp_path / "agent.json"
    dspy_imp.ReActV2("request -> answer", tools=[refund, look], **options).save(path)
    return path


def test_an_older_file_without_approval_keeps_the_hosts_approval(tmp_path, run):
    path = _older_file(tmp_path)
    agent = dspy_imp.ReActV2("request -> answer", tools=[refund, look], needs_approval=[refund])
    agent.load(path)
    lm = ScriptedLM([reply(calls=[call("refund", {"amount": 250}, id="r1")]), reply("done")])
    with dspy.context(lm=lm):
        pred = run(agent, request="Refund me.")
    assert pred.metadata.termination_reason == "paused"
    assert [c["id"] for c in pred.metadata.pending_calls] == ["r1"]
    assert REFUNDS == []
    assert agent.options.needs_approval == ("refund",)


def test_an_older_file_without_limits_keeps_the_hosts_limits(tmp_path, run):
    path = _older_file(tmp_path)
    agent = dspy_imp.ReActV2("request -> answer", tools=[refund, look], usage_limits=dspy_imp.UsageLimits(requests=2))
    agent.load(path)
    lm = ScriptedLM(lambda request: reply(calls=[call("look", {"where": "x"})]))
    with dspy.context(lm=lm):
        pred = run(agent, request="Look around.")
    assert len(lm.requests) == 2
    assert (pred.metadata.termination_reason, pred.metadata.termination_cause) == ("incomplete", "usage_limit_exceeded")


def test_a_file_may_tighten_gates_and_each_limit_is_the_lower_one(tmp_path):
    path = _older_file(
        tmp_path,
        needs_approval=[look],
        external_tools=[refund],
        usage_limits=dspy_imp.UsageLimits(requests=9, cost=0.5),
    )
    host_limits = dspy_imp.UsageLimits(requests=3, total_tokens=1000, cost=2.0)
    agent = dspy_imp.ReActV2("request -> answer", tools=[refund, look], usage_limits=host_limits)
    agent.load(path)
    options = agent.options
    assert (options.needs_approval, options.external_tools) == (("look",), ("refund",))
    assert options.usage_limits == dspy_imp.UsageLimits(requests=3, total_tokens=1000, cost=0.5)


def test_a_file_never_turns_parallel_tools_on_and_may_turn_it_off(tmp_path):
    on = _older_file(tmp_path, parallel_tools=True)
    sequential = dspy_imp.ReActV2("request -> answer", tools=[refund, look])
    sequential.load(on)
    assert sequential.options.parallel_tools is False
    state = json.loads(on.read_text())
    state["react"]["dspy_imp"]["parallel_tools"] = False
    on.write_text(json.dumps(state))
    parallel = dspy_imp.ReActV2("request -> answer", tools=[refund, look], parallel_tools=True)
    parallel.load(on)
    assert parallel.options.parallel_tools is False


def test_loading_twice_merges_with_what_the_host_built_not_with_the_first_file(tmp_path):
    strict = _older_file(tmp_path, needs_approval=[look])
    strict_state = json.loads(strict.read_text())
    agent = dspy_imp.ReActV2("request -> answer", tools=[refund, look], needs_approval=[refund])
    agent.load(strict)
    assert agent.options.needs_approval == ("refund", "look")
    strict_state["react"].pop("dspy_imp")
    strict.write_text(json.dumps(strict_state))
    agent.load(strict)
    assert agent.options.needs_approval == ("refund",)


def test_a_file_whose_gates_clash_with_the_hosts_is_refused_and_nothing_is_applied(tmp_path):
    path = _older_file(tmp_path, external_tools=[refund])
    agent = dspy_imp.ReActV2("request -> answer", tools=[refund, look], needs_approval=[refund])
    with pytest.raises(dspy_imp.ConfigurationError, match="needs_approval"):
        agent.load(path)
    assert (agent.options.needs_approval, agent.options.external_tools) == (("refund",), ())


# -- point 9: a gate given per call is refused, never dropped -------------------------------------


@pytest.mark.parametrize("option", ["needs_approval", "external_tools", "tool_policy"])
def test_a_gate_given_per_call_is_refused_before_any_request(run, option):
    agent = dspy_imp.ReActV2("request -> answer", tools=[refund, look])
    lm = ScriptedLM([reply(calls=[call("refund", {"amount": 250}, id="r1")]), reply("done")])
    value = ["refund"] if option != "tool_policy" else ["look"]
    with dspy.context(lm=lm), pytest.raises(dspy_imp.ConfigurationError, match=f"`{option}` cannot be given per call"):
        run(agent, request="Refund me.", **{option: value})
    assert lm.requests == [] and REFUNDS == []


def test_an_input_named_like_a_program_option_is_still_an_input(run):
    agent = dspy_imp.ReActV2("request, unsent_note -> answer", tools=[look])
    lm = ScriptedLM([reply("done")])
    with dspy.context(lm=lm):
        pred = run(agent, request="hi", unsent_note="a note")
    assert pred.answer == "done"
    assert "a note" in str(lm.requests[0].messages)
