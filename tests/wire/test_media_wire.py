"""Media over HTTP: image, audio and file inputs and a tool returning an image, per provider and engine.

Each turn runs on both ``dspy.LM`` engines (native lm15 and LiteLLM), sync and async, against
``tests/fake_openai_server.py`` scripted with the provider's own response bodies (the server
only plays JSON; the client speaks the provider's protocol). Every request body passes the
provider-rules checker (``provider_rules.py``, with the media rules of ``media_rules.py``), and
the assertions name where each medium landed: OpenAI Chat Completions user content parts (a
tool's image in the user message right after the results), Anthropic ``image``/``document``
blocks (a tool's image inside its ``tool_result``), Gemini inline data (a tool's image in or
right beside its function response).
"""

from __future__ import annotations

import base64
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import dspy
import pytest
from fake_openai_server import FakeOpenAIServer, text_completion, tool_calls_completion
from provider_rules import assert_accepted

import dspy_imp

pytestmark = pytest.mark.block_network(allowed_hosts=[r"127\.0\.0\.1$"])

PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n-a-picture-").decode()
CHART = base64.b64encode(b"\x89PNG\r\n\x1a\n-a-chart-").decode()
WAV = base64.b64encode(b"RIFF$\x00\x00\x00WAVEfmt -a-recording-").decode()
PDF = base64.b64encode(b"%PDF-1.4\n-a-document-").decode()

SUFFIX = {
    ("openai", "auto"): "/v1",
    ("openai", "litellm"): "/v1",
    ("anthropic", "auto"): "/v1",
    ("anthropic", "litellm"): "",
    ("gemini", "auto"): "/v1beta",
    ("gemini", "litellm"): "/v1beta",
}
MODEL = {"openai": "openai/gpt-4o", "anthropic": "anthropic/claude-sonnet-4-5", "gemini": "gemini/gemini-2.5-flash"}


# -- the providers' answers ------------------------------------------------------------------------


def answer(protocol: str, text: str) -> dict[str, Any]:
    if protocol == "openai":
        return text_completion(text)
    if protocol == "anthropic":
        return _anthropic([{"type": "text", "text": text}], "end_turn")
    return _gemini([{"text": text}])


def zoom_call(protocol: str) -> dict[str, Any]:
    if protocol == "openai":
        return tool_calls_completion([("call_zoom_1", "zoom", {"area": "top"})])
    if protocol == "anthropic":
        # Claude Sonnet 4.5 thinks (DSPy sends a reasoning_effort): its signed thinking block is replayed.
        thought = {"type": "thinking", "thinking": "Zoom in first.", "signature": "EpIBCkYIBxgCKkCmedia0signature"}
        return _anthropic(
            [thought, {"type": "tool_use", "id": "toolu_zoom_1", "name": "zoom", "input": {"area": "top"}}], "tool_use"
        )
    return _gemini([{"functionCall": {"name": "zoom", "args": {"area": "top"}}}])


def _anthropic(content: list[dict[str, Any]], stop: str) -> dict[str, Any]:
    return {
        "id": "msg_01media",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5-20250929",
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {"input_tokens": 900, "output_tokens": 20},
    }


def _gemini(parts: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}],
        "usageMetadata": {"promptTokenCount": 900, "candidatesTokenCount": 20, "totalTokenCount": 920},
        "modelVersion": "gemini-2.5-flash",
    }


# -- where media landed --------------------------------------------------------------------------


@dataclass(frozen=True)
class Found:
    """One medium in a request body: which message/content, in what, what kind, its payload."""

    index: int
    inside: str  # "user", "tool_result", "function_response"
    mime: str
    data: str


def found(protocol: str, body: Mapping[str, Any]) -> list[Found]:
    if protocol == "openai":
        return list(_openai_found(body))
    if protocol == "anthropic":
        return list(_anthropic_found(body))
    return list(_gemini_found(body))


def _openai_found(body: Mapping[str, Any]) -> Iterator[Found]:
    for index, message in enumerate(body["messages"]):
        for part in message["content"] if isinstance(message.get("content"), list) else []:
            if part["type"] == "image_url":
                header, _, data = part["image_url"]["url"].partition(",")
                yield Found(index, message["role"], header.removeprefix("data:").removesuffix(";base64"), data)
            elif part["type"] == "input_audio":
                yield Found(
                    index, message["role"], "audio/" + part["input_audio"]["format"], part["input_audio"]["data"]
                )
            elif part["type"] == "file":
                header, _, data = part["file"]["file_data"].partition(",")
                yield Found(index, message["role"], header.removeprefix("data:").removesuffix(";base64"), data)


