"""What people see of a call the provider ran (``dspy_imp.hosted``): status lines, the turn's events,
the AG-UI and AI SDK streams, the notebook view, the GenAI spans, all read from the recorded blocks.

The turns play recorded replies (``hosted_recordings``, ``cassettes/hosted``) to a real ``dspy.LM`` on
DSPy's native engine over loopback HTTP. An observed turn streams its requests; the emulator answers
whole JSON bodies, so ``whole_replies_streamed`` hands each engine's whole reply as its stream (lm15's
own ``response_to_events``): what an observed turn reads is then what a non-streamed one reads.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import dspy
import pytest
from dspy._vendor.lm15.result import response_to_events
from dspy.clients.engines import lm15_engine
from emulator import Emulator, Scripted
from hosted_recordings import CODE_REPLY_1, SEARCH_ERROR, SEARCH_ID, SEARCH_RESULT, SERVER_TOOL_USE, USAGE
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as ga
from opentelemetry.semconv.attributes.error_attributes import ERROR_TYPE
from opentelemetry.trace import StatusCode
from streaming_helpers import statuses, stream_items
from web_helpers import agui_events, vercel_parts, verify_agui, verify_vercel
from web_scenarios import client, run_input

import dspy_imp
import dspy_imp.tracing
import dspy_imp.web
from dspy_imp._routes.hosted import calls_of
from dspy_imp._routes.hosted_types import HostedCall
from dspy_imp._watch.events import HostedToolCall, SubAgentEvent
from dspy_imp.hosted import CodeExecution, WebSearch
from dspy_imp.mcp._serving import _line

pytestmark = pytest.mark.block_network(allowed_hosts=[r"127\.0\.0\.1$"])

MODEL = "anthropic/claude-sonnet-4-5"
CASSETTES = Path(__file__).resolve().parents[2] / "cassettes" / "hosted"
QUESTION = "What happened on September 29, and the weather in Geneva?"
ANSWER = "CERN was founded on September 29, 1954."


def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"Sunny in {city}."


@pytest.fixture
def whole_replies_streamed(monkeypatch: pytest.MonkeyPatch) -> None:
    def stream(self: Any, request: Any) -> Iterator[Any]:
        return response_to_events(self.complete(request))

    async def astream(self: Any, request: Any) -> AsyncIterator[Any]:
        for event in response_to_events(await self.complete(request)):
            yield event

    monkeypatch.setattr(lm15_engine.LM15Engine, "stream", stream)
    monkeypatch.setattr(lm15_engine.AsyncLM15Engine, "stream", astream)


def _message(content: list[dict[str, Any]], usage: dict[str, Any] | None = None) -> Scripted:
    calls = any(b["type"] == "tool_use" for b in content)
    body = {
        "id": "msg_011CfY3xKWz4wdu1A1if4oLf",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5-20250929",
        "content": content,
        "stop_reason": "tool_use" if calls else "end_turn",
        "stop_sequence": None,
        "usage": usage or {"input_tokens": 120, "output_tokens": 20},
    }
    return Scripted(200, body)


def _use(call_id: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"type": "tool_use", "id": call_id, "name": name, "input": args}


def search_script() -> list[Scripted]:
    """The recorded search (its call and results, no text), then our weather call; then our submit."""
    weather = _use("toolu_01Weather", "get_weather", {"city": "Geneva"})
    return [
        _message([SERVER_TOOL_USE, SEARCH_RESULT, weather], USAGE),
        _message([_use("toolu_02Submit", "submit", {"answer": ANSWER})]),
    ]


def agent() -> dspy_imp.ReActV2:
    return dspy_imp.ReActV2("question -> answer", tools=[WebSearch(max_uses=3), get_weather], finish="submit")


def lm(emulator: Emulator) -> dspy.LM:
    return dspy.LM(
        MODEL,
        api_base=emulator.base_url + "/v1",
        api_key="sk-test",
        cache=False,
        num_retries=0,
        reasoning_effort=None,
    )


def recording(name: str) -> dict[str, Any]:
    found: dict[str, Any] = json.loads((CASSETTES / f"{name}.json").read_text())
    return found


SEARCHED = HostedCall(
    SEARCH_ID,
    "web_search",
    {"query": "September 29 history events"},
    {
        "results": [
            {"title": "On This Day in History", "url": "https://www.timeanddate.com/on-this-day/september/29"},
            {
                "title": "Today in History - September 29",
                "url": "https://www.loc.gov/item/today-in-history/september-29/",
            },
        ]
    },
    None,
    "anthropic",
)


# -- the calls of a recorded block, per provider -----------------------------------------------------


def test_anthropic_blocks_list_their_searches_code_and_errors() -> None:
    assert calls_of([{"type": "anthropic_served", "content": [SERVER_TOOL_USE, SEARCH_RESULT]}]) == [SEARCHED]
    errored = [SERVER_TOOL_USE, {**SEARCH_ERROR, "tool_use_id": SEARCH_ID}]
    assert calls_of([{"type": "anthropic_served", "content": errored}]) == [
        HostedCall(SEARCH_ID, "web_search", SEARCHED.input, {}, "max_uses_exceeded", "anthropic")
    ]
    code = {"type": "anthropic_served", "content": CODE_REPLY_1["content"]}
    assert calls_of([code]) == [
        HostedCall(
            "srvtoolu_01Pc4vcD1JPUDcVhHaskFUfn",
            "code_execution",
            {"code": 'result = 3 * 12390\nprint(f"3 * 12390 = {result}")'},
            {"output": "3 * 12390 = 37170\n", "return_code": 0},
            None,
            "anthropic",
        )
    ]


def test_openai_output_lists_its_hosted_call_items() -> None:
    def block(name: str, index: int = 0) -> list[dict[str, Any]]:
        return [{"type": "openai_served", "content": recording(name)["interactions"][index]["response"]["output"]}]

    searches = calls_of(block("openai_web_search"))
    assert [(c.name, c.input["query"], c.provider) for c in searches][:2] == [
        ("web_search", "top world news September 12, 2025 Reuters", "openai"),
        ("web_search", "Nepal protests September 12 2025 Reuters", "openai"),
    ]
    assert len(searches) == 6 and searches[0].id == "ws_0e3d55e9502941380068c4aaab56508195a1effa9583720d20"
    assert searches[0].input == {"query": "top world news September 12, 2025 Reuters", "type": "search"}
    assert calls_of(block("openai_code_interpreter")) == [
        HostedCall(
            "ci_68cdba5af39881a393a01eebb253854e09b7445677780c8f",
            "code_execution",
            {"code": "# compute the value\n65465 - 6544 * 65464 - 6 + 1.02255\n"},
            {"output": "-428330955.97745"},
            None,
            "openai",
        )
    ]
    assert calls_of(block("openai_file_search")) == [
        HostedCall(
            "fs_08aa886305ae5628006939ad6cfa30819a85b07d52d61eb121",
            "file_search",
            {"queries": ["What is the capital of France?"]},
            {"results": [{"title": "tmpd_9a5dki.txt", "file_id": "file-2b6dRdmXnzSrqiEbhVJZRU", "score": 0.9716}]},
            None,
            "openai",
        )
    ]
    mcp_item = next(i for i in block("openai_mcp")[0]["content"] if i["type"] == "mcp_call")
    assert calls_of(block("openai_mcp")) == [  # listing the server's tools is no call
        HostedCall(
            mcp_item["id"],
            "mcp_call",
            {"server": "deepwiki", "tool": "ask_question", "arguments": json.loads(mcp_item["arguments"])},
            {"output": mcp_item["output"]},
            None,
            "openai",
        )
    ]


def _gemini(name: str, index: int) -> list[dict[str, Any]]:
    candidate = recording(f"gemini_{name}")["responses"][index]["body"]["candidates"][0]
    extra = {k: candidate[k] for k in ("groundingMetadata", "urlContextMetadata") if k in candidate}
    return [{"type": "gemini_served", "content": candidate["content"]["parts"], **extra}]


def test_gemini_parts_and_grounding_list_their_calls() -> None:
    code = calls_of(_gemini("code_execution", 0))
    assert [(c.id, c.name, c.result, c.error) for c in code] == [
        (
            "h0mwtrhs",
            "code_execution",
            {"output": "Current day in Utrecht: Tuesday, May 05, 2026\n", "outcome": "OUTCOME_OK"},
            None,
        ),
        ("7lr99y60", "code_execution", {"output": "2026-05-05 20:40:33.367937\n", "outcome": "OUTCOME_OK"}, None),
    ]
    assert code[1].input == {"code": "import datetime\nprint(datetime.datetime.now())\n", "language": "PYTHON"}
    searched = calls_of(_gemini("function_tools_with_builtin_tools", 0))
    assert searched == [
        HostedCall("93z4z1x3", "web_search", {"queries": ["current weather in Tokyo"]}, {"results": []}, None, "gemini")
    ]
    (fetched,) = calls_of(_gemini("web_fetch_tool", 0))
    assert (fetched.name, fetched.input, fetched.result, fetched.error) == (
        "web_fetch",
        {"urls": ["https://ai.pydantic.dev"]},
        {"results": [{"url": "https://ai.pydantic.dev", "status": "URL_RETRIEVAL_STATUS_SUCCESS"}]},
        None,
    )
    assert fetched.id == calls_of(_gemini("web_fetch_tool", 0))[0].id  # made from the call: the same every read
    (grounded,) = calls_of(_gemini("web_search_tool", 0))
    assert (grounded.name, grounded.input) == ("web_search", {"queries": ["weather in San Francisco today"]})
    assert grounded.result["results"][0] == {
        "title": "Weather information for San Francisco, CA, US",
        "url": "https://www.google.com/search?q=weather+in+San Francisco, CA,+US",
    }
    (files,) = calls_of(_gemini("file_search_tool", 0))
    assert (files.name, files.input) == (
        "file_search",
        {"stores": ["fileSearchStores/testfilesearchstore-q7prdj5dqu8p"]},
    )
    assert files.id != calls_of(_gemini("file_search_tool", 1))[0].id  # another reply's search, another id


# -- status lines under dspy.streamify ---------------------------------------------------------------


def test_the_status_lines_say_what_the_provider_ran(whole_replies_streamed: None, how: str) -> None:
    with Emulator(search_script()) as emulator, dspy.context(lm=lm(emulator)):
        items = stream_items(agent(), how, [], question=QUESTION)
    assert statuses(items) == [
        'Searched the web for "September 29 history events" (2 results)',
        'Calling get_weather({"city": "Geneva"})',
        "get_weather returned: Sunny in Geneva.",
        f'Calling submit({{"answer": "{ANSWER}"}})',
        f'submit returned: {{"answer": "{ANSWER}"}}',
        "Turn ended: submit",
    ]


def test_a_hosted_code_run_and_an_error_have_their_lines() -> None:
    code = calls_of([{"type": "anthropic_served", "content": CODE_REPLY_1["content"]}])[0]
    failed = HostedCall(SEARCH_ID, "web_search", SEARCHED.input, {}, "max_uses_exceeded", "anthropic")
    mcp = HostedCall(
        "mcp_1", "mcp_call", {"server": "deepwiki", "tool": "ask", "arguments": {"q": "hi"}}, {"output": "Hello"}
    )
    provider = dspy_imp.StatusMessageProvider()
    assert [provider.hosted_tool_status_message(c) for c in (code, failed, mcp)] == [
        'Ran code: result = 3 * 12390 print(f"3 * 12390 = … -> 3 * 12390 = 37170',
        'Searched the web for "September 29 history events" (failed: max_uses_exceeded)',
        'Called deepwiki.ask({"q": "hi"}) on the provider: Hello',
    ]


# -- the web: AG-UI and the AI SDK stream ------------------------------------------------------------

WEATHER_ID, SUBMIT_ID = "toolu_01Weather", "toolu_02Submit"
SEARCH_RESULT_TEXT = json.dumps(SEARCHED.result, ensure_ascii=False)


def _call(call_id: str, name: str, args: str) -> list[dict[str, Any]]:
    return [
        {"type": "TOOL_CALL_START", "toolCallId": call_id, "toolCallName": name},
        {"type": "TOOL_CALL_ARGS", "toolCallId": call_id, "delta": args},
        {"type": "TOOL_CALL_END", "toolCallId": call_id},
    ]


def _result(call_id: str, content: str) -> dict[str, Any]:
    return {
        "type": "TOOL_CALL_RESULT",
        "messageId": f"r1-result-{call_id}",
        "toolCallId": call_id,
        "content": content,
        "role": "tool",
    }


@pytest.mark.parametrize("sync", [False, True], ids=["async", "sync"])
async def test_agui_tells_the_hosted_call_as_a_provider_run_tool_call(whole_replies_streamed: None, sync: bool) -> None:
    with Emulator(search_script()) as emulator:
        served = agent()
        served.set_lm(lm(emulator))
        async with client(dspy_imp.web.app(served, sync=sync)) as http:
            response = await http.post("/ag-ui", json=run_input(QUESTION), headers={"accept": "text/event-stream"})
    events = agui_events(response.text)
    verify_agui(events)
    answer = json.dumps({"answer": ANSWER})
    marker = {"toolCallId": SEARCH_ID, "toolName": "web_search", "provider": "anthropic", "error": None}
    assert events[:-2] == [
        {"type": "RUN_STARTED", "threadId": "t1", "runId": "r1", "protocolVersion": "1.0"},
        {"type": "STEP_STARTED", "stepName": "request 1: step"},
        {"type": "CUSTOM", "name": "dspy_imp.provider_executed", "value": marker},
        *_call(SEARCH_ID, "web_search", '{"query": "September 29 history events"}'),
        _result(SEARCH_ID, SEARCH_RESULT_TEXT),
        *_call(WEATHER_ID, "get_weather", '{"city": "Geneva"}'),
        _result(WEATHER_ID, "Sunny in Geneva."),
        {"type": "STEP_FINISHED", "stepName": "request 1: step"},
        {"type": "STEP_STARTED", "stepName": "request 2: step"},
        *_call(SUBMIT_ID, "submit", answer),
        _result(SUBMIT_ID, answer),
        {"type": "STEP_FINISHED", "stepName": "request 2: step"},
        {"type": "TEXT_MESSAGE_START", "messageId": "r1-answer", "role": "assistant"},
        {"type": "TEXT_MESSAGE_CONTENT", "messageId": "r1-answer", "delta": ANSWER},
        {"type": "TEXT_MESSAGE_END", "messageId": "r1-answer"},
    ]
    snapshot, finished = events[-2:]
    assert finished["type"] == "RUN_FINISHED" and finished["result"]["termination_reason"] == "submit"
    step = next(m for m in snapshot["messages"] if m["role"] == "assistant")
    hosted = [{**SEARCHED.as_dict(), "content": SEARCH_RESULT_TEXT}]
    assert step["metadata"]["dspy_imp"]["hosted_calls"] == hosted  # what a reload shows
    assert [c["id"] for c in step["toolCalls"]] == [WEATHER_ID]  # the loop's own calls only


def _vercel_chat(text: str) -> dict[str, Any]:
    return {"id": "c1", "messages": [{"id": "u1", "role": "user", "parts": [{"type": "text", "text": text}]}]}


@pytest.mark.parametrize("sync", [False, True], ids=["async", "sync"])
async def test_the_ai_sdk_stream_marks_the_hosted_call_provider_executed(
    whole_replies_streamed: None, sync: bool
) -> None:
    with Emulator(search_script()) as emulator:
        served = agent()
        served.set_lm(lm(emulator))
        async with client(dspy_imp.web.app(served, sync=sync)) as http:
            response = await http.post("/api/chat", json=_vercel_chat(QUESTION))
    parts = vercel_parts(response.text)
    verify_vercel(parts)
    answer = {"answer": ANSWER}
    assert parts[:-1] == [
        {"type": "start", "messageId": "c1-1"},
        {"type": "start-step"},
        {"type": "tool-input-start", "toolCallId": SEARCH_ID, "toolName": "web_search", "providerExecuted": True},
        {
            "type": "tool-input-available",
            "toolCallId": SEARCH_ID,
            "toolName": "web_search",
            "input": {"query": "September 29 history events"},
            "providerExecuted": True,
        },
        {"type": "tool-output-available", "toolCallId": SEARCH_ID, "output": SEARCHED.result, "providerExecuted": True},
        {"type": "tool-input-start", "toolCallId": WEATHER_ID, "toolName": "get_weather"},
        {"type": "tool-input-delta", "toolCallId": WEATHER_ID, "inputTextDelta": '{"city": "Geneva"}'},
        {
            "type": "tool-input-available",
            "toolCallId": WEATHER_ID,
            "toolName": "get_weather",
            "input": {"city": "Geneva"},
        },
        {"type": "tool-output-available", "toolCallId": WEATHER_ID, "output": "Sunny in Geneva."},
        {"type": "finish-step"},
        {"type": "start-step"},
        {"type": "tool-input-start", "toolCallId": SUBMIT_ID, "toolName": "submit"},
        {"type": "tool-input-delta", "toolCallId": SUBMIT_ID, "inputTextDelta": json.dumps(answer)},
        {"type": "tool-input-available", "toolCallId": SUBMIT_ID, "toolName": "submit", "input": answer},
        {"type": "tool-output-available", "toolCallId": SUBMIT_ID, "output": answer},
        {"type": "finish-step"},
        {"type": "text-start", "id": "c1-1-answer"},
        {"type": "text-delta", "id": "c1-1-answer", "delta": ANSWER},
        {"type": "text-end", "id": "c1-1-answer"},
    ]
    assert parts[-1]["type"] == "finish" and parts[-1]["finishReason"] == "stop"


async def test_an_ai_sdk_resume_carrying_the_hosted_tool_part_is_read(whole_replies_streamed: None) -> None:
    """``useChat`` sends the whole assistant message back, the provider's tool part with it: that part
    is the client's copy of a call the server recorded, not an answer to refuse."""
    served = dspy_imp.ReActV2(
        "question -> answer", tools=[WebSearch(), get_weather], finish="submit", needs_approval=["get_weather"]
    )
    with Emulator(search_script()) as emulator:
        served.set_lm(lm(emulator))
        async with client(dspy_imp.web.app(served)) as http:
            first = vercel_parts((await http.post("/api/chat", json=_vercel_chat(QUESTION))).text)
            assert {"type": "tool-approval-request", "approvalId": WEATHER_ID, "toolCallId": WEATHER_ID} in first
            hosted_part = {
                "type": "tool-web_search",
                "toolCallId": SEARCH_ID,
                "state": "output-available",
                "input": SEARCHED.input,
                "output": SEARCHED.result,
                "providerExecuted": True,
            }
            approved = {
                "type": "tool-get_weather",
                "toolCallId": WEATHER_ID,
                "state": "approval-responded",
                "input": {"city": "Geneva"},
                "approval": {"id": WEATHER_ID, "approved": True},
            }
            body = _vercel_chat(QUESTION)
            body["messages"].append({"id": "c1-1", "role": "assistant", "parts": [hosted_part, approved]})
            resumed = vercel_parts((await http.post("/api/chat", json=body)).text)
    assert {"type": "tool-output-available", "toolCallId": WEATHER_ID, "output": "Sunny in Geneva."} in resumed
    assert resumed[-1]["type"] == "finish" and resumed[-1]["messageMetadata"]["termination_reason"] == "submit"


