"""Reference §12 H: history_replay (SPEC §1, §4 "prefix stability"; reference §7.6).

``"trajectory"`` (the default) replays every recorded step whole. ``"actions"`` shows the
earlier turns as their inputs, their calls with their results, and their answers; the text
and the reasoning written beside calls are left out, and so is a step that only wrote text
(with its line). The current turn is shown whole. It starts at the call's new inputs, or at
its own ``last_request_note``; on a resume with neither, at the last entry carrying inputs.
Only the prompt changes: the returned history keeps every entry in both modes.

Every prior entry below has its own narration, reasoning and tool result, so moving the
turn boundary, or leaking narration or reasoning across it, fails these tests (H6).
"""

from __future__ import annotations

import json
import re
from typing import Any

import dspy
import pytest
from helpers import LINE_PLAIN, MESSAGE_REPLY_TEXT_ANSWER_SYSTEM, Look, assistant, inputs, tool, user

import dspy_imp
from dspy_imp.testing import ScriptedLM, call, reply

T0 = "2026-01-01T00:00:00.000Z"
ISO_UTC = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|\+00:00)$")
LINE_TOOLS = "Your message above was not sent. To end the turn, call `send` or `decline`; to keep working, call a tool."


def send(text: str) -> str:
    """Send the reply to the person."""
    return f"delivered: {text}"


def decline(reason: str = "") -> str:
    """Decline to reply."""
    return "declined"


FINISH_ON = {
    "send": lambda a, r, i: dspy_imp.Finish(reply=a["text"]),
    "decline": lambda a, r, i: dspy_imp.Finish(reply=""),
}


def tools_agent(replay: str, look: Look | None = None, **options: Any) -> dspy_imp.ReActV2:
    return dspy_imp.ReActV2(
        "message -> reply",
        tools=[look or Look(), send, decline],
        finish="tools",
        finish_on=FINISH_ON,
        history_replay=replay,
        **options,
    )


def entry(
    call_id: str,
    name: str,
    args: dict[str, Any],
    result: Any,
    thought: str | None = None,
    reasoning: str | None = None,
    **keys: Any,
) -> dict[str, Any]:
    """A recorded tool step in the history's entry shape."""
    data: dict[str, Any] = dict(keys)
    if thought is not None:
        data["next_thought"] = thought
    if reasoning is not None:
        data["reasoning_content"] = reasoning
    data["tool_calls"] = [{"id": call_id, "name": name, "args": args}]
    data["tool_call_results"] = [{"id": call_id, "name": name, "result": result, "error": False, "returned_at": T0}]
    return data


def thought_entry(text: str, **keys: Any) -> dict[str, Any]:
    return {**keys, "next_thought": text, "tool_calls": [], "tool_call_results": []}


