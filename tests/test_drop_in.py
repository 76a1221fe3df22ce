"""Switching a ``dspy.ReActV2`` program over: adapter flags, reasoning, mocks, tools, histories."""

from __future__ import annotations

import asyncio
import json
from typing import Any
from unittest import mock

import dspy
import pytest
from helpers import TA, Look, SubmitSig

import dspy_imp
from dspy_imp.testing import ScriptedLM, call, reply

WRITTEN_CALL = '[[ ## tool_calls ## ]]\n[{"name": "look", "arguments": {"where": "shelf"}}]'


def _ask(run: Any, lm: ScriptedLM, agent: dspy_imp.ReActV2 | None = None, adapter: Any = None, **kwargs: Any) -> Any:
    agent = agent or dspy_imp.ReActV2(TA, tools=[Look()])
    with dspy.context(lm=lm, adapter=adapter):
        return run(agent, intent="what is on the shelf?", **kwargs)


# -- 1. the adapter's request options reach the requests ------------------------------------------


def test_the_adapters_parallel_tool_calls_reach_every_step_request(run):
    lm = ScriptedLM([reply(calls=[call("look", {"where": "shelf"}, id="c1")]), reply("a cat")])
    adapter = dspy.ChatAdapter(use_native_function_calling=True, parallel_tool_calls=True)
    _ask(run, lm, adapter=adapter)
    assert [(r.tool_choice, r.options) for r in lm.requests] == [("auto", {"parallel_tool_calls": True})] * 2


def test_config_wins_over_the_adapters_parallel_tool_calls(run):
    lm = ScriptedLM([reply("a cat")])
    adapter = dspy.ChatAdapter(parallel_tool_calls=True)
    _ask(run, lm, adapter=adapter, config={"parallel_tool_calls": False})
    assert lm.requests[0].options == {"parallel_tool_calls": False}


def test_a_json_adapter_sends_its_response_format(run):
    lm = ScriptedLM([reply('{"answer": "a cat"}')])
    pred = _ask(run, lm, adapter=dspy.JSONAdapter())
    assert pred.answer == "a cat"
    assert lm.requests[0].options == {"response_format": {"type": "json_object"}}


# -- 2. written calls on a model that supports native ones ----------------------------------------


@pytest.mark.parametrize(
    "adapter",
    [dspy_imp.ReActAdapter(native_calls=False), dspy.JSONAdapter(use_native_function_calling=False)],
    ids=["native_calls=False", "JSONAdapter(use_native_function_calling=False)"],
)
def test_written_calls_can_be_forced_on_a_native_model(run, adapter):
    written = (
        '{"answer": "", "tool_calls": [{"name": "look", "arguments": {"where": "shelf"}}]}'
        if isinstance(adapter, dspy.JSONAdapter)
        else f"[[ ## answer ## ]]\n\n{WRITTEN_CALL}"
    )
    final = (
        '{"answer": "a cat", "tool_calls": []}'
        if isinstance(adapter, dspy.JSONAdapter)
        else "[[ ## answer ## ]]\na cat"
    )
    look = Look()
    lm = ScriptedLM([reply(written), reply(final)])
    pred = _ask(run, lm, agent=dspy_imp.ReActV2(TA, tools=[look]), adapter=adapter)
    assert pred.answer == "a cat" and look.runs == [{"where": "shelf"}]
    assert all(r.tools is None and r.tool_choice is None for r in lm.requests)
    assert "look, whose description is <desc>Look at a thing</desc>" in lm.requests[0].messages[-1]["content"]


# -- 3. use_json_adapter_fallback=False is followed -----------------------------------------------


@pytest.mark.parametrize("fallback", [True, False])
def test_the_json_fallback_follows_the_adapters_flag(run, fallback):
    unreadable = "[[ ## answer ## ]]\nx\n\n[[ ## tool_calls ## ]]\n42"
    script = [reply(unreadable)] * (2 if fallback else 1) + [reply("[[ ## answer ## ]]\na cat")]
    lm = ScriptedLM(script, native=False)
    pred = _ask(run, lm, adapter=dspy.ChatAdapter(use_json_adapter_fallback=fallback))
    json_requests = ["Respond with a JSON object" in r.messages[-1]["content"] for r in lm.requests]
    if fallback:
        assert json_requests == [False, True, False]
    else:
        assert json_requests == [False, False]  # the unreadable step, then the last-text request
    assert (pred.answer, pred.metadata.termination_reason, pred.metadata.termination_cause) == (
        "a cat",
        "last_text",
        "parse_error",
    )


# -- 4. reasoning_effort as dspy.ReActV2 sends it ---------------------------------------------------


