"""Streaming through DSPy's own API, offline: every finish mode, status messages for every
step, the final prediction last, a ``StepError`` reaching the consumer, user providers, and
DSPy's own listener refused with a clear error. Over HTTP: ``test_streaming_wire.py``.
"""

from __future__ import annotations

from typing import Any

import dspy
import pytest
from dspy.utils.exceptions import LMAuthError
from helpers import TA, Look, SubmitSig
from streaming_helpers import chunks, segments, statuses, stream_items

import dspy_imp
from dspy_imp import StreamListener
from dspy_imp.testing import ScriptedLM, call, fail, reply

LOOK = reply(calls=[call("look", {"where": "shelf"}, id="c1")])
LOOKED = ['Calling look({"where": "shelf"})', 'look returned: {"seen": true}']
EXTRACTED = (
    "[[ ## reasoning ## ]]\nIt was seen.\n\n[[ ## answer ## ]]\nOn the shelf.\n\n"
    "[[ ## confidence ## ]]\n0.5\n\n[[ ## completed ## ]]"
)


def streamed(agent: dspy.Module, lm: ScriptedLM, how: str, *fields: str, **kwargs: Any) -> list[Any]:
    with dspy.context(lm=lm):
        items = stream_items(agent, how, [StreamListener(f) for f in fields], **kwargs)
    assert isinstance(items[-1], dspy_imp.Prediction)
    assert sum(isinstance(i, dspy.Prediction) for i in items) == 1
    return items


def test_answered(how):
    lm = ScriptedLM([LOOK, reply("On the shelf.")])
    items = streamed(dspy_imp.ReActV2(TA, tools=[Look()]), lm, how, "answer", intent="keys?")
    assert statuses(items) == [*LOOKED, "Turn ended: answered"]
    assert segments(chunks(items, "answer")) == ["On the shelf."]


def test_submit(how):
    lm = ScriptedLM([LOOK, reply("Found.", calls=[call("submit", {"answer": "shelf", "confidence": 0.9}, id="c2")])])
    items = streamed(dspy_imp.ReActV2(SubmitSig, tools=[Look()]), lm, how, "answer", "next_thought", intent="k")
    assert statuses(items) == [
        *LOOKED,
        'Calling submit({"answer": "shelf", "confidence": 0.9})',
        'submit returned: {"answer": "shelf", "confidence": 0.9}',
        "Turn ended: submit",
    ]
    assert segments(chunks(items, "next_thought")) == ["Found."]
    assert segments(chunks(items, "answer")) == ["shelf"]
    assert {c.predict_name for c in chunks(items, "answer")} == {"react"}


def test_last_text(how):
    lm = ScriptedLM([LOOK, reply("It is on the shelf.")])
    items = streamed(dspy_imp.ReActV2(TA, tools=[Look()], max_iters=1), lm, how, "answer", intent="keys?")
    assert statuses(items) == [*LOOKED, "Asking for a last text answer", "Turn ended: last_text (max_iters)"]
    assert segments(chunks(items, "answer")) == ["It is on the shelf."]
    assert items[-1].answer == "It is on the shelf."


def test_forced_submit(how):
    lm = ScriptedLM([LOOK, reply(calls=[call("submit", {"answer": "shelf", "confidence": 0.5}, id="c2")])])
    items = streamed(dspy_imp.ReActV2(SubmitSig, tools=[Look()], max_iters=1), lm, how, "answer", intent="k")
    assert statuses(items) == [
        *LOOKED,
        "Asking the model to submit its answer (forced submit)",
        'Calling submit({"answer": "shelf", "confidence": 0.5})',
        'submit returned: {"answer": "shelf", "confidence": 0.5}',
        "Turn ended: forced_submit (max_iters)",
    ]
    assert segments(chunks(items, "answer")) == ["shelf"]


