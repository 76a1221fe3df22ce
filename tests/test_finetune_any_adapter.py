"""``BootstrapFinetune`` writes a loop step as the request the loop sent whatever adapter it formats
with: its own ``adapter=``, ``dspy.settings.adapter`` or DSPy's default ``ChatAdapter`` (issue 23,
point 16). Before, anything but ``ReActAdapter`` re-rendered the steps as text, without tool results."""

from __future__ import annotations

import json
from typing import Any

import dspy
import pytest
from dspy.teleprompt.bootstrap_finetune import BootstrapFinetune
from helpers import TA, Look

import dspy_imp
from dspy_imp.testing import ScriptedLM, call, reply

ADAPTERS = {
    "default": lambda: {},  # nothing configured: DSPy formats with a ChatAdapter
    "settings-json": lambda: {"settings": dspy.JSONAdapter()},
    "optimizer-chat": lambda: {"optimizer": dspy.ChatAdapter()},
    "optimizer-xml": lambda: {"optimizer": dspy.XMLAdapter()},
}


@pytest.mark.parametrize("adapters", ADAPTERS.values(), ids=ADAPTERS.keys())
def test_the_data_is_the_requests_the_loop_sent(run, adapters):
    chosen = adapters()
    lm = ScriptedLM([reply("checking", calls=[call("look", {"where": "shelf"}, id="c1")]), reply("a cat")])
    agent = dspy_imp.ReActV2(TA, tools=[Look()])
    with dspy.context(lm=lm, adapter=chosen.get("settings"), trace=[]):
        prediction = run(agent, intent="what is on the shelf?")
        trace = list(dspy.settings.trace)
        traced = [{"example": None, "prediction": prediction, "trace": trace, "score": True}]
        finetune = BootstrapFinetune(adapter=chosen.get("optimizer"), num_threads=1)
        data, data_format = finetune._prepare_finetune_data(trace_data=traced, lm=lm)

    assert data_format == "chat"
    first, second = lm.requests
    by_length = sorted(data, key=lambda d: len(d["messages"]))
    assert [_compact(d["messages"])[:-1] for d in by_length] == [first.messages, second.messages]
    ours = [dspy_imp.ReActAdapter().format_finetune_data(p.signature, [], i, o) for p, i, o in trace]
    assert by_length == sorted(ours, key=lambda d: len(d["messages"]))  # what ReActAdapter writes
    (result,) = [m for m in by_length[1]["messages"] if m["role"] == "tool"]
    assert (result["tool_call_id"], result["content"]) == ("c1", '{"seen": true}')
    assert [d["tools"] for d in by_length] == [first.tools, second.tools]
    if "settings" in chosen:
        return  # the replies are written as the JSON dialect writes them (test_drop_in.py covers the dialects)
    assert [_compact(d["messages"])[-1:] for d in by_length] == [
        [
            {
                "role": "assistant",
                "content": "checking",
                "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "look", "arguments": '{"where":"shelf"}'}}
                ],
            },
        ],
        [{"role": "assistant", "content": "a cat"}],
    ]


def test_other_programs_steps_are_formatted_by_dspy_as_before():
    lm = dspy.utils.DummyLM([{"answer": "a cat"}])
    dspy_imp.ReActV2(TA)  # a loop program exists; a plain Predict's data is DSPy's own
    predict = dspy.Predict("question -> answer")
    with dspy.context(lm=lm, trace=[]):
        predict(question="what is on the shelf?")
        trace = list(dspy.settings.trace)
    traced = [{"example": None, "prediction": None, "trace": trace, "score": True}]
    data, _ = BootstrapFinetune(num_threads=1)._prepare_finetune_data(trace_data=traced, lm=lm)
    (pred, inputs, outputs) = trace[0]
    assert data == [dspy.ChatAdapter().format_finetune_data(pred.signature, pred.demos, inputs, outputs)]


def _compact(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Arguments as the scripted engine records them (lm15 re-serializes them compactly)."""
    out = []
    for message in messages:
        message = dict(message)
        if message.get("tool_calls"):
            message["tool_calls"] = [
                {
                    **c,
                    "function": {
                        **c["function"],
                        "arguments": json.dumps(json.loads(c["function"]["arguments"]), separators=(",", ":")),
                    },
                }
                for c in message["tool_calls"]
            ]
        elif message["role"] == "assistant" and message.get("content") == "":
            message["content"] = None
        out.append(message)
    return out


def test_a_sub_agents_requests_are_fine_tuning_data_of_the_team(run):
    lm = ScriptedLM(
        [
            reply(calls=[call("researcher", {"question": "what is on the shelf?"}, id="p1")]),
            reply("checking", calls=[call("look", {"where": "shelf"}, id="c1")]),
            reply("a cat"),
            reply("A cat is on the shelf."),
        ]
    )
    researcher = dspy_imp.ReActV2("question -> findings", tools=[Look()])
    team = dspy_imp.ReActV2("ticket -> reply", tools=[researcher.as_tool(name="researcher")])
    team.set_lm(lm)
    with dspy.context(trace=[]):
        prediction = run(team, ticket="what is on the shelf?")
        trace = list(dspy.settings.trace)
        traced = [{"example": None, "prediction": prediction, "trace": trace, "score": True}]
        data, _ = BootstrapFinetune(num_threads=1)._prepare_finetune_data(trace_data=traced, lm=lm)
    assert [p for p, _, _ in trace] == [team.react, researcher.react, researcher.react, team.react]
    sent = sorted(json.dumps(r.messages) for r in lm.requests)
    assert sorted(json.dumps(_compact(d["messages"])[:-1]) for d in data) == sent  # both agents' requests
