"""``Window``: what a request sees of the turn's steps, without copying them.

A request used to copy the recorded steps (and walk them to check the render memo) every
time; at a thousand steps those O(history) passes were most of our per-request cost. These
tests pin the window's sequence behaviour and that the memo's checks stay O(1) on it.
"""

from __future__ import annotations

import operator
from typing import Any

import dspy
import pytest

import dspy_imp
from dspy_imp._drivers import adapter as _adapter
from dspy_imp._prompt import memo as _render_memo
from dspy_imp._prompt import render as _render
from dspy_imp._prompt.memo import RenderMemo
from dspy_imp._records.steps import Step
from dspy_imp._records.window import Window
from dspy_imp.testing import ScriptedLM, call, reply


class Unwalkable(list[Any]):
    """A copy of settled steps that fails the test if anything walks it."""

    def __iter__(self) -> Any:
        raise AssertionError("the settled steps were walked")


def test_a_window_is_the_slice_it_was_made_as_even_after_the_list_grows():
    items = [1, 2, 3]
    window = Window(items)
    items.append(4)

    assert len(window) == 3 and list(window) == [1, 2, 3]
    assert window == (1, 2, 3) and operator.eq((1, 2, 3), window) and window != (1, 2, 3, 4)
    assert window[-1] == 3 and window[0] == 1
    with pytest.raises(IndexError):
        window[3]
    assert list(window[1:]) == [2, 3] and isinstance(window[1:], Window)
    assert list(window[5:]) == [] and list(window[::2]) == [1, 3]
    assert hash(window) == hash((1, 2, 3))


def test_two_windows_on_one_list_share_their_prefix_without_a_walk():
    items = [object(), object()]
    first = Window(items)
    items.append(object())
    source = _render_memo.source_of(first)

    assert _render_memo.same_prefix(Window(items), Unwalkable(first), source)
    assert not _render_memo.same_prefix(Window(items)[1:], list(first), source)  # another start: compared
    assert _render_memo.same_prefix(tuple(items), list(first), None)  # not a window: compared one by one


@pytest.mark.parametrize("asynchronous", [False, True])
def test_a_long_turn_never_walks_or_copies_the_steps_a_request_reuses(monkeypatch, asynchronous):
    """Every request's steps are a window on the turn's one step list, and the memo's prefix
    check never iterates what it settled."""
    check = _render_memo.same_prefix
    lists: set[int] = set()
    render = _render.render_request

    def watched(guidance: Any, *args: Any) -> Any:
        assert isinstance(guidance.steps, Window)
        lists.add(id(guidance.steps.items))
        return render(guidance, *args)

    def unwalked(steps: Any, known: Any, source: Any) -> bool:
        return check(steps, Unwalkable(known), source)

    monkeypatch.setattr(_adapter, "render_request", watched)
    monkeypatch.setattr(_render_memo, "same_prefix", unwalked)
    steps = 15
    lm = ScriptedLM(
        [
            *(reply(f"step {i}", calls=[call("look", {"where": f"p{i}"}, id=f"c{i}")]) for i in range(steps)),
            reply(calls=[call("submit", {"answer": "found"}, id="s")]),
        ]
    )
    agent = dspy_imp.ReActV2("question -> answer", tools=[look], max_iters=steps + 1, finish="submit")
    with dspy.context(lm=lm):
        if asynchronous:
            import asyncio

            pred = asyncio.run(agent.acall(question="where?"))
        else:
            pred = agent(question="where?")

    assert pred.answer == "found" and len(lm.requests) == steps + 1
    assert len(lists) == 1


def test_the_reasoning_kinds_of_a_step_are_read_once_per_turn():
    reads: list[int] = []

    class Counted(list[Any]):
        def __iter__(self) -> Any:
            reads.append(1)
            return super().__iter__()

    recorded = [Step(reasoning_details=Counted([{"type": "thinking", "thinking": "t", "signature": "s"}]))]
    memo = RenderMemo()
    assert memo.block_kinds(Window(recorded)) == {"thinking"}
    recorded += [Step(), Step(reasoning_details=Counted([{"type": "thought_signature", "value": "v"}]))]
    assert memo.block_kinds(Window(recorded)) == {"thinking", "thought_signature"}
    assert memo.block_kinds(Window(recorded)) == {"thinking", "thought_signature"}
    assert len(reads) == 2
    assert memo.block_kinds(tuple(recorded)) == {"thinking", "thought_signature"}  # not a window: read whole


def look(where: str) -> str:
    """Look somewhere."""
    return f"nothing at {where}"
