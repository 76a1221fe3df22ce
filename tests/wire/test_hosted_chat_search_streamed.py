"""A Chat Completions search model's streamed reply over HTTP: its citations as the reply not streamed
gives them, on both ``dspy.LM`` engines and both drivers.

No public recording of a streamed ``gpt-4o-search-preview`` reply was found (pydantic-ai, openai-python
and LiteLLM record the search models' replies whole only). The stream here is built in the chunk
format OpenAI documents (``chat.completion.chunk`` objects: the role on the first delta, the content in
pieces, ``finish_reason`` on the last choice, then the usage chunk ``stream_options.include_usage``
asks for), from the recorded reply of ``test_hosted_chat_search.py`` (``cassettes/hosted/
openai_chat_web_search.json``: seven ``url_citation`` annotations), its ``annotations`` on a delta of
their own after the content, as OpenAI streams them (the shape the AI SDK's and other clients'
stream readers take them in). What the turn must do: record the message as the reply not streamed
does, put the same annotations in ``pred.metadata.citations`` with the text each marks, and count
and price the search the same.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import dspy
import pytest
from emulator import Emulator, Scripted
from helpers import settled
from streaming_helpers import stream_items

import dspy_imp
from dspy_imp.hosted import WebSearch

pytestmark = pytest.mark.block_network(allowed_hosts=[r"127\.0\.0\.1$"])

RECORDED = json.loads(
    (Path(__file__).resolve().parents[2] / "cassettes" / "hosted" / "openai_chat_web_search.json").read_text()
)["interactions"][0]
SEARCH = RECORDED["response"]
MESSAGE = SEARCH["choices"][0]["message"]
QUESTION = RECORDED["request"]["messages"][-1]["content"]


def _chunk(delta: dict[str, Any] | None, finish: str | None = None, usage: dict[str, Any] | None = None) -> str:
    chunk: dict[str, Any] = {
        "id": SEARCH["id"],
        "object": "chat.completion.chunk",
        "created": SEARCH["created"],
        "model": SEARCH["model"],
        "system_fingerprint": SEARCH["system_fingerprint"],
        "choices": [] if delta is None else [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
    }
    if usage is not None:
        chunk["usage"] = usage
    return f"data: {json.dumps(chunk)}\n\n"


def _stream() -> Scripted:
    """The recorded reply as OpenAI streams it: role, content in pieces, the annotations, finish, usage."""
    text = MESSAGE["content"]
    pieces = [text[i : i + 97] for i in range(0, len(text), 97)]
    frames = [_chunk({"role": "assistant", "content": "", "refusal": None})]
    frames += [_chunk({"content": p}) for p in pieces]
    frames.append(_chunk({"annotations": MESSAGE["annotations"]}))
    frames.append(_chunk({}, finish="stop"))
    frames.append(_chunk(None, usage=SEARCH["usage"]))
    return Scripted(200, {}, sse="".join(frames) + "data: [DONE]\n\n")


def _lm(emulator: Emulator, engine: str) -> dspy.LM:
    return dspy.LM(
        "openai/gpt-4o-search-preview",
        api_base=emulator.base_url + "/v1",
        api_key="sk-test",
        cache=False,
        engine=engine,
        num_retries=0,
    )


@pytest.mark.parametrize("engine", ["auto", "litellm"])
def test_a_streamed_search_reply_gives_the_citations_the_reply_not_streamed_gives(how: str, engine: str) -> None:
    agent = dspy_imp.ReActV2("question -> answer", tools=[WebSearch(search_context_size="low")])
    with Emulator([_stream()]) as emulator, dspy.context(lm=_lm(emulator, engine)):
        streamed = stream_items(agent, how, [], question=QUESTION)[-1]
    with Emulator([Scripted(200, SEARCH)]) as plain, dspy.context(lm=_lm(plain, engine)):
        whole = agent(question=QUESTION) if how == "sync" else asyncio.run(agent.acall(question=QUESTION))

    assert isinstance(streamed, dspy_imp.Prediction)
    assert streamed.metadata.termination_reason == "answered", streamed.metadata.termination_error
    (request,) = emulator.requests
    assert request.body["stream"] is True
    assert request.body["web_search_options"] == {"search_context_size": "low"}
    assert streamed.answer == MESSAGE["content"]
    cited = [
        {**n, "cited_for": MESSAGE["content"][n["url_citation"]["start_index"] : n["url_citation"]["end_index"]]}
        for n in MESSAGE["annotations"]
    ]
    assert streamed.metadata.citations == tuple(cited) == whole.metadata.citations
    assert streamed.metadata.history.messages[0]["reasoning_details"] == [
        {
            "type": "openai_chat_served",
            "content": [{k: MESSAGE[k] for k in ("role", "content", "refusal", "annotations")}],
        }
    ]
    assert settled(streamed.metadata.history.messages) == settled(whole.metadata.history.messages)
    assert streamed.metadata.usage.hosted_calls == whole.metadata.usage.hosted_calls == {"web_search_call": 1}
    assert streamed.metadata.usage.cost == pytest.approx(whole.metadata.usage.cost)