def test_a_reasoning_model_gets_low_effort_on_ordinary_steps_and_none_when_forced(run):
    lm = ScriptedLM(
        [reply("thinking it over"), reply(calls=[call("submit", {"answer": "a", "confidence": 1.0})])], reasoning=True
    )
    pred = _ask(run, lm, agent=dspy_imp.ReActV2(SubmitSig, tools=[Look()]))
    assert pred.metadata.termination_reason == "forced_submit"
    assert [r.options for r in lm.requests] == [{"reasoning_effort": "low"}, {}]


@pytest.mark.parametrize(
    "lm_kwargs, config, sent",
    [
        ({}, {}, {"reasoning_effort": "low"}),
        ({"reasoning_effort": "high"}, {}, {"reasoning_effort": "high"}),
        ({"reasoning_effort": None}, {}, {}),
        ({}, {"reasoning_effort": "medium"}, {"reasoning_effort": "medium"}),
        ({"reasoning_effort": "high"}, {"reasoning_effort": None}, {}),
    ],
)
def test_an_explicit_reasoning_effort_wins(run, lm_kwargs, config, sent):
    lm = ScriptedLM([reply("a cat")], reasoning=True, **lm_kwargs)
    _ask(run, lm, config=config)
    assert lm.requests[0].options == sent


def test_a_model_without_reasoning_gets_no_effort(run):
    lm = ScriptedLM([reply("a cat")])
    _ask(run, lm)
    assert lm.requests[0].options == {}


# -- 5. mocking the inner predictor as DSPy's tests do ----------------------------------------------


def _predictions() -> list[dspy.Prediction]:
    calls = dspy.ToolCalls(tool_calls=[dspy.ToolCalls.ToolCall(name="look", args={"where": "shelf"})])
    return [dspy.Prediction(next_thought="checking", tool_calls=calls), dspy.Prediction(next_thought="a cat")]


def test_a_mocked_inner_predictor_drives_the_turn(run):
    look = Look()
    agent = dspy_imp.ReActV2(TA, tools=[look])
    method = "forward" if run.mode == "sync" else "aforward"
    patcher = mock.patch.object(agent.react, method, side_effect=_predictions())
    if run.mode == "async":
        patcher = mock.patch.object(agent.react, method, new=mock.AsyncMock(side_effect=_predictions()))
    with patcher, dspy.context(lm=ScriptedLM([])):
        pred = run(agent, intent="what is on the shelf?")
    assert pred.answer == "a cat" and pred.metadata.termination_reason == "answered"
    assert look.runs == [{"where": "shelf"}]
    first = pred.metadata.history.messages[0]
    assert (first["next_thought"], [c["name"] for c in first["tool_calls"]]) == ("checking", ["look"])
    assert first["tool_call_results"][0]["result"] == {"seen": True}


def test_a_mocked_acall_of_the_inner_predictor_drives_an_async_turn():
    agent = dspy_imp.ReActV2(TA, tools=[Look()])
    patched = mock.patch.object(agent.react, "acall", new=mock.AsyncMock(side_effect=_predictions()))
    with patched, dspy.context(lm=ScriptedLM([])):
        pred = asyncio.run(agent.acall(intent="what is on the shelf?"))
    assert (pred.answer, len(pred.metadata.history.messages)) == ("a cat", 2)


def test_a_mocked_submit_ends_a_submit_turn(run):
    calls = dspy.ToolCalls.from_dict_list([{"name": "submit", "args": {"answer": "a cat", "confidence": 0.5}}])
    done = dspy.Prediction(next_thought=dspy.Reasoning(content="done"), tool_calls=calls)
    agent = dspy_imp.ReActV2(SubmitSig, tools=[Look()])
    new = mock.Mock(return_value=done) if run.mode == "sync" else mock.AsyncMock(return_value=done)
    method = "forward" if run.mode == "sync" else "aforward"
    with mock.patch.object(agent.react, method, new=new), dspy.context(lm=ScriptedLM([])):
        pred = run(agent, intent="what?")
    assert (pred.answer, pred.confidence, pred.metadata.termination_reason) == ("a cat", 0.5, "submit")


# -- 6. written calls in any readable shape run; markup never becomes the answer -------------------


def test_a_written_reply_with_only_calls_runs_them(run):
    look = Look()
    lm = ScriptedLM([reply(WRITTEN_CALL), reply(WRITTEN_CALL), reply("[[ ## answer ## ]]\na cat")], native=False)
    pred = _ask(run, lm, agent=dspy_imp.ReActV2(TA, tools=[look]))
    assert (pred.answer, pred.metadata.termination_reason) == ("a cat", "answered")
    assert look.runs == [{"where": "shelf"}] * 2
    assert len(lm.requests) == 3  # no JSON fallback: the reply was readable