async def test_no_client_tool_may_take_a_name_hosted_calls_are_shown_by() -> None:
    served = agent()
    body = {
        **run_input(QUESTION),
        "tools": [{"name": "web_search", "description": "mine", "parameters": {"type": "object"}}],
    }
    async with client(dspy_imp.web.app(served, client_tools=True)) as http:
        response = await http.post("/ag-ui", json=body, headers={"accept": "text/event-stream"})
    assert response.status_code == 422
    assert "`tools[0].name` 'web_search' is the name of one of the agent's own tools (or submit)" in response.text


# -- the notebook view --------------------------------------------------------------------------------


def test_the_notebook_view_shows_the_hosted_call_in_its_step(run: Any) -> None:
    with Emulator(search_script()) as emulator, dspy.context(lm=lm(emulator)):
        pred = run(agent(), question=QUESTION)
    view = dspy_imp.HistoryView(pred.metadata.history, ["answer"])._repr_html_()
    whole = (
        "{&quot;results&quot;: [{&quot;title&quot;: &quot;On This Day in History&quot;, &quot;url&quot;: "
        "&quot;https://www.timeanddate.com/on-this-day/september/29&quot;}, {&quot;title&quot;: &quot;Today in "
        "History - September 29&quot;, &quot;url&quot;: &quot;https://www.loc.gov/item/today-in-history/september-29/"
        "&quot;}]}"
    )
    folded = (
        "{&quot;results&quot;: [{&quot;title&quot;: &quot;On This Day in History&quot;, &quot;url&quot;: "
        "&quot;https://www.timeanddate…"
    )
    results = f'<details class="dspy-imp-fold"><summary><code>{folded}</code></summary><pre>{whole}</pre></details>'
    card = (
        f'<ul class="dspy-imp-calls"><li class="dspy-imp-call dspy-imp-hosted" data-call-id="{SEARCH_ID}">'
        "<code>web_search</code>(<code>{&quot;query&quot;: &quot;September 29 history events&quot;}</code>) → "
        f'<span>{results}</span> <span class="dspy-imp-cause">run by anthropic</span></li></ul>'
    )
    weather = '<ul class="dspy-imp-calls"><li class="dspy-imp-call"><code>get_weather</code>'
    assert card + weather in view  # in the first step, before the step's own calls
    assert view.count("dspy-imp-hosted") == 1


