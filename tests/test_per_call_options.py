"""Reference §12 I and §8.2: options given beside the inputs apply to that call only."""

from __future__ import annotations

import logging
from typing import Any

import dspy
import pytest
from helpers import TA, Look, assistant, inputs, settled, tool

import dspy_imp
from dspy_imp.testing import ScriptedLM, call, reply


def imp_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name.startswith("dspy_imp") and r.levelno >= logging.WARNING]


def lookup(query: str) -> str:
    """Look something up."""
    return f"found {query}"


def refused(run: Any, agent: dspy_imp.ReActV2, option: str, **kwargs: Any) -> str:
    """Call with a bad per-call option: ConfigurationError naming it, and no request sent."""
    lm = ScriptedLM([])
    with dspy.context(lm=lm), pytest.raises(dspy_imp.ConfigurationError) as caught:
        run(agent, **kwargs)
    assert isinstance(caught.value, ValueError)
    assert option in str(caught.value)
    assert lm.requests == []
    return str(caught.value)


# -- I1, I2: max_iters -----------------------------------------------------------------------------


def test_i1_per_call_max_iters_replaces_the_programs(run, caplog):
    caplog.set_level(logging.WARNING)
    lm = ScriptedLM([reply(calls=[call("lookup", {"query": "beam"}, id="c1")]), reply("last words")])
    agent = dspy_imp.ReActV2(TA, tools=[lookup], max_iters=5)
    with dspy.context(lm=lm):
        pred = run(agent, intent="find it", max_iters=1)

    assert len(lm.requests) == 2
    meta = pred.metadata
    assert (pred.answer, meta.termination_reason, meta.termination_cause) == ("last words", "last_text", "max_iters")
    assert imp_warnings(caplog) == []
    assert agent.max_iters == 5
    lm.assert_complete()


@pytest.mark.parametrize("value", [-1, 1.0, "1", None, True])
def test_i2_an_invalid_max_iters_is_refused_before_any_request(run, value):
    agent = dspy_imp.ReActV2(TA, tools=[lookup])
    message = refused(run, agent, "max_iters", intent="find it", max_iters=value)
    assert repr(value) in message


# -- I3, I4: last_request_note ---------------------------------------------------------------------


def test_i3_a_summary_request_on_a_held_conversation(run):
    look = Look()
    history = dspy.History(
        messages=[
            {
                "intent": "what is in the box?",
                "next_thought": "",
                "tool_calls": [{"id": "c", "name": "look", "args": {}}],
                "tool_call_results": [
                    {
                        "id": "c",
                        "name": "look",
                        "result": "a cat",
                        "error": False,
                        "returned_at": "2025-01-01T00:00:00Z",
                    }
                ],
            }
        ]
    )
    lm = ScriptedLM([reply("I looked at the box.", calls=[call("look", {}, id="l9")])])
    agent = dspy_imp.ReActV2(TA, tools=[look], last_request_note="Last action.")
    with dspy.context(lm=lm):
        pred = run(agent, history=history, max_iters=0, last_request_note="Summarise this conversation.")

    [request] = lm.requests
    assert request.tool_choice == "auto" and request.tool_names == ["look"]
    assert request.roles == ["system", "user", "assistant", "tool", "user"]
    assert request.messages[1:] == [
        inputs(intent="what is in the box?"),
        assistant("", [("c", "look", "{}")]),
        tool("c", "a cat"),
        inputs(intent="Summarise this conversation."),
    ]
    assert "Last action." not in str(request.messages)
    assert look.runs == []
    meta = pred.metadata
    assert (pred.answer, meta.termination_reason, meta.termination_cause) == (
        "I looked at the box.",
        "last_text",
        "max_iters",
    )
    assert meta.unexecuted_tool_calls == ({"id": "l9", "name": "look", "args": {}},)
    assert meta.history.messages[1:] == [
        {"intent": "Summarise this conversation.", "tool_calls": [], "tool_call_results": []},
        {
            "next_thought": "I looked at the box.",
            "tool_calls": [],
            "tool_call_results": [],
            "answer": "I looked at the box.",
        },
    ]
    lm.assert_complete()