def _anthropic_found(body: Mapping[str, Any]) -> Iterator[Found]:
    for index, message in enumerate(body["messages"]):
        for block in message["content"] if isinstance(message["content"], list) else []:
            if block["type"] in ("image", "document"):
                yield Found(index, message["role"], block["source"]["media_type"], block["source"]["data"])
            if block["type"] == "tool_result" and isinstance(block["content"], list):
                for inner in block["content"]:
                    if inner["type"] in ("image", "document"):
                        yield Found(index, "tool_result", inner["source"]["media_type"], inner["source"]["data"])


def _gemini_found(body: Mapping[str, Any]) -> Iterator[Found]:
    for index, content in enumerate(body["contents"]):
        answered = False
        for part in content["parts"]:
            response = part.get("functionResponse") or part.get("function_response")
            if response:
                answered = True
                for inner in response.get("parts") or []:
                    yield _inline(index, "function_response", inner)
            elif "inlineData" in part or "inline_data" in part:
                yield _inline(index, "function_response" if answered else content["role"], part)


def _inline(index: int, inside: str, part: Mapping[str, Any]) -> Found:
    data = part.get("inlineData") or part["inline_data"]
    return Found(index, inside, data.get("mimeType") or data["mime_type"], data["data"])


# -- the turns -------------------------------------------------------------------------------------


def zoom(area: str) -> dspy.Image:
    """Zoom into an area of the picture; returns the zoomed picture."""
    return dspy.Image(f"data:image/png;base64,{CHART}")


class Look(dspy.Signature):
    """Answer the question about the attachment."""

    attachment: Any = dspy.InputField()
    question: str = dspy.InputField()
    answer: str = dspy.OutputField()


def signature_for(kind: type) -> type[dspy.Signature]:
    return Look.with_updated_fields("attachment", type_=kind)


def turn(protocol: str, engine: str, run: Any, script: list[dict[str, Any]], **inputs: Any) -> tuple[Any, list[Any]]:
    with FakeOpenAIServer(script) as server:
        lm = dspy.LM(
            MODEL[protocol],
            api_base=f"http://127.0.0.1:{server.port}{SUFFIX[(protocol, engine)]}",
            api_key="sk-test",
            cache=False,
            num_retries=0,
            engine=engine,
        )
        agent = dspy_imp.ReActV2(signature_for(type(inputs["attachment"])), tools=[zoom])
        with dspy.context(lm=lm):
            pred = run(agent, **inputs)
    for request in server.requests:
        assert_accepted(protocol, request.body, request.path)
    return pred, [r.body for r in server.requests]


