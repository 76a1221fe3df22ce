"""Reference §12 M (M1–M4), §2.2, §2.5, §7.9: what each native request looks like.

The roster goes natively (never as text), the loop's guidance lines are added to the
program's own instructions at render time, the system message and the roster are the same
on every request (prompt-cache prefix), and one request fires one ``on_lm_start`` and one
``on_adapter_format_start`` callback, whatever adapter the user configured.
"""

from __future__ import annotations

import itertools
from typing import Any, Literal

import dspy
import pytest
from dspy.utils.callback import BaseCallback
from helpers import (
    NAMED_SUBMIT,
    TA,
    EnumSig,
    Look,
    SubmitSig,
    assistant,
    inputs,
    submit_line,
    submit_system,
    tool,
    user,
)

import dspy_imp
from dspy_imp.testing import ScriptedLM, call, reply

SYSTEM_SUBMIT = submit_system("look")

FORBIDDEN = ("[[ ## tools ## ]]", "Respond with the corresponding output fields", "The tools you can call")


def system_of(request: Any) -> str:
    assert request.messages[0]["role"] == "system"
    return request.messages[0]["content"]


def objective_lines(request: Any) -> list[str]:
    """The lines of a native system message: the program's instructions, then the guidance lines."""
    system = system_of(request)
    assert "In adhering to this structure" not in system and "Inputs will be structured" not in system, system
    return system.splitlines()


def assert_native(request: Any, roster: list[str]) -> None:
    assert request.tool_names == roster
    assert all(t["type"] == "function" for t in request.tools)
    for message in request.messages:
        for text in FORBIDDEN:
            assert text not in str(message.get("content") or ""), (text, message)


# -- M1 -----------------------------------------------------------------------------------------


def test_m1_text_answer_roster_is_native_never_text(run):
    lm = ScriptedLM([reply(calls=[call("look", {}, id="c1")]), reply("done")])
    agent = dspy_imp.ReActV2(TA, tools=[Look()])
    with dspy.context(lm=lm):
        run(agent, intent="what is it?")

    assert len(lm.requests) == 2
    for request in lm.requests:
        assert_native(request, ["look"])
        assert request.tool_choice == "auto"
    assert lm.requests[0].tools[0]["function"]["description"] == "Look at a thing"


def test_m1_every_request_of_a_submit_turn_carries_the_roster_natively(run):
    lm = ScriptedLM(
        [
            reply(calls=[call("look", {}, id="c1")]),
            reply("Thinking it over."),
            reply("Still thinking."),
            reply(calls=[call("submit", {"answer": "a", "confidence": 0.5}, id="s1")]),
        ]
    )
    agent = dspy_imp.ReActV2(SubmitSig, tools=[Look()], finish="submit")
    with dspy.context(lm=lm):
        pred = run(agent, intent="what is it?")

    assert (pred.metadata.termination_reason, pred.metadata.termination_cause) == ("forced_submit", "empty_tool_calls")
    assert [r.tool_choice for r in lm.requests] == ["auto", "auto", "auto", NAMED_SUBMIT]
    for request in lm.requests:
        assert_native(request, ["look", "submit"])
    # The continued request and the forced one, whole.
    line = submit_line("answer", "confidence")
    assert lm.requests[2].messages[1:] == [
        inputs(intent="what is it?"),
        assistant("", [("c1", "look", "{}")]),
        tool("c1", '{"seen": true}'),
        assistant("Thinking it over."),
        user(line),
    ]
    assert lm.requests[3].messages[1:] == [
        *lm.requests[2].messages[1:],
        user("[[ ## next_thought ## ]]\nStill thinking."),
    ]
    lm.assert_complete()


# -- M2 -----------------------------------------------------------------------------------------


