"""Reference §12 F (F1–F6), §7.2–§7.4, §7.7 and seed 003: replay across a change of ending.

An answer (a step carrying an output) is never a thought; a genuine thought-only step
replayed in a plain-text loop is followed by "Your message above was not sent."; a recorded
``submit`` replays as the answer's text in a loop without ``submit`` and natively in a loop
with it; a history written only by a plain-text loop replays exactly as it was sent.
"""

from __future__ import annotations

from typing import Any

import dspy
from helpers import LINE_PLAIN, TA, Look, assistant, inputs, tool, user

import dspy_imp
from dspy_imp.testing import ScriptedLM, call, reply

RETURNED = "2026-01-02T03:04:05.000Z"
LINE_SUBMIT = "Your message above was not sent. To reply, call `submit` with `answer`; to keep working, call a tool."
NOT_SENT = "was not sent"


class Ticket(dspy.Signature):
    """Answer the ticket."""

    ticket: str = dspy.InputField()
    answer: str = dspy.OutputField()


SYSTEM_TICKET_AUTO = (
    "Answer the ticket.\nWhen the final answer is ready, reply without calling a tool: that message is `answer`."
)


def lookup(query: str) -> str:
    """Look something up."""
    return query.upper()


def result(id: str | None, name: str, value: Any, *, error: bool = False) -> dict[str, Any]:
    data: dict[str, Any] = {"name": name, "result": value, "error": error, "returned_at": RETURNED}
    if id is not None:
        data["id"] = id
    return data


def called(id: str | None, name: str, args: dict[str, Any]) -> dict[str, Any]:
    data: dict[str, Any] = {"name": name, "args": args}
    if id is not None:
        data["id"] = id
    return data


def no_line_anywhere(requests: list[Any]) -> bool:
    return not any(NOT_SENT in str(m.get("content") or "") for r in requests for m in r.messages)


def replay(run: Any, agent: Any, history: Any, **kwargs: Any) -> Any:
    """One call over ``history``; returns the one request it sent (the model answers at once)."""

    def answer(request: Any) -> Any:
        if "submit" in request.tool_names:
            return reply(calls=[call("submit", {"answer": "All set."}, id="z1")])
        return reply("All set.")

    lm = ScriptedLM(answer)
    with dspy.context(lm=lm):
        run(agent, history=history, **kwargs)
    assert len(lm.requests) == 1
    return lm.requests[0]


# -- F1 / seed 003: a submit-era thought and answer in a plain-text loop -----------------------------


def test_f1_a_submit_era_thought_and_answer_replay_in_a_plain_text_loop(run):
    lm = ScriptedLM([reply("Let me check."), reply(calls=[call("submit", {"answer": "Done."}, id="s1")])])
    submit_agent = dspy_imp.ReActV2(Ticket, tools=[Look()], finish="submit")
    with dspy.context(lm=lm):
        recorded = run(submit_agent, ticket="t1")
    assert recorded.metadata.termination_reason == "submit"
    lm.assert_complete()

    auto = dspy_imp.ReActV2(Ticket, tools=[Look()])
    request = replay(run, auto, recorded.metadata.history, ticket="t2")

    assert request.tool_choice == "auto" and request.tool_names == ["look"]
    assert request.messages == [
        {"role": "system", "content": SYSTEM_TICKET_AUTO},
        inputs(ticket="t1"),
        assistant("Let me check."),
        user(LINE_PLAIN),
        assistant("Done."),
        inputs(ticket="t2"),
    ]
    assert request.roles == ["system", "user", "assistant", "user", "assistant", "user"]


def test_seed003_a_written_submit_era_history_gets_the_plain_line_only(run):
    history = [
        {"ticket": "t1", "next_thought": "Let me check.", "tool_calls": [], "tool_call_results": []},
        {
            "tool_calls": [called("s1", "submit", {"answer": "Done."})],
            "tool_call_results": [result("s1", "submit", {"answer": "Done."})],
            "answer": "Done.",
        },
    ]
    request = replay(run, dspy_imp.ReActV2(Ticket, tools=[Look()]), dspy.History(messages=history), ticket="t2")

    assert request.messages[1:] == [
        inputs(ticket="t1"),
        assistant("Let me check."),
        user(LINE_PLAIN),
        assistant("Done."),
        inputs(ticket="t2"),
    ]
    # Only the factual half: a plain-text loop has no submit to name.
    assert "submit" not in str(request.messages[1:])
    assert RETURNED not in str(request.messages)


# -- seed 003: answers are never thoughts ----------------------------------------------------------


