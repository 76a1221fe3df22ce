"""Parallel function calls on a streamed Gemini reply, over HTTP, on DSPy's native engine, both drivers.

Gemini's ``streamGenerateContent`` (``?alt=sse``) serves a reply as a run of ``GenerateContentResponse``
chunks, each with its own ``candidates[0].content.parts``. Text comes in pieces, at the same place of
successive chunks; a ``functionCall`` part comes whole (no argument deltas, unlike OpenAI's and
Anthropic's streams), and parallel calls often come one to a chunk, so each is the first part of its
chunk. Gemini gives the thought signature to the first call only, and often gives no call ``id``.

No public recording of a streamed Gemini reply with parallel calls was found (pydantic-ai's
``test_google_streaming_tool_call_thought_signature.yaml`` streams one signed call, then an empty text
part with the finish reason; the shapes here follow it). The streams below are built from Google's
documented format (the API reference's ``models.streamGenerateContent`` and ``GenerateContentResponse``,
the function-calling guide's parallel calls, the thought-signatures guide's "first function call part"),
with emulator signatures (``CiQBVKhc7sIg...``).

lm15's Gemini reader placed each part by its place in its chunk, and lm15's stream assembler joins every
delta of one place, so two calls each first in its chunk were read as one call with input
``{"city":"Paris"}{"city":"Rome"}``: the tool got no valid arguments and the next request sent one broken
call back. What the turn must do: run each call with its own arguments, record the same history a reply
not streamed records, and send the same next request, whole: both calls as served (the signature on the
first), both results; and the stream's own chunks (``dspy.streamify`` without a listener) give each call
its own ``tool_calls`` index.
"""

from __future__ import annotations

import asyncio
import copy
import json
from typing import Any

import dspy
import pytest
from emulator import Emulator, Scripted
from helpers import settled
from provider_rules import assert_accepted
from streaming_helpers import stream_items

import dspy_imp

pytestmark = pytest.mark.block_network(allowed_hosts=[r"127\.0\.0\.1$"])

SIGNATURE = "CiQBVKhc7sIg_parallel_first"  # an emulator signature (``provider_rules.MINTED``)


def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"Sunny in {city}."


def _call(city: str, call_id: str | None = None, signed: bool = False) -> dict[str, Any]:
    call: dict[str, Any] = {"name": "get_weather", "args": {"city": city}}
    if call_id is not None:
        call["id"] = call_id
    part: dict[str, Any] = {"functionCall": call}
    if signed:
        part["thoughtSignature"] = SIGNATURE
    return part


def _chunk(parts: list[dict[str, Any]], tokens: int, last: bool = False) -> dict[str, Any]:
    candidate: dict[str, Any] = {"content": {"parts": parts, "role": "model"}, "index": 0}
    if last:
        candidate["finishReason"] = "STOP"
    return {
        "candidates": [candidate],
        "usageMetadata": {"promptTokenCount": 60, "candidatesTokenCount": tokens, "totalTokenCount": 60 + tokens},
        "modelVersion": "gemini-3-flash-preview",
        "responseId": "streamed-calls-1",
    }


# Each stream: its chunks' parts, in order.
STREAMS: dict[str, list[list[dict[str, Any]]]] = {
    # Gemini 3 without ids: each call the first part of its chunk, the first signed.
    "one-call-a-chunk": [[_call("Paris", signed=True)], [_call("Rome")]],
    # With ids, after a text part at the same place: before, the later call took the earlier's place and id,
    # and the first call's signature was laid on the text part too.
    "text-then-calls-with-ids": [
        [{"text": "Checking both cities."}],
        [_call("Paris", "call-paris", signed=True)],
        [_call("Rome", "call-rome")],
    ],
    # Two calls in one chunk, a third first in the next: before, the third joined the first.
    "two-then-one": [[_call("Paris", signed=True), _call("Rome")], [_call("Oslo")]],
}


def _sse(chunks: list[dict[str, Any]]) -> Scripted:
    """Gemini's ``alt=sse`` body: one ``data:`` event per chunk, each ended by a blank line (CRLF, as served)."""
    return Scripted(200, {}, sse="".join(f"data: {json.dumps(c)}\r\n\r\n" for c in chunks))


def _chunks(name: str) -> list[dict[str, Any]]:
    parts = STREAMS[name]
    return [_chunk(p, 5 * (i + 1), last=i == len(parts) - 1) for i, p in enumerate(parts)]