def test_m2_guidance_lines_with_submit_and_the_programs_instructions_unchanged(run):
    lm = ScriptedLM([reply(calls=[call("submit", {"answer": "a", "confidence": 1.0}, id="s1")])])
    agent = dspy_imp.ReActV2(SubmitSig, tools=[Look()])
    assert agent.react.signature.instructions == SubmitSig.instructions == "Answer the intent with a confidence."
    with dspy.context(lm=lm):
        run(agent, intent="what is it?")

    assert system_of(lm.requests[0]) == SYSTEM_SUBMIT
    lines = objective_lines(lm.requests[0])
    assert lines[0] == "Answer the intent with a confidence."  # the program's own words come first
    # What the request says elsewhere is not repeated: the tools are its `tools`, the user message
    # shows the inputs, and submit's schema names the outputs with their types; so no agent line.
    assert not any(line.startswith("You are an Agent") for line in lines)
    assert "Call tools when more information is needed." not in lines
    assert lines[-1] == "When the final answer is ready, call `submit`."
    assert not any(line.startswith("The available tools are") for line in lines)
    # Rendering added the guidance; the predictor optimizers rewrite was not touched.
    assert agent.react.signature.instructions == "Answer the intent with a confidence."
    assert list(agent.react.signature.output_fields) == ["next_thought", "tool_calls"]


def test_m2_rewritten_instructions_keep_the_guidance(run):
    lm = ScriptedLM([reply(calls=[call("submit", {"answer": "a", "confidence": 1.0}, id="s1")])])
    agent = dspy_imp.ReActV2(SubmitSig, tools=[Look()])
    agent.react.signature = agent.react.signature.with_instructions("Be terse.\nCite nothing.")
    with dspy.context(lm=lm):
        run(agent, intent="x")

    lines = objective_lines(lm.requests[0])
    assert lines == ["Be terse.", "Cite nothing.", "When the final answer is ready, call `submit`."]


def test_m2_a_per_call_finish_never_rebuilds_the_predictor(run):
    lm = ScriptedLM([reply("a thought"), reply(calls=[call("submit", {"answer": "x"}, id="s1")])])
    agent = dspy_imp.ReActV2(TA, tools=[Look()])
    predictor, signature = agent.react, agent.react.signature
    with dspy.context(lm=lm):
        pred = run(agent, intent="x", finish="submit")

    assert pred.metadata.termination_reason == "submit"
    assert agent.react is predictor and agent.react.signature is signature
    assert [name for name, _ in agent.named_predictors()] == ["react"]
    lines = objective_lines(lm.requests[0])
    assert "When the final answer is ready, call `submit`." in lines
    assert lm.requests[0].tool_names == ["look", "submit"]


# -- M3 -----------------------------------------------------------------------------------------


class Triage(dspy.Signature):
    """Route the ticket."""

    ticket: str = dspy.InputField()
    team: Literal["atlas", "harbor"] = dspy.OutputField(desc="atlas owns money; harbor owns outages")
    confidence: float = dspy.OutputField(desc="From 0 to 1")


def test_m3_native_submit_carries_the_outputs_in_its_schema_not_in_a_list(run):
    lm = ScriptedLM([reply(calls=[call("submit", {"team": "atlas", "confidence": 0.8}, id="s1")])])
    agent = dspy_imp.ReActV2(Triage, tools=[Look()])
    with dspy.context(lm=lm):
        pred = run(agent, ticket="I was charged twice.")

    assert objective_lines(lm.requests[0]) == [
        "Route the ticket.",
        "When the final answer is ready, call `submit`.",
    ]
    submit = lm.requests[0].tools[-1]["function"]["parameters"]["properties"]
    assert submit == {
        "team": {"type": "string", "enum": ["atlas", "harbor"], "description": "atlas owns money; harbor owns outages"},
        "confidence": {"type": "number", "description": "From 0 to 1"},
    }
    assert (pred.team, pred.confidence) == ("atlas", 0.8)