ENGINES = ["auto", "litellm"]


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("protocol", ["openai", "anthropic", "gemini"])
def test_an_image_input_is_an_image(protocol: str, engine: str, run: Any) -> None:
    picture = dspy.Image(f"data:image/png;base64,{PNG}")
    pred, (body,) = turn(protocol, engine, run, [answer(protocol, "A cat.")], attachment=picture, question="What?")
    assert pred.answer == "A cat."
    assert found(protocol, body) == [Found(_first_user(protocol), "user", "image/png", PNG)]
    if protocol == "openai":
        assert body["messages"][1]["content"] == [
            {"type": "text", "text": "[[ ## attachment ## ]]\n"},
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
            {"type": "text", "text": "\n\n[[ ## question ## ]]\nWhat?"},
        ]


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("protocol", ["openai", "gemini"])
def test_an_audio_input_is_audio(protocol: str, engine: str, run: Any) -> None:
    recording = dspy.Audio(data=WAV, audio_format="wav")
    pred, (body,) = turn(protocol, engine, run, [answer(protocol, "Birdsong.")], attachment=recording, question="What?")
    assert pred.answer == "Birdsong."
    (medium,) = found(protocol, body)
    assert (medium.index, medium.inside, medium.data) == (_first_user(protocol), "user", WAV)
    assert medium.mime in ("audio/wav", "audio/x-wav")


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("protocol", ["openai", "anthropic", "gemini"])
def test_a_file_input_is_a_document(protocol: str, engine: str, run: Any) -> None:
    document = dspy.File(file_data=f"data:application/pdf;base64,{PDF}")
    pred, (body,) = turn(protocol, engine, run, [answer(protocol, "A form.")], attachment=document, question="What?")
    assert pred.answer == "A form."
    assert found(protocol, body) == [Found(_first_user(protocol), "user", "application/pdf", PDF)]


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("protocol", ["openai", "anthropic", "gemini"])
def test_a_tool_returning_an_image_shows_it_to_the_model(protocol: str, engine: str, run: Any) -> None:
    picture = dspy.Image(f"data:image/png;base64,{PNG}")
    script = [zoom_call(protocol), answer(protocol, "A cat with a hat.")]
    pred, (first, second) = turn(protocol, engine, run, script, attachment=picture, question="What?")
    assert pred.answer == "A cat with a hat."
    user = _first_user(protocol)
    assert found(protocol, first) == [Found(user, "user", "image/png", PNG)]
    chart = found(protocol, second)[1:]
    if protocol == "openai":  # tool messages carry text: the tool's image follows the results
        messages = second["messages"]
        assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool", "user"]
        assert messages[3]["content"] == "[image 1]"
        assert messages[4]["content"][:2] == [
            {"type": "text", "text": "Media returned by the tools above:"},
            {"type": "text", "text": "[image 1]"},
        ]
        assert chart == [Found(4, "user", "image/png", CHART)]
    elif protocol == "anthropic":
        assert chart == [Found(user + 2, "tool_result", "image/png", CHART)]
    else:
        assert chart == [Found(user + 2, "function_response", "image/png", CHART)]


def _first_user(protocol: str) -> int:
    return 1 if protocol == "openai" else 0  # the system prompt is a message only on Chat Completions


def listen(area: str) -> dspy.Audio:
    """Record the sound of an area."""
    return dspy.Audio(data=WAV, audio_format="wav")


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("protocol", ["openai", "gemini"])
def test_a_tool_returning_audio_sends_it_after_the_results(protocol: str, engine: str, run: Any) -> None:
    """Audio never rides in a tool result (Gemini's function responses take images here): a user turn follows."""
    script = [zoom_call(protocol), answer(protocol, "Rain.")]
    with FakeOpenAIServer(script) as server:
        lm = dspy.LM(
            MODEL[protocol],
            api_base=f"http://127.0.0.1:{server.port}{SUFFIX[(protocol, engine)]}",
            api_key="sk-test",
            cache=False,
            num_retries=0,
            engine=engine,
        )
        listening = dspy.Tool(listen, name="zoom")  # the scripted call names `zoom`
        with dspy.context(lm=lm):
            pred = run(dspy_imp.ReActV2("question -> answer", tools=[listening]), question="What do you hear?")
    assert pred.answer == "Rain."
    for request in server.requests:
        assert_accepted(protocol, request.body, request.path)
    second = server.requests[1].body
    (medium,) = found(protocol, second)
    assert medium.data == WAV and medium.inside == "user" and medium.mime in ("audio/wav", "audio/x-wav")
    after_results = len(second["messages" if protocol == "openai" else "contents"]) - 1
    assert medium.index == after_results


@pytest.mark.parametrize("engine", ENGINES)
def test_audio_for_an_anthropic_model_is_refused_before_it_is_sent(engine: str, run: Any) -> None:
    """Anthropic takes no audio; the engines would drop it (lm15 leaving an empty text block the API refuses)."""
    recording = dspy.Audio(data=WAV, audio_format="wav")
    with FakeOpenAIServer([answer("anthropic", "unused")]) as server:
        base = f"http://127.0.0.1:{server.port}{SUFFIX[('anthropic', engine)]}"
        lm = dspy.LM(MODEL["anthropic"], api_base=base, api_key="sk-test", cache=False, num_retries=0, engine=engine)
        agent = dspy_imp.ReActV2(signature_for(dspy.Audio), tools=[zoom])
        with dspy.context(lm=lm), pytest.raises(dspy_imp.StepError) as raised:
            run(agent, attachment=recording, question="What?")
    assert server.requests == []
    assert isinstance(raised.value.reason, dspy_imp.ConfigurationError)
    assert "Anthropic models take no audio" in str(raised.value.reason)