def test_seed003_auto_answers_replayed_after_a_per_call_switch_to_submit_get_no_line(run):
    lm = ScriptedLM(
        [
            reply("It is a cat."),
            reply("Still a cat."),
            reply(calls=[call("submit", {"answer": "A dog."}, id="s1")]),
        ]
    )
    agent = dspy_imp.ReActV2(TA, tools=[Look()])
    with dspy.context(lm=lm):
        first = run(agent, intent="what is it?")
        second = run(agent, intent="and now?", history=first.metadata.history)
        third = run(agent, intent="and that one?", history=second.metadata.history, finish="submit")

    r3 = lm.requests[2]
    assert r3.tool_names == ["look", "submit"] and r3.tool_choice == "auto"
    assert r3.roles == ["system", "user", "assistant", "user", "assistant", "user"]
    assert r3.messages[1:] == [
        inputs(intent="what is it?"),
        assistant("It is a cat."),
        inputs(intent="and now?"),
        assistant("Still a cat."),
        inputs(intent="and that one?"),
    ]
    assert no_line_anywhere(lm.requests)
    assert (third.answer, third.metadata.termination_reason) == ("A dog.", "submit")
    lm.assert_complete()


# -- F2 / seed 003: plain-text-only histories are unchanged ------------------------------------------


def test_f2_a_plain_text_only_history_replays_exactly_as_it_was_sent(run):
    lm = ScriptedLM(
        [
            reply(calls=[call("look", {"where": "shelf"}, id="c1")]),
            reply("It is a cat."),
            reply("Still a cat."),
            reply("A dog now."),
        ]
    )
    agent = dspy_imp.ReActV2(TA, tools=[Look()])
    with dspy.context(lm=lm):
        first = run(agent, intent="what is it?")
        second = run(agent, intent="and now?", history=first.metadata.history)
        third = run(agent, intent="and that one?", history=second.metadata.history)

    assert [p.metadata.termination_reason for p in (first, second, third)] == ["answered"] * 3
    r1, r2, r3, r4 = (r.messages for r in lm.requests)
    # Each replay is the live request it continues plus the newest exchange, byte for byte.
    assert r3 == [*r2, assistant("It is a cat."), inputs(intent="and now?")]
    assert r4 == [*r3, assistant("Still a cat."), inputs(intent="and that one?")]
    assert r4[1:] == [
        inputs(intent="what is it?"),
        assistant("", [("c1", "look", '{"where":"shelf"}')]),
        tool("c1", '{"seen": true}'),
        assistant("It is a cat."),
        inputs(intent="and now?"),
        assistant("Still a cat."),
        inputs(intent="and that one?"),
    ]
    assert r1 == r2[:2]
    assert no_line_anywhere(lm.requests)
    assert all(r.tool_choice == "auto" and r.tool_names == ["look"] for r in lm.requests)
    lm.assert_complete()


# -- F3, F4: a recorded submit in a loop without submit ----------------------------------------------


def test_f3_a_rejected_submit_is_dropped_with_its_error(run):
    history = [
        {
            "intent": "prior",
            "next_thought": "trying",
            "tool_calls": [called("s1", "submit", {"reply": "wrong key"})],
            "tool_call_results": [result("s1", "submit", "submit is missing: answer", error=True)],
        },
        {
            "next_thought": "again",
            "tool_calls": [called("s2", "submit", {"answer": "Right key."})],
            "tool_call_results": [result("s2", "submit", {"answer": "Right key."})],
            "answer": "Right key.",
        },
    ]
    request = replay(run, dspy_imp.ReActV2(TA, tools=[Look()]), dspy.History(messages=history), intent="new")

    assert request.messages[1:] == [
        inputs(intent="prior"),
        assistant("trying"),
        assistant("again\n\nRight key."),
        inputs(intent="new"),
    ]
    # The one documented case of two assistant messages in a row (reference §7.4, §7.7).
    assert request.roles == ["system", "user", "assistant", "assistant", "user"]
    assert "wrong key" not in str(request.messages)
    assert "submit is missing" not in str(request.messages)
    assert NOT_SENT not in str(request.messages)  # the trying step had a call: it is not a thought


def test_f4_a_submit_alone_replays_as_the_answers_text(run):
    history = [
        {
            "intent": "how many?",
            "tool_calls": [called("s1", "submit", {"answer": "Seven, exactly."})],
            "tool_call_results": [result("s1", "submit", {"answer": "Seven, exactly."})],
            "answer": "Seven, exactly.",
        }
    ]
    request = replay(run, dspy_imp.ReActV2(TA, tools=[Look()]), dspy.History(messages=history), intent="sure?")

    assert request.messages[1:] == [inputs(intent="how many?"), assistant("Seven, exactly."), inputs(intent="sure?")]
    assert not any(m["role"] == "tool" for m in request.messages)


def test_f4_a_submit_beside_a_lookup_replays_the_lookup_natively_then_the_answer(run):
    history = [
        {
            "intent": "which beam?",
            "next_thought": "checking",
            "tool_calls": [called("l1", "lookup", {"query": "beam"}), called("s1", "submit", {"answer": "BEAM."})],
            "tool_call_results": [result("l1", "lookup", "BEAM"), result("s1", "submit", {"answer": "BEAM."})],
            "answer": "BEAM.",
        }
    ]
    request = replay(run, dspy_imp.ReActV2(TA, tools=[lookup]), dspy.History(messages=history), intent="sure?")

    assert request.messages[1:] == [
        inputs(intent="which beam?"),
        assistant("checking", [("l1", "lookup", '{"query":"beam"}')]),
        tool("l1", "BEAM"),
        assistant("BEAM."),
        inputs(intent="sure?"),
    ]