# -- GenAI spans ---------------------------------------------------------------------------------------


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    dspy_imp.tracing.instrument(tracer_provider=provider, capture_content=True)
    yield exporter
    dspy_imp.tracing.uninstrument()


def _tree(exporter: InMemorySpanExporter) -> list[Any]:
    """``(name, [children...])`` of each root, children in start order (then end order: a hosted call's
    span starts with its request's)."""
    finished = sorted(exporter.get_finished_spans(), key=lambda s: (s.start_time, -s.end_time))
    by_parent: dict[Any, list[Any]] = {}
    for span in finished:
        by_parent.setdefault(span.parent.span_id if span.parent else None, []).append(span)

    def node(span: Any) -> Any:
        children = by_parent.get(span.context.span_id, [])
        return (span.name, [node(c) for c in children]) if children else span.name

    return [node(root) for root in by_parent.get(None, [])]


def test_a_hosted_call_is_an_execute_tool_span_inside_its_request(spans: InMemorySpanExporter, run: Any) -> None:
    with Emulator(search_script()) as emulator, dspy.context(lm=lm(emulator)):
        run(agent(), question=QUESTION)
    assert _tree(spans) == [
        (
            "invoke_agent ReActV2",
            [
                ("chat claude-sonnet-4-5", ["execute_tool web_search"]),
                "execute_tool get_weather",
                "chat claude-sonnet-4-5",
                "execute_tool submit",
            ],
        )
    ]
    (hosted,) = [s for s in spans.get_finished_spans() if s.name == "execute_tool web_search"]
    chat = next(s for s in spans.get_finished_spans() if s.context.span_id == hosted.parent.span_id)
    assert dict(hosted.attributes) == {
        ga.GEN_AI_OPERATION_NAME: "execute_tool",
        ga.GEN_AI_TOOL_NAME: "web_search",
        ga.GEN_AI_TOOL_CALL_ID: SEARCH_ID,
        ga.GEN_AI_TOOL_TYPE: "extension",
        ga.GEN_AI_PROVIDER_NAME: "anthropic",
        "dspy_imp.tool.provider_executed": True,
        "dspy_imp.tool.outcome": "returned",
        ga.GEN_AI_TOOL_CALL_ARGUMENTS: json.dumps(SEARCHED.input),
        ga.GEN_AI_TOOL_CALL_RESULT: json.dumps(SEARCHED.result),
    }
    assert hosted.start_time == chat.start_time and hosted.end_time <= chat.end_time
    assert hosted.status.status_code == StatusCode.UNSET