@pytest.mark.parametrize(
    "written",
    [
        '<tool_calls>[{"name": "look", "arguments": {"where": "shelf"}}]</tool_calls>',
        '{"tool_calls": [{"name": "look", "arguments": {"where": "shelf"}}]}',
        '```json\n{"answer": "", "tool_calls": [{"name": "look", "args": {"where": "shelf"}}]}\n```',
    ],
    ids=["xml", "json", "fenced-json"],
)
def test_calls_written_in_another_format_run(run, written):
    look = Look()
    lm = ScriptedLM([reply(written), reply("[[ ## answer ## ]]\na cat")], native=False)
    pred = _ask(run, lm, agent=dspy_imp.ReActV2(TA, tools=[look]))
    assert (pred.answer, look.runs, len(lm.requests)) == ("a cat", [{"where": "shelf"}], 2)


def test_a_native_reply_that_writes_its_calls_as_text_runs_them(run):
    look = Look()
    lm = ScriptedLM(
        [reply(f"[[ ## next_thought ## ]]\nchecking\n\n{WRITTEN_CALL}"), reply(WRITTEN_CALL), reply("a cat")]
    )
    pred = _ask(run, lm, agent=dspy_imp.ReActV2(TA, tools=[look]))
    assert (pred.answer, look.runs) == ("a cat", [{"where": "shelf"}] * 2)
    first, second = pred.metadata.history.messages[:2]
    assert first["next_thought"] == "checking" and "next_thought" not in second


def test_markers_with_no_known_field_never_reach_the_answer(run):
    lm = ScriptedLM([reply("[[ ## reasoning ## ]]\nhm\n\n[[ ## completed ## ]]")])
    pred = _ask(run, lm)
    assert pred.answer == "hm"


# -- 7. agent.tools["submit"] -------------------------------------------------------------------------


def test_agent_tools_holds_submit_when_turns_end_through_it():
    look = dspy.Tool(Look())
    submitting = dspy_imp.ReActV2(SubmitSig, tools=[look])
    assert list(submitting.tools) == ["look", "submit"] and submitting.tools["look"] is look
    assert submitting.tools["submit"].desc == "Submit the final outputs for the task."
    assert list(dspy_imp.ReActV2(TA, tools=[look], finish="submit").tools) == ["look", "submit"]
    assert list(dspy_imp.ReActV2(TA, tools=[look]).tools) == ["look"]


# -- 8. our history, read by stock code and dspy.ReActV2 -------------------------------------------


def test_to_dspy_history_gives_stock_entries_that_dspy_react_v2_replays(run):
    lm = ScriptedLM([reply("checking", calls=[call("look", {"where": "shelf"}, id="c1")]), reply("a cat")])
    pred = _ask(run, lm)
    stock = dspy_imp.to_dspy_history(pred.metadata.history)
    first = stock.messages[0]
    assert first["tool_calls"].tool_calls[0].id == "c1"
    assert first["tool_calls"].tool_call_results.tool_call_results[0].value == {"seen": True}
    assert (first["intent"], first["next_thought"]) == ("what is on the shelf?", "checking")
    assert stock.messages[1] == {"next_thought": "a cat", "answer": "a cat"}

    replay = ScriptedLM([reply(calls=[call("submit", {"answer": "a cat"}, id="s1")])])
    react = dspy.ReActV2(TA, tools=[Look()])
    with dspy.context(lm=replay, adapter=dspy.ChatAdapter(use_native_function_calling=True)):
        again = run(react, intent="and now?", history=stock)
    sent = replay.requests[0].messages
    (result,) = [m for m in sent if m["role"] == "tool"]
    assert (result["tool_call_id"], result["content"]) == ("c1", '{"seen": true}')
    assert sent[2]["tool_calls"][0]["id"] == "c1" and "checking" in sent[2]["content"]
    assert again.answer == "a cat"


# -- 11. BootstrapFinetune's data is what the loop sent ---------------------------------------------