def test_required_retry_then_extraction(how):
    lm = ScriptedLM([LOOK, fail.tool_choice_refused(), reply("no submit"), reply(EXTRACTED)])
    items = streamed(dspy_imp.ReActV2(SubmitSig, tools=[Look()], max_iters=1), lm, how, "answer", intent="k")
    assert statuses(items) == [
        *LOOKED,
        "Asking the model to submit its answer (forced submit)",
        "Asking again for submit (tool_choice=required)",
        "Prompt cache: this request starts a new prefix (a different tool list)",
        "Extracting the outputs from the conversation",
        "Turn ended: extracted (max_iters)",
    ]
    answer = chunks(items, "answer")
    assert segments(answer) == ["On the shelf."]
    assert {c.predict_name for c in answer} == {"extract"}


def test_finished_by_tool(how):
    hook = {"look": lambda args, result, inputs: dspy_imp.Finish(answer="shelf", confidence=1.0)}
    agent = dspy_imp.ReActV2(SubmitSig, tools=[Look()], finish="tools", finish_on=hook)
    items = streamed(agent, ScriptedLM([LOOK]), how, "answer", intent="k")
    assert statuses(items) == [*LOOKED, "Turn ended: finished_by_tool"]
    assert items[-1].answer == "shelf"


def test_a_retry_under_the_deadline(how):
    lm = ScriptedLM([fail.rate_limit(retry_after=0.01), reply("shelf")])
    with dspy_imp.deadline(seconds=60):
        items = streamed(dspy_imp.ReActV2(TA, tools=[Look()]), lm, how, "answer", intent="k")
    assert statuses(items) == ["Retrying in 0.01s after LMRateLimitError", "Turn ended: answered"]
    assert segments(chunks(items, "answer")) == ["shelf"]


def test_incomplete(how):
    hook = {"look": lambda args, result, inputs: None}
    agent = dspy_imp.ReActV2(SubmitSig, tools=[Look()], finish="tools", finish_on=hook, max_iters=1)
    items = streamed(agent, ScriptedLM([LOOK]), how, "answer", intent="k")
    assert statuses(items) == [*LOOKED, "Turn ended: incomplete (max_iters)"]
    assert chunks(items, "answer") == [] and items[-1].answer is None


def test_context_window_recovery(how):
    prior = [
        {"intent": f"q{i}", "next_thought": f"a{i}", "answer": f"a{i}", "tool_calls": [], "tool_call_results": []}
        for i in range(4)
    ]
    lm = ScriptedLM([fail.context_window(), reply("fits now")])
    agent = dspy_imp.ReActV2(TA, tools=[Look()])
    items = streamed(agent, lm, how, "answer", intent="q4", history=dspy.History(messages=prior))
    assert statuses(items) == [
        "Context window exceeded: resending with 2 earlier entries left out",
        "Prompt cache: this request starts a new prefix (the context policy changed earlier entries)",
        "Turn ended: answered",
    ]
    assert segments(chunks(items, "answer")) == ["fits now"]


def test_a_step_error_reaches_the_consumer_with_its_history(how):
    lm = ScriptedLM([LOOK, fail.raises(LMAuthError("Incorrect API key provided.", status=401))])
    seen: list[Any] = []
    with dspy.context(lm=lm), pytest.raises(dspy_imp.StepError) as caught:
        stream = dspy.streamify(
            dspy_imp.ReActV2(TA, tools=[Look()]),
            status_message_provider=dspy_imp.StatusMessageProvider(),
            is_async_program=how == "async",
            async_streaming=False,
        )
        for item in stream(intent="keys?"):
            seen.append(item)
    assert statuses(seen) == [*LOOKED, "Turn ended: error (LMAuthError)"]
    assert [entry["tool_calls"][0]["name"] for entry in caught.value.history.messages] == ["look"]


def test_without_listeners_status_messages_and_dspys_raw_chunks_arrive(how):
    lm = ScriptedLM([LOOK, reply("On the shelf.")])
    with dspy.context(lm=lm):
        items = stream_items(dspy_imp.ReActV2(TA, tools=[Look()]), how, [], intent="k")
    assert statuses(items) == [*LOOKED, "Turn ended: answered"]
    raw = [i for i in items if not isinstance(i, dspy.streaming.StatusMessage | dspy.Prediction)]
    assert raw and all(hasattr(i, "choices") for i in raw)  # as DSPy streams a program without listeners
    assert items[-1].answer == "On the shelf."


