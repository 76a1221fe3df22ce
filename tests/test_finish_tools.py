"""Reference §12 G: finish="tools" (SPEC §2, §4; reference §3, §4.2, §7.3, §8, §9 item 7).

Under ``"tools"`` only a ``finish_on`` tool ends a turn: there is no ``submit``, nothing is
forced and there is no last request. A thought gets one continued step followed by the
unsent line naming the ending tools; a second thought, a silent step, the step limit or a
second failed request end the turn ``"incomplete"``.

Fixture (reference §12 G): signature ``message -> reply``; tools ``[look, send, decline]``
declared in that order; ``send`` finishes with its text, ``decline`` with an empty reply.
The ending tools are named in declared order (SPEC §4), so this fixture reads
``send`` or ``decline``; the SPEC's literal ``decline`` or ``send`` lines are pinned with
the tools declared the other way round.
"""

from __future__ import annotations

import json
import re
from typing import Any

import dspy
import pytest
from helpers import MESSAGE_REPLY_TEXT_ANSWER_SYSTEM, Look, assistant, inputs, tool, user

import dspy_imp
from dspy_imp.testing import ScriptedLM, call, fail, reply

WITHIN = 0.4  # the deadline (seconds on the test's clock, ``fake_clock``)
SLOW = 0.8  # how long a reply that must pass it takes (on that clock: however busy the machine is)
T0 = "2026-01-01T00:00:00.000Z"
ISO_UTC = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|\+00:00)$")

LINE_TOOLS = "Your message above was not sent. To end the turn, call `send` or `decline`; to keep working, call a tool."
FINISH_LINE = "The turn ends only when you call `send` or `decline`. Text you write is not sent."


def system(finish_line: str = FINISH_LINE, tools: str = "`look`, `send`, `decline`") -> dict[str, str]:
    return {
        "role": "system",
        "content": (f"Given the fields `message`, produce the fields `reply`.\n{finish_line}"),
    }


SYSTEM_TOOLS = system()

SYSTEM_TEXT_ANSWER = MESSAGE_REPLY_TEXT_ANSWER_SYSTEM


class Outbox:
    """``send`` and ``decline``, recording what went out."""

    def __init__(self) -> None:
        self.sent: list[str] = []
        self.declined: list[str] = []

        def send(text: str) -> str:
            """Send the reply to the person."""
            self.sent.append(text)
            return f"delivered: {text}"

        def decline(reason: str = "") -> str:
            """Decline to reply."""
            self.declined.append(reason)
            return "declined"

        self.send, self.decline = send, decline


def on_send(args: dict[str, Any], result: Any, given: dict[str, Any]) -> dspy_imp.Finish:
    return dspy_imp.Finish(reply=args["text"])


def on_decline(args: dict[str, Any], result: Any, given: dict[str, Any]) -> dspy_imp.Finish:
    return dspy_imp.Finish(reply="")


FINISH_ON = {"send": on_send, "decline": on_decline}


def tools_agent(box: Outbox | None = None, look: Look | None = None, **options: Any) -> dspy_imp.ReActV2:
    box = box or Outbox()
    options.setdefault("finish", "tools")
    options.setdefault("finish_on", FINISH_ON)
    return dspy_imp.ReActV2("message -> reply", tools=[look or Look(), box.send, box.decline], **options)


def thought(text: str, **keys: Any) -> dict[str, Any]:
    return {**keys, "next_thought": text, "tool_calls": [], "tool_call_results": []}


def step(call_id: str, name: str, args: dict[str, Any], result: Any, **keys: Any) -> dict[str, Any]:
    return {
        **keys,
        "tool_calls": [{"id": call_id, "name": name, "args": args}],
        "tool_call_results": [{"id": call_id, "name": name, "result": result, "error": False, "returned_at": T0}],
    }