def test_i3_a_per_call_note_of_none_sends_no_note(run):
    lm = ScriptedLM([reply("Done.")])
    agent = dspy_imp.ReActV2(TA, tools=[Look()], last_request_note="Last action.")
    with dspy.context(lm=lm):
        pred = run(agent, intent="hello", max_iters=0, last_request_note=None)

    assert lm.requests[0].messages[1:] == [inputs(intent="hello")]
    assert "Last action." not in str(pred.metadata.history.messages)
    assert pred.metadata.termination_reason == "last_text"


@pytest.mark.parametrize("value", [7, {"text": "no"}])
def test_i4_an_invalid_per_call_note_is_refused_before_any_request(run, value):
    agent = dspy_imp.ReActV2(TA, tools=[Look()])
    message = refused(run, agent, "last_request_note", intent="hello", last_request_note=value)
    assert repr(value) in message


# -- I5: config ------------------------------------------------------------------------------------


def test_i5_per_call_config_is_merged_over_the_programs_and_does_not_leak(run):
    lm = ScriptedLM([reply("short"), reply("long")])
    agent = dspy_imp.ReActV2(TA, tools=[Look()], config={"max_tokens": 600, "temperature": 0.2})
    with dspy.context(lm=lm):
        first = run(agent, intent="hello", config={"max_tokens": 32})
        second = run(agent, intent="hello again")

    assert lm.requests[0].options == {"max_tokens": 32, "temperature": 0.2}
    assert lm.requests[1].options == {"max_tokens": 600, "temperature": 0.2}
    assert (first.answer, second.answer) == ("short", "long")
    assert agent.options.config == {"max_tokens": 600, "temperature": 0.2}
    lm.assert_complete()


def test_i5_per_call_config_reaches_every_request_of_the_call(run):
    lm = ScriptedLM([reply(calls=[call("look", {}, id="c1")]), reply("done")])
    agent = dspy_imp.ReActV2(TA, tools=[Look()], max_iters=1, config={"temperature": 0.2})
    with dspy.context(lm=lm):
        pred = run(agent, intent="hello", config={"max_tokens": 32})

    assert pred.metadata.termination_reason == "last_text"
    assert [r.options for r in lm.requests] == [{"temperature": 0.2, "max_tokens": 32}] * 2
    assert [r.tool_choice for r in lm.requests] == ["auto", "auto"]


@pytest.mark.parametrize(
    "config",
    [{"tool_choice": "none"}, {"tools": []}, {"api_base": "http://elsewhere"}, {"api_key": "sk-x"}, "fast"],
)
def test_i5_per_call_config_may_not_set_what_the_loop_or_the_client_owns(run, config):
    agent = dspy_imp.ReActV2(TA, tools=[Look()])
    refused(run, agent, "config", intent="hello", config=config)


# -- I6: tools (runners swapped) -------------------------------------------------------------------


class Runner:
    """A ``look`` runner: same name, description and schema as the program's, its own record."""

    def __init__(self) -> None:
        self.runs: list[str] = []
        self.__name__ = "look"
        self.__doc__ = "Look at a thing"

    def __call__(self, where: str = "here") -> dict[str, bool]:
        self.runs.append(where)
        return {"seen": True}


def _look_turn(run: Any, agent: dspy_imp.ReActV2, **kwargs: Any) -> ScriptedLM:
    lm = ScriptedLM([reply(calls=[call("look", {"where": "shelf"}, id="c1")]), reply("It is there.")])
    with dspy.context(lm=lm):
        pred = run(agent, intent="is it there?", **kwargs)
    assert pred.answer == "It is there."
    lm.assert_complete()
    return lm


@pytest.mark.parametrize("wrap", [False, True], ids=["callable", "dspy.Tool"])
def test_i6_per_call_tools_swap_runners_and_leave_the_request_unchanged(run, wrap):
    held, swapped = Runner(), Runner()
    agent = dspy_imp.ReActV2(TA, tools=[held])
    plain = _look_turn(run, agent)
    assert held.runs == ["shelf"]

    with_swap = _look_turn(run, agent, tools=[dspy.Tool(swapped) if wrap else swapped])
    assert swapped.runs == ["shelf"]
    assert held.runs == ["shelf"]  # the program's runner did not run this time
    for before, after in zip(plain.requests, with_swap.requests, strict=True):
        assert (after.messages, after.tools, after.tool_choice, after.options) == (
            before.messages,
            before.tools,
            before.tool_choice,
            before.options,
        )

    # The swap applied to that call only.
    _look_turn(run, agent)
    assert (held.runs, swapped.runs) == (["shelf", "shelf"], ["shelf"])