class Terse(dspy_imp.StatusMessageProvider):
    def tool_start_status_message(self, instance: Any, inputs: dict[str, Any]) -> str:
        return f"> {instance.name}"

    def turn_end_status_message(self, reason: str, cause: str | None) -> str:
        return f"done: {reason}"

    def request_status_message(self, kind: str, omitted: int) -> None:
        return None


class PlainDSPy(dspy.streaming.StatusMessageProvider):
    def tool_end_status_message(self, outputs: Any) -> str:
        return f"got {outputs}"


@pytest.mark.parametrize(
    ("provider", "expected"),
    [
        pytest.param(Terse(), ["> look", 'Tool returned: {"seen": true}', "done: last_text"], id="dspy_imp-subclass"),
        pytest.param(
            PlainDSPy(),
            [
                "Calling tool look...",
                "got {'seen': True}",
                "Asking for a last text answer",
                "Turn ended: last_text (max_iters)",
            ],
            id="plain-dspy",
        ),
    ],
)
def test_a_user_supplied_provider_is_used(how, provider, expected):
    lm = ScriptedLM([LOOK, reply("shelf")])
    with dspy.context(lm=lm):
        items = stream_items(dspy_imp.ReActV2(TA, tools=[Look()], max_iters=1), how, [], provider=provider, intent="k")
    assert statuses(items) == expected


def test_a_listener_follows_an_agent_inside_a_larger_program(how):
    class Outer(dspy.Module):
        def __init__(self) -> None:
            super().__init__()
            self.agent = dspy_imp.ReActV2(TA, tools=[Look()])

        def forward(self, intent: str) -> Any:
            return self.agent(intent=intent)

        async def aforward(self, intent: str) -> Any:
            return await self.agent.acall(intent=intent)

    outer = Outer()
    lm = ScriptedLM([reply("one"), reply("two")])
    with dspy.context(lm=lm):
        named = stream_items(
            outer, how, [StreamListener("answer", predict=outer.agent, predict_name="agent")], intent="k"
        )
        other = stream_items(outer, how, [StreamListener("answer", predict=dspy_imp.ReActV2(TA))], intent="k")
    assert [(c.predict_name, c.chunk) for c in chunks(named, "answer")] == [("agent", "one"), ("agent", "")]
    assert chunks(other, "answer") == []  # a listener for another program hears nothing of this one
    assert other[-1].answer == "two"


@pytest.mark.parametrize("target", ["auto", "react"])
def test_dspys_own_listener_is_refused_with_a_clear_error(how, target):
    agent = dspy_imp.ReActV2(TA, tools=[Look()])
    listener = dspy.streaming.StreamListener("next_thought", predict=agent.react if target == "react" else None)
    lm = ScriptedLM([reply("never sent")])
    with (
        dspy.context(lm=lm),
        pytest.raises(dspy_imp.ConfigurationError, match=r"dspy_imp.StreamListener\('next_thought'\)"),
    ):
        stream_items(agent, how, [listener], intent="k")
    assert lm.requests == []


def test_tools_run_at_once_each_send_their_status_with_their_own_name(how):
    calls = [call("look", {"where": "a"}, id="c1"), call("look", {"where": "b"}, id="c2")]
    lm = ScriptedLM([reply(calls=calls), reply("done")])
    with dspy.context(lm=lm):
        items = stream_items(dspy_imp.ReActV2(TA, tools=[Look()]), how, [StreamListener("answer")], intent="k")
    lines = statuses(items)
    assert sorted(lines[:4]) == sorted(
        ['Calling look({"where": "a"})', 'Calling look({"where": "b"})', *['look returned: {"seen": true}'] * 2]
    )
    assert lines[4:] == ["Turn ended: answered"]
    assert segments(chunks(items, "answer")) == ["done"]


def test_a_refused_call_has_its_status_too(how):
    lm = ScriptedLM([LOOK, reply("Not allowed, sorry.")])
    agent = dspy_imp.ReActV2(TA, tools=[Look()], tool_policy=lambda name, args: False)
    items = streamed(agent, lm, how, "answer", intent="k")
    assert statuses(items) == [LOOKED[0], "look finished with no result", "Turn ended: answered"]
