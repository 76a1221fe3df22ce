"""OpenAI-compatible routes: Groq's refusal of a malformed call, local servers (vLLM, Ollama)."""

from __future__ import annotations

from typing import Any

from responses import chat, gemini_compat, groq, groq_tool_use_failed, openrouter, reasoning_text
from turns import PARIS, Body, Outcome, Scenario, answered

from dspy_imp import ReActAdapter

GROQ = "groq/openai/gpt-oss-120b"  # a Groq model DSPy knows calls tools natively
BROKEN_CALL = '<function=get_weather>{"city": "Paris"</function>'


def _expect_refused_call_read(bodies: list[Body], outcome: Outcome) -> None:
    """The refused call is an observation (with what the model wrote); the next step answers."""
    answered("Sunny, 21°C.")(outcome)
    assert len(bodies) == 3
    last = bodies[2]["messages"]
    refused = [m for m in last if m["role"] == "tool"][-1]
    assert "refused this tool call as malformed" in refused["content"]
    # LiteLLM keeps Groq's body in the error, so the model reads what it wrote; DSPy's native
    # engine keeps only the code (``provider_code``), so there it reads the refusal alone.
    assert refused["content"].endswith((BROKEN_CALL, "valid arguments."))
    assert all("tools" in body for body in bodies)  # the step after the refusal still offers the tools


COMPAT: list[Scenario] = [
    Scenario(
        "groq_tool_use_failed_then_answer",
        "groq",
        [
            groq(calls=[("call_g1", "get_weather", PARIS)]),
            groq_tool_use_failed(BROKEN_CALL),
            groq("Sunny, 21°C."),
        ],
        _expect_refused_call_read,
        model=GROQ,
    ),
]


def _expect_refused_last_text_asked_again(bodies: list[Body], outcome: Outcome) -> None:
    """After max_iters, the last-text request is refused: the refused call becomes an observation
    asking for the text answer, and the same request goes once more with it appended."""
    assert outcome.error is None, outcome.error
    meta = outcome.prediction.metadata
    assert outcome.prediction.answer == "Sunny, 21°C."
    assert (meta.termination_reason, meta.termination_cause) == ("last_text", "max_iters")
    assert len(bodies) == 3
    first, again = bodies[1]["messages"], bodies[2]["messages"]
    assert again[: len(first)] == first  # the cached prefix holds
    assert [m["role"] for m in again[len(first) :]] == ["assistant", "tool"]
    refused = again[-1]["content"]
    assert "refused this tool call as malformed; answer in text now, without calling a tool." in refused
    assert refused.endswith((BROKEN_CALL, "without calling a tool."))  # LiteLLM keeps what the model wrote
    assert bodies[2]["tools"] == bodies[1]["tools"] == bodies[0]["tools"]
    assert [body.get("tool_choice") for body in bodies[1:]] == [bodies[1].get("tool_choice")] * 2
    assert dict(meta.usage.requests) == {"step": 1, "last_text": 2}


COMPAT.append(
    Scenario(
        "groq_last_text_tool_use_failed_then_answer",
        "groq",
        [
            groq(calls=[("call_g1", "get_weather", PARIS)]),
            groq_tool_use_failed(BROKEN_CALL),
            groq("Sunny, 21°C."),
        ],
        _expect_refused_last_text_asked_again,
        model=GROQ,
        agent={"max_iters": 1},
    )
)


LOCAL = "openai/Qwen/Qwen3-8B"  # a name DSPy's capability lookup does not know
LOCAL_STEPS = [
    ("get_weather", PARIS, "Weather first."),
    ("get_time", PARIS, "Now the time."),
    ("get_weather", {"city": "Lyon"}, "Lyon too."),
]


def _expect_native_local(bodies: list[Body], outcome: Outcome) -> None:
    """``ReActAdapter(native_calls=True)`` wins over DSPy's lookup: tools go natively, calls come back natively,
    and the server's ``reasoning`` is recorded (not shown as text)."""
    answered("Sunny and 14:05.")(outcome)
    assert len(bodies) == 4
    assert all([t["function"]["name"] for t in body["tools"]] == ["get_weather", "get_time"] for body in bodies)
    turns = [m for m in bodies[-1]["messages"] if m["role"] == "assistant"]
    assert [[c["function"]["name"] for c in t["tool_calls"]] for t in turns] == [
        ["get_weather"],
        ["get_time"],
        ["get_weather"],
    ]
    assert "[[ ## tool_calls ## ]]" not in str(bodies[0]["messages"][0])  # no written-calls format
    steps = outcome.prediction.metadata.history.messages
    assert [s.get("reasoning_content") for s in steps[:3]] == ["Weather first.", "Now the time.", "Lyon too."]
    assert all("Weather first." not in str(t.get("content")) for t in turns)
    assert [t.get("reasoning_content") for t in turns] == ["Weather first.", "Now the time.", "Lyon too."]


