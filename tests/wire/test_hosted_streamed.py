"""Hosted tools on streamed replies, over HTTP, on DSPy's native engine, both drivers.

A turn under ``dspy.streamify`` asks for each reply as a stream. The streamed replies here are
third-party recordings served frame by frame as recorded (``cassettes/hosted/*_stream.json``, each
naming the pydantic-ai cassette it came from): Anthropic web search (with thinking, two searches,
citations) and code execution; OpenAI Responses web search and file search; Gemini 3 file search
(signed ``toolCall``/``toolResponse`` parts, a last empty text part holding the signature) and Gemini 2.5
URL context (its metadata on the first chunk only). What the turn must do: record the same served block
a non-streamed reply gives (Anthropic: the content list as Anthropic's own SDK assembles the stream;
OpenAI: ``response.completed``'s output list; Gemini: every chunk's parts in order), send it back byte
for byte on the next request after ``dump_history``/``load_history`` through JSON, and give the same
citations and hosted usage counts.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import dspy
import pytest
from emulator import Emulator, Scripted
from helpers import settled
from provider_rules import assert_accepted
from responses import openai_response, output_message
from streaming_helpers import stream_items

import dspy_imp
from dspy_imp.hosted import CodeExecution, FileSearch, WebFetch, WebSearch

pytestmark = pytest.mark.block_network(allowed_hosts=[r"127\.0\.0\.1$"])

RECORDINGS = Path(__file__).resolve().parents[2] / "cassettes" / "hosted"


def _recording(name: str) -> dict[str, Any]:
    interaction: dict[str, Any] = json.loads((RECORDINGS / f"{name}_stream.json").read_text())["interactions"][0]
    return interaction


def _frames(name: str) -> list[dict[str, Any]]:
    """The recorded events' data, parsed."""
    return [json.loads(e["data"]) for e in _recording(name)["events"] if e["data"] != "[DONE]"]


def _sse(name: str) -> Scripted:
    """The recorded stream, served as recorded."""
    text = "".join(
        (f"event: {e['event']}\n" if "event" in e else "") + f"data: {e['data']}\n\n"
        for e in _recording(name)["events"]
    )
    return Scripted(200, {}, sse=text)


def _same_bytes(sent: Any, served: Any) -> None:
    assert json.dumps(sent, sort_keys=False) == json.dumps(served, sort_keys=False)


def _turns(agent: Any, how: str, lm: dspy.LM, first: str, later: str) -> tuple[Any, Any]:
    """A streamed turn, its history saved and loaded through JSON, then a later turn (same driver)."""
    with dspy.context(lm=lm):
        items = stream_items(agent, how, [], question=first)
        streamed = items[-1]
        assert isinstance(streamed, dspy_imp.Prediction)
        saved = json.loads(json.dumps(streamed.metadata.history.model_dump()))  # as a store keeps it
        history = dspy.History(**saved)
        resumed = agent(question=later, history=history) if how == "sync" else _arun(agent, later, history)
    return streamed, resumed


def _plain_turns(
    agent: Any, how: str, lm_for: Any, reply: dict[str, Any], later_reply: Scripted, first: str, later: str
) -> tuple[Any, list[Any]]:
    """The same two turns, not streamed, the first reply served whole (``reply``): its prediction and requests."""
    with Emulator([Scripted(200, reply), later_reply]) as emulator, dspy.context(lm=lm_for(emulator)):
        pred = agent(question=first) if how == "sync" else _arun(agent, first, None)
        saved = json.loads(json.dumps(pred.metadata.history.model_dump()))
        history = dspy.History(**saved)
        agent(question=later, history=history) if how == "sync" else _arun(agent, later, history)
    return pred, emulator.requests


def _same_as_plain(streamed: Any, requests: list[Any], plain: Any, plain_requests: list[Any]) -> None:
    """The streamed turn recorded what the non-streamed one did, and the next request is the same, whole."""
    assert _without_reencrypted(streamed) == _without_reencrypted(plain)
    assert requests[1].body == plain_requests[1].body
    assert streamed.metadata.citations == plain.metadata.citations
    assert streamed.metadata.usage.hosted_calls == plain.metadata.usage.hosted_calls


