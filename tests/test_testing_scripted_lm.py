"""Tests for dspy_imp.testing.ScriptedLM: a scripted test double on DSPy's real LM plumbing."""

import asyncio
import contextvars
import copy
import json
import sys
import time
from pathlib import Path

import dspy
import pytest
from dspy.utils.exceptions import (
    AdapterParseError,
    ContextWindowExceededError,
    LMError,
    LMInvalidRequestError,
    LMRateLimitError,
    LMServerError,
    LMUnexpectedError,
)

try:
    import dspy_imp  # noqa: F401
except ModuleNotFoundError:  # not installed yet: test the checkout
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dspy_imp.testing import ScriptedLM, ScriptError, call, fail, reply


def look(where: str) -> str:
    """Look somewhere."""
    return f"a cat on the {where}"


def send(text: str) -> str:
    """Send a message."""
    return "sent"


TOOLS = [dspy.Tool(look), dspy.Tool(send)]


class ToolStep(dspy.Signature):
    """Answer, calling tools when needed."""

    question: str = dspy.InputField()
    tools: list[dspy.Tool] = dspy.InputField()
    answer: str = dspy.OutputField()
    tool_calls: dspy.ToolCalls = dspy.OutputField()


def answer(text: str) -> str:
    """A ChatAdapter-formatted reply for a `question -> answer` signature."""
    return f"[[ ## answer ## ]]\n{text}\n\n[[ ## completed ## ]]"


NATIVE = dspy.ChatAdapter(use_native_function_calling=True)
STRICT = dspy.ChatAdapter(use_json_adapter_fallback=False)


# ─── text mode ────────────────────────────────────────────────────────────────────────────────


def test_plain_predict_in_chat_adapter_text_mode():
    lm = ScriptedLM([reply(answer("It is a cat."))])
    assert isinstance(lm, dspy.LM)
    with dspy.context(lm=lm, adapter=dspy.ChatAdapter()):
        assert dspy.Predict("question -> answer")(question="What is it?").answer == "It is a cat."

    [sent] = lm.requests
    assert sent.roles == ["system", "user"]
    assert "What is it?" in sent.messages[1]["content"]
    assert (sent.tools, sent.tool_choice, sent.options, sent.tool_names) == (None, None, {}, [])
    response = lm.history[-1]["response"]  # DSPy keeps the engine's dspy.lm15.Response here
    assert (response.finish_reason, response.model) == ("stop", "scripted")
    assert response.usage.input_tokens > 0
    lm.assert_complete()


def test_dspy_configure_accepts_it():
    lm = ScriptedLM([reply(answer("yes"))])
    dspy.configure(lm=lm)
    try:  # run in a fresh context, outside the suite's autouse `dspy.context(lm=None)`
        result = contextvars.Context().run(dspy.Predict("question -> answer"), question="ok?")
    finally:
        dspy.configure(lm=None)
    assert result.answer == "yes"
    assert lm.remaining == 0


async def test_async_predict_and_sync_share_one_script():
    lm = ScriptedLM([reply(answer("first")), reply(answer("second"))])
    predict = dspy.Predict("question -> answer")
    with dspy.context(lm=lm, adapter=dspy.ChatAdapter()):
        assert (await predict.acall(question="a")).answer == "first"
        assert predict(question="b").answer == "second"
    assert [r.asynchronous for r in lm.requests] == [True, False]
    lm.assert_complete()


# ─── native tool calls ────────────────────────────────────────────────────────────────────────


def test_native_tool_calls_keep_their_ids_and_options_are_recorded():
    lm = ScriptedLM(
        [
            reply("look 1", calls=[call("look", {"where": "shelf"}, id="c1")]),
            reply(calls=[call("look", {}, id=""), call("send", {"text": "hi"}, id="c2"), call("look", {})]),
        ]
    )
    predict = dspy.Predict(ToolStep)
    forced = {"type": "function", "function": {"name": "look"}}
    with dspy.context(lm=lm, adapter=NATIVE):
        first = predict(
            question="Where is the cat?",
            tools=TOOLS,
            config={"tool_choice": forced, "temperature": 0.2, "reasoning_effort": None},
        )
        second = predict(question="Again", tools=TOOLS, config={"tool_choice": "required", "max_tokens": 50})

    assert [(c.id, c.args) for c in first.tool_calls.tool_calls] == [("c1", {"where": "shelf"})]
    # id="" reaches the adapter with no id (lm15 needs one: it carries ""); no id at all gets a stable made-up one.
    assert [(c.id, c.name) for c in second.tool_calls.tool_calls] == [
        (None, "look"),
        ("c2", "send"),
        ("scripted_2_2", "look"),
    ]
    assert [c["id"] for c in lm.history[-1]["outputs"][0]["tool_calls"]] == ["", "c2", "scripted_2_2"]
    assert lm.history[-1]["response"].finish_reason == "tool_call"

    one, two = lm.requests
    assert one.tool_names == ["look", "send"]
    assert one.tools[0] == {
        "type": "function",
        "function": {
            "name": "look",
            "description": "Look somewhere.",
            "parameters": {"type": "object", "properties": {"where": {"type": "string"}}, "required": ["where"]},
        },
    }
    assert one.tool_choice == forced
    assert one.options == {"temperature": 0.2}  # reasoning_effort=None never reaches the engine
    assert (two.tool_choice, two.options) == ("required", {"max_tokens": 50})