def test_a_hosted_calls_error_is_its_spans_error(spans: InMemorySpanExporter, run: Any) -> None:
    errored = [
        SERVER_TOOL_USE,
        {**SEARCH_ERROR, "tool_use_id": SEARCH_ID},
        _use(WEATHER_ID, "get_weather", {"city": "Geneva"}),
    ]
    script = [_message(errored, USAGE), search_script()[1]]
    with Emulator(script) as emulator, dspy.context(lm=lm(emulator)):
        pred = run(agent(), question=QUESTION)
    assert pred.metadata.termination_reason == "submit"  # the provider's error is part of its reply: the turn goes on
    (hosted,) = [s for s in spans.get_finished_spans() if s.name == "execute_tool web_search"]
    assert (hosted.status.status_code, hosted.status.description) == (StatusCode.ERROR, "max_uses_exceeded")
    assert hosted.attributes[ERROR_TYPE] == "max_uses_exceeded"
    assert hosted.attributes["dspy_imp.tool.outcome"] == "failed"


def _openai_code() -> tuple[str, Scripted]:
    first = recording("openai_code_interpreter")["interactions"][0]
    return first["request"]["input"][0]["content"], Scripted(200, first["response"])


def _gemini_code() -> tuple[str, Scripted]:
    first = recording("gemini_code_execution")["responses"][0]
    return "What day is today in Utrecht?", Scripted(first["status"], first["body"])