def _other_description(where: str = "here") -> dict[str, bool]:
    """Look at something else"""
    return {"seen": True}


def _other_schema(where: int = 0) -> dict[str, bool]:
    """Look at a thing"""
    return {"seen": True}


def _not_held(where: str = "here") -> dict[str, bool]:
    """Look at a thing"""
    return {"seen": True}


_other_description.__name__ = "look"
_other_schema.__name__ = "look"
_not_held.__name__ = "peek"


@pytest.mark.parametrize(
    "swap", [_other_description, _other_schema, _not_held], ids=["description", "schema", "not-held"]
)
def test_i6_a_per_call_tool_differing_from_the_programs_is_refused(run, swap):
    held = Runner()
    agent = dspy_imp.ReActV2(TA, tools=[held])
    refused(run, agent, "tools", intent="is it there?", tools=[swap])
    assert held.runs == []


# -- I7: keys that are not inputs ------------------------------------------------------------------


def test_i7_extra_input_keys_log_a_warning_naming_them(run, caplog):
    caplog.set_level(logging.WARNING)
    lm = ScriptedLM([reply("Paris")])
    agent = dspy_imp.ReActV2(TA, tools=[Look()])
    with dspy.context(lm=lm):
        pred = run(agent, intent="capital?", extra_field="ignored value")

    [warning] = imp_warnings(caplog)
    assert "extra_field" in warning and "not in signature" in warning
    assert pred.answer == "Paris"
    assert "ignored value" not in str(lm.requests[0].messages)
    assert lm.requests[0].messages[1:] == [inputs(intent="capital?")]


def test_i7_option_keys_log_no_warning(run, caplog):
    caplog.set_level(logging.WARNING)
    lm = ScriptedLM([reply("Paris")])
    agent = dspy_imp.ReActV2(TA, tools=[Look()])
    with dspy.context(lm=lm):
        run(agent, intent="capital?", max_iters=3, config={"temperature": 0.1}, last_request_note="Answer now.")
    assert imp_warnings(caplog) == []


# -- I8: a serialized history ----------------------------------------------------------------------


def test_i8_a_serialized_history_is_accepted_and_keeps_its_keys(run):
    prior = {"question": "prior", "answer": "prior answer"}
    lm = ScriptedLM([reply("continued")])
    agent = dspy_imp.ReActV2("question -> answer", tools=[])
    with dspy.context(lm=lm):
        pred = run(agent, history={"messages": [dict(prior)]}, max_iters=0)

    [request] = lm.requests
    assert request.messages[1:] == [inputs(question="prior"), assistant("prior answer")]
    meta = pred.metadata
    assert (pred.answer, meta.termination_reason, meta.termination_cause) == ("continued", "last_text", "max_iters")
    assert meta.history.messages == [
        prior,
        {"next_thought": "continued", "tool_calls": [], "tool_call_results": [], "answer": "continued"},
    ]
    assert list(meta.history.messages[0]) == ["question", "answer"]
    lm.assert_complete()


def test_i8_a_bare_list_history_is_accepted(run):
    lm = ScriptedLM([reply("continued")])
    agent = dspy_imp.ReActV2("question -> answer", tools=[])
    with dspy.context(lm=lm):
        pred = run(agent, history=[{"question": "prior", "answer": "prior answer"}], question="next?")

    assert lm.requests[0].messages[1:] == [
        inputs(question="prior"),
        assistant("prior answer"),
        inputs(question="next?"),
    ]
    assert pred.metadata.termination_reason == "answered"


def test_an_invalid_history_is_refused_before_any_request(run):
    agent = dspy_imp.ReActV2(TA, tools=[])
    refused(run, agent, "history", intent="hello", history=42)


# -- finish and last_request_tools per call --------------------------------------------------------