COMPAT.append(
    Scenario(
        "local_server_native_tools",
        "local",
        [
            chat(
                calls=[("chatcmpl-tool-1", "get_weather", PARIS)],
                reasoning="Weather first.",
                reasoning_field="reasoning",
                model="Qwen/Qwen3-8B",
            ),
            chat(
                calls=[("chatcmpl-tool-2", "get_time", PARIS)],
                reasoning="Now the time.",
                reasoning_field="reasoning",
                model="Qwen/Qwen3-8B",
            ),
            chat(
                calls=[("chatcmpl-tool-3", "get_weather", {"city": "Lyon"})],
                reasoning="Lyon too.",
                reasoning_field="reasoning",
                model="Qwen/Qwen3-8B",
            ),
            chat("Sunny and 14:05.", reasoning="Done.", reasoning_field="reasoning", model="Qwen/Qwen3-8B"),
        ],
        _expect_native_local,
        model=LOCAL,
        adapter=ReActAdapter(native_calls=True),
    )
)


def _expect_local_forced(bodies: list[Body], outcome: Outcome) -> None:
    """After three tool steps (``max_iters``) the forced submit names ``submit`` in ``tool_choice``, the way the
    OpenAI-compatible protocol takes it; tools go natively throughout and the ``reasoning`` is recorded, not shown."""
    assert outcome.error is None, outcome.error
    meta = outcome.prediction.metadata
    assert outcome.prediction.answer == "Sunny and 14:05."
    assert (meta.termination_reason, meta.termination_cause) == ("forced_submit", "max_iters")
    assert len(bodies) == 4
    names = ["get_weather", "get_time", "submit"]
    assert all([t["function"]["name"] for t in body["tools"]] == names for body in bodies)
    assert [body.get("tool_choice") for body in bodies] == [
        *[bodies[0].get("tool_choice")] * 3,
        {"type": "function", "function": {"name": "submit"}},
    ]
    assert bodies[0].get("tool_choice") in (None, "auto")
    assert all(bodies[3]["messages"][: len(body["messages"])] == body["messages"] for body in bodies[:3])
    turns = [m for m in bodies[-1]["messages"] if m["role"] == "assistant"]
    assert [[c["function"]["name"] for c in t["tool_calls"]] for t in turns] == [
        ["get_weather"],
        ["get_time"],
        ["get_weather"],
    ]
    assert [[c["id"] for c in t["tool_calls"]] for t in turns] == [[f"chatcmpl-tool-{i}"] for i in (1, 2, 3)]
    assert all("[[ ## tool_calls ## ]]" not in str(body["messages"]) for body in bodies)  # no written-calls format
    # Never shown as text; sent back in its own field on both engines (the server's chat template reads it).
    assert all("Weather first." not in str(m.get("content")) for body in bodies for m in body["messages"])
    assert [t.get("reasoning_content") for t in turns] == [thought for _, _, thought in LOCAL_STEPS]
    assert all(body["model"] == "Qwen/Qwen3-8B" for body in bodies)
    steps = meta.history.messages
    assert [s.get("reasoning_content") for s in steps[:3]] == ["Weather first.", "Now the time.", "Lyon too."]
    assert dict(meta.usage.requests) == {"step": 3, "forced_submit": 1}


COMPAT.append(
    Scenario(
        "local_server_forced_submit",
        "local",
        [
            *[
                chat(
                    calls=[(f"chatcmpl-tool-{i}", name, args)],
                    reasoning=thought,
                    reasoning_field="reasoning",
                    model="Qwen/Qwen3-8B",
                )
                for i, (name, args, thought) in enumerate(LOCAL_STEPS, start=1)
            ],
            chat(
                calls=[("chatcmpl-tool-4", "submit", {"answer": "Sunny and 14:05."})],
                reasoning="Submit now.",
                reasoning_field="reasoning",
                model="Qwen/Qwen3-8B",
            ),
        ],
        _expect_local_forced,
        model=LOCAL,
        adapter=ReActAdapter(native_calls=True),
        agent={"finish": "submit", "max_iters": 3},
    )
)