def stamped(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The entries with every ``returned_at`` checked as ISO 8601 UTC and replaced by ``T0``."""
    out = []
    for item in entries:
        results = []
        for result in item.get("tool_call_results", []):
            assert ISO_UTC.match(result["returned_at"]), result["returned_at"]
            results.append({**result, "returned_at": T0})
        out.append({**item, "tool_call_results": results})
    return out


def native(call_id: str, name: str, args: dict[str, Any]) -> tuple[str, str, str]:
    return (call_id, name, json.dumps(args, separators=(",", ":")))


# -- H1, H2: one finished turn, then a call with new inputs ----------------------------------------

FINISHED_TURN = [
    entry("c1", "look", {"where": "desk"}, "r1: a stapler", "narration one", "rc one", message="m1"),
    thought_entry("a thought"),
    entry("c3", "send", {"text": "A stapler."}, "r3: delivered once", "sending", "rc three"),
]

H1_EARLIER = {
    "actions": [
        inputs(message="m1"),
        assistant("", [native("c1", "look", {"where": "desk"})]),
        tool("c1", "r1: a stapler"),
        assistant("", [native("c3", "send", {"text": "A stapler."})]),
        tool("c3", "r3: delivered once"),
    ],
    "trajectory": [
        inputs(message="m1"),
        assistant("narration one", [native("c1", "look", {"where": "desk"})], reasoning_content="rc one"),
        tool("c1", "r1: a stapler"),
        assistant("a thought"),
        user(LINE_TOOLS),
        assistant("sending", [native("c3", "send", {"text": "A stapler."})], reasoning_content="rc three"),
        tool("c3", "r3: delivered once"),
    ],
}


@pytest.mark.parametrize("replay", ["actions", "trajectory"])
def test_h1_h2_earlier_narration_and_thoughts_by_replay_mode(run, replay):
    lm = ScriptedLM(
        [
            reply("n new", reasoning="rc new", calls=[call("look", {"where": "shelf"}, id="c4")]),
            reply("t new"),
            reply(calls=[call("send", {"text": "On the shelf."}, id="c5")]),
        ]
    )
    caller_history = dspy.History(messages=[dict(e) for e in FINISHED_TURN])
    with dspy.context(lm=lm):
        pred = run(tools_agent(replay), message="m2", history=caller_history)

    r1, r2, r3 = (r.messages for r in lm.requests)
    system = r1[0]
    assert system["role"] == "system"
    assert r1 == [system, *H1_EARLIER[replay], inputs(message="m2")]
    # The current turn is shown whole (narration, reasoning, the thought and its line) in both modes.
    assert r2 == [
        *r1,
        assistant("n new", [native("c4", "look", {"where": "shelf"})], reasoning_content="rc new"),
        tool("c4", '{"seen": true}'),
    ]
    assert r3 == [*r2, assistant("t new"), user(LINE_TOOLS)]
    if replay == "actions":
        earlier = json.dumps(r1[1:])
        for leaked in ("narration one", "rc one", "a thought", "sending", "rc three", "not sent"):
            assert leaked not in earlier, leaked

    assert pred.reply == "On the shelf."
    # The returned history keeps every entry, whatever the prompt showed.
    history = pred.metadata.history.messages
    assert history[:3] == FINISHED_TURN
    assert stamped(history[3:]) == [
        entry("c4", "look", {"where": "shelf"}, {"seen": True}, "n new", "rc new", message="m2"),
        thought_entry("t new"),
        entry("c5", "send", {"text": "On the shelf."}, "delivered: On the shelf."),
    ]
    assert caller_history.messages == FINISHED_TURN  # the caller's history is not mutated


def test_h1_the_earlier_turn_is_compressed_once_it_becomes_earlier(run):
    # Turn 1 is recorded live under "actions"; turn 2 then shows it without narration or reasoning.
    agent = tools_agent("actions")
    lm = ScriptedLM(
        [
            reply("first narration", reasoning="first reasoning", calls=[call("look", {"where": "desk"}, id="c1")]),
            reply("first thought"),
            reply("sending now", reasoning="send reasoning", calls=[call("send", {"text": "Stapler."}, id="c2")]),
            reply(calls=[call("send", {"text": "Still a stapler."}, id="c3")]),
        ]
    )
    with dspy.context(lm=lm):
        first = run(agent, message="m1")
        second = run(agent, message="m2", history=first.metadata.history)

    assert lm.requests[2].messages[1:] == [
        inputs(message="m1"),
        assistant("first narration", [native("c1", "look", {"where": "desk"})], reasoning_content="first reasoning"),
        tool("c1", '{"seen": true}'),
        assistant("first thought"),
        user(LINE_TOOLS),
    ]
    assert lm.requests[3].messages[1:] == [
        inputs(message="m1"),
        assistant("", [native("c1", "look", {"where": "desk"})]),
        tool("c1", '{"seen": true}'),
        assistant("", [native("c2", "send", {"text": "Stapler."})]),
        tool("c2", "delivered: Stapler."),
        inputs(message="m2"),
    ]
    assert second.reply == "Still a stapler."
    assert len(second.metadata.history.messages) == 4
    assert second.metadata.history.messages[:3] == first.metadata.history.messages


# -- H3: a resume mid-turn ---------------------------------------------------------------------------

MID_TURN = [
    entry("c1", "look", {"where": "desk"}, "r1: a stapler", "n1", "rc1", message="m1"),
    entry("c2", "send", {"text": "A stapler."}, "r2: delivered once", "n2", "rc2"),
    entry("c3", "look", {"where": "shelf"}, "r3: a lamp", "n3", "rc3", message="m2"),
    thought_entry("t4"),
]

H3_TURN_ONE = {
    "actions": [
        inputs(message="m1"),
        assistant("", [native("c1", "look", {"where": "desk"})]),
        tool("c1", "r1: a stapler"),
        assistant("", [native("c2", "send", {"text": "A stapler."})]),
        tool("c2", "r2: delivered once"),
    ],
    "trajectory": [
        inputs(message="m1"),
        assistant("n1", [native("c1", "look", {"where": "desk"})], reasoning_content="rc1"),
        tool("c1", "r1: a stapler"),
        assistant("n2", [native("c2", "send", {"text": "A stapler."})], reasoning_content="rc2"),
        tool("c2", "r2: delivered once"),
    ],
}

H3_CURRENT = [
    inputs(message="m2"),
    assistant("n3", [native("c3", "look", {"where": "shelf"})], reasoning_content="rc3"),
    tool("c3", "r3: a lamp"),
    assistant("t4"),
    user(LINE_TOOLS),
]


@pytest.mark.parametrize("replay", ["actions", "trajectory"])
def test_h3_a_resume_mid_turn_keeps_the_current_turn_whole(run, replay):
    seen: list[dict[str, Any]] = []

    def on_send(args, result, given):
        seen.append(given)
        return dspy_imp.Finish(reply=args["text"])

    agent = dspy_imp.ReActV2(
        "message -> reply",
        tools=[Look(), send, decline],
        finish="tools",
        finish_on={"send": on_send, "decline": FINISH_ON["decline"]},
        history_replay=replay,
    )
    lm = ScriptedLM(
        [
            reply("n5", reasoning="rc5", calls=[call("look", {"where": "floor"}, id="c5")]),
            reply(calls=[call("send", {"text": "A lamp."}, id="c6")]),
        ]
    )
    with dspy.context(lm=lm):
        pred = run(agent, history=dspy.History(messages=MID_TURN))  # no inputs, no note

    r1, r2 = (r.messages for r in lm.requests)
    assert r1 == [r1[0], *H3_TURN_ONE[replay], *H3_CURRENT]  # ends on the line: nothing is pending
    # A step recorded in this call carries no inputs: the boundary stays at the entry with m2.
    assert r2 == [
        *r1,
        assistant("n5", [native("c5", "look", {"where": "floor"})], reasoning_content="rc5"),
        tool("c5", '{"seen": true}'),
    ]
    assert pred.reply == "A lamp."
    assert seen == [{}]  # a pure resume gives the hook no inputs
    history = pred.metadata.history.messages
    assert history[:4] == MID_TURN
    assert stamped(history[4:]) == [
        entry("c5", "look", {"where": "floor"}, {"seen": True}, "n5", "rc5"),
        entry("c6", "send", {"text": "A lamp."}, "delivered: A lamp."),
    ]


# -- H4: the call's own note starts the current turn ------------------------------------------------

SYSTEM_TEXT_ANSWER = MESSAGE_REPLY_TEXT_ANSWER_SYSTEM


@pytest.mark.parametrize(
    "program",
    [
        pytest.param(lambda: tools_agent("actions"), id="tools-program"),
        pytest.param(
            lambda: dspy_imp.ReActV2("message -> reply", tools=[Look(), send, decline], history_replay="actions"),
            id="auto-text-answer-program",
        ),
    ],
)
def test_h4_the_calls_own_note_makes_every_prior_entry_earlier(run, program):
    summary = "You asked about your desk and shelf; a stapler and a lamp."
    lm = ScriptedLM([reply(summary)])
    with dspy.context(lm=lm):
        pred = run(
            program(),
            history=dspy.History(messages=MID_TURN),
            finish="auto",
            max_iters=0,
            last_request_note="Summarise.",
        )

    [request] = lm.requests
    assert request.tool_choice == "auto"
    assert request.tool_names == ["look", "send", "decline"]
    assert request.messages == [
        SYSTEM_TEXT_ANSWER,
        *H3_TURN_ONE["actions"],
        inputs(message="m2"),
        assistant("", [native("c3", "look", {"where": "shelf"})]),  # n3 and rc3 left out
        tool("c3", "r3: a lamp"),
        # the thought t4 is left out entirely, with its line
        inputs(message="Summarise."),
    ]
    assert pred.reply == summary
    meta = pred.metadata
    assert (meta.termination_reason, meta.termination_cause) == ("last_text", "max_iters")
    assert meta.history.messages == [
        *MID_TURN,
        {"message": "Summarise.", "tool_calls": [], "tool_call_results": []},
        {"next_thought": summary, "reply": summary, "tool_calls": [], "tool_call_results": []},
    ]


def test_h4_under_trajectory_the_same_summary_request_shows_everything(run):
    lm = ScriptedLM([reply("A summary.")])
    agent = dspy_imp.ReActV2("message -> reply", tools=[Look(), send, decline])
    with dspy.context(lm=lm):
        run(agent, history=dspy.History(messages=MID_TURN), max_iters=0, last_request_note="Summarise.")

    assert lm.requests[0].messages == [
        SYSTEM_TEXT_ANSWER,
        *H3_TURN_ONE["trajectory"],
        *H3_CURRENT[:4],
        user(LINE_PLAIN),  # a text-answer loop's line after a thought
        inputs(message="Summarise."),
    ]


# -- H5: answers are shown whole ---------------------------------------------------------------------


@pytest.mark.parametrize("replay", ["actions", "trajectory"])
def test_h5_an_earlier_text_answer_is_shown_whole(run, replay):
    prior = [
        {"message": "m0", "reply": "Hello again."},  # a host-written plain turn
        entry("c1", "look", {"where": "desk"}, "r1: keys", "n1", "rc1", message="m1"),
        {
            "next_thought": "They are on the desk.",
            "reply": "They are on the desk.",
            "reasoning_content": "rc2 answer",
            "tool_calls": [],
            "tool_call_results": [],
        },
    ]
    lm = ScriptedLM([reply("Still on the desk.")])
    agent = dspy_imp.ReActV2("message -> reply", tools=[Look()], history_replay=replay)
    with dspy.context(lm=lm):
        pred = run(agent, message="m2", history=dspy.History(messages=prior))

    narration = {"actions": ("", {}), "trajectory": ("n1", {"reasoning_content": "rc1"})}[replay]
    assert lm.requests[0].messages[1:] == [
        inputs(message="m0"),
        assistant("Hello again."),
        inputs(message="m1"),
        assistant(narration[0], [native("c1", "look", {"where": "desk"})], **narration[1]),
        tool("c1", "r1: keys"),
        assistant("They are on the desk.", reasoning_content="rc2 answer"),  # whole, with no line
        inputs(message="m2"),
    ]
    assert pred.reply == "Still on the desk."
    assert pred.metadata.history.messages[:3] == prior


def test_h5_an_earlier_submit_answer_is_shown_whole(run):
    prior = [
        entry("c1", "look", {"where": "desk"}, "r1: keys", "n1", "rc1", message="m1"),
        {
            **entry("s2", "submit", {"reply": "On the desk."}, {"reply": "On the desk."}, "submitting", "rc2"),
            "reply": "On the desk.",
        },
    ]
    lm = ScriptedLM([reply(calls=[call("submit", {"reply": "Still there."}, id="s3")])])
    agent = dspy_imp.ReActV2("message -> reply", tools=[Look()], finish="submit", history_replay="actions")
    with dspy.context(lm=lm):
        pred = run(agent, message="m2", history=dspy.History(messages=prior))

    assert lm.requests[0].tool_names == ["look", "submit"]
    assert lm.requests[0].messages[1:] == [
        inputs(message="m1"),
        assistant("", [native("c1", "look", {"where": "desk"})]),
        tool("c1", "r1: keys"),
        assistant("submitting", [native("s2", "submit", {"reply": "On the desk."})], reasoning_content="rc2"),
        tool("s2", '{"reply": "On the desk."}'),
        inputs(message="m2"),
    ]
    assert pred.reply == "Still there."
    assert pred.metadata.termination_reason == "submit"
    assert pred.metadata.history.messages[:2] == prior


# -- the option itself ---------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["all", "Actions", None, 1])
def test_history_replay_must_be_trajectory_or_actions(value):
    with pytest.raises(dspy_imp.ConfigurationError, match="history_replay"):
        dspy_imp.ReActV2("message -> reply", tools=[Look()], history_replay=value)


def test_actions_is_opt_in():
    agent = dspy_imp.ReActV2("message -> reply", tools=[Look()])
    assert agent.options.history_replay == "trajectory"