def test_per_call_finish_submit_adds_submit_for_that_call_only(run):
    look = Look()
    lm = ScriptedLM([reply(calls=[call("submit", {"answer": "A cat."}, id="s1")]), reply("A dog.")])
    agent = dspy_imp.ReActV2(TA, tools=[look])
    predictor, signature = agent.react, agent.react.signature
    with dspy.context(lm=lm):
        first = run(agent, intent="what is it?", finish="submit")
        second = run(agent, intent="and that?")

    r1, r2 = lm.requests
    assert r1.tool_names == ["look", "submit"]
    assert "When the final answer is ready, call `submit`." in r1.messages[0]["content"]
    assert (first.answer, first.metadata.termination_reason) == ("A cat.", "submit")
    assert r2.tool_names == ["look"]
    assert "When the final answer is ready, reply without calling a tool" in r2.messages[0]["content"]
    assert (second.answer, second.metadata.termination_reason) == ("A dog.", "answered")
    # The step predictor is never rebuilt.
    assert agent.react is predictor and agent.react.signature is signature
    assert list(dict(agent.named_predictors())) == ["react"]
    lm.assert_complete()


def test_per_call_finish_refusals(run):
    agent = dspy_imp.ReActV2(TA, tools=[Look()])
    assert repr("never") in refused(run, agent, "finish", intent="hello", finish="never")
    # "tools" needs a finish_on tool (G15).
    refused(run, agent, "finish_on", intent="hello", finish="tools")


def test_an_input_named_finish_is_an_input_not_an_option(run):
    lm = ScriptedLM([reply("See you then.")])
    agent = dspy_imp.ReActV2("finish, message -> reply", tools=[])
    with dspy.context(lm=lm):
        pred = run(agent, finish="tomorrow", message="When do we finish?")

    assert lm.requests[0].messages[1:] == [inputs(finish="tomorrow", message="When do we finish?")]
    assert pred.reply == "See you then."


def test_per_call_last_request_tools_run_in_the_last_text_request(run):
    published: list[str] = []

    def publish(text: str) -> str:
        """Publish a text."""
        published.append(text)
        return "ok"

    lm = ScriptedLM([reply("Published.", calls=[call("publish", {"text": "hi"}, id="p1")])])
    agent = dspy_imp.ReActV2(TA, tools=[Look(), publish])
    with dspy.context(lm=lm):
        pred = run(agent, intent="publish", max_iters=0, last_request_tools=["publish"])

    assert published == ["hi"]
    assert pred.metadata.unexecuted_tool_calls == ()
    assert settled(pred.metadata.history.messages) == [
        {
            "intent": "publish",
            "next_thought": "Published.",
            "tool_calls": [{"id": "p1", "name": "publish", "args": {"text": "hi"}}],
            "tool_call_results": [{"id": "p1", "name": "publish", "result": "ok", "error": False}],
            "answer": "Published.",
        }
    ]


def test_per_call_last_request_tools_must_be_held(run):
    agent = dspy_imp.ReActV2(TA, tools=[Look()])
    refused(run, agent, "last_request_tools", intent="hello", last_request_tools=["publish"])


# -- prompt_cache ----------------------------------------------------------------------------------


@pytest.mark.parametrize("value", [None, "on", "2h", 1, {"ttl": "1h"}])
def test_an_invalid_prompt_cache_is_refused_before_any_request(run, value):
    agent = dspy_imp.ReActV2(TA, tools=[lookup])
    message = refused(run, agent, "prompt_cache", intent="find it", prompt_cache=value)
    assert repr(value) in message
    with pytest.raises(dspy_imp.ConfigurationError, match="`prompt_cache`"):
        dspy_imp.ReActV2(TA, tools=[lookup], prompt_cache=value)


@pytest.mark.parametrize("value", [True, False, "5m", "1h", "24h"])
def test_prompt_cache_takes_on_off_and_a_lifetime(run, value):
    lm = ScriptedLM([reply("done")])
    agent = dspy_imp.ReActV2(TA, tools=[lookup], prompt_cache=value)
    with dspy.context(lm=lm):
        pred = run(agent, intent="find it", prompt_cache=not value if isinstance(value, bool) else "5m")
    assert (pred.answer, agent.options.prompt_cache) == ("done", value)
    lm.assert_complete()