# -- OpenRouter ----------------------------------------------------------------------------------

OR_STEPS = [
    ("get_weather", PARIS, [reasoning_text("Weather first.", "EqQBCkYIBxgCKkDorw1")]),
    ("get_time", PARIS, [reasoning_text("Now the time.", "EqQBCkYIBxgCKkDort2")]),
    ("get_weather", {"city": "Lyon"}, [reasoning_text("Lyon too.", "EqQBCkYIBxgCKkDorl3")]),
]


def _expect_details_replayed(steps: int, answer: str = "Sunny and 14:05.") -> Any:
    def expect(bodies: list[Body], outcome: Outcome) -> None:
        answered(answer)(outcome)
        turns = [m for m in bodies[-1]["messages"] if m["role"] == "assistant"]
        assert [t.get("reasoning_details") for t in turns] == [d for _, _, d in OR_STEPS[:steps]]
        history = outcome.prediction.metadata.history.messages
        assert history[0]["reasoning_details"] == OR_STEPS[0][2]

    return expect


def _expect_or_forced(bodies: list[Body], outcome: Outcome) -> None:
    assert outcome.error is None, outcome.error
    assert outcome.prediction.answer == "Sunny, 21°C."
    assert outcome.prediction.metadata.termination_reason == "forced_submit"
    assert bodies[1]["tool_choice"] == "auto"  # Fable 5.1 refuses a forced choice, behind OpenRouter too
    (turn,) = [m for m in bodies[-1]["messages"] if m["role"] == "assistant"]
    assert turn["reasoning_details"] == OR_STEPS[0][2]


COMPAT += [
    Scenario(
        "openrouter_claude_three_steps",
        "openrouter",
        [
            *[openrouter(calls=[(f"toolu_or{i}", n, a)], details=d) for i, (n, a, d) in enumerate(OR_STEPS)],
            openrouter("Sunny and 14:05.", details=[reasoning_text("Done.", "EqQBCkYIBxgCKkDordn")]),
        ],
        _expect_details_replayed(3),
    ),
    Scenario(  # OpenRouter's own ``reasoning`` option: natively, lm15 sends it (no LiteLLM)
        "openrouter_claude_reasoning_option",
        "openrouter",
        [
            *[openrouter(calls=[(f"toolu_or{i}", n, a)], details=d) for i, (n, a, d) in enumerate(OR_STEPS)],
            openrouter("Sunny and 14:05.", details=[reasoning_text("Done.", "EqQBCkYIBxgCKkDordn")]),
        ],
        _expect_details_replayed(3),
        lm={"reasoning": {"effort": "low"}, "reasoning_effort": None},
    ),
    Scenario(
        "openrouter_claude_forced_submit",
        "openrouter",
        [
            openrouter(calls=[("toolu_or0", "get_weather", PARIS)], details=OR_STEPS[0][2]),
            openrouter(
                calls=[("toolu_ors", "submit", {"answer": "Sunny, 21°C."})],
                details=[reasoning_text("Submit.", "EqQBCkYIBxgCKkDors")],
            ),
        ],
        _expect_or_forced,
        agent={"finish": "submit", "max_iters": 1},
    ),
]


# -- Gemini's OpenAI-compatible endpoint -----------------------------------------------------------

COMPAT_SIGS = ["CiQBVKhc7sIg_oai1", "CiQBVKhc7sIg_oai2", "CiQBVKhc7sIg_oai3"]


def _expect_compat_signed(bodies: list[Body], outcome: Outcome) -> None:
    """Each call goes back with its ``extra_content.google.thought_signature`` (both engines)."""
    answered("Sunny and 14:05.")(outcome)
    assert len(bodies) == 4
    turns = [m for m in bodies[-1]["messages"] if m["role"] == "assistant"]
    assert [t["tool_calls"][0]["extra_content"]["google"]["thought_signature"] for t in turns] == COMPAT_SIGS
    assert all("provider_specific_fields" not in str(t) for t in turns)


COMPAT.append(
    Scenario(
        "gemini_openai_compat_three_steps",
        "gemini_compat",
        [
            *[
                gemini_compat(calls=[(f"function-call-{i}", n, a)], signatures=[sig])
                for i, ((n, a, _), sig) in enumerate(zip(OR_STEPS, COMPAT_SIGS, strict=True))
            ],
            gemini_compat("Sunny and 14:05."),
        ],
        _expect_compat_signed,
        adapter=ReActAdapter(native_calls=True),  # DSPy does not know the name behind the openai/ prefix
    )
)