def _without_reencrypted(pred: Any) -> list[dict[str, Any]]:
    """The history, each Responses reasoning item's own record without its ``encrypted_content``: OpenAI
    serves that item encrypted anew in ``response.completed`` (the served block keeps that one) from the
    one in its ``response.output_item.done`` frame (lm15's reasoning record of a stream keeps that one)."""
    entries = settled(pred.metadata.history.messages)
    for entry in entries:
        entry["reasoning_details"] = [
            {k: v for k, v in b.items() if not (b.get("type") == "reasoning_item" and k == "encrypted_content")}
            for b in entry.get("reasoning_details") or ()
        ]
    return entries


def _arun(agent: Any, question: str, history: Any) -> Any:
    import asyncio

    kwargs = {"question": question} if history is None else {"question": question, "history": history}
    return asyncio.run(agent.acall(**kwargs))


def _recorded_block(pred: Any, kind: str) -> dict[str, Any]:
    details = pred.metadata.history.messages[0]["reasoning_details"]
    blocks = [b for b in details if b.get("type") == kind]
    assert len(blocks) == 1, details
    return blocks[0]


# -- Anthropic ---------------------------------------------------------------------------------------


def _sdk_message(name: str) -> dict[str, Any]:
    """The recorded stream assembled by Anthropic's own SDK (``anthropic.lib.streaming``): the message a
    non-streamed reply holds."""
    from anthropic.lib.streaming._messages import accumulate_event

    snapshot = None
    buffers: dict[int, bytes] = {}
    for frame in _frames(name):
        if frame["type"] == "ping":
            continue
        snapshot = accumulate_event(event=frame, current_snapshot=snapshot, json_bufs=buffers)  # type: ignore[arg-type]
    assert snapshot is not None
    message: dict[str, Any] = snapshot.to_dict(mode="json")
    return message


def _anthropic_reply(text: str) -> Scripted:
    return Scripted(
        200,
        {
            "id": "msg_01Later",
            "type": "message",
            "role": "assistant",
            "model": "claude-sonnet-4-5-20250929",
            "content": [{"type": "text", "text": text}],
            "stop_reason": "end_turn",
            "stop_sequence": None,
            "usage": {"input_tokens": 120, "output_tokens": 20},
        },
    )


@pytest.mark.parametrize(
    ("name", "tool", "hosted_calls"),
    [
        ("anthropic_web_search", WebSearch(), {"web_search_requests": 2, "web_fetch_requests": 0}),
        ("anthropic_code_execution", CodeExecution(), {"web_search_requests": 0, "web_fetch_requests": 0}),
    ],
    ids=["web-search", "code-execution"],
)
def test_a_streamed_anthropic_reply_keeps_its_served_blocks_as_the_sdk_assembles_them(
    how: str, name: str, tool: Any, hosted_calls: dict[str, int]
) -> None:
    agent = dspy_imp.ReActV2("question -> answer", tools=[tool])  # finish="auto": the reply's text answers
    expected = _sdk_message(name)
    _holds_what_lm15_drops(name, expected["content"])

    def lm_for(emulator: Emulator) -> dspy.LM:  # thinking on, as recorded
        return dspy.LM(
            "anthropic/claude-sonnet-4-5", api_base=emulator.base_url + "/v1", api_key="sk-test", cache=False
        )

    asked = ("What is the weather in San Francisco today?", "And tomorrow?")
    with Emulator([_sse(name), _anthropic_reply("Still the same.")]) as emulator:
        streamed, later = _turns(agent, how, lm_for(emulator), *asked)
    _same_as_plain(
        streamed,
        emulator.requests,
        *_plain_turns(agent, how, lm_for, expected, _anthropic_reply("Still the same."), *asked),
    )
    assert streamed.metadata.termination_reason == "answered", streamed.metadata.termination_error
    assert later.metadata.termination_reason == "answered", later.metadata.termination_error
    first, second = emulator.requests
    assert first.body["stream"] is True and second.body["stream"] is False

    block = _recorded_block(streamed, "anthropic_served")
    container = {"container": expected["container"]} if expected.get("container") else {}  # where its code ran
    assert block == {
        "type": "anthropic_served",
        "content": expected["content"],
        "server_tool_use": hosted_calls,
        **container,
    }
    assert "container" not in second.body  # the recorded container expired (2026-04-24): a new one
    replayed = next(m for m in second.body["messages"] if m["role"] == "assistant")["content"]
    _same_bytes(replayed, block["content"])  # the recorded block, byte for byte
    assert replayed == expected["content"]  # every block and field as Anthropic's SDK assembles the stream
    for request in emulator.requests:
        assert_accepted("anthropic", request.body, request.path)

    cited = [
        {**c, "cited_for": b["text"]}
        for b in expected["content"]
        if b["type"] == "text"
        for c in b.get("citations") or ()
    ]
    assert list(streamed.metadata.citations) == cited
    assert streamed.metadata.usage.hosted_calls == hosted_calls
    searches = hosted_calls["web_search_requests"]  # $10 per 1,000 (the engine prices no tokens here)
    assert streamed.metadata.usage.cost == (pytest.approx(searches * 0.01) if searches else None)