def _whole(chunks: list[dict[str, Any]]) -> dict[str, Any]:
    """The reply not streamed: every chunk's parts in one candidate, the last chunk's finish and usage."""
    whole = copy.deepcopy(chunks[-1])
    whole["candidates"][0]["content"]["parts"] = [p for c in chunks for p in c["candidates"][0]["content"]["parts"]]
    return whole


ANSWER = "Sunny in every city."
FINAL = _chunk([{"text": ANSWER}], 4, last=True)


QUESTION = "What is the weather in each city?"


def _plain(agent: Any, how: str, lm: dspy.LM) -> Any:
    with dspy.context(lm=lm):
        return agent(question=QUESTION) if how == "sync" else asyncio.run(agent.acall(question=QUESTION))


def _lm(emulator: Emulator) -> dspy.LM:
    return dspy.LM(
        "gemini/gemini-3-flash-preview",
        api_base=emulator.base_url + "/v1beta",
        api_key="sk-test",
        cache=False,
        num_retries=0,
    )


def _served_ids(name: str) -> list[str]:
    """Each call's id on the wire: the served one, else lm15's correlator ``tool_call_<its index among the
    reply's parts>`` (what DSPy's engine gives a reply not streamed, and sends back)."""
    parts = [p for chunk in STREAMS[name] for p in chunk]
    return [p["functionCall"].get("id") or f"tool_call_{i}" for i, p in enumerate(parts) if "functionCall" in p]


def _sent_back(part: dict[str, Any], call_id: str) -> dict[str, Any]:
    """A served call part as the next request holds it: as served, with its id (``_served_ids``)."""
    return {**part, "functionCall": {**part["functionCall"], "id": call_id}}


@pytest.mark.parametrize("name", list(STREAMS))
def test_streamed_parallel_gemini_calls_are_each_their_own_call(how: str, name: str) -> None:
    agent = dspy_imp.ReActV2("question -> answer", tools=[get_weather])
    chunks = _chunks(name)
    with Emulator([_sse(chunks), _sse([FINAL])]) as emulator, dspy.context(lm=_lm(emulator)):
        items = stream_items(agent, how, [], question=QUESTION)  # no listener: the LM's chunks pass through
    streamed = items[-1]
    with Emulator([Scripted(200, _whole(chunks)), Scripted(200, FINAL)]) as plain_emulator:
        plain = _plain(agent, how, _lm(plain_emulator))

    assert streamed.metadata.termination_reason == "answered", streamed.metadata.termination_error
    assert streamed.answer == ANSWER
    first, second = emulator.requests
    assert ":streamGenerateContent?alt=sse" in first.path and ":streamGenerateContent?alt=sse" in second.path

    served = [p for chunk in STREAMS[name] for p in chunk]
    cities = [p["functionCall"]["args"]["city"] for p in served if "functionCall" in p]
    ids = iter(_served_ids(name))
    model_turn = {"role": "model", "parts": [_sent_back(p, next(ids)) if "functionCall" in p else p for p in served]}
    answers = {
        "role": "user",
        "parts": [
            {"functionResponse": {"name": "get_weather", "response": {"result": f"Sunny in {city}."}, "id": call_id}}
            for city, call_id in zip(cities, _served_ids(name), strict=True)
        ],
    }
    assert second.body["contents"] == [first.body["contents"][0], model_turn, answers]
    assert second.body == plain_emulator.requests[1].body  # the whole next request, as the reply not streamed
    assert settled(streamed.metadata.history.messages) == settled(plain.metadata.history.messages)

    (step,) = settled(streamed.metadata.history.messages)[:1]
    assert [(c["id"], c["name"], c["args"]) for c in step["tool_calls"]] == [
        (call_id, "get_weather", {"city": city}) for city, call_id in zip(cities, _served_ids(name), strict=True)
    ]
    assert [r["result"] for r in step["tool_call_results"]] == [f"Sunny in {city}." for city in cities]
    chunked = [
        c for i in items for choice in getattr(i, "choices", None) or () for c in choice.delta.get("tool_calls") or ()
    ]
    assert [(c["index"], json.loads(c["function"]["arguments"])) for c in chunked] == [
        (index, {"city": city}) for index, city in enumerate(cities)
    ]  # the stream's own chunks: each call at its own index
    for request in emulator.requests:
        assert_accepted("gemini", request.body, request.path)
