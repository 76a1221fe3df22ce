"""The OpenAI Responses API (``dspy.LM(..., model_type="responses")``): reasoning items go back, in order.

DSPy's native engine sends these requests to ``/v1/responses`` and reads each ``reasoning`` item
as lm15 replay state; on LiteLLM the raw response's ``output`` holds it and
``_routes.responses_bridge`` puts it back into DSPy's chat-to-Responses conversion. The loop
records each item and sends it back before the call it preceded. Under ``store=False`` every
request asks for ``include: ["reasoning.encrypted_content"]``.
"""

from __future__ import annotations

from typing import Any

from responses import function_call, openai_response, output_message, reasoning_item
from turns import PARIS, Body, Outcome, Scenario, answered

import dspy_imp
from dspy_imp import ReActAdapter

RESPONSES = {"model_type": "responses"}
CALLS = [
    ("call_w1", "get_weather", PARIS),
    ("call_t2", "get_time", PARIS),
    ("call_w3", "get_weather", {"city": "Lyon"}),
]


def _script(encrypted: bool) -> list[Any]:
    steps = [
        openai_response(reasoning_item(f"rs_{i}", f"gAAAAABo{i}enc" if encrypted else None), function_call(*call))
        for i, call in enumerate(CALLS, start=1)
    ]
    return [
        *steps,
        openai_response(
            reasoning_item("rs_4", "gAAAAABo4enc" if encrypted else None), output_message("Sunny and 14:05.")
        ),
    ]


def _expect_items_replayed(encrypted: bool) -> Any:
    def expect(bodies: list[Body], outcome: Outcome) -> None:
        answered("Sunny and 14:05.")(outcome)
        assert len(bodies) == 4
        kinds = [i.get("type", i.get("role")) for i in bodies[-1]["input"] if i.get("role") != "system"]  # LiteLLM
        assert kinds == ["user", *["reasoning", "function_call", "function_call_output"] * 3]
        replayed = [i for i in bodies[-1]["input"] if i.get("type") == "reasoning"]
        assert [i["id"] for i in replayed] == ["rs_1", "rs_2", "rs_3"]
        if encrypted:
            assert all(body["include"] == ["reasoning.encrypted_content"] and body["store"] is False for body in bodies)
            assert [i["encrypted_content"] for i in replayed] == ["gAAAAABo1enc", "gAAAAABo2enc", "gAAAAABo3enc"]

    return expect


def _expect_forced(bodies: list[Body], outcome: Outcome) -> None:
    assert outcome.error is None, outcome.error
    assert outcome.prediction.metadata.termination_reason == "forced_submit"
    assert outcome.prediction.answer == "Sunny, 21°C."
    forced = bodies[1]
    assert forced["tool_choice"] == {"type": "function", "name": "submit"}
    kinds = [i.get("type", i.get("role")) for i in forced["input"] if i.get("role") != "system"]  # LiteLLM
    assert kinds[:4] == ["user", "reasoning", "function_call", "function_call_output"]


def _expect_misrouted(bodies: list[Body], outcome: Outcome) -> None:
    """``openai/responses/<model>``, on either engine: refused before sending, naming the spelling that works."""
    assert bodies == []
    assert isinstance(outcome.error, dspy_imp.ConfigurationError), outcome  # not a StepError: a bad option
    assert "model_type='responses'" in str(outcome.error)


RESPONSES_API: list[Scenario] = [
    Scenario(
        "responses_litellm_spelling_on_the_default_engine",
        "responses",
        [],
        _expect_misrouted,
        model="openai/responses/gpt-5-mini",
    ),
    Scenario(
        "responses_three_steps",
        "responses",
        _script(encrypted=False),
        _expect_items_replayed(encrypted=False),
        lm=RESPONSES,
    ),
    Scenario(
        "responses_three_steps_store_false",
        "responses",
        _script(encrypted=True),
        _expect_items_replayed(encrypted=True),
        lm={**RESPONSES, "store": False},
    ),
    Scenario(
        "responses_forced_submit",
        "responses",
        [
            openai_response(reasoning_item("rs_1", "gAAAAABo1enc"), function_call(*CALLS[0])),
            openai_response(
                reasoning_item("rs_2", "gAAAAABo2enc"), function_call("call_s", "submit", {"answer": "Sunny, 21°C."})
            ),
        ],
        _expect_forced,
        lm={**RESPONSES, "store": False},
        agent={"finish": "submit", "max_iters": 1},
    ),
]


# -- The items go back as served: summary parts, ``reasoning_text`` content ----------------------

PARTS = [["Weather first.", "Paris is the city."], ["Now the time.", "Same city."]]


def _expect_summary_parts(bodies: list[Body], outcome: Outcome) -> None:
    """Each replayed item has the summary parts it was served with, not one part joining them."""
    answered("Sunny and 14:05.")(outcome)
    assert len(bodies) == 3
    replayed = [i for i in bodies[-1]["input"] if i.get("type") == "reasoning"]
    assert [[p["text"] for p in i["summary"]] for i in replayed] == PARTS
    assert all(p["type"] == "summary_text" for i in replayed for p in i["summary"])


DEEPSEEK_TEXT = ["The user wants the weather; call get_weather.", "Now the time; call get_time."]


def _expect_reasoning_text(bodies: list[Body], outcome: Outcome) -> None:
    """Each replayed item keeps its ``reasoning_text`` content (before: only id, encrypted content, summary)."""
    answered("Sunny and 14:05.")(outcome)
    assert len(bodies) == 3
    replayed = [i for i in bodies[-1]["input"] if i.get("type") == "reasoning"]
    assert [i.get("content") for i in replayed] == [[{"type": "reasoning_text", "text": t}] for t in DEEPSEEK_TEXT]
    history = outcome.prediction.metadata.history.messages
    assert history[0]["reasoning_details"][0]["content"] == [{"type": "reasoning_text", "text": DEEPSEEK_TEXT[0]}]


RESPONSES_API += [
    Scenario(
        "responses_summary_parts_replayed",
        "responses",
        [
            openai_response(reasoning_item("rs_p1", summaries=PARTS[0]), function_call(*CALLS[0])),
            openai_response(reasoning_item("rs_p2", summaries=PARTS[1]), function_call(*CALLS[1])),
            openai_response(reasoning_item("rs_p3", summary="Done."), output_message("Sunny and 14:05.")),
        ],
        _expect_summary_parts,
        lm=RESPONSES,
    ),
    Scenario(
        "deepseek_responses_reasoning_text_replayed",
        "responses",
        [
            openai_response(
                reasoning_item("rs_ds1", text=DEEPSEEK_TEXT[0]), function_call(*CALLS[0]), model="deepseek-v4-pro"
            ),
            openai_response(
                reasoning_item("rs_ds2", text=DEEPSEEK_TEXT[1]), function_call(*CALLS[1]), model="deepseek-v4-pro"
            ),
            openai_response(
                reasoning_item("rs_ds3", text="Both known."),
                output_message("Sunny and 14:05."),
                model="deepseek-v4-pro",
            ),
        ],
        _expect_reasoning_text,
        model="openai/deepseek-v4-pro",
        lm=RESPONSES,
        adapter=ReActAdapter(native_calls=True),  # DSPy does not know the name calls tools
    ),
]