def _holds_what_lm15_drops(name: str, content: list[dict[str, Any]]) -> None:
    """The recordings exercise each kind of frame lm15's stream events leave out."""
    types = [b["type"] for b in content]
    assert types[0] == "thinking" and content[0]["signature"]  # signature_delta
    assert any(t == "server_tool_use" and b["input"] for t, b in zip(types, content, strict=True))  # input fragments
    assert any(t.endswith("_tool_result") for t in types)
    if name == "anthropic_web_search":
        assert content[1]["input"] == {"query": "San Francisco weather today"}
        assert sum(len(b.get("citations") or ()) for b in content) == 7  # citations_delta
        assert all(r["encrypted_content"] for r in content[2]["content"])


# -- OpenAI Responses ----------------------------------------------------------------------------


def _completed(name: str) -> dict[str, Any]:
    """The response ``response.completed`` carries: the non-streamed reply's body."""
    completed = [f for f in _frames(name) if f["type"] == "response.completed"]
    assert len(completed) == 1
    response: dict[str, Any] = completed[0]["response"]
    return response


@pytest.mark.parametrize(
    ("name", "tool", "hosted_calls", "cited"),
    [
        ("openai_web_search", WebSearch(), {"web_search_call": 1}, 0),  # this answer carries no annotation
        (
            "openai_file_search",
            FileSearch(store_ids=["vs_6931d752e41c8191833fcaad1cf47055"]),
            {"file_search_call": 1},
            1,
        ),
    ],
    ids=["web-search", "file-search"],
)
def test_a_streamed_responses_reply_keeps_the_completed_output_list(
    how: str, name: str, tool: Any, hosted_calls: dict[str, int], cited: int
) -> None:
    agent = dspy_imp.ReActV2("question -> answer", tools=[tool])
    served = _completed(name)["output"]
    later_reply = openai_response(output_message("Same."))

    def lm_for(emulator: Emulator) -> dspy.LM:
        return dspy.LM(
            "openai/gpt-5",
            model_type="responses",
            api_base=emulator.base_url + "/v1",
            api_key="sk-test",
            cache=False,
            num_retries=0,
        )

    asked = ("What is the weather in San Francisco today?", "And tomorrow?")
    with Emulator([_sse(name), later_reply]) as emulator:
        streamed, _later = _turns(agent, how, lm_for(emulator), *asked)
    _same_as_plain(
        streamed, emulator.requests, *_plain_turns(agent, how, lm_for, _completed(name), later_reply, *asked)
    )
    assert streamed.metadata.termination_reason == "answered", streamed.metadata.termination_error
    first, second = emulator.requests
    assert first.body["stream"] is True

    block = _recorded_block(streamed, "openai_served")
    _same_bytes(block, {"type": "openai_served", "content": served})
    start = next(i for i, item in enumerate(second.body["input"]) if item.get("id") == served[0]["id"])
    _same_bytes(second.body["input"][start : start + len(served)], served)  # the items back as input, as served
    for request in emulator.requests:
        assert_accepted("responses", request.body, request.path)

    notes = [
        {**n, "cited_for": p["text"][n["start_index"] : n["end_index"]] if "start_index" in n else p["text"]}
        for item in served
        if item["type"] == "message"
        for p in item["content"]
        for n in p.get("annotations") or ()
    ]
    assert list(streamed.metadata.citations) == notes and len(notes) == cited
    assert streamed.metadata.usage.hosted_calls == hosted_calls