def stamped(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The entries with every ``returned_at`` checked as ISO 8601 UTC and replaced by ``T0``."""
    out = []
    for entry in entries:
        results = []
        for result in entry.get("tool_call_results", []):
            assert ISO_UTC.match(result["returned_at"]), result["returned_at"]
            results.append({**result, "returned_at": T0})
        out.append({**entry, "tool_call_results": results})
    return out


def assert_meta(pred: Any, reason: str, cause: str | None, **expected: Any) -> None:
    meta = pred.metadata
    assert (meta.termination_reason, meta.termination_cause) == (reason, cause)
    assert meta.complete is (reason != "incomplete")
    assert dspy_imp.is_complete(pred) is (reason != "incomplete")
    assert meta.unexecuted_tool_calls == ()
    for key, value in expected.items():
        assert getattr(meta, key) == value, key


def assert_no_submit_ever(lm: ScriptedLM) -> None:
    for request in lm.requests:
        assert request.tool_names == ["look", "send", "decline"]
        assert request.tool_choice == "auto"
        assert "reasoning_effort" not in request.options


# -- G1: a thought continues; only an ending tool ends ----------------------------------------------


def test_g1_a_thought_continues_and_only_an_ending_tool_ends(run):
    box = Outbox()
    lm = ScriptedLM([reply("I'll look it up."), reply(calls=[call("send", {"text": "Hi"}, id="s1")])])
    with dspy.context(lm=lm):
        pred = run(tools_agent(box), message="hello")

    r1, r2 = (r.messages for r in lm.requests)
    assert r1 == [SYSTEM_TOOLS, inputs(message="hello")]
    assert r2 == [SYSTEM_TOOLS, inputs(message="hello"), assistant("I'll look it up."), user(LINE_TOOLS)]
    assert_no_submit_ever(lm)
    assert box.sent == ["Hi"]
    assert pred.reply == "Hi" and list(pred.keys()) == ["reply"]
    assert_meta(pred, "finished_by_tool", None, finished_by_tool="send", termination_error=None)
    assert stamped(pred.metadata.history.messages) == [
        thought("I'll look it up.", message="hello"),
        step("s1", "send", {"text": "Hi"}, "delivered: Hi"),  # the hook's outputs are not recorded
    ]
    lm.assert_complete()


def test_g1_decline_ends_the_turn_too(run):
    box = Outbox()
    lm = ScriptedLM([reply(calls=[call("decline", {"reason": "spam"}, id="d1")])])
    with dspy.context(lm=lm):
        pred = run(tools_agent(box), message="buy now")

    assert len(lm.requests) == 1
    assert box.declined == ["spam"] and box.sent == []
    assert pred.reply == ""
    assert_meta(pred, "finished_by_tool", None, finished_by_tool="decline")


def test_g1_a_tool_step_then_an_ending_tool_extends_the_prefix(run):
    look = Look()
    lm = ScriptedLM(
        [
            reply("checking the shelf", calls=[call("look", {"where": "shelf"}, id="c1")]),
            reply(calls=[call("send", {"text": "It is on the shelf."}, id="s1")]),
        ]
    )
    with dspy.context(lm=lm):
        pred = run(tools_agent(look=look), message="where is it?")

    r1, r2 = (r.messages for r in lm.requests)
    assert r2 == [
        *r1,
        assistant("checking the shelf", [("c1", "look", '{"where":"shelf"}')]),
        tool("c1", '{"seen": true}'),
    ]
    assert look.runs == [{"where": "shelf"}]
    assert pred.reply == "It is on the shelf."
    assert_meta(pred, "finished_by_tool", None, finished_by_tool="send")


def test_g1_the_spec_lines_read_decline_or_send_when_declared_in_that_order(run):
    # SPEC §4's literal strings; the tools' declared order wins over finish_on's order.
    box = Outbox()
    agent = dspy_imp.ReActV2(
        "message -> reply", tools=[Look(), box.decline, box.send], finish="tools", finish_on=FINISH_ON
    )
    lm = ScriptedLM([reply("Thinking it over."), reply(calls=[call("decline", {}, id="d1")])])
    with dspy.context(lm=lm):
        pred = run(agent, message="hello")

    spec_finish = "The turn ends only when you call `decline` or `send`. Text you write is not sent."
    spec_line = (
        "Your message above was not sent. To end the turn, call `decline` or `send`; to keep working, call a tool."
    )
    sys = system(spec_finish, "`look`, `decline`, `send`")
    assert lm.requests[1].messages == [sys, inputs(message="hello"), assistant("Thinking it over."), user(spec_line)]
    assert pred.reply == "" and pred.metadata.finished_by_tool == "decline"


def test_g1_three_ending_tools_join_with_commas_and_or(run):
    box = Outbox()

    def escalate(team: str) -> str:
        """Hand the conversation to a team."""
        return f"escalated to {team}"

    agent = dspy_imp.ReActV2(
        "message -> reply",
        tools=[Look(), box.send, box.decline, escalate],
        finish="tools",
        finish_on={**FINISH_ON, "escalate": lambda a, r, i: dspy_imp.Finish(reply=f"escalated:{a['team']}")},
    )
    lm = ScriptedLM([reply("Hmm."), reply(calls=[call("escalate", {"team": "billing"}, id="e1")])])
    with dspy.context(lm=lm):
        pred = run(agent, message="refund?")

    system_text = lm.requests[0].messages[0]["content"]
    assert (
        "The turn ends only when you call `send`, `decline` or `escalate`. Text you write is not sent." in system_text
    )
    assert lm.requests[1].messages[-1] == user(
        "Your message above was not sent. To end the turn, call `send`, `decline` or `escalate`; "
        "to keep working, call a tool."
    )
    assert pred.reply == "escalated:billing"
    assert pred.metadata.finished_by_tool == "escalate"


# -- G2, G3, G13: incomplete endings -----------------------------------------------------------------


def test_g2_two_thoughts_end_incomplete_after_two_requests(run):
    lm = ScriptedLM([reply("a"), reply("b")])
    with dspy.context(lm=lm):
        pred = run(tools_agent(), message="hello")

    assert len(lm.requests) == 2  # nothing forced, no last request
    assert lm.requests[1].messages == [SYSTEM_TOOLS, inputs(message="hello"), assistant("a"), user(LINE_TOOLS)]
    assert_no_submit_ever(lm)
    assert pred.reply is None and list(pred.keys()) == ["reply"]
    assert_meta(pred, "incomplete", "empty_tool_calls", termination_error=None, finished_by_tool=None)
    assert pred.metadata.history.messages == [thought("a", message="hello"), thought("b")]
    lm.assert_complete()


def test_g2_a_tool_call_resets_the_thought_count(run):
    box = Outbox()
    lm = ScriptedLM(
        [
            reply("t1"),
            reply(calls=[call("look", {"where": "desk"}, id="c1")]),
            reply("t2"),
            reply(calls=[call("send", {"text": "Found it."}, id="s1")]),
        ]
    )
    with dspy.context(lm=lm):
        pred = run(tools_agent(box), message="hello")

    assert len(lm.requests) == 4
    assert lm.requests[3].messages == [
        SYSTEM_TOOLS,
        inputs(message="hello"),
        assistant("t1"),
        user(LINE_TOOLS),
        assistant("", [("c1", "look", '{"where":"desk"}')]),
        tool("c1", '{"seen": true}'),
        assistant("t2"),
        user(LINE_TOOLS),
    ]
    assert pred.reply == "Found it."
    assert_meta(pred, "finished_by_tool", None, finished_by_tool="send")


def test_g2_a_failed_step_between_two_thoughts_does_not_reset_the_count(run):
    # SPEC §4: only a step with a tool call resets the thought counter.
    lm = ScriptedLM([reply("t1"), fail.server_error(503), reply("t2")])
    with dspy.context(lm=lm):
        pred = run(tools_agent(), message="hello")

    assert len(lm.requests) == 3
    continued = [SYSTEM_TOOLS, inputs(message="hello"), assistant("t1"), user(LINE_TOOLS)]
    assert lm.requests[1].messages == continued
    assert lm.requests[2].messages == continued  # the failed step recorded nothing
    assert_meta(pred, "incomplete", "empty_tool_calls")
    assert pred.metadata.history.messages == [thought("t1", message="hello"), thought("t2")]
    lm.assert_complete()


def test_g3_the_step_limit_ends_incomplete_with_nothing_forced(run):
    look = Look()
    lm = ScriptedLM(
        [
            reply(calls=[call("look", {"where": "desk"}, id="c1")]),
            reply(calls=[call("look", {"where": "shelf"}, id="c2")]),
        ]
    )
    with dspy.context(lm=lm):
        pred = run(tools_agent(look=look, max_iters=2), message="where is it?")

    assert len(lm.requests) == 2  # no third request
    assert_no_submit_ever(lm)
    assert lm.requests[1].messages[-1] == tool("c1", '{"seen": true}')
    assert look.runs == [{"where": "desk"}, {"where": "shelf"}]
    assert pred.reply is None
    assert_meta(pred, "incomplete", "max_iters", termination_error=None)
    assert stamped(pred.metadata.history.messages) == [
        step("c1", "look", {"where": "desk"}, {"seen": True}, message="where is it?"),
        step("c2", "look", {"where": "shelf"}, {"seen": True}),
    ]
    lm.assert_complete()


def test_g3_a_thought_on_the_last_allowed_step_is_not_continued(run):
    lm = ScriptedLM([reply("let me think")])
    with dspy.context(lm=lm):
        pred = run(tools_agent(max_iters=1), message="hello")

    assert len(lm.requests) == 1
    assert_meta(pred, "incomplete", "max_iters")
    assert pred.metadata.history.messages == [thought("let me think", message="hello")]
    lm.assert_complete()


def test_g3_max_iters_zero_sends_nothing(run):
    lm = ScriptedLM([])
    with dspy.context(lm=lm):
        pred = run(tools_agent(max_iters=0), message="hello")

    assert lm.requests == []
    assert_meta(pred, "incomplete", "max_iters")
    assert pred.metadata.history.messages == []


def test_g13_a_silent_step_ends_incomplete_and_records_nothing(run):
    lm = ScriptedLM([reply("")])
    with dspy.context(lm=lm):
        pred = run(tools_agent(), message="hello")

    assert len(lm.requests) == 1
    assert_meta(pred, "incomplete", "empty_tool_calls", termination_error=None)
    assert pred.metadata.history.messages == []
    lm.assert_complete()


def test_g13_a_whitespace_step_after_a_thought_ends_incomplete(run):
    lm = ScriptedLM([reply("one moment"), reply("   \n")])
    with dspy.context(lm=lm):
        pred = run(tools_agent(), message="hello")

    assert len(lm.requests) == 2
    assert_meta(pred, "incomplete", "empty_tool_calls")
    assert pred.metadata.history.messages == [thought("one moment", message="hello")]


# -- G4: the host's note ------------------------------------------------------------------------------


def test_g4_the_hosts_note_replaces_the_default_line(run):
    note = "Nobody reads your text; use send."
    lm = ScriptedLM([reply("I'll look it up."), reply(calls=[call("send", {"text": "Hi"}, id="s1")])])
    with dspy.context(lm=lm):
        pred = run(tools_agent(unsent_note=note), message="hello")

    assert lm.requests[1].messages == [SYSTEM_TOOLS, inputs(message="hello"), assistant("I'll look it up."), user(note)]
    assert all("was not sent" not in json.dumps(r.messages) for r in lm.requests)  # not even in the system
    assert pred.reply == "Hi"


# -- G5: refusals, at construction and at load ----------------------------------------------------


REFUSED_AT_CONSTRUCTION = [
    pytest.param({"finish_on": None}, "finish_on", id="no-finish_on"),
    pytest.param({"finish_on": {}}, "finish_on", id="empty-finish_on"),
    pytest.param({"last_request_note": "Sum up."}, "last_request_note", id="last_request_note"),
    pytest.param({"last_request_note": ""}, "last_request_note", id="empty-last_request_note"),
    pytest.param({"last_request_tools": ["send"]}, "last_request_tools", id="last_request_tools"),
    pytest.param({"unsent_note": ""}, "unsent_note", id="empty-unsent_note"),
    pytest.param({"unsent_note": "  \n\t"}, "unsent_note", id="blank-unsent_note"),
]


@pytest.mark.parametrize(("options", "named"), REFUSED_AT_CONSTRUCTION)
def test_g5_construction_refuses_with_a_reason(options, named):
    with pytest.raises(dspy_imp.ConfigurationError, match=re.escape(named)) as error:
        tools_agent(**options)
    assert isinstance(error.value, ValueError)
    assert len(str(error.value)) > len(named) + 10  # a reason, not just the name


def test_g5_an_empty_last_request_tools_is_not_a_setting():
    agent = tools_agent(last_request_tools=[])
    assert agent.options.finish == "tools" and agent.options.last_request_tools == ()


def _save_then_tamper(tmp_path, change):
    path = tmp_path / "agent.json"
    tools_agent().save(path)
    state = json.loads(path.read_text())
    change(state["react"]["dspy_imp"])
    path.write_text(json.dumps(state))
    return path


@pytest.mark.parametrize(
    ("change", "named"),
    [
        pytest.param(lambda block: block.pop("finish_on"), "finish_on", id="finish_on-removed"),
        pytest.param(lambda block: block.update(finish_on=[]), "finish_on", id="finish_on-empty"),
        pytest.param(lambda block: block.update(last_request_note="Sum up."), "last_request_note", id="note"),
        pytest.param(lambda block: block.update(last_request_tools=["send"]), "last_request_tools", id="lr-tools"),
        pytest.param(lambda block: block.update(unsent_note=""), "unsent_note", id="empty-unsent_note"),
        pytest.param(lambda block: block.update(unsent_note="   "), "unsent_note", id="blank-unsent_note"),
        pytest.param(lambda block: block.update(unsent_note=7), "unsent_note", id="int-unsent_note"),
    ],
)
def test_g5_loading_a_tampered_state_is_refused_the_same_way(tmp_path, change, named):
    path = _save_then_tamper(tmp_path, change)
    fresh = dspy_imp.ReActV2("message -> reply", tools=[Look(), *_outbox_tools()], finish_on=FINISH_ON)
    before = fresh.dump_state()
    with pytest.raises(dspy_imp.ConfigurationError, match=re.escape(named)):
        fresh.load(path)
    assert fresh.dump_state() == before  # nothing of that state was applied
    assert fresh.options.finish == "auto"


def _outbox_tools():
    box = Outbox()
    return [box.send, box.decline]


# -- G6: per-call finish, both ways ---------------------------------------------------------------


def test_g6_a_tools_program_answers_once_in_text_with_finish_auto(run):
    look = Look()
    box = Outbox()
    history = [
        step("c1", "look", {"where": "desk"}, "a stapler", message="what is on my desk?"),
        step("c2", "send", {"text": "A stapler."}, "delivered: A stapler."),
    ]
    lm = ScriptedLM([reply("You asked about your desk; I said a stapler.", calls=[call("look", {}, id="late")])])
    with dspy.context(lm=lm):
        pred = run(
            tools_agent(box, look),
            history=dspy.History(messages=history),
            finish="auto",
            max_iters=0,
            last_request_note="Summarise.",
        )

    [request] = lm.requests
    assert request.tool_choice == "auto"
    assert request.tool_names == ["look", "send", "decline"]  # no submit: a text-answer loop
    assert request.messages == [
        SYSTEM_TEXT_ANSWER,
        inputs(message="what is on my desk?"),
        assistant("", [("c1", "look", '{"where":"desk"}')]),
        tool("c1", "a stapler"),
        assistant("", [("c2", "send", '{"text":"A stapler."}')]),
        tool("c2", "delivered: A stapler."),
        inputs(message="Summarise."),
    ]
    assert look.runs == [] and box.sent == []
    assert pred.reply == "You asked about your desk; I said a stapler."
    meta = pred.metadata
    assert (meta.termination_reason, meta.termination_cause) == ("last_text", "max_iters")
    assert meta.unexecuted_tool_calls == ({"id": "late", "name": "look", "args": {}},)
    assert meta.history.messages[:2] == history
    assert meta.history.messages[2:] == [
        {"message": "Summarise.", "tool_calls": [], "tool_call_results": []},
        {
            "next_thought": "You asked about your desk; I said a stapler.",
            "reply": "You asked about your desk; I said a stapler.",
            "tool_calls": [],
            "tool_call_results": [],
        },
    ]
    # The program itself is unchanged by the call.
    assert tools_agent(box, look).options.finish == "tools"


def test_g6_an_auto_program_called_with_finish_tools_behaves_as_g1(run):
    box = Outbox()
    agent = dspy_imp.ReActV2("message -> reply", tools=[Look(), box.send, box.decline], finish_on=FINISH_ON)
    lm = ScriptedLM([reply("I'll look it up."), reply(calls=[call("send", {"text": "Hi"}, id="s1")])])
    with dspy.context(lm=lm):
        pred = run(agent, message="hello", finish="tools")

    assert [r.messages for r in lm.requests] == [
        [SYSTEM_TOOLS, inputs(message="hello")],
        [SYSTEM_TOOLS, inputs(message="hello"), assistant("I'll look it up."), user(LINE_TOOLS)],
    ]
    assert_no_submit_ever(lm)
    assert pred.reply == "Hi"
    assert_meta(pred, "finished_by_tool", None, finished_by_tool="send")

    # Without the per-call finish the same program answers in text.
    lm2 = ScriptedLM([reply("I'll look it up.")])
    with dspy.context(lm=lm2):
        plain = run(agent, message="hello")
    assert plain.reply == "I'll look it up." and plain.metadata.termination_reason == "answered"


# -- G7: answers recorded under "auto" replay without a line ---------------------------------------


def test_g7_auto_answers_replay_without_an_unsent_line(run):
    history = [
        {"message": "m1", "reply": "Answer one."},  # a host-written plain turn
        {
            "message": "m2",
            "next_thought": "Answer two.",
            "reply": "Answer two.",
            "tool_calls": [],
            "tool_call_results": [],
        },
    ]
    lm = ScriptedLM([reply(calls=[call("send", {"text": "Three."}, id="s3")])])
    with dspy.context(lm=lm):
        pred = run(tools_agent(), message="m3", history=dspy.History(messages=history))

    assert lm.requests[0].messages == [
        SYSTEM_TOOLS,
        inputs(message="m1"),
        assistant("Answer one."),
        inputs(message="m2"),
        assistant("Answer two."),
        inputs(message="m3"),
    ]
    assert "not sent" not in json.dumps(lm.requests[0].messages[1:])
    assert pred.reply == "Three."
    assert pred.metadata.history.messages[:2] == history


# -- G8: save and load ----------------------------------------------------------------------------


def test_g8_finish_history_replay_and_unsent_note_round_trip(tmp_path):
    path = tmp_path / "agent.json"
    saved = tools_agent(history_replay="actions", unsent_note="Use send or decline.", max_iters=4)
    saved.save(path)
    block = json.loads(path.read_text())["react"]["dspy_imp"]
    assert block["finish"] == "tools"
    assert block["history_replay"] == "actions"
    assert block["unsent_note"] == "Use send or decline."
    assert sorted(block["finish_on"]) == ["decline", "send"]
    assert block["max_iters"] == 4

    loaded = dspy_imp.ReActV2("message -> reply", tools=[Look(), *_outbox_tools()], finish_on=FINISH_ON)
    assert loaded.options.finish == "auto"
    loaded.load(path)
    options = loaded.options
    assert (options.finish, options.history_replay, options.unsent_note, options.max_iters) == (
        "tools",
        "actions",
        "Use send or decline.",
        4,
    )
    assert set(options.finish_on) == {"send", "decline"}

    # The loaded program asks exactly what the saved one asked (actions replay, the note).
    prior = [
        {**step("c1", "look", {"where": "desk"}, "r-one"), "message": "m1", "next_thought": "narration"},
    ]

    def requests_of(agent: dspy_imp.ReActV2) -> list[Any]:
        lm = ScriptedLM([reply("thinking"), reply(calls=[call("send", {"text": "x"}, id="s")])])
        with dspy.context(lm=lm):
            agent(message="m2", history=dspy.History(messages=prior))
        return [(r.messages, r.tool_names, r.tool_choice) for r in lm.requests]

    assert requests_of(loaded) == requests_of(saved)
    second = requests_of(loaded)[1][0]
    assert second[-1] == user("Use send or decline.")
    assert assistant("", [("c1", "look", '{"where":"desk"}')]) in second  # narration left out
    assert "narration" not in json.dumps(second)


def test_g8_a_program_using_none_of_them_saves_exactly_as_before(tmp_path):
    plain = dspy_imp.ReActV2("message -> reply", tools=[Look(), *_outbox_tools()])
    defaults = dspy_imp.ReActV2(
        "message -> reply",
        tools=[Look(), *_outbox_tools()],
        finish="auto",
        history_replay="trajectory",
        unsent_note=None,
    )
    expected = {"react": dspy.Predict(plain.react.signature).dump_state()}
    assert plain.dump_state() == expected
    assert defaults.dump_state() == expected
    path = tmp_path / "plain.json"
    defaults.save(path)
    assert "dspy_imp" not in json.loads(path.read_text())["react"]


# -- G9, G10, G11: one retry after a failed request --------------------------------------------------


def test_g9_one_retry_after_a_failed_request_then_incomplete(run):
    lm = ScriptedLM([fail.server_error(503, "first outage"), fail.server_error(503, "second outage")])
    with dspy.context(lm=lm):
        pred = run(tools_agent(), message="hello")

    assert len(lm.requests) == 2
    assert lm.requests[1].messages == lm.requests[0].messages == [SYSTEM_TOOLS, inputs(message="hello")]
    assert_no_submit_ever(lm)
    assert pred.reply is None
    assert_meta(pred, "incomplete", "prediction_error")
    errors = pred.metadata.termination_error
    assert errors, errors
    described = json.dumps(dict(errors))
    assert "first outage" in described and "second outage" in described  # both failed requests
    assert pred.metadata.history.messages == []
    lm.assert_complete()


def test_g9_the_retry_is_once_per_turn_not_once_per_failure(run):
    lm = ScriptedLM(
        [
            fail.server_error(503, "first outage"),
            reply(calls=[call("look", {"where": "desk"}, id="c1")]),
            fail.server_error(503, "second outage"),
        ]
    )
    with dspy.context(lm=lm):
        pred = run(tools_agent(), message="hello")

    assert len(lm.requests) == 3
    assert_meta(pred, "incomplete", "prediction_error")
    assert "second outage" in json.dumps(dict(pred.metadata.termination_error))
    assert stamped(pred.metadata.history.messages) == [
        step("c1", "look", {"where": "desk"}, {"seen": True}, message="hello")
    ]
    lm.assert_complete()


def test_g10_the_retry_succeeds(run):
    box = Outbox()
    lm = ScriptedLM([fail.server_error(503), reply(calls=[call("send", {"text": "Hi"}, id="s1")])])
    with dspy.context(lm=lm):
        pred = run(tools_agent(box), message="hello")

    assert [r.messages for r in lm.requests] == [[SYSTEM_TOOLS, inputs(message="hello")]] * 2
    assert_no_submit_ever(lm)
    assert box.sent == ["Hi"]
    assert pred.reply == "Hi"
    assert_meta(pred, "finished_by_tool", None, finished_by_tool="send", termination_error=None)
    assert stamped(pred.metadata.history.messages) == [
        step("s1", "send", {"text": "Hi"}, "delivered: Hi", message="hello")
    ]


def test_g11_a_failure_on_the_last_allowed_step_is_not_retried(run):
    lm = ScriptedLM([fail.server_error(503, "only outage")])
    with dspy.context(lm=lm):
        pred = run(tools_agent(max_iters=1), message="hello")

    assert len(lm.requests) == 1
    assert_meta(pred, "incomplete", "prediction_error")
    assert "only outage" in json.dumps(dict(pred.metadata.termination_error))
    lm.assert_complete()


def test_g11_the_failed_step_and_its_retry_both_count_toward_max_iters(run):
    lm = ScriptedLM([fail.server_error(503), reply(calls=[call("look", {"where": "desk"}, id="c1")])])
    with dspy.context(lm=lm):
        pred = run(tools_agent(max_iters=2), message="hello")

    assert len(lm.requests) == 2
    assert_meta(pred, "incomplete", "max_iters")
    lm.assert_complete()


# -- G12: deadline --------------------------------------------------------------------------------


def test_g12_a_slow_thought_past_the_deadline_is_not_continued(run, fake_clock):
    lm = ScriptedLM([fake_clock.after(SLOW, reply("a"))])
    with dspy.context(lm=lm), dspy_imp.deadline(seconds=WITHIN):
        pred = run(tools_agent(), message="hello")

    assert len(lm.requests) == 1
    assert pred.reply is None
    assert_meta(pred, "incomplete", "deadline_exceeded")
    assert pred.metadata.history.messages == [thought("a", message="hello")]
    lm.assert_complete()


def test_g12_a_slow_failed_step_past_the_deadline_is_not_retried(run, fake_clock):
    lm = ScriptedLM([fake_clock.after(SLOW, fail.server_error(503))])
    with dspy.context(lm=lm), dspy_imp.deadline(seconds=WITHIN):
        pred = run(tools_agent(), message="hello")

    assert len(lm.requests) == 1
    assert_meta(pred, "incomplete", "deadline_exceeded")
    assert pred.metadata.termination_error  # the failed request is still reported
    lm.assert_complete()


def test_g12_a_slow_tool_step_past_the_deadline_sends_no_next_step(run, fake_clock):
    lm = ScriptedLM([fake_clock.after(SLOW, reply(calls=[call("look", {"where": "desk"}, id="c1")]))])
    with dspy.context(lm=lm), dspy_imp.deadline(seconds=WITHIN):
        pred = run(tools_agent(), message="hello")

    assert len(lm.requests) == 1
    assert_meta(pred, "incomplete", "deadline_exceeded")
    lm.assert_complete()


# -- G14, G15: an input named finish; per-call "tools" without finish_on ----------------------------


def test_g14_an_input_named_finish_stays_an_input(run):
    box = Outbox()
    seen: list[dict[str, Any]] = []

    def on_send_seeing(args, result, given):
        seen.append(given)
        return dspy_imp.Finish(reply=args["text"])

    agent = dspy_imp.ReActV2(
        "finish, message -> reply",
        tools=[Look(), box.send, box.decline],
        finish="tools",
        finish_on={"send": on_send_seeing, "decline": on_decline},
    )
    lm = ScriptedLM([reply("noted"), reply(calls=[call("send", {"text": "See you."}, id="s1")])])
    with dspy.context(lm=lm):
        pred = run(agent, finish="auto", message="when do we stop?")

    # "auto" is the task input: the loop stays "tools" (the thought continues, with the tools line).
    first = inputs(finish="auto", message="when do we stop?")
    assert lm.requests[0].messages[1:] == [first]
    assert lm.requests[1].messages[1:] == [first, assistant("noted"), user(LINE_TOOLS)]
    assert_no_submit_ever(lm)
    assert seen == [{"finish": "auto", "message": "when do we stop?"}]
    assert pred.reply == "See you."
    assert pred.metadata.history.messages[0]["finish"] == "auto"


def test_g15_per_call_tools_without_finish_on_is_refused_before_any_request(run):
    lm = ScriptedLM([])
    agent = dspy_imp.ReActV2("message -> reply", tools=[Look(), *_outbox_tools()])
    with dspy.context(lm=lm), pytest.raises(dspy_imp.ConfigurationError, match="finish_on"):
        run(agent, message="hello", finish="tools")
    assert lm.requests == []


# -- G16: content filter ---------------------------------------------------------------------------


def test_g16_a_content_filtered_step_raises_step_error_at_once(run):
    lm = ScriptedLM([reply("", finish_reason="content_filter")])
    with dspy.context(lm=lm), pytest.raises(dspy_imp.StepError) as error:
        run(tools_agent(), message="hello")

    assert len(lm.requests) == 1  # no "tools" retry
    assert error.value.history.messages == [{"message": "hello", "tool_calls": [], "tool_call_results": []}]
    lm.assert_complete()


def test_g16_a_content_filtered_continued_step_keeps_the_thought_in_the_error(run):
    lm = ScriptedLM([reply("t1"), reply("", finish_reason="content_filter")])
    with dspy.context(lm=lm), pytest.raises(dspy_imp.StepError) as error:
        run(tools_agent(), message="hello")

    assert len(lm.requests) == 2
    assert error.value.history.messages == [thought("t1", message="hello")]
    lm.assert_complete()


# -- K4: a context-window refusal drops the whole prior history at once ---------------------------


def test_k4_a_context_window_refusal_drops_the_whole_prior_history(run):
    prior = [
        step("c1", "look", {"where": "desk"}, "r-one", message="m1", next_thought="n1"),
        step("c2", "send", {"text": "one"}, "r-two"),
        step("c3", "look", {"where": "shelf"}, "r-three", message="m2"),
        step("c4", "send", {"text": "two"}, "r-four"),
    ]
    lm = ScriptedLM([fail.context_window(), reply(calls=[call("send", {"text": "three"}, id="s5")])])
    with dspy.context(lm=lm):
        pred = run(tools_agent(), message="m3", history=dspy.History(messages=prior))

    assert len(lm.requests) == 2
    assert len(lm.requests[0].messages) == 1 + 10 + 1  # system, the four prior entries, the new inputs
    assert lm.requests[1].messages == [SYSTEM_TOOLS, inputs(message="m3")]
    assert pred.reply == "three"
    assert_meta(
        pred,
        "finished_by_tool",
        None,
        context_projection={
            "reason": "context_window_exceeded",
            "omitted_prior_entries": 4,
            "omitted_prior_groups": 1,
            "recovery_requests": 1,
        },
    )
    history = pred.metadata.history.messages
    assert history[:4] == prior  # the returned history keeps everything
    assert stamped(history[4:]) == [step("s5", "send", {"text": "three"}, "delivered: three", message="m3")]


def test_k4_nothing_left_to_drop_ends_incomplete(run):
    lm = ScriptedLM([fail.context_window()])
    with dspy.context(lm=lm):
        pred = run(tools_agent(), message="hello")

    assert len(lm.requests) == 1  # no "tools" retry after a full context window
    assert_meta(pred, "incomplete", "context_window_exceeded", context_projection=None)
    lm.assert_complete()
