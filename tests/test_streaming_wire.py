"""Token streaming over the real HTTP path: ``dspy.streamify`` against a local server that
streams server-sent events the way OpenAI does, on both DSPy engines, native and written,
sync (``async_streaming=False``) and async.

The fake server splits text into one chunk per word and tool-call arguments into pieces of a
few characters, so a field that arrives in several chunks was streamed, not copied from the
final reply. Everything is asserted on the order of the items the consumer receives.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import dspy
import pytest
from dspy.streaming import StatusMessage
from fake_openai_server import FakeOpenAIServer, text_completion, tool_calls_completion
from helpers import settled
from streaming_helpers import chunks, segments, statuses, stream_items

import dspy_imp
from dspy_imp import StreamListener

pytestmark = pytest.mark.block_network(allowed_hosts=[r"127\.0\.0\.1$"])

ANSWER = "It is sunny and 21 degrees in Paris, with a light breeze."
NATIVE_MODEL, WRITTEN_MODEL = "openai/gpt-4o-mini", "openai/my-local-model"  # DSPy: function calling / none


def lookup(city: str) -> str:
    """Find the weather station of a city."""
    return f"station-{city.lower()}"


def weather(station: str) -> str:
    """Read a weather station."""
    return f"sunny, 21 degrees at {station}"


def written(field: str, text: str, calls: list[dict[str, Any]]) -> dict[str, Any]:
    """A reply of a model without native calls: the text field and the calls in ChatAdapter markers."""
    body = f"[[ ## {field} ## ]]\n{text}\n\n[[ ## tool_calls ## ]]\n{json.dumps(calls)}\n\n[[ ## completed ## ]]"
    return text_completion(body)


def text_script(mode: str) -> list[dict[str, Any]]:
    if mode == "native":
        return [
            tool_calls_completion([("c1", "lookup", {"city": "Paris"})]),
            tool_calls_completion([("c2", "weather", {"station": "station-paris"})]),
            text_completion(ANSWER),
        ]
    return [
        written("answer", "", [{"name": "lookup", "arguments": {"city": "Paris"}}]),
        written("answer", "", [{"name": "weather", "arguments": {"station": "station-paris"}}]),
        written("answer", ANSWER, []),
    ]


def lm_for(server: FakeOpenAIServer, engine: str, mode: str) -> dspy.LM:
    model = NATIVE_MODEL if mode == "native" else WRITTEN_MODEL
    return dspy.LM(model, api_base=server.base_url, api_key="sk-test", cache=False, num_retries=0, engine=engine)


@pytest.fixture(params=["auto", "litellm"])
def engine(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def served() -> Iterator[Any]:
    servers: list[FakeOpenAIServer] = []

    def start(script: list[dict[str, Any]]) -> FakeOpenAIServer:
        server = FakeOpenAIServer(script).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


def without_times(history: dspy.History) -> list[dict[str, Any]]:
    return settled(history.messages)


@pytest.mark.parametrize("mode", ["native", "written"])
def test_a_text_answer_streams_word_by_word_after_the_tools(served, engine, mode, how):
    server = served(text_script(mode))
    agent = dspy_imp.ReActV2("city -> answer", tools=[lookup, weather])
    with dspy.context(lm=lm_for(server, engine, mode)):
        items = stream_items(agent, how, [StreamListener("answer")], city="Paris")

    prediction = items[-1]
    assert isinstance(prediction, dspy_imp.Prediction)
    assert sum(isinstance(i, dspy.Prediction) for i in items) == 1
    assert all(r.body["stream"] is True for r in server.requests)

    answer = chunks(items, "answer")
    assert {(c.predict_name, c.signature_field_name) for c in answer} == {("react", "answer")}
    assert segments(answer)[-1] == prediction.answer == ANSWER
    assert len([c for c in answer if c.chunk]) > 5  # streamed, not handed over whole

    # Order: both tools ran (in the order the model called them) before the answer streamed,
    # and the answer streamed before the turn ended.
    assert statuses(items) == [
        'Calling lookup({"city": "Paris"})',
        "lookup returned: station-paris",
        'Calling weather({"station": "station-paris"})',
        "weather returned: sunny, 21 degrees at station-paris",
        "Turn ended: answered",
    ]
    first_chunk = items.index(next(c for c in answer if c.chunk))
    last_tool = max(i for i, item in enumerate(items) if isinstance(item, StatusMessage) and "returned" in item.message)
    ended = next(
        i for i, item in enumerate(items) if isinstance(item, StatusMessage) and item.message.startswith("Turn")
    )
    assert last_tool < first_chunk < ended < len(items) - 1

    # The streamed prediction is the one a plain call returns.
    plain_server = served(text_script(mode))
    with dspy.context(lm=lm_for(plain_server, engine, mode)):
        plain = agent(city="Paris")
    assert dict(prediction) == dict(plain)
    assert prediction.metadata.termination_reason == plain.metadata.termination_reason == "answered"
    assert without_times(prediction.metadata.history) == without_times(plain.metadata.history)
    assert [r.body["messages"] for r in server.requests] == [r.body["messages"] for r in plain_server.requests]


SUBMITTED = "Sunny in Paris: 21 degrees and a light breeze from the west."


def test_thoughts_and_submit_arguments_stream_from_native_tool_call_deltas(served, engine, how):
    server = served(
        [
            tool_calls_completion([("c1", "lookup", {"city": "Paris"})], content="First I find the station."),
            tool_calls_completion(
                [("c2", "submit", {"answer": SUBMITTED, "degrees": 21})], content="Now I can answer the question."
            ),
        ]
    )
    agent = dspy_imp.ReActV2("city -> answer, degrees: int", tools=[lookup])
    listeners = [StreamListener("next_thought"), StreamListener("answer"), StreamListener("degrees")]
    with dspy.context(lm=lm_for(server, engine, "native")):
        items = stream_items(agent, how, listeners, city="Paris")

    prediction = items[-1]
    assert (prediction.answer, prediction.degrees) == (SUBMITTED, 21)
    assert prediction.metadata.termination_reason == "submit"
    assert segments(chunks(items, "next_thought")) == ["First I find the station.", "Now I can answer the question."]
    answer = chunks(items, "answer")
    assert segments(answer) == [SUBMITTED]
    assert len([c for c in answer if c.chunk]) > 5  # read from the argument deltas as they came
    assert segments(chunks(items, "degrees")) == ["21"]
    assert all(c.predict_name == "react" for c in chunks(items, "answer"))

    # The second thought streams before the submit arguments; the tool ran before both.
    kinds = [
        "tool"
        if isinstance(i, StatusMessage) and i.message.startswith("Calling")
        else getattr(i, "signature_field_name", None)
        for i in items
    ]
    assert kinds.index("tool") < kinds.index("answer")
    second_thought = next(i for i, item in enumerate(items) if getattr(item, "chunk", None) == "Now ")
    assert second_thought < kinds.index("answer")


def test_a_written_submit_streams_its_thought_and_hands_over_the_outputs(served, engine, how):
    server = served(
        [
            written("next_thought", "Looking it up.", [{"name": "lookup", "arguments": {"city": "Paris"}}]),
            written("next_thought", "Done.", [{"name": "submit", "arguments": {"answer": SUBMITTED, "degrees": 21}}]),
        ]
    )
    agent = dspy_imp.ReActV2("city -> answer, degrees: int", tools=[lookup])
    listeners = [StreamListener("next_thought"), StreamListener("answer")]
    with dspy.context(lm=lm_for(server, engine, "written")):
        items = stream_items(agent, how, listeners, city="Paris")

    assert items[-1].answer == SUBMITTED
    assert segments(chunks(items, "next_thought")) == ["Looking it up.", "Done."]
    assert segments(chunks(items, "answer")) == [SUBMITTED]  # written calls stream as text: whole at the end


def formatted(adapter: str, mode: str, text: str) -> dict[str, Any]:
    """A text answer in the adapter's format (written mode adds the empty calls field)."""
    if adapter == "json":
        fields: dict[str, Any] = {"answer": text, **({"tool_calls": []} if mode == "written" else {})}
        return text_completion(json.dumps(fields))
    calls = "\n<tool_calls>[]</tool_calls>" if mode == "written" else ""
    return text_completion(f"<answer>{text}</answer>{calls}")


@pytest.mark.parametrize("adapter", ["json", "xml"])
@pytest.mark.parametrize("mode", ["native", "written"])
def test_an_answer_written_in_json_or_xml_streams_without_its_format(served, engine, mode, adapter, how):
    server = served([formatted(adapter, mode, ANSWER)])
    agent = dspy_imp.ReActV2("city -> answer", tools=[lookup])
    configured = dspy.JSONAdapter() if adapter == "json" else dspy.XMLAdapter()
    with dspy.context(lm=lm_for(server, engine, mode), adapter=configured):
        items = stream_items(agent, how, [StreamListener("answer")], city="Paris")

    answer = chunks(items, "answer")
    assert segments(answer) == [ANSWER] == [items[-1].answer]
    assert len([c for c in answer if c.chunk]) > 5