# -- Gemini --------------------------------------------------------------------------------------


def _gemini_parts(name: str) -> list[dict[str, Any]]:
    """Every chunk's parts, in order, as served."""
    return [p for f in _frames(name) for p in f["candidates"][0]["content"]["parts"]]


def _gemini_whole(frames: list[dict[str, Any]]) -> dict[str, Any]:
    """The reply a non-streamed request would get: every chunk's parts in one candidate, with the
    candidate's metadata where the chunks carried it (URL context's on the first, the rest on the last)."""
    last = frames[-1]
    candidate = {k: v for f in frames for k, v in f["candidates"][0].items() if v not in ({}, [], None)}
    candidate["content"] = {
        "parts": [p for f in frames for p in f["candidates"][0]["content"]["parts"]],
        "role": "model",
    }
    return {**last, "candidates": [candidate]}


def _gemini_reply(text: str) -> Scripted:
    return Scripted(
        200,
        {
            "candidates": [{"content": {"role": "model", "parts": [{"text": text}]}, "finishReason": "STOP"}],
            "usageMetadata": {"promptTokenCount": 20, "candidatesTokenCount": 5, "totalTokenCount": 25},
            "modelVersion": "gemini-3-flash-preview",
        },
    )


STORE = "fileSearchStores/testfilesearchgroundingstre-p2hcv3cs2i69"  # the recording's store