@pytest.mark.parametrize(
    ("provider", "model", "base", "recorded", "lines"),
    [
        (
            "openai",
            "openai/gpt-5",
            "/v1",
            _openai_code,
            ["Ran code: # compute the value 65465 - 6544 * 6546… -> -428330955.97745"],
        ),
        (
            "gemini",
            "gemini/gemini-3-flash-preview",
            "/v1beta",
            _gemini_code,
            [
                "Ran code: from datetime import datetime import py… -> Current day in Utrecht: Tuesday, May 05…",
                "Ran code: import datetime print(datetime.datetime… -> 2026-05-05 20:40:33.367937",
            ],
        ),
    ],
)
def test_openai_and_gemini_code_runs_have_their_status_lines(
    whole_replies_streamed: None, how: str, provider: str, model: str, base: str, recorded: Any, lines: list[str]
) -> None:
    question, reply = recorded()
    options: dict[str, Any] = {"model_type": "responses"} if provider == "openai" else {}
    with Emulator([reply]) as emulator:
        served = dspy.LM(
            model, api_base=emulator.base_url + base, api_key="sk-test", cache=False, num_retries=0, **options
        )
        with dspy.context(lm=served):
            items = stream_items(
                dspy_imp.ReActV2("question -> answer", tools=[CodeExecution()]), how, [], question=question
            )
    assert statuses(items) == [*lines, "Turn ended: answered"]


def test_an_mcp_served_agents_progress_names_the_hosted_call() -> None:
    event = HostedToolCall(SEARCH_ID, "web_search", 1, SEARCHED.input, SEARCHED.result, None, "anthropic")
    assert [_line(event), _line(SubAgentEvent("researcher", "p1", event))] == [
        'Searched the web for "September 29 history events" (2 results)',
        'researcher: Searched the web for "September 29 history events" (2 results)',
    ]
