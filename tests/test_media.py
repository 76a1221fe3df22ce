"""Images, audio and files: inputs, replayed turns, demos, the extractor and tool results (issue 11).

Media values (``dspy.Image``, ``dspy.Audio``, ``dspy.File``, lists of them) reach the request as
content parts where DSPy's ``ChatAdapter`` puts them, never as DSPy's marker text, and the
text around them is the text a request without media has. A tool's media goes after the
results (OpenAI and every other provider) or inside the tool message (Anthropic, Gemini).
Histories with media dump, load and replay byte-identically.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import dspy
import pydantic
import pytest
from dspy.utils.callback import BaseCallback
from helpers import assistant, tool, user

import dspy_imp
from dspy_imp.testing import ScriptedLM, call, reply

PICTURE = dspy.Image("data:image/png;base64," + base64.b64encode(b"\x89PNG\r\n\x1a\n-a-cat-").decode())
CHART = dspy.Image("https://example.com/chart.png")
RECORDING = dspy.Audio(data="UklGRiQAAABXQVZFZm10IBAAAAABAAEAQB8AAEAfAAABAAgAZGF0YQAAAAA=", audio_format="wav")
REPORT = dspy.File(file_data="data:application/pdf;base64,JVBERi0xLjQKJcfsj6IK", filename="report.pdf")
MARKER = "CUSTOM-TYPE"


def image_part(image: dspy.Image) -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": image.url}}


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


class Look(dspy.Signature):
    """Answer the question about the picture."""

    picture: dspy.Image = dspy.InputField()
    question: str = dspy.InputField()
    answer: str = dspy.OutputField()


def zoom(area: str) -> dspy.Image:
    """Zoom into an area of the picture."""
    return CHART


PICTURE_MESSAGE = user(
    [text("[[ ## picture ## ]]\n"), image_part(PICTURE), text("\n\n[[ ## question ## ]]\nWhat is it?")]  # type: ignore[arg-type]
)
ZOOM = assistant("", [("c1", "zoom", '{"area":"top"}')])


def test_an_image_input_is_an_image_part_and_the_text_around_it_is_unchanged(run: Any) -> None:
    lm = ScriptedLM([reply("A cat.")])
    with dspy.context(lm=lm):
        pred = run(dspy_imp.ReActV2(Look, tools=[zoom]), picture=PICTURE, question="What is it?")

    assert pred.answer == "A cat."
    (request,) = lm.requests
    assert request.messages[1:] == [PICTURE_MESSAGE]

    # The same request with a text where the picture was: the text parts are that text's pieces.
    plain = ScriptedLM([reply("A cat.")])
    with dspy.context(lm=plain):
        run(dspy_imp.ReActV2(Look, tools=[zoom]), picture="@", question="What is it?")
    (text_request,) = plain.requests
    assert text_request.messages[0] == request.messages[0]
    assert text_request.messages[1]["content"] == "[[ ## picture ## ]]\n@\n\n[[ ## question ## ]]\nWhat is it?"


def test_a_list_of_images_is_parts_as_dspy_writes_it(run: Any) -> None:
    """Audio and files: ``tests/wire/test_media_wire.py`` (ScriptedLM's Chat serializer carries images only)."""
    signature = dspy.Signature(
        {"pictures": (list[dspy.Image], dspy.InputField()), "answer": (str, dspy.OutputField())}, "Compare."
    )
    lm = ScriptedLM([reply("Done.")])
    with dspy.context(lm=lm):
        run(dspy_imp.ReActV2(signature, tools=[zoom]), pictures=[PICTURE, CHART])

    assert lm.requests[0].messages[1]["content"] == [
        text('[[ ## pictures ## ]]\n["'),
        image_part(PICTURE),
        text('", "'),
        image_part(CHART),
        text('"]'),
    ]
    assert MARKER not in json.dumps(lm.requests[0].messages)


def test_a_tool_image_follows_the_results_for_chat_completions(run: Any) -> None:
    """OpenAI's tool messages carry text: a placeholder there, the image in a user message after the results."""
    lm = ScriptedLM([reply(calls=[call("zoom", {"area": "top"}, id="c1")]), reply("A cat with a hat.")])
    with dspy.context(lm=lm):
        pred = run(dspy_imp.ReActV2(Look, tools=[zoom]), picture=PICTURE, question="What is it?")

    assert pred.answer == "A cat with a hat."
    assert lm.requests[1].messages[1:] == [
        PICTURE_MESSAGE,
        ZOOM,
        tool("c1", "[image 1]"),
        user([text("Media returned by the tools above:"), text("[image 1]"), image_part(CHART)]),  # type: ignore[arg-type]
    ]
    # The record keeps the value as the tool returned it.
    assert pred.metadata.history.messages[0]["tool_call_results"][0]["result"] is CHART


def test_parallel_results_share_one_media_message_and_keep_their_text(run: Any) -> None:
    def chart(kind: str) -> dict[str, Any]:
        """Draw a chart."""
        return {"kind": kind, "image": CHART}

    lm = ScriptedLM(
        [reply(calls=[call("chart", {"kind": "bar"}, id="c1"), call("zoom", {"area": "top"}, id="c2")]), reply("Ok.")]
    )
    with dspy.context(lm=lm):
        run(dspy_imp.ReActV2(Look, tools=[chart, zoom]), picture=PICTURE, question="What is it?")

    assert lm.requests[1].messages[3:] == [
        tool("c1", '{"kind": "bar", "image": "[image 1]"}'),
        tool("c2", "[image 2]"),
        user(
            [
                text("Media returned by the tools above:"),
                text("[image 1]"),
                image_part(CHART),
                text("[image 2]"),
                image_part(CHART),
            ]
        ),  # type: ignore[arg-type]
    ]


def test_anthropic_and_gemini_take_the_image_inside_the_tool_message(run: Any) -> None:
    lm = ScriptedLM([reply(calls=[call("zoom", {"area": "top"}, id="c1")]), reply("Ok.")], model="anthropic/scripted")
    with dspy.context(lm=lm):
        run(dspy_imp.ReActV2(Look, tools=[zoom]), picture=PICTURE, question="What is it?")

    assert lm.requests[1].messages[3:] == [{"role": "tool", "tool_call_id": "c1", "content": [image_part(CHART)]}]


def test_written_calls_carry_tool_media_in_the_results_message(run: Any) -> None:
    def written(answer: str, calls: list[dict[str, Any]]) -> str:
        return f"[[ ## answer ## ]]\n{answer}\n\n[[ ## tool_calls ## ]]\n{json.dumps(calls)}\n\n[[ ## completed ## ]]"

    lm = ScriptedLM(
        [reply(written("zooming", [{"name": "zoom", "arguments": {"area": "top"}}])), reply(written("A cat.", []))],
        native=False,
    )
    with dspy.context(lm=lm):
        pred = run(dspy_imp.ReActV2(Look, tools=[zoom]), picture=PICTURE, question="What is it?")

    assert pred.answer == "A cat."
    first, second = lm.requests
    assert first.messages[1] == PICTURE_MESSAGE
    call_id = pred.metadata.history.messages[0]["tool_calls"][0]["id"]
    assert second.messages[3] == user(
        [text(f"[[ ## tool_call_results ## ]]\nzoom ({call_id}): "), image_part(CHART)]  # type: ignore[arg-type]
    )


def test_a_json_adapter_sends_the_same_parts(run: Any) -> None:
    lm = ScriptedLM([reply(calls=[call("zoom", {"area": "top"}, id="c1")]), reply('{"answer": "A cat."}')])
    with dspy.context(lm=lm, adapter=dspy.JSONAdapter()):
        pred = run(dspy_imp.ReActV2(Look, tools=[zoom]), picture=PICTURE, question="What is it?")

    assert pred.answer == "A cat."
    assert lm.requests[1].messages[1] == PICTURE_MESSAGE
    assert lm.requests[1].messages[3:5] == [tool("c1", "[image 1]"), lm.requests[1].messages[4]]
    assert lm.requests[1].messages[4]["content"][-1] == image_part(CHART)


def test_the_renderer_gets_the_value_and_may_return_text_and_media(run: Any) -> None:
    seen: list[Any] = []

    def renderer(call: Any, result: Any) -> list[Any]:
        seen.append(result.value)
        return [f"{call.name} returned a chart:", result.value]

    lm = ScriptedLM([reply(calls=[call("zoom", {"area": "top"}, id="c1")]), reply("Ok.")])
    with dspy.context(lm=lm):
        run(
            dspy_imp.ReActV2(Look, tools=[zoom], tool_result_renderer=renderer), picture=PICTURE, question="What is it?"
        )

    assert seen == [CHART] and seen[0] is CHART
    assert lm.requests[1].messages[3:] == [
        tool("c1", "zoom returned a chart:[image 1]"),
        user([text("Media returned by the tools above:"), text("[image 1]"), image_part(CHART)]),  # type: ignore[arg-type]
    ]


def test_a_renderer_returning_something_else_fails_the_step(run: Any) -> None:
    lm = ScriptedLM([reply(calls=[call("zoom", {"area": "top"}, id="c1")]), reply("unused")])
    agent = dspy_imp.ReActV2(Look, tools=[zoom], tool_result_renderer=lambda call, result: 42)
    with dspy.context(lm=lm), pytest.raises(dspy_imp.StepError) as raised:
        run(agent, picture=PICTURE, question="What is it?")
    assert "tool_result_renderer" in str(raised.value.reason)
    assert len(raised.value.history.messages) == 1


def test_an_earlier_turn_replays_its_media_identically_after_dump_and_load(run: Any) -> None:
    first = ScriptedLM([reply(calls=[call("zoom", {"area": "top"}, id="c1")]), reply("A cat.")])
    agent = dspy_imp.ReActV2(Look, tools=[zoom])
    with dspy.context(lm=first):
        pred = run(agent, picture=PICTURE, question="What is it?")

    dumped = json.loads(json.dumps(dspy_imp.dump_history(pred.metadata.history)))
    assert dumped["messages"][0]["picture"] == {
        "__imp_type__": "media",
        "class": "dspy.Image",
        "fields": {"url": PICTURE.url},
    }
    loaded = dspy_imp.load_history(dumped)
    assert loaded.messages[0]["picture"] == PICTURE
    assert loaded.messages[0]["tool_call_results"][0]["result"] == CHART

    requests = []
    for history in (pred.metadata.history, loaded):
        lm = ScriptedLM([reply("A hat.")])
        with dspy.context(lm=lm):
            run(agent, picture=CHART, question="And on its head?", history=history)
        requests.append(lm.requests[0].messages)
    assert requests[0] == requests[1]
    assert requests[0][1:6] == [
        PICTURE_MESSAGE,
        ZOOM,
        tool("c1", "[image 1]"),
        user([text("Media returned by the tools above:"), text("[image 1]"), image_part(CHART)]),  # type: ignore[arg-type]
        assistant("A cat."),
    ]
    assert requests[0][6]["content"][1] == image_part(CHART)


def test_dumps_keep_every_field_as_given_and_refuse_unknown_media_classes() -> None:
    history = [
        {"recording": RECORDING, "report": REPORT, "pictures": [PICTURE], "tool_calls": [], "tool_call_results": []}
    ]
    dumped = json.loads(json.dumps(dspy_imp.dump_history(history)))
    entry = dumped["messages"][0]
    assert entry["recording"]["fields"] == {"data": RECORDING.data, "audio_format": "wav"}
    assert entry["report"]["fields"] == {"file_data": REPORT.file_data, "file_id": None, "filename": "report.pdf"}
    loaded = dspy_imp.load_history(dumped).messages[0]
    assert (loaded["recording"], loaded["report"], loaded["pictures"]) == (RECORDING, REPORT, [PICTURE])

    entry["report"]["class"] = "somewhere.Unknown"
    with pytest.raises(dspy_imp.ConfigurationError, match=r"somewhere\.Unknown"):
        dspy_imp.load_history(dumped)


def test_redaction_leaves_media_alone_and_keeps_it() -> None:
    # base64 that happens to look like an AWS key, and a URL that looks like a token
    secretish = dspy.Image("data:image/png;base64,AKIAABCDEFGHIJKLMNOP1234")
    linked = dspy.Image("https://example.com/a.png?token=abcdefgh12345")
    history = [
        {
            "picture": secretish,
            "note": "key AKIAABCDEFGHIJKLMNOP1234",
            "tool_calls": [],
            "tool_call_results": [
                {
                    "id": "c1",
                    "name": "zoom",
                    "result": linked,
                    "error": False,
                    "returned_at": "2026-11-30T00:00:00.000Z",
                }
            ],
        }
    ]
    redacted = dspy_imp.redact_history(history).messages[0]
    assert redacted["note"] == "key [REDACTED]"
    assert redacted["picture"]["fields"] == {"url": secretish.url}
    assert redacted["tool_call_results"][0]["result"]["fields"] == {"url": linked.url}


def test_demos_show_their_media(run: Any) -> None:
    agent = dspy_imp.ReActV2(Look, tools=[zoom])
    agent.react.demos = [
        dspy.Example(picture=CHART, question="What is it?", next_thought="A chart.", tool_calls=[]),
    ]
    lm = ScriptedLM([reply("A cat.")])
    with dspy.context(lm=lm):
        run(agent, picture=PICTURE, question="What is it?")

    messages = lm.requests[0].messages
    assert messages[1] == user(
        [text("[[ ## picture ## ]]\n"), image_part(CHART), text("\n\n[[ ## question ## ]]\nWhat is it?")]  # type: ignore[arg-type]
    )
    assert messages[-1] == PICTURE_MESSAGE


def test_the_extractor_sees_the_inputs_and_the_tool_media(run: Any) -> None:
    class Count(dspy.Signature):
        """Count the cats in the picture."""

        picture: dspy.Image = dspy.InputField()
        cats: int = dspy.OutputField()

    lm = ScriptedLM(
        [
            reply(calls=[call("zoom", {"area": "top"}, id="c1")]),
            reply("I think there are three."),  # no submit: the forced submit follows
            reply("Three."),  # still no submit: the extractor fills the outputs
            reply("[[ ## reasoning ## ]]\nCounted.\n\n[[ ## cats ## ]]\n3\n\n[[ ## completed ## ]]"),
        ]
    )
    with dspy.context(lm=lm):
        pred = run(dspy_imp.ReActV2(Count, tools=[zoom]), picture=PICTURE)

    assert (pred.cats, pred.metadata.termination_reason) == (3, "extracted")
    extraction = lm.requests[-1].messages[-1]["content"]
    media = [p for p in extraction if p["type"] != "text"]
    assert media == [image_part(PICTURE), image_part(PICTURE), image_part(CHART)]  # input, then its transcript
    assert MARKER not in json.dumps(extraction)


class _Formatted(BaseCallback):
    def __init__(self) -> None:
        self.messages: list[Any] = []

    def on_adapter_format_end(self, call_id: str, outputs: Any, exception: Exception | None = None) -> None:
        self.messages.append(outputs)


def test_a_large_payload_is_referenced_by_each_request_not_copied(run: Any) -> None:
    big = dspy.Image("data:image/png;base64," + "A" * 2_000_000)

    def shoot() -> dspy.Image:
        """Take a screenshot."""
        return big

    formatted = _Formatted()
    lm = ScriptedLM(
        [reply(calls=[call("shoot", {}, id="c1")]), reply(calls=[call("shoot", {}, id="c2")]), reply("Ok.")]
    )
    with dspy.context(lm=lm, callbacks=[formatted]):
        run(dspy_imp.ReActV2(Look, tools=[shoot]), picture=big, question="What is it?")

    urls = [
        part["image_url"]["url"]
        for messages in formatted.messages
        for message in messages
        if isinstance(message["content"], list)
        for part in message["content"]
        if part["type"] == "image_url"
    ]
    assert len(urls) == 1 + 2 + 3  # the input, then one screenshot more per request
    assert urls == [big.url] * 6
    # One string object serves every request (DSPy's Image.format caches its parts per value).
    assert len({id(url) for url in urls}) == 1


def test_context_window_recovery_leaves_out_an_earlier_turn_with_its_media(run: Any) -> None:
    from dspy_imp.testing import fail

    agent = dspy_imp.ReActV2(Look, tools=[zoom])
    first = ScriptedLM([reply(calls=[call("zoom", {"area": "top"}, id="c1")]), reply("A cat.")])
    with dspy.context(lm=first):
        earlier = run(agent, picture=PICTURE, question="What is it?")

    lm = ScriptedLM([fail.context_window(), reply("A dog.")])
    with dspy.context(lm=lm):
        pred = run(agent, picture=PICTURE, question="And now?", history=earlier.metadata.history)

    refused, retried = lm.requests
    assert [m["role"] for m in refused.messages] == ["system", "user", "assistant", "tool", "user", "assistant", "user"]
    assert retried.messages[1:] == [
        user([text("[[ ## picture ## ]]\n"), image_part(PICTURE), text("\n\n[[ ## question ## ]]\nAnd now?")])  # type: ignore[arg-type]
    ]
    assert pred.metadata.context_projection["omitted_prior_entries"] == 2
    assert len(pred.metadata.history.messages) == 3  # the record keeps everything


def test_an_xml_adapter_sends_the_same_parts(run: Any) -> None:
    lm = ScriptedLM([reply(calls=[call("zoom", {"area": "top"}, id="c1")]), reply("<answer>A cat.</answer>")])
    with dspy.context(lm=lm, adapter=dspy.XMLAdapter()):
        pred = run(dspy_imp.ReActV2(Look, tools=[zoom]), picture=PICTURE, question="What is it?")

    assert pred.answer == "A cat."
    assert lm.requests[0].messages[1] == user(
        [text("<picture>\n"), image_part(PICTURE), text("\n</picture>\n\n<question>\nWhat is it?\n</question>")]  # type: ignore[arg-type]
    )
    assert lm.requests[1].messages[3:5] == [
        tool("c1", "[image 1]"),
        user([text("Media returned by the tools above:"), text("[image 1]"), image_part(CHART)]),  # type: ignore[arg-type]
    ]


class Screenshot(dspy.Type):
    """A user-defined media type: any ``dspy.Type`` whose ``format()`` gives content parts."""

    url: str
    page: str

    def format(self) -> list[dict[str, Any]]:
        return [
            {"type": "text", "text": f"(screenshot of {self.page})"},
            {"type": "image_url", "image_url": {"url": self.url}},
        ]


def test_a_user_media_type_is_sent_dumped_and_loaded_like_the_builtin_ones(run: Any) -> None:
    shot = Screenshot(url=CHART.url, page="home")

    def screenshot() -> Screenshot:
        """Take a screenshot of the page."""
        return shot

    lm = ScriptedLM([reply(calls=[call("screenshot", {}, id="c1")]), reply("A home page.")])
    with dspy.context(lm=lm):
        pred = run(dspy_imp.ReActV2("question -> answer", tools=[screenshot]), question="What page?")

    assert lm.requests[1].messages[3:] == [
        tool("c1", "(screenshot of home)[image 1]"),
        user([text("Media returned by the tools above:"), text("[image 1]"), image_part(CHART)]),  # type: ignore[arg-type]
    ]
    dumped = json.loads(json.dumps(dspy_imp.dump_history(pred.metadata.history)))
    result = dumped["messages"][0]["tool_call_results"][0]["result"]
    assert result == {
        "__imp_type__": "media",
        "class": f"{__name__}.Screenshot",
        "fields": {"url": CHART.url, "page": "home"},
    }
    assert dspy_imp.load_history(dumped).messages[0]["tool_call_results"][0]["result"] == shot


class Page(pydantic.BaseModel):
    title: str
    shot: dspy.Image


def test_media_inside_a_pydantic_value_are_split_as_dspy_splits_them(run: Any) -> None:
    def visit(url: str) -> Page:
        """Visit a page."""
        return Page(title="Home", shot=CHART)

    signature = dspy.Signature({"page": (Page, dspy.InputField()), "answer": (str, dspy.OutputField())}, "Look.")
    lm = ScriptedLM([reply(calls=[call("visit", {"url": "/"}, id="c1")]), reply("Ok.")])
    with dspy.context(lm=lm):
        pred = run(dspy_imp.ReActV2(signature, tools=[visit]), page=Page(title="Start", shot=PICTURE))

    messages = lm.requests[1].messages
    assert messages[1]["content"] == [
        text('[[ ## page ## ]]\n{"title": "Start", "shot": "'),
        image_part(PICTURE),
        text('"}'),
    ]
    assert messages[3:] == [
        tool("c1", '{"title": "Home", "shot": "[image 1]"}'),
        user([text("Media returned by the tools above:"), text("[image 1]"), image_part(CHART)]),  # type: ignore[arg-type]
    ]
    # Dumped with its media as media (issue 23: never marker text), it replays the same.
    history = dspy_imp.load_history(json.loads(json.dumps(dspy_imp.dump_history(pred.metadata.history))))
    replays = []
    for earlier in (pred.metadata.history, history):
        again = ScriptedLM([reply("Ok.")])
        with dspy.context(lm=again):
            run(dspy_imp.ReActV2(signature, tools=[visit]), page=Page(title="Next", shot=CHART), history=earlier)
        replays.append(again.requests[0].messages)
    assert replays[0] == replays[1]