@pytest.mark.parametrize(
    ("name", "model", "tool", "hosted_calls"),
    [
        (
            "gemini_file_search",
            "gemini/gemini-3-flash-preview",
            FileSearch(store_ids=[STORE]),
            {"web_search_requests": 0, "web_fetch_requests": 0},
        ),
        (
            "gemini_web_fetch",
            "gemini/gemini-2.5-flash",
            WebFetch(),
            {"web_search_requests": 0, "web_fetch_requests": 1},
        ),
        (
            "gemini_web_search",
            "gemini/gemini-2.5-pro",
            WebSearch(),
            {"web_search_requests": 1, "web_fetch_requests": 0},
        ),
        (  # an executableCode part on the first chunk
            "gemini_file_search_code",
            "gemini/gemini-2.5-pro",
            FileSearch(store_ids=["fileSearchStores/testfilesearchstream-lsy34id7fwk0"]),
            {"web_search_requests": 0, "web_fetch_requests": 0},
        ),
    ],
    ids=["gemini-3-file-search", "gemini-2.5-url-context", "gemini-2.5-google-search", "gemini-2.5-code-part"],
)
def test_a_streamed_gemini_reply_keeps_every_chunks_parts_and_the_grounding(
    how: str, name: str, model: str, tool: Any, hosted_calls: dict[str, int]
) -> None:
    agent = dspy_imp.ReActV2("question -> answer", tools=[tool])
    frames = _frames(name)
    parts = _gemini_parts(name)
    last = frames[-1]["candidates"][0]
    if name == "gemini_file_search":  # signed parts on several chunks, the last an empty text part
        assert [next(k for k in p if k != "thoughtSignature") for p in parts] == ["toolCall", "toolResponse"] + [
            "text"
        ] * 6
        assert [bool(p.get("thoughtSignature")) for p in parts] == [True, True, *[False] * 5, True]
        assert parts[-1]["text"] == ""

    def lm_for(emulator: Emulator) -> dspy.LM:
        return dspy.LM(model, api_base=emulator.base_url + "/v1beta", api_key="sk-test", cache=False, num_retries=0)

    asked = ("What is the capital of France?", "And of Italy?")
    with Emulator([_sse(name), _gemini_reply("Still Paris.")]) as emulator:
        streamed, later = _turns(agent, how, lm_for(emulator), *asked)
    plain = _plain_turns(agent, how, lm_for, _gemini_whole(frames), _gemini_reply("Still Paris."), *asked)
    _same_as_plain(streamed, emulator.requests, *plain)
    assert streamed.metadata.termination_reason == "answered", streamed.metadata.termination_error
    assert later.metadata.termination_reason == "answered", later.metadata.termination_error
    first, second = emulator.requests
    assert ":streamGenerateContent" in first.path and ":generateContent" in second.path

    expected: dict[str, Any] = {
        "type": "gemini_served",
        "content": parts,
        "groundingMetadata": last["groundingMetadata"],
    }
    url_context = [
        f["candidates"][0]["urlContextMetadata"] for f in frames if "urlContextMetadata" in f["candidates"][0]
    ]
    if url_context:
        expected["urlContextMetadata"] = url_context[-1]
    expected["usageMetadata"] = frames[-1]["usageMetadata"]
    block = _recorded_block(streamed, "gemini_served")
    _same_bytes(block, expected)
    model_turn = next(c for c in second.body["contents"] if c["role"] == "model")
    _same_bytes(model_turn, {"role": "model", "parts": parts})  # every part, each signature where it came
    for request in emulator.requests:
        assert_accepted("gemini", request.body, request.path)

    grounding = last["groundingMetadata"]
    assert len(streamed.metadata.citations) == sum(
        len(s["groundingChunkIndices"]) for s in grounding["groundingSupports"]
    )
    assert [c["cited_for"] for c in streamed.metadata.citations][:1] == [
        grounding["groundingSupports"][0]["segment"]["text"]
    ]
    assert streamed.metadata.usage.hosted_calls == hosted_calls
    tool_tokens = frames[-1]["usageMetadata"].get("toolUsePromptTokenCount", 0)
    assert (
        streamed.metadata.usage.calls[0].input_tokens == frames[-1]["usageMetadata"]["promptTokenCount"] + tool_tokens
    )


# -- What cannot be assembled is refused -------------------------------------------------------


def _with_frame(name: str, before: int, frame: dict[str, Any]) -> Scripted:
    """The recorded stream with one more frame before its ``before``-th event."""
    events = list(_recording(name)["events"])
    events.insert(before, {"event": frame["type"], "data": json.dumps(frame)})
    text = "".join(f"event: {e['event']}\ndata: {e['data']}\n\n" for e in events)
    return Scripted(200, {}, sse=text)


def test_a_streamed_anthropic_frame_the_assembler_cannot_read_is_refused_not_dropped(how: str) -> None:
    """A delta type Anthropic might add later, on the reply's last text block: the served blocks would go
    back without it, so the turn stops with a ConfigurationError naming it."""
    events = _recording("anthropic_code_execution")["events"]
    last_stop = max(i for i, e in enumerate(events) if json.loads(e["data"])["type"] == "content_block_stop")
    index = json.loads(events[last_stop]["data"])["index"]
    unknown = {"type": "content_block_delta", "index": index, "delta": {"type": "annotation_delta", "note": "n"}}
    agent = dspy_imp.ReActV2("question -> answer", tools=[CodeExecution()])
    with Emulator([_with_frame("anthropic_code_execution", last_stop, unknown)]) as emulator:
        lm = dspy.LM("anthropic/claude-sonnet-4-5", api_base=emulator.base_url + "/v1", api_key="sk-test", cache=False)
        with dspy.context(lm=lm), pytest.raises(dspy_imp.ConfigurationError) as raised:
            stream_items(agent, how, [], question="What is 65465-6544 * 65464-6+1.02255?")
    assert "annotation_delta" in str(raised.value) and "without streaming" in str(raised.value)
    assert len(emulator.requests) == 1