def test_finetune_data_is_the_requests_the_loop_sent_and_their_replies():
    from dspy.teleprompt.bootstrap_finetune import BootstrapFinetune
    from dspy.teleprompt.bootstrap_trace import bootstrap_trace_data

    lm = ScriptedLM([reply("checking", calls=[call("look", {"where": "shelf"}, id="c1")]), reply("a cat")])
    agent = dspy_imp.ReActV2(TA, tools=[Look()])
    agent.set_lm(lm)
    trainset = [dspy.Example(intent="what is on the shelf?", answer="a cat").with_inputs("intent")]
    with dspy.context(lm=lm):
        traces = bootstrap_trace_data(agent, trainset, metric=lambda g, p, t=None: p.answer == g.answer)
    finetune = BootstrapFinetune(metric=lambda g, p, t=None: True, adapter=dspy_imp.ReActAdapter(), num_threads=1)
    data, data_format = finetune._prepare_finetune_data(trace_data=traces, lm=lm)
    assert data_format == "chat"
    by_length = sorted(data, key=lambda d: len(d["messages"]))
    first, second = lm.requests
    assert _compact(by_length[0]["messages"]) == [
        *first.messages,
        {
            "role": "assistant",
            "content": "checking",
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "look", "arguments": '{"where":"shelf"}'}}
            ],
        },
    ]
    assert by_length[0]["tools"] == first.tools
    assert _compact(by_length[1]["messages"]) == [*second.messages, {"role": "assistant", "content": "a cat"}]


def test_each_traced_step_formats_as_its_request_and_reply(run):
    lm = ScriptedLM([reply(calls=[call("look", {"where": "shelf"}, id="c1")]), reply("a cat")])
    with dspy.context(trace=[]):
        _ask(run, lm)
        trace = list(dspy.settings.trace)
    adapter = dspy_imp.ReActAdapter()
    data = [adapter.format_finetune_data(p.signature, [], i, o) for p, i, o in trace]
    assert [_compact(d["messages"])[:-1] for d in data] == [r.messages for r in lm.requests]
    assert [d["messages"][-1]["content"] for d in data] == [None, "a cat"]
    assert all(d["tools"] == r.tools for d, r in zip(data, lm.requests, strict=True))


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


# -- 12. TwoStepAdapter with a model that writes its calls ------------------------------------------


def test_two_step_adapter_with_a_model_without_native_calls(run):
    main = ScriptedLM([reply("I will look on the shelf."), reply("It is a cat.")], native=False)
    extraction = ScriptedLM(
        [
            reply(f"[[ ## answer ## ]]\n\n{WRITTEN_CALL}\n\n[[ ## completed ## ]]"),
            reply("[[ ## answer ## ]]\na cat\n\n[[ ## tool_calls ## ]]\n[]\n\n[[ ## completed ## ]]"),
        ],
        native=False,
    )
    look = Look()
    pred = _ask(run, main, agent=dspy_imp.ReActV2(TA, tools=[look]), adapter=dspy.TwoStepAdapter(extraction))
    assert (pred.answer, pred.metadata.termination_reason, look.runs) == ("a cat", "answered", [{"where": "shelf"}])
    assert extraction.requests[0].messages[-1]["content"].startswith("[[ ## text ## ]]\nI will look on the shelf.")
    assert main.requests[1].messages[0]["content"].startswith("You are a helpful assistant")


# -- 13. ScriptedLM calls without ids under cache=True and dspy.streamify -------------------------


def test_id_less_scripted_calls_survive_the_cache(run):
    dspy.configure_cache(enable_disk_cache=False, enable_memory_cache=True)
    try:
        script = [reply(calls=[call("look", {"where": "shelf"})]), reply("a cat")]
        lm = ScriptedLM(script, cache=True, model=f"openai/cached-{run.mode}")  # one cache key space per test
        first = _ask(run, lm)
        again = _ask(run, lm)  # every request is answered from the cache
    finally:
        dspy.configure_cache(enable_disk_cache=False, enable_memory_cache=False)
    assert first.answer == again.answer == "a cat" and len(lm.requests) == 2
    assert again.metadata.history.messages[0]["tool_calls"][0]["id"] == "scripted_1_0"


def test_id_less_scripted_calls_stream_from_the_cache():
    dspy.configure_cache(enable_disk_cache=False, enable_memory_cache=True)
    lm = ScriptedLM(
        [reply(calls=[call("look", {"where": "shelf"})]), reply("a cat")], cache=True, model="openai/streamed"
    )
    streaming = dspy.streamify(dspy_imp.ReActV2(TA, tools=[Look()]))

    async def collect() -> list[Any]:
        with dspy.context(lm=lm):
            return [item async for item in streaming(intent="what is on the shelf?")]

    try:
        runs = [asyncio.run(collect())[-1] for _ in range(2)]  # the second is answered from the cache
    finally:
        dspy.configure_cache(enable_disk_cache=False, enable_memory_cache=False)
    assert [p.answer for p in runs] == ["a cat", "a cat"] and len(lm.requests) == 2
    assert runs[1].metadata.history.messages[0]["tool_calls"][0]["id"] == "scripted_1_0"