async def test_native_tool_calls_async():
    lm = ScriptedLM([reply(calls=[call("send", {"text": "hi"}, id="a1")], reasoning="plan: send")])
    with dspy.context(lm=lm, adapter=NATIVE):
        result = await dspy.Predict(ToolStep).acall(question="Say hi", tools=TOOLS)
    assert [(c.id, c.args) for c in result.tool_calls.tool_calls] == [("a1", {"text": "hi"})]
    assert lm.history[-1]["outputs"][0]["reasoning_content"] == "plan: send"
    assert lm.requests[0].asynchronous


def test_replayed_assistant_turn_is_recorded_in_openai_chat_form():
    lm = ScriptedLM([reply("done")])
    lm15 = dspy.lm15
    request = lm15.Request(
        model=lm.model,
        system="Be brief.",
        messages=(
            lm15.Message.user("Where?"),
            lm15.Message.assistant(
                [
                    lm15.ThinkingPart("check shelf"),
                    lm15.TextPart("Looking."),
                    lm15.ToolCallPart(id="c1", name="look", input={"where": "shelf"}),
                ]
            ),
            lm15.Message.tool({"c1": "a cat"}),
        ),
        config=lm15.Config(max_tokens=20),
    )
    response = lm(request)  # the canonical (non-deprecated) direct call returns the lm15.Response
    assert (response.text, response.finish_reason) == ("done", "stop")

    sent = lm.requests[0]
    assert sent.roles == ["system", "user", "assistant", "tool"]
    assert sent.messages[2] == {
        "role": "assistant",
        "content": "Looking.",
        "reasoning_content": "check shelf",
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "look", "arguments": '{"where":"shelf"}'}}
        ],
    }
    assert sent.messages[3]["role"] == "tool" and sent.messages[3]["tool_call_id"] == "c1"
    assert sent.options == {"max_tokens": 20}
    assert sent.request is request


def test_options_reach_the_engine_under_chat_completions_names():
    lm = ScriptedLM([reply(answer("x")), reply(answer("y"))], temperature=0.1, max_tokens=77)
    options = {
        "top_p": 0.5,
        "top_k": 4,
        "stop": ["END"],
        "seed": 1,
        "logit_bias": {"5": 1},
        "user": "u",
        "reasoning_effort": "high",
        "logprobs": True,
        "top_logprobs": 2,
    }
    with dspy.context(lm=lm):
        predict = dspy.Predict("question -> answer")
        predict(question="q", config=options)
        predict(question="q", config={"temperature": None, "reasoning_effort": "none"})
    assert lm.requests[0].options == {"temperature": 0.1, "max_tokens": 77, **options}
    assert lm.requests[1].options == {"max_tokens": 77, "reasoning_effort": "none"}  # None means "not sent"


def test_callbacks_and_history_see_scripted_calls():
    seen = []

    class Spy(dspy.utils.callback.BaseCallback):
        def on_lm_start(self, call_id, instance, inputs):
            seen.append(("start", instance))

        def on_lm_end(self, call_id, outputs, exception):
            seen.append(("end", type(exception).__name__ if exception else outputs))

    lm = ScriptedLM([reply(answer("hi")), fail.server_error()], callbacks=[Spy()])
    with dspy.context(lm=lm), pytest.raises(LMServerError):
        predict = dspy.Predict("question -> answer")
        predict(question="q")
        predict(question="q")
    assert seen == [("start", lm), ("end", [answer("hi")]), ("start", lm), ("end", "LMServerError")]
    assert len(lm.history) == 1  # a failed call leaves no history entry; lm.requests has both
    assert len(lm.requests) == 2


# ─── failures ─────────────────────────────────────────────────────────────────────────────────