# -- Function calls beside served parts ------------------------------------------------------------


def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"Sunny in {city}."


def test_streamed_gemini_calls_each_first_in_its_chunk_beside_served_parts_are_each_answered(how: str) -> None:
    """Two calls after the recorded signed file search parts, each call first in its chunk (Gemini streams
    a call whole, parallel calls one to a chunk): lm15's reader read them as one call; now the turn runs
    both, records every chunk's parts as served, and the next request sends them back with both answers,
    as the same reply not streamed does."""
    served = _frames("gemini_file_search")[:2]  # the signed toolCall and toolResponse chunks
    calls = [
        {
            "candidates": [
                {"content": {"role": "model", "parts": [{"functionCall": {"name": "get_weather", "args": a}}]}}
            ]
        }
        for a in ({"city": "Paris"}, {"city": "Rome"})
    ]
    calls[0]["candidates"][0]["content"]["parts"][0]["thoughtSignature"] = "CiQBVKhc7sIg_first_call"  # Gemini 3
    calls[-1]["candidates"][0]["finishReason"] = "STOP"
    calls[-1]["usageMetadata"] = served[-1]["usageMetadata"]
    frames = [*served, *calls]
    text = "".join(f"data: {json.dumps(f)}\r\n\r\n" for f in frames)
    final = _gemini_reply("Sunny in both.")
    final_sse = Scripted(200, {}, sse=f"data: {json.dumps(final.body)}\r\n\r\n")
    agent = dspy_imp.ReActV2("question -> answer", tools=[FileSearch(store_ids=[STORE]), get_weather])
    question = "The weather in the capitals my file names?"

    def lm_for(emulator: Emulator) -> dspy.LM:
        return dspy.LM(
            "gemini/gemini-3-flash-preview",
            api_base=emulator.base_url + "/v1beta",
            api_key="sk-test",
            cache=False,
            num_retries=0,
        )

    with Emulator([Scripted(200, {}, sse=text), final_sse]) as emulator, dspy.context(lm=lm_for(emulator)):
        streamed = stream_items(agent, how, [], question=question)[-1]
    with Emulator([Scripted(200, _gemini_whole(frames)), final]) as plain, dspy.context(lm=lm_for(plain)):
        not_streamed = agent(question=question) if how == "sync" else _arun(agent, question, None)

    assert streamed.metadata.termination_reason == "answered", streamed.metadata.termination_error
    parts = [p for f in frames for p in f["candidates"][0]["content"]["parts"]]
    block = _recorded_block(streamed, "gemini_served")
    _same_bytes(block["content"], parts)
    first, second = emulator.requests
    assert ":streamGenerateContent" in first.path and ":streamGenerateContent" in second.path
    model_turn = next(c for c in second.body["contents"] if c["role"] == "model")
    ids = iter(["tool_call_0", "tool_call_1"])  # a call served without id: the id the loop answers it by
    sent = [{**p, "functionCall": {**p["functionCall"], "id": next(ids)}} if "functionCall" in p else p for p in parts]
    _same_bytes(model_turn, {"role": "model", "parts": sent})  # both calls back as served, every signature kept
    answers = second.body["contents"][second.body["contents"].index(model_turn) + 1]
    assert answers == {
        "role": "user",
        "parts": [
            {"functionResponse": {"name": "get_weather", "response": {"result": f"Sunny in {city}."}, "id": i}}
            for city, i in (("Paris", "tool_call_0"), ("Rome", "tool_call_1"))
        ],
    }
    assert second.body == plain.requests[1].body  # the whole next request, as the reply not streamed
    assert settled(streamed.metadata.history.messages) == settled(not_streamed.metadata.history.messages)
    for request in emulator.requests:
        assert_accepted("gemini", request.body, request.path)
