"""Incremental rendering: the per-turn memo changes how much is rendered, never a byte of a request.

Every request of these turns is rendered twice, with the turn's memo and from scratch (no
memo), and the two must be equal; and a turn renders each recorded step a bounded number of
times, not once per request.
"""

from __future__ import annotations

import itertools
from dataclasses import replace
from typing import Any

import dspy
import pytest

import dspy_imp
from dspy_imp._drivers import adapter as _adapter
from dspy_imp._prompt import render as _render
from dspy_imp._turn import arguments as _tools
from dspy_imp.testing import ScriptedLM, call, reply


def look(where: str) -> str:
    """Look somewhere."""
    return f"nothing at {where}"


class Checked:
    """Wraps ``render_request``: renders each request again without the memo and compares."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch):
        self.original = _render.render_request
        self.requests: list[list[dict[str, Any]]] = []
        self.steps = 0
        step = _render._step

        def counted(*args: Any) -> Any:
            self.steps += 1
            return step(*args)

        monkeypatch.setattr(_adapter, "render_request", self.render)
        monkeypatch.setattr(_render, "_step", counted)

    def render(self, guidance: Any, instructions: str, demos: Any, pending: Any) -> list[dict[str, Any]]:
        assert guidance.memo is not None
        messages = self.original(guidance, instructions, demos, pending)
        counted = self.steps
        fresh = self.original(replace(guidance, memo=None), instructions, demos, pending)
        self.steps = counted  # the check's own rendering is not the loop's
        assert messages == fresh
        self.requests.append(messages)
        return messages


def _thinking_turn(steps: int) -> ScriptedLM:
    items = []
    for index in range(steps):
        items.append(reply(f"thinking {index}"))
        items.append(reply(f"step {index}", calls=[call("look", {"where": f"p{index}"}, id=f"c{index}")]))
    return ScriptedLM([*items, reply(calls=[call("submit", {"answer": "found"}, id="s")])])


@pytest.mark.parametrize(
    ("options", "adapter"),
    [
        ({"finish": "submit"}, None),
        ({"finish": "submit", "history_replay": "actions"}, None),
        ({"finish": "submit", "unsent_note": "Call a tool."}, dspy.JSONAdapter()),
        ({"finish": "submit"}, dspy.XMLAdapter()),
    ],
)
def test_every_request_is_what_a_fresh_rendering_sends(run, monkeypatch, options, adapter):
    checked = Checked(monkeypatch)
    lm = _thinking_turn(4)
    agent = dspy_imp.ReActV2("question -> answer", tools=[look], **options)
    prior = [{"question": "before?", "tool_calls": [], "tool_call_results": [], "answer": "earlier"}]
    with dspy.context(lm=lm, adapter=adapter):
        pred = run(agent, question="where?", history=dspy.History(messages=prior))

    assert pred.answer == "found"
    assert len(checked.requests) == len(lm.requests) == 9


def test_a_forced_request_ending_on_a_moved_thought_renders_as_without_the_memo(run, monkeypatch):
    checked = Checked(monkeypatch)
    lm = ScriptedLM(
        [
            reply(calls=[call("look", {"where": "desk"}, id="c1")]),
            reply("I think it is in the drawer."),
            reply(calls=[call("submit", {"answer": "drawer", "confidence": 0.5}, id="s")]),
        ]
    )
    agent = dspy_imp.ReActV2("question -> answer, confidence: float", tools=[look], max_iters=3)
    with dspy.context(lm=lm):
        pred = run(agent, question="where?")

    assert pred.answer == "drawer"
    assert len(checked.requests) == 3
    last = checked.requests[-1][-1]
    assert last["role"] == "user" and "I think it is in the drawer." in last["content"]


def test_a_long_turn_renders_each_step_a_bounded_number_of_times(run, monkeypatch):
    checked = Checked(monkeypatch)
    steps = 30
    lm = ScriptedLM(
        [
            *(reply(calls=[call("look", {"where": f"p{i}"}, id=f"c{i}")]) for i in range(steps)),
            reply(calls=[call("submit", {"answer": "found"}, id="s")]),
        ]
    )
    agent = dspy_imp.ReActV2("question -> answer", tools=[look], max_iters=steps + 1, finish="submit")
    with dspy.context(lm=lm):
        run(agent, question="where?")

    # Each request renders the newest step and the one before it (which may still change);
    # from scratch, the turn would render steps * (steps + 1) / 2 = 465 of them.
    assert checked.steps <= 2 * steps


def test_the_memo_keeps_one_growing_list_and_each_request_gets_its_own(run, monkeypatch):
    """Settling a step appends to the memo's lists (no copy of everything settled so far, which
    would cost each request in proportion to the history); a request's message list is its own,
    so DSPy never receives the memo's list."""
    seen: list[tuple[int, int, int]] = []
    requests: list[list[dict[str, Any]]] = []
    render = _render.render_request

    def watched(guidance: Any, *args: Any) -> list[dict[str, Any]]:
        messages = render(guidance, *args)
        memo = guidance.memo
        assert messages is not memo.messages
        seen.append((id(memo.steps), id(memo.messages), len(memo.steps)))
        requests.append(messages)
        return messages

    monkeypatch.setattr(_adapter, "render_request", watched)
    steps = 12
    lm = ScriptedLM(
        [
            *(reply(calls=[call("look", {"where": f"p{i}"}, id=f"c{i}")]) for i in range(steps)),
            reply(calls=[call("submit", {"answer": "found"}, id="s")]),
        ]
    )
    agent = dspy_imp.ReActV2("question -> answer", tools=[look], max_iters=steps + 1, finish="submit")
    with dspy.context(lm=lm):
        run(agent, question="where?")

    assert len(seen) == steps + 1
    # The first two requests have no step to settle (the newest step may still change); from the
    # third on, the memo's two lists are the same objects, one step longer each request.
    assert len({(steps_id, messages_id) for steps_id, messages_id, _ in seen[2:]}) == 1
    assert [settled for _, _, settled in seen] == [0, 0, *range(1, steps)]
    assert all(later[: len(earlier)] == earlier for earlier, later in itertools.pairwise(requests[1:]))


def test_each_tool_argument_validator_is_built_once(monkeypatch):
    built = []
    make = _tools.validators.validator_for

    def counting(schema: Any, *args: Any, **kwargs: Any) -> Any:
        built.append(schema)
        return make(schema, *args, **kwargs)

    monkeypatch.setattr(_tools.validators, "validator_for", counting)

    def find(where: str, count: int) -> str:
        return where

    tool = dspy.Tool(find)
    for value in (1, "two", 3):
        _tools.check_arguments(tool, {"where": "desk", "count": value})
    rejected = _tools.check_arguments(tool, {"where": "desk", "count": "two"})

    assert [s for s in built if any(s is spec for spec in tool.args.values())] == list(tool.args.values())
    assert rejected is not None and "count 'two' is not of type 'integer'" in rejected.sentence