@pytest.mark.parametrize(
    ("item", "error", "status", "text"),
    [
        (fail.server_error(), LMServerError, 500, "server had an error"),
        (fail.server_error(503), LMServerError, 503, "server had an error"),
        (fail.rate_limit(), LMRateLimitError, 429, "Rate limit"),
        (fail.context_window(), ContextWindowExceededError, 400, "maximum context length"),
        (
            fail.tool_choice_refused(),
            LMInvalidRequestError,
            400,
            "Invalid tool_choice type: 'object'. Supported string values: none, auto, required",
        ),
        (
            fail.invalid_request("Invalid request: model is unavailable"),
            LMInvalidRequestError,
            400,
            "Invalid request: model is unavailable",
        ),
    ],
)
def test_failures_raise_dspy_public_errors_and_are_recorded(item, error, status, text):
    lm = ScriptedLM([item, reply("never used")])
    with dspy.context(lm=lm, adapter=NATIVE), pytest.raises(error) as caught:
        dspy.Predict(ToolStep)(question="q", tools=TOOLS)
    assert type(caught.value) is error
    assert (caught.value.status, caught.value.model) == (status, "openai/scripted")
    assert text in caught.value.message
    assert lm.requests[0].tool_names == ["look", "send"]  # the failed request is recorded
    assert lm.remaining == 1  # num_retries=0: no retry, no sleep


async def test_failures_async_and_retry_after():
    lm = ScriptedLM([fail.rate_limit(retry_after=7), fail.context_window()])
    predict = dspy.Predict("question -> answer")
    with dspy.context(lm=lm):
        with pytest.raises(LMRateLimitError) as caught:
            await predict.acall(question="q")
        assert caught.value.retry_after == 7
        with pytest.raises(ContextWindowExceededError):
            await predict.acall(question="q")
    assert len(lm.requests) == 2


def test_raises_passes_dspy_errors_through_and_wraps_others():
    mine = LMServerError("boom", status=502)
    lm = ScriptedLM([fail.raises(mine), fail.raises(KeyError("k"))])
    with dspy.context(lm=lm):
        with pytest.raises(LMServerError) as caught:
            dspy.Predict("question -> answer")(question="q")
        assert caught.value is mine
        with pytest.raises(LMUnexpectedError) as wrapped:
            dspy.Predict("question -> answer")(question="q")
    assert isinstance(wrapped.value.__cause__, KeyError)


def test_retries_are_dspys_when_asked_for():
    lm = ScriptedLM([fail.rate_limit(retry_after=0.05), reply(answer("ok"))], num_retries=1)
    started = time.monotonic()
    with dspy.context(lm=lm):
        assert dspy.Predict("question -> answer")(question="q").answer == "ok"
    assert 0.05 <= time.monotonic() - started < 0.9  # DSPy slept retry_after, not its 1 s default
    assert len(lm.requests) == 2


# ─── finish reasons ───────────────────────────────────────────────────────────────────────────


def test_content_filter_and_length_are_visible_in_history():
    lm = ScriptedLM([reply("", finish_reason="content_filter"), reply(answer("cut"), finish_reason="length")])
    predict = dspy.Predict("question -> answer")
    with dspy.context(lm=lm, adapter=STRICT):
        with pytest.raises(AdapterParseError):  # an empty 200 reply: nothing is raised by the LM itself
            predict(question="q")
        assert lm.history[-1]["response"].finish_reason == "content_filter"
        assert lm.history[-1]["outputs"] == [""]
        assert predict(question="q").answer == "cut"
        assert lm.history[-1]["response"].finish_reason == "length"


def test_default_chat_adapter_retries_an_empty_reply_with_json():
    lm = ScriptedLM([reply("", finish_reason="content_filter"), reply('{"answer": "json"}')])
    with dspy.context(lm=lm, adapter=dspy.ChatAdapter()):
        assert dspy.Predict("question -> answer")(question="q").answer == "json"
    assert lm.requests[1].options == {"response_format": {"type": "json_object"}}


# ─── written (non-native) mode ────────────────────────────────────────────────────────────────


def test_written_mode_has_no_function_calling():
    written = {"tool_calls": [{"name": "look", "args": {"where": "box"}}]}
    text = f"[[ ## answer ## ]]\nlooking\n\n[[ ## tool_calls ## ]]\n{json.dumps(written)}\n\n[[ ## completed ## ]]"
    lm = ScriptedLM([reply(text)], native=False)
    assert lm.supports_function_calling is False
    with dspy.context(lm=lm, adapter=NATIVE):
        result = dspy.Predict(ToolStep)(question="q", tools=TOOLS)
    assert [(c.name, c.args) for c in result.tool_calls.tool_calls] == [("look", {"where": "box"})]
    assert lm.requests[0].tools is None and "look" in lm.requests[0].messages[-1]["content"]