def test_f4_an_id_less_submit_is_matched_to_its_result_by_name_in_call_order(run):
    history = [
        {
            "intent": "how many?",
            "tool_calls": [
                called(None, "submit", {"answer": "Six."}),
                called(None, "submit", {"answer": "Seven, exactly."}),
            ],
            "tool_call_results": [
                result(None, "submit", "submit outputs were not accepted", error=True),
                result(None, "submit", {"answer": "Seven, exactly."}),
            ],
            "answer": "Seven, exactly.",
        }
    ]
    request = replay(run, dspy_imp.ReActV2(TA, tools=[Look()]), dspy.History(messages=history), intent="sure?")

    # The first (rejected) submit is dropped; the second, accepted, is the answer.
    assert request.messages[1:] == [inputs(intent="how many?"), assistant("Seven, exactly."), inputs(intent="sure?")]
    assert "Six." not in str(request.messages)


def test_f4_a_loop_that_still_has_submit_replays_the_call_natively(run):
    history = [
        {
            "intent": "which beam?",
            "next_thought": "checking",
            "tool_calls": [called("l1", "lookup", {"query": "beam"}), called("s1", "submit", {"answer": "BEAM."})],
            "tool_call_results": [result("l1", "lookup", "BEAM"), result("s1", "submit", {"answer": "BEAM."})],
            "answer": "BEAM.",
        }
    ]
    agent = dspy_imp.ReActV2(TA, tools=[lookup], finish="submit")
    request = replay(run, agent, dspy.History(messages=history), intent="sure?")

    assert request.tool_names == ["lookup", "submit"]
    assert request.messages[1:] == [
        inputs(intent="which beam?"),
        assistant("checking", [("l1", "lookup", '{"query":"beam"}'), ("s1", "submit", '{"answer":"BEAM."}')]),
        tool("l1", "BEAM"),
        tool("s1", '{"answer": "BEAM."}'),
        inputs(intent="sure?"),
    ]


def test_f4_an_id_less_submit_replays_natively_with_matching_ids(run):
    history = [
        {
            "intent": "how many?",
            "tool_calls": [called(None, "submit", {"answer": "Seven, exactly."})],
            "tool_call_results": [result(None, "submit", {"answer": "Seven, exactly."})],
            "answer": "Seven, exactly.",
        }
    ]
    agent = dspy_imp.ReActV2(TA, tools=[Look()], finish="submit")
    request = replay(run, agent, dspy.History(messages=history), intent="sure?")

    call_message, tool_message = request.messages[2:4]
    [native] = call_message["tool_calls"]
    assert native["function"] == {"name": "submit", "arguments": '{"answer":"Seven, exactly."}'}
    assert native["id"]
    assert tool_message == tool(native["id"], '{"answer": "Seven, exactly."}')
    assert request.messages[4] == inputs(intent="sure?")


# -- F5, F6: host-written entries --------------------------------------------------------------------


def test_f5_a_host_input_only_entry_renders_its_user_message_alone(run):
    request = replay(
        run, dspy_imp.ReActV2(TA, tools=[Look()]), dspy.History(messages=[{"intent": "earlier"}]), intent="now"
    )

    assert request.messages[1:] == [inputs(intent="earlier"), inputs(intent="now")]
    assert "Not supplied" not in str(request.messages)


def test_f5_under_submit_too(run):
    agent = dspy_imp.ReActV2(TA, tools=[Look()], finish="submit")
    request = replay(run, agent, dspy.History(messages=[{"intent": "earlier"}]), intent="now")

    assert request.messages[1:] == [inputs(intent="earlier"), inputs(intent="now")]
    assert "Not supplied" not in str(request.messages)


def test_f6_a_stored_answer_only_turn_and_a_stored_thought(run):
    history = [
        {"intent": "earlier", "answer": "earlier reply"},
        {"intent": "later", "next_thought": "noted", "tool_calls": []},
    ]
    request = replay(run, dspy_imp.ReActV2(TA, tools=[Look()]), dspy.History(messages=history), intent="now")

    # The answer-only turn replays as a text answer; "noted" is a genuine thought and, in a
    # plain-text loop, gets the plain line.
    assert request.messages[1:] == [
        inputs(intent="earlier"),
        assistant("earlier reply"),
        inputs(intent="later"),
        assistant("noted"),
        user(LINE_PLAIN),
        inputs(intent="now"),
    ]
    assert "Not supplied" not in str(request.messages)


def test_f6_under_submit_the_stored_answer_gets_no_line_and_the_thought_gets_the_submit_line(run):
    history = [
        {"intent": "earlier", "answer": "earlier reply"},
        {"intent": "later", "next_thought": "noted", "tool_calls": []},
    ]
    agent = dspy_imp.ReActV2(TA, tools=[Look()], finish="submit")
    request = replay(run, agent, dspy.History(messages=history), intent="now")

    assert request.messages[1:] == [
        inputs(intent="earlier"),
        assistant("earlier reply"),
        inputs(intent="later"),
        assistant("noted"),
        user(LINE_SUBMIT),
        inputs(intent="now"),
    ]
