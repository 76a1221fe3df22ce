"""dspy_imp quick start: one turn that calls a tool, then answers.

Offline with a scripted model (no network), or live against a real model::

    python examples/quickstart.py
    DSPY_IMP_MODEL=openai/gpt-4o-mini OPENAI_API_KEY=... python examples/quickstart.py --live
"""

from __future__ import annotations

import argparse
import os
import sys

# Use the model metadata bundled with DSPy/LiteLLM instead of fetching it (keeps the offline run offline).
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import dspy

import dspy_imp
from dspy_imp.testing import ScriptedLM, call, reply


def get_weather(city: str) -> str:
    """Get the current weather for a city."""
    return f"sunny, 21°C in {city}"


def scripted_model() -> dspy.LM:
    """A model that calls `get_weather`, then answers in text. It records requests and sends none."""
    return ScriptedLM(
        [
            reply(calls=[call("get_weather", {"city": "Paris"}, id="call_1")]),
            reply("It is sunny and 21°C in Paris."),
        ]
    )


def live_model() -> dspy.LM:
    model = os.environ.get("DSPY_IMP_MODEL")
    if not model:
        sys.exit(
            "--live needs DSPY_IMP_MODEL, e.g. DSPY_IMP_MODEL=openai/gpt-4o-mini "
            "(plus that provider's API key, e.g. OPENAI_API_KEY)"
        )
    return dspy.LM(model)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--live", action="store_true", help="use DSPY_IMP_MODEL instead of the scripted model")
    live = parser.parse_args().live

    lm = live_model() if live else scripted_model()
    print(f"model: {lm.model}" if live else "model: scripted model (no network)")

    agent = dspy_imp.ReActV2("question -> answer", tools=[get_weather])
    question = "What's the weather in Paris?"
    print(f"question: {question}")

    with dspy.context(lm=lm):
        pred = agent(question=question)

    for step in pred.metadata.history.messages:
        results = {r["id"]: r["result"] for r in step.get("tool_call_results", [])}
        for tool_call in step.get("tool_calls", []):
            print(f"tool call: {tool_call['name']}({tool_call['args']}) -> {results.get(tool_call['id'])!r}")
    print(f"answer: {pred.answer}")
    print(f"termination_reason: {pred.metadata.termination_reason}")


if __name__ == "__main__":
    main()