def test_written_mode_refuses_native_calls():
    with pytest.raises(ValueError, match="native=False"):
        ScriptedLM([reply(calls=[call("look")])], native=False)
    lm = ScriptedLM([lambda request: reply(calls=[call("look")])], native=False)
    with dspy.context(lm=lm), pytest.raises(ScriptError, match="native=False"):
        dspy.Predict("question -> answer")(question="q")


# ─── script control ───────────────────────────────────────────────────────────────────────────


def test_callable_items_see_the_request():
    def shorten_first(request):
        too_long = len(request.messages[-1]["content"]) > 200
        return fail.context_window() if too_long else reply(answer(f"t={request.options.get('temperature')}"))

    lm = ScriptedLM([shorten_first, shorten_first])
    predict = dspy.Predict("question -> answer")
    with dspy.context(lm=lm):
        with pytest.raises(ContextWindowExceededError):
            predict(question="x" * 500)
        assert predict(question="short", config={"temperature": 0.7}).answer == "t=0.7"
    lm.assert_complete()


def test_callable_returning_junk_is_a_script_error():
    lm = ScriptedLM([lambda request: "not an item"])
    with dspy.context(lm=lm), pytest.raises(ScriptError, match="request #1"):
        dspy.Predict("question -> answer")(question="q")


def test_running_out_of_script_is_not_swallowed():
    lm = ScriptedLM([reply(answer("one"))])
    predict = dspy.Predict("question -> answer")
    with dspy.context(lm=lm, adapter=dspy.ChatAdapter()):  # its JSON fallback does not catch it
        predict(question="a")
        with pytest.raises(AssertionError, match=r"request #2 \(lm.requests\[1\]\)") as caught:
            predict(question="b")
    assert isinstance(caught.value, ScriptError) and isinstance(caught.value, LMError)
    assert len(lm.requests) == 2
    with pytest.raises(AssertionError, match=r"\[2\] arrived after the script ran out"):
        lm.assert_complete()  # even if a program had caught the error


async def test_running_out_of_script_async():
    lm = ScriptedLM([])
    with dspy.context(lm=lm), pytest.raises(ScriptError, match="request #1"):
        await dspy.Predict("question -> answer").acall(question="q")


def test_assert_complete_reports_unused_items():
    lm = ScriptedLM([reply(answer("one")), fail.server_error()])
    with dspy.context(lm=lm):
        dspy.Predict("question -> answer")(question="q")
    with pytest.raises(AssertionError, match="1 scripted item"):
        lm.assert_complete()


def test_delay_sync():
    lm = ScriptedLM([reply(answer("late"), delay=0.2)])
    started = time.monotonic()
    with dspy.context(lm=lm):
        dspy.Predict("question -> answer")(question="q")
    assert time.monotonic() - started >= 0.2


async def test_delay_async_meets_a_deadline():
    lm = ScriptedLM([reply(answer("late"), delay=5), reply(answer("fast"))])
    predict = dspy.Predict("question -> answer")
    with dspy.context(lm=lm):
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(predict.acall(question="q"), timeout=0.1)
        assert (await predict.acall(question="q")).answer == "fast"
    assert len(lm.requests) == 2


def test_copies_share_the_script_and_survive_deepcopy():
    lm = ScriptedLM([reply(answer("a")), reply(answer("b")), reply(answer("c"))], temperature=0.3)
    clone, hot = copy.deepcopy(lm), lm.copy(temperature=0.9)
    program = dspy.Predict("question -> answer")
    program.lm = lm
    program_copy = program.deepcopy()
    assert isinstance(clone, ScriptedLM) and isinstance(hot, ScriptedLM)
    with dspy.context(lm=clone):
        assert dspy.Predict("question -> answer")(question="q").answer == "a"
    with dspy.context(lm=hot):
        assert dspy.Predict("question -> answer")(question="q").answer == "b"
    assert program_copy(question="q").answer == "c"
    assert [r.options.get("temperature") for r in lm.requests] == [0.3, 0.9, 0.3]
    assert [len(x.history) for x in (lm, clone, hot, program_copy.lm)] == [0, 1, 1, 1]  # history is per copy
    lm.assert_complete()


def test_timeout_is_refused_for_a_custom_engine():
    lm = ScriptedLM([reply(answer("x"))])
    with dspy.context(lm=lm), pytest.raises(ValueError, match="timeout"):
        dspy.Predict("question -> answer")(question="q", config={"timeout": 5})
    assert lm.requests == []  # refused before the engine


def test_bad_items_and_finish_reasons_are_refused_early():
    with pytest.raises(ValueError, match="finish_reason"):
        reply("x", finish_reason="tool_calls")
    with pytest.raises(ValueError, match="script item 1"):
        ScriptedLM(["just text"])
