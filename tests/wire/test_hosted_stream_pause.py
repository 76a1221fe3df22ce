"""Anthropic's ``pause_turn`` on a streamed reply, over HTTP, on DSPy's native engine, both drivers.

A turn under ``dspy.streamify`` asks for each reply as a stream; a paused reply then ends with a
``message_delta`` frame whose ``stop_reason`` is ``"pause_turn"``, and the body assembled from the
frames keeps it. The turn must go on at once exactly as with a reply not streamed
(``test_hosted_pause_turn.py``). No public recording of a paused stream was found: the paused stream
here is the recorded web search stream (``cassettes/hosted/anthropic_web_search_stream.json``,
pydantic-ai's live ``web_search_20250305`` recording, thinking on) cut where a pause falls, after the
first search's result (its thinking, ``server_tool_use`` and ``web_search_tool_result`` frames as
recorded), closed by a ``message_delta`` with ``stop_reason: "pause_turn"`` and a ``message_stop``;
the continuation's stream is the rest of that recording (its blocks renumbered from 0 under a
``message_start`` of its own), ending ``end_turn``.

What the turn must do: send the continuation at once, streamed, its body the first request's with the
paused content (as Anthropic's SDK assembles the cut stream) as the last, assistant, message; the same
continuation request a reply not streamed gives; one step holding every block served, in order.
"""

from __future__ import annotations

import asyncio
import copy
import json
from pathlib import Path
from typing import Any

import dspy
import pytest
from emulator import Emulator, Scripted
from provider_rules import assert_accepted
from streaming_helpers import stream_items

import dspy_imp
from dspy_imp.hosted import WebSearch

pytestmark = pytest.mark.block_network(allowed_hosts=[r"127\.0\.0\.1$"])

RECORDING = Path(__file__).resolve().parents[2] / "cassettes" / "hosted" / "anthropic_web_search_stream.json"
QUESTION = "What is the weather in San Francisco today?"


def _events() -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = json.loads(RECORDING.read_text())["interactions"][0]["events"]
    return events


def _cut() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The recorded stream's frames, as a paused stream and its continuation's stream."""
    frames = [json.loads(e["data"]) for e in _events()]
    start, end = frames[0], frames[-2]
    assert start["type"] == "message_start" and end["type"] == "message_delta"
    # the pause falls after the first search's result: blocks 0 (thinking), 1 (server_tool_use), 2 (its result)
    first_text = next(i for i, f in enumerate(frames) if f["type"] == "content_block_start" and f["index"] == 3)
    paused_delta = {
        "type": "message_delta",
        "delta": {"stop_reason": "pause_turn", "stop_sequence": None},
        "usage": {**end["usage"], "server_tool_use": {"web_search_requests": 1, "web_fetch_requests": 0}},
    }
    paused = [*frames[:first_text], paused_delta, {"type": "message_stop"}]
    rest = copy.deepcopy(frames[first_text:-2])
    for frame in rest:
        if "index" in frame:
            frame["index"] -= 3
    went_on = copy.deepcopy(start)
    went_on["message"]["id"] = "msg_01QmxBSdEbD9ZeBWDVgFDoQ6"
    continued_delta = {**end, "usage": {**end["usage"], "server_tool_use": {"web_search_requests": 1}}}
    continued = [went_on, *rest, continued_delta, {"type": "message_stop"}]
    return paused, continued


def _sse(frames: list[dict[str, Any]]) -> Scripted:
    return Scripted(200, {}, sse="".join(f"event: {f['type']}\ndata: {json.dumps(f)}\n\n" for f in frames))


def _sdk_message(frames: list[dict[str, Any]]) -> dict[str, Any]:
    """The frames assembled by Anthropic's own SDK: the body a reply not streamed holds."""
    from anthropic.lib.streaming._messages import accumulate_event

    snapshot = None
    buffers: dict[int, bytes] = {}
    for frame in frames:
        if frame["type"] != "ping":
            snapshot = accumulate_event(event=frame, current_snapshot=snapshot, json_bufs=buffers)  # type: ignore[arg-type]
    assert snapshot is not None
    message: dict[str, Any] = snapshot.to_dict(mode="json")
    return message


def _lm(emulator: Emulator) -> dspy.LM:  # thinking on, as recorded
    return dspy.LM(
        "anthropic/claude-sonnet-4-5", api_base=emulator.base_url + "/v1", api_key="sk-test", cache=False, num_retries=0
    )


def _same_bytes(sent: Any, served: Any) -> None:
    assert json.dumps(sent, sort_keys=False) == json.dumps(served, sort_keys=False)


def test_a_streamed_paused_reply_goes_back_at_once_as_a_reply_not_streamed_does(how: str) -> None:
    paused, continued = _cut()
    paused_body, continued_body = _sdk_message(paused), _sdk_message(continued)
    assert paused_body["stop_reason"] == "pause_turn"
    agent = dspy_imp.ReActV2("question -> answer", tools=[WebSearch()])  # finish="auto": the text answers

    with Emulator([_sse(paused), _sse(continued)]) as emulator, dspy.context(lm=_lm(emulator)):
        pred = stream_items(agent, how, [], question=QUESTION)[-1]
    with Emulator([Scripted(200, paused_body), Scripted(200, continued_body)]) as plain, dspy.context(lm=_lm(plain)):
        not_streamed = agent(question=QUESTION) if how == "sync" else asyncio.run(agent.acall(question=QUESTION))

    assert isinstance(pred, dspy_imp.Prediction)
    assert pred.metadata.termination_reason == "answered", pred.metadata.termination_error
    assert len(emulator.requests) == 2
    first, went_on = (r.body for r in emulator.requests)
    assert first["stream"] is True
    paused_content = paused_body["content"]
    # the continuation: the same request, streamed, with the paused reply as the assistant's last message
    assert went_on == {**first, "messages": [*first["messages"], {"role": "assistant", "content": paused_content}]}
    # the same continuation a reply not streamed gives (but for asking for a stream)
    assert went_on == {**plain.requests[1].body, "stream": True}
    for request in emulator.requests:
        assert_accepted("anthropic", request.body, request.path)

    whole = [*paused_content, *continued_body["content"]]
    assert pred.metadata.history.messages[0]["reasoning_details"] == [
        {
            "type": "anthropic_served",
            "content": whole,
            "server_tool_use": {"web_search_requests": 2, "web_fetch_requests": 0},
        }
    ]
    recorded = pred.metadata.history.messages[0]["reasoning_details"][0]["content"]
    _same_bytes(went_on["messages"][-1]["content"], recorded[: len(paused_content)])  # as recorded, byte for byte
    assert pred.metadata.citations == not_streamed.metadata.citations
    assert len(pred.metadata.citations) == 7
    assert pred.metadata.usage.hosted_calls == {"web_search_requests": 2, "web_fetch_requests": 0}
    assert pred.metadata.usage.requests == {"step": 2}
    assert pred.answer == not_streamed.answer