def test_m3_the_outputs_list_in_written_calls(run):
    lm = ScriptedLM(
        [
            reply(
                '[[ ## next_thought ## ]]\nDone.\n\n[[ ## tool_calls ## ]]\n[{"name": "submit", "arguments": '
                '{"team": "atlas", "confidence": 0.8}}]\n\n[[ ## completed ## ]]'
            )
        ],
        native=False,
    )
    agent = dspy_imp.ReActV2(Triage, tools=[Look()])
    with dspy.context(lm=lm):
        pred = run(agent, ticket="I was charged twice.")

    system = system_of(lm.requests[0])
    _, _, objective = system.partition("In adhering to this structure, your objective is: \n")
    lines = [line.strip() for line in objective.splitlines()]
    start = lines.index("The outputs to produce are:")
    assert lines[start : start + 4] == [
        "The outputs to produce are:",
        "1. `team` (one of: atlas, harbor): atlas owns money; harbor owns outages",
        "2. `confidence` (number): From 0 to 1",
        "Call tools when more information is needed.",
    ]
    assert (pred.team, pred.confidence) == ("atlas", 0.8)


def test_m3_a_text_answer_lists_only_an_output_with_a_description(run):
    class Described(dspy.Signature):
        """Answer."""

        intent: str = dspy.InputField(desc="what the user wants")
        answer: str = dspy.OutputField(desc="one sentence")

    lm = ScriptedLM([reply("It is done.")])
    agent = dspy_imp.ReActV2(Described, tools=[Look()])
    with dspy.context(lm=lm):
        run(agent, intent="x")

    assert system_of(lm.requests[0]).splitlines() == [
        "Your input fields are:",
        "1. `intent` (str): what the user wants",
        "Answer.",
        "The outputs to produce are:",
        "1. `answer` (string): one sentence",
        "When the final answer is ready, reply without calling a tool: that message is `answer`.",
    ]


# -- M4 -----------------------------------------------------------------------------------------


def test_m4_native_text_answer_system_message_shows_no_output_markers(run):
    lm = ScriptedLM([reply("[[ ## answer ## ]]\nParis\n\n[[ ## completed ## ]]")])
    agent = dspy_imp.ReActV2(TA, tools=[Look()])
    with dspy.context(lm=lm):
        pred = run(agent, intent="capital of France?")

    system = system_of(lm.requests[0])
    assert "When the final answer is ready, reply without calling a tool: that message is `answer`." in (
        objective_lines(lm.requests[0])
    )
    assert "[[ ## answer ## ]]" not in system and "[[ ## completed ## ]]" not in system
    assert "Your output fields are" not in system
    # A reply that still uses the old markers parses as before.
    assert pred.answer == "Paris"
    assert pred.metadata.termination_reason == "answered"
    assert pred.metadata.history.messages[0]["answer"] == "Paris"
    lm.assert_complete()


# -- prefix stability (§7.9) ------------------------------------------------------------------------


def test_the_system_message_and_roster_are_identical_on_every_request_and_across_turns(run):
    lm = ScriptedLM(
        [
            reply(calls=[call("look", {"where": "shelf"}, id="c1")]),
            reply("On the shelf."),
            reply(calls=[call("look", {"where": "desk"}, id="c2")]),
            reply(calls=[call("look", {"where": "box"}, id="c3")]),
            reply("In the box."),
        ]
    )
    agent = dspy_imp.ReActV2(TA, tools=[Look()])
    with dspy.context(lm=lm):
        first = run(agent, intent="where is the key?")
        run(agent, intent="and the pen?", history=first.metadata.history)

    requests = lm.requests
    assert len(requests) == 5
    assert len({system_of(r) for r in requests}) == 1
    assert all(r.tools == requests[0].tools and r.tool_choice == "auto" for r in requests)
    # Each request is the previous one plus the newest exchange, across the turn boundary too.
    for before, after in itertools.pairwise(requests):
        assert after.messages[: len(before.messages)] == before.messages
    assert requests[2].messages[len(requests[1].messages) :] == [
        assistant("On the shelf."),
        inputs(intent="and the pen?"),
    ]


