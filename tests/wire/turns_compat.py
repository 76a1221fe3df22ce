"""OpenAI-compatible routes: Groq's refusal of a malformed call, local servers (vLLM, Ollama)."""

from __future__ import annotations

from responses import groq, groq_tool_use_failed
from turns import PARIS, Body, Outcome, Scenario, answered

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
