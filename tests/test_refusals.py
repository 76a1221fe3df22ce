"""SPEC §1, §5 and reference §8.1, §8.2: refused options and inputs.

Every refusal is a ``dspy_imp.ConfigurationError`` (a ``ValueError``) whose message names the
option at fault. Construction refuses before anything runs; a per-call refusal happens
before any request is sent.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

import dspy
import pytest
from helpers import TA, Look, SubmitSig, inputs, tool

import dspy_imp
from dspy_imp.testing import ScriptedLM, call, reply


def send(text: str) -> str:
    """Send a reply."""
    return f"sent: {text}"


def hook(args: dict[str, Any], result: Any, inputs: dict[str, Any]) -> None:
    return None


def refused(option: str) -> Any:
    """``pytest.raises`` for a ConfigurationError whose message names ``option``."""
    return pytest.raises(dspy_imp.ConfigurationError, match=re.escape(option))


def test_configuration_error_is_a_value_error():
    assert issubclass(dspy_imp.ConfigurationError, ValueError)
    with pytest.raises(ValueError, match="max_iters"):
        dspy_imp.ReActV2(TA, tools=[], max_iters=-1)


# -- construction ---------------------------------------------------------------------------------


@pytest.mark.parametrize("tool_", [pytest.param("function", id="function"), pytest.param("dspy.Tool", id="Tool")])
def test_a_tool_named_submit_is_refused(tool_):
    def submit(answer: str) -> str:
        """Pretend to submit."""
        return answer

    tools = [submit] if tool_ == "function" else [dspy.Tool(send, name="submit")]
    with refused("submit") as error:
        dspy_imp.ReActV2(TA, tools=tools)
    assert "reserved" in str(error.value)


@pytest.mark.parametrize("name", ["history", "tools", "max_iters", "last_request_note", "last_request_tools", "config"])
def test_reserved_input_field_names_are_refused(name):
    with refused(f"`{name}`") as error:
        dspy_imp.ReActV2(f"{name}, question -> answer", tools=[])
    assert "reserved" in str(error.value)


def test_an_output_named_tools_is_refused():
    with refused("`tools`"):
        dspy_imp.ReActV2("question -> tools", tools=[])


def test_an_unknown_constructor_option_is_refused_with_advice_to_use_config():
    with refused("temperature") as error:
        dspy_imp.ReActV2(TA, tools=[], temperature=0.2)
    assert "config" in str(error.value)
    with refused("on_max_iters"):
        dspy_imp.ReActV2(TA, tools=[], on_max_iters="last_text")


BAD_MAX_ITERS = [-1, 1.0, "1", None, True]


@pytest.mark.parametrize("value", BAD_MAX_ITERS, ids=repr)
def test_max_iters_must_be_a_non_negative_int(value):
    with refused("max_iters") as error:
        dspy_imp.ReActV2(TA, tools=[], max_iters=value)
    assert repr(value) in str(error.value)


def test_max_iters_zero_is_accepted():
    assert dspy_imp.ReActV2(TA, tools=[], max_iters=0).max_iters == 0


@pytest.mark.parametrize("value", ["never", "Submit", None, 1])
def test_finish_must_be_auto_submit_or_tools(value):
    with refused("finish") as error:
        dspy_imp.ReActV2(TA, tools=[send], finish=value)
    assert repr(value) in str(error.value)


def test_finish_on_must_be_a_dict():
    with refused("finish_on"):
        dspy_imp.ReActV2(TA, tools=[send], finish_on=["send"])


def test_finish_on_must_name_a_tool_the_program_holds():
    with refused("finish_on") as error:
        dspy_imp.ReActV2(TA, tools=[send], finish_on={"nope": hook})
    assert "names no tool" in str(error.value) and "nope" in str(error.value)


def test_finish_on_may_not_name_submit():
    with refused("finish_on") as error:
        dspy_imp.ReActV2(SubmitSig, tools=[send], finish_on={"submit": hook})
    assert "submit already ends the turn" in str(error.value)


@pytest.mark.parametrize(
    "bad_hook",
    [
        pytest.param("send", id="not-callable"),
        pytest.param(lambda args, result: None, id="two-args"),
        pytest.param(lambda args, result, inputs, extra: None, id="four-args"),
        pytest.param(lambda: None, id="no-args"),
    ],
)
def test_a_finish_on_hook_must_take_args_result_inputs(bad_hook):
    with refused("finish_on"):
        dspy_imp.ReActV2(TA, tools=[send], finish_on={"send": bad_hook})


@pytest.mark.parametrize(
    "good_hook",
    [lambda a, r, i: None, lambda *args: None, lambda a, r, i, extra=None: None],
    ids=["three", "varargs", "default"],
)
def test_a_hook_that_takes_three_arguments_is_accepted(good_hook):
    agent = dspy_imp.ReActV2(TA, tools=[send], finish_on={"send": good_hook})
    assert isinstance(agent, dspy_imp.ReActV2)


@pytest.mark.parametrize("value", [3, b"note", ["a"]], ids=repr)
def test_last_request_note_must_be_a_string(value):
    with refused("last_request_note"):
        dspy_imp.ReActV2(TA, tools=[], last_request_note=value)


@pytest.mark.parametrize("value", ["", "   ", "\n\t"], ids=repr)
def test_a_blank_unsent_note_is_refused(value):
    with refused("unsent_note"):
        dspy_imp.ReActV2(TA, tools=[send], finish="submit", unsent_note=value)


def test_last_request_tools_must_name_tools_the_program_holds():
    with refused("last_request_tools") as error:
        dspy_imp.ReActV2(TA, tools=[send], last_request_tools=["look"])
    assert "look" in str(error.value)
    with refused("last_request_tools"):
        dspy_imp.ReActV2(TA, tools=[send], last_request_tools=[Look()])


def test_last_request_tools_may_not_name_submit():
    with refused("last_request_tools") as error:
        dspy_imp.ReActV2(SubmitSig, tools=[send], last_request_tools=["submit"])
    assert "submit" in str(error.value)


def test_finish_tools_needs_a_finish_on_tool():
    with refused("finish_on"):
        dspy_imp.ReActV2(TA, tools=[send], finish="tools")


def test_finish_tools_refuses_a_last_request_note():
    with refused("last_request_note"):
        dspy_imp.ReActV2(TA, tools=[send], finish="tools", finish_on={"send": hook}, last_request_note="Sum up.")


def test_finish_tools_refuses_last_request_tools():
    with refused("last_request_tools"):
        dspy_imp.ReActV2(TA, tools=[send], finish="tools", finish_on={"send": hook}, last_request_tools=["send"])


def test_finish_tools_with_what_it_needs_is_accepted():
    agent = dspy_imp.ReActV2(TA, tools=[send], finish="tools", finish_on={"send": hook}, last_request_tools=[])
    assert isinstance(agent, dspy_imp.ReActV2)


@pytest.mark.parametrize("value", ["look", 3, [1]], ids=repr)
def test_a_tool_policy_that_is_not_names_or_a_callable_is_refused(value):
    # The code's choice (the reference only lists the accepted shapes): a bare string is not a list.
    with refused("tool_policy"):
        dspy_imp.ReActV2(TA, tools=[Look()], tool_policy=value)


def test_a_tool_result_renderer_must_be_callable():
    with refused("tool_result_renderer"):
        dspy_imp.ReActV2(TA, tools=[Look()], tool_result_renderer="{result}")


LOOP_AND_CLIENT_KEYS = ["tools", "tool_choice", "api_base", "base_url", "api_key", "model"]


@pytest.mark.parametrize("key", LOOP_AND_CLIENT_KEYS)
def test_program_config_may_not_carry_loop_or_client_keys(key):
    with refused("config") as error:
        dspy_imp.ReActV2(TA, tools=[], config={"temperature": 0.1, key: "value"})
    assert key in str(error.value)


def test_a_refused_api_key_is_not_echoed():
    # The code's choice (the spec asks that values be shown): a credential is named, not shown.
    with refused("config") as error:
        dspy_imp.ReActV2(TA, tools=[], config={"api_key": "sk-live-0123456789abcdef"})
    assert "api_key" in str(error.value) and "sk-live-0123456789abcdef" not in str(error.value)


# -- per call: nothing is sent ---------------------------------------------------------------------


def call_refused(run: Any, agent: Any, option: str, **kwargs: Any) -> str:
    """Call with a refused per-call value; assert the error names ``option`` and nothing was sent."""
    lm = ScriptedLM([])
    with dspy.context(lm=lm), refused(option) as error:
        run(agent, **kwargs)
    assert lm.requests == []
    return str(error.value)


@pytest.mark.parametrize("value", BAD_MAX_ITERS, ids=repr)
def test_per_call_max_iters_must_be_a_non_negative_int(run, value):
    message = call_refused(run, dspy_imp.ReActV2(TA, tools=[]), "max_iters", intent="x", max_iters=value)
    assert repr(value) in message


@pytest.mark.parametrize("key", LOOP_AND_CLIENT_KEYS)
def test_per_call_config_may_not_carry_loop_or_client_keys(run, key):
    message = call_refused(run, dspy_imp.ReActV2(TA, tools=[]), "config", intent="x", config={key: "v"})
    assert key in message


def test_per_call_config_must_be_a_dict(run):
    call_refused(run, dspy_imp.ReActV2(TA, tools=[]), "config", intent="x", config=[("temperature", 0)])


def test_per_call_tools_must_match_the_programs_tool(run):
    def described_otherwise(text: str) -> str:
        """Send something else entirely."""
        return "other"

    def typed_otherwise(text: int) -> str:
        """Send a reply."""
        return "other"

    described_otherwise.__name__ = typed_otherwise.__name__ = "send"
    agent = dspy_imp.ReActV2(TA, tools=[send])
    assert "send" in call_refused(run, agent, "tools", intent="x", tools=[described_otherwise])
    assert "send" in call_refused(run, agent, "tools", intent="x", tools=[typed_otherwise])
    call_refused(run, agent, "tools", intent="x", tools=[Look()])


def test_per_call_tools_that_match_swap_the_runner_only(run):
    def swapped(text: str) -> str:
        """Send a reply."""
        return f"swapped: {text}"

    swapped.__name__ = "send"
    lm = ScriptedLM([reply(calls=[call("send", {"text": "hi"}, id="s1")]), reply("done")])
    agent = dspy_imp.ReActV2(TA, tools=[send])
    with dspy.context(lm=lm):
        run(agent, intent="x", tools=[swapped])
    assert lm.requests[0].tools[0]["function"]["description"] == "Send a reply."
    assert lm.requests[1].messages[-1] == tool("s1", "swapped: hi")


@pytest.mark.parametrize("value", ["never", None, 2])
def test_per_call_finish_must_be_auto_submit_or_tools(run, value):
    call_refused(run, dspy_imp.ReActV2(TA, tools=[send]), "finish", intent="x", finish=value)


def test_per_call_finish_tools_needs_a_finish_on_tool(run):
    call_refused(run, dspy_imp.ReActV2(TA, tools=[send]), "finish_on", intent="x", finish="tools")


def test_per_call_last_request_note_must_be_a_string(run):
    call_refused(run, dspy_imp.ReActV2(TA, tools=[send]), "last_request_note", intent="x", last_request_note=5)


def test_per_call_last_request_tools_must_name_held_tools_and_not_submit(run):
    message = call_refused(
        run, dspy_imp.ReActV2(TA, tools=[send]), "last_request_tools", intent="x", last_request_tools=["look"]
    )
    assert "look" in message
    call_refused(
        run, dspy_imp.ReActV2(SubmitSig, tools=[send]), "last_request_tools", intent="x", last_request_tools=["submit"]
    )


def test_a_per_call_note_or_last_request_tools_with_per_call_finish_tools_is_refused(run):
    agent = dspy_imp.ReActV2(TA, tools=[send], finish_on={"send": hook})
    call_refused(run, agent, "last_request_note", intent="x", finish="tools", last_request_note="Sum up.")
    call_refused(run, agent, "last_request_tools", intent="x", finish="tools", last_request_tools=["send"])


def test_the_programs_note_and_last_request_tools_are_ignored_by_a_per_call_finish_tools(run):
    lm = ScriptedLM([reply("Thinking."), reply("Still thinking.")])
    agent = dspy_imp.ReActV2(
        TA,
        tools=[send],
        finish_on={"send": hook},
        last_request_note="PROGRAM NOTE",
        last_request_tools=["send"],
    )
    with dspy.context(lm=lm):
        pred = run(agent, intent="x", finish="tools")

    meta = pred.metadata
    assert (meta.termination_reason, meta.termination_cause) == ("incomplete", "empty_tool_calls")
    assert len(lm.requests) == 2  # no last request under "tools"
    assert all("PROGRAM NOTE" not in str(r.messages) for r in lm.requests)
    assert all("PROGRAM NOTE" not in str(e) for e in meta.history.messages)
    lm.assert_complete()


@pytest.mark.parametrize(
    "history",
    [5, "a conversation", {"messages": "nope"}, {"turns": []}, [1, 2]],
    ids=["int", "str", "messages-not-a-list", "no-messages", "entries-not-dicts"],
)
def test_a_history_of_the_wrong_type_is_refused(run, history):
    call_refused(run, dspy_imp.ReActV2(TA, tools=[]), "history", intent="x", history=history)


# -- an input named finish ------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["tomorrow", "tools"])
def test_an_input_named_finish_stays_an_input(run, value):
    lm = ScriptedLM([reply("See you then.")])
    agent = dspy_imp.ReActV2("finish, message -> reply", tools=[send])
    with dspy.context(lm=lm):
        pred = run(agent, finish=value, message="when do we stop?")

    assert lm.requests[0].messages[1:] == [inputs(finish=value, message="when do we stop?")]
    assert lm.requests[0].tool_names == ["send"]  # finish="auto" still: a text-answer loop
    assert (pred.reply, pred.metadata.termination_reason) == ("See you then.", "answered")
    assert pred.metadata.history.messages[0]["finish"] == value


# -- deadline -------------------------------------------------------------------------------------


def test_deadline_refuses_a_naive_datetime():
    with refused("at"), dspy_imp.deadline(at=datetime(2030, 1, 1, 12, 0)):
        pass


@pytest.mark.parametrize(
    "kwargs",
    [{}, {"seconds": 5, "at": datetime(2030, 1, 1, tzinfo=UTC)}],
    ids=["neither", "both"],
)
def test_deadline_takes_exactly_one_of_seconds_or_at(kwargs):
    with pytest.raises(dspy_imp.ConfigurationError) as error, dspy_imp.deadline(**kwargs):
        pass
    assert "seconds" in str(error.value) and "at" in str(error.value)


def test_deadline_accepts_an_aware_datetime():
    with dspy_imp.deadline(at=datetime(2030, 1, 1, tzinfo=UTC)):
        pass