def test_the_roster_is_identical_on_every_ordinary_request_of_a_submit_turn(run):
    lm = ScriptedLM(
        [
            reply(calls=[call("look", {}, id="c1")]),
            reply("Thinking."),
            reply(calls=[call("submit", {"answer": "a", "confidence": 0.5}, id="s1")]),
        ]
    )
    agent = dspy_imp.ReActV2(SubmitSig, tools=[Look()])
    with dspy.context(lm=lm):
        run(agent, intent="x")

    assert len({system_of(r) for r in lm.requests}) == 1
    assert all(r.tools == lm.requests[0].tools for r in lm.requests)
    assert [r.tool_choice for r in lm.requests] == ["auto", "auto", NAMED_SUBMIT]


# -- callbacks ------------------------------------------------------------------------------------


class Counter(BaseCallback):
    def __init__(self) -> None:
        self.events: list[str] = []

    def on_lm_start(self, call_id: str, instance: Any, inputs: dict[str, Any]) -> None:
        self.events.append("lm")

    def on_adapter_format_start(self, call_id: str, instance: Any, inputs: dict[str, Any]) -> None:
        self.events.append("format")


ADAPTERS = {"none": lambda: None, "chat": dspy.ChatAdapter, "json": dspy.JSONAdapter}


@pytest.mark.parametrize("adapter", list(ADAPTERS))
def test_one_lm_start_and_one_format_start_per_request(run, adapter):
    counter = Counter()
    lm = ScriptedLM(
        [
            reply(calls=[call("look", {}, id="c1")]),  # step
            reply("team: harbor"),  # step: text, so the forced submit follows
            reply("harbor"),  # forced submit: no call, so the extractor follows
            reply("no idea"),  # extraction
        ]
    )
    agent = dspy_imp.ReActV2(EnumSig, tools=[Look()])
    with dspy.context(lm=lm, adapter=ADAPTERS[adapter](), callbacks=[counter]):
        pred = run(agent, ticket="The site is down.")

    assert pred.metadata.termination_reason == "incomplete"
    assert len(lm.requests) == 4
    assert counter.events == ["format", "lm"] * 4


# -- the adapter the user configured -------------------------------------------------------------------


def requests_with(adapter: dspy.Adapter | None, run: Any) -> list[tuple[Any, ...]]:
    lm = ScriptedLM(
        [
            reply(calls=[call("look", {"where": "desk"}, id="c1")]),
            reply("[[ ## answer ## ]]\nOn the desk.\n\n[[ ## completed ## ]]"),
            reply("thinking"),
            reply(calls=[call("submit", {"answer": "desk", "confidence": 0.7}, id="s1")]),
        ]
    )
    with dspy.context(lm=lm, adapter=adapter):
        ta = run(dspy_imp.ReActV2(TA, tools=[Look()]), intent="where?")
        submitted = run(dspy_imp.ReActV2(SubmitSig, tools=[Look()]), intent="where?")
    assert (ta.answer, ta.metadata.termination_reason) == ("On the desk.", "answered")
    assert (submitted.answer, submitted.metadata.termination_reason) == ("desk", "forced_submit")
    lm.assert_complete()
    return [(r.messages, r.tools, r.tool_choice, r.options) for r in lm.requests]


def test_a_configured_chat_adapter_sends_the_same_requests_as_none(run):
    # JSONAdapter and XMLAdapter write the step in their own format: tests/test_adapters.py (M7).
    expected = requests_with(None, run)
    assert requests_with(dspy.ChatAdapter(), run) == expected


def test_callbacks_given_to_a_react_adapter_fire_on_every_request_including_extraction(run):
    counter = Counter()
    lm = ScriptedLM([reply("t1"), reply("no submit"), reply("unreadable")])
    with dspy.context(lm=lm, adapter=dspy_imp.ReActAdapter(callbacks=[counter])):
        pred = run(dspy_imp.ReActV2(SubmitSig, tools=[Look()]), intent="where?")
    assert pred.metadata.termination_reason == "incomplete"
    assert len(lm.requests) == 3  # step, forced submit, extraction
    assert counter.events.count("format") == 3
