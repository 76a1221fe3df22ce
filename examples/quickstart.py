"""dspy_imp quick start: one turn that calls a tool, then answers.

Offline with a scripted model (no network), replayed through the real HTTP stack from a
cassette (offline, no key: LiteLLM -> OpenAI SDK -> httpx, answered by ``cassettes/quickstart.yaml``,
which ``make record`` writes from a local emulator), or live against a real model::

    python examples/quickstart.py
    python examples/quickstart.py --replay
    DSPY_IMP_MODEL=openai/gpt-4o-mini OPENAI_API_KEY=... python examples/quickstart.py --live
"""

from __future__ import annotations

import argparse
import os
import sys
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path

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


CASSETTE = Path(__file__).resolve().parents[1] / "cassettes" / "quickstart.yaml"
REPLAY_BASE = "http://127.0.0.1:18089/v1"  # where the cassette was recorded (the local emulator)


def replay_model() -> dspy.LM:
    """gpt-4o-mini through LiteLLM's real HTTP stack; every request is answered from the cassette."""
    return dspy.LM(
        "openai/gpt-4o-mini", api_base=REPLAY_BASE, api_key="sk-replay", engine="litellm", cache=False, num_retries=0
    )


def replaying() -> AbstractContextManager[object]:
    """Answer HTTP from ``CASSETTE`` (vcrpy, a dev dependency); an unrecorded request fails."""
    import vcr  # type: ignore[import-untyped]

    return vcr.VCR(record_mode="none", match_on=["method", "path", "body"]).use_cassette(str(CASSETTE))


def ask(lm: dspy.LM) -> dspy.Prediction:
    """The quickstart's turn: one question, one tool."""
    agent = dspy_imp.ReActV2("question -> answer", tools=[get_weather])
    with dspy.context(lm=lm):
        return agent(question=QUESTION)


QUESTION = "What's the weather in Paris?"


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
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--live", action="store_true", help="use DSPY_IMP_MODEL instead of the scripted model")
    mode.add_argument("--replay", action="store_true", help="replay gpt-4o-mini over HTTP from the cassette")
    args = parser.parse_args()

    context: AbstractContextManager[object] = nullcontext()
    if args.live:
        lm = live_model()
        print(f"model: {lm.model}")
    elif args.replay:
        lm, context = replay_model(), replaying()
        print(f"model: {lm.model}, replayed over HTTP from {os.path.relpath(CASSETTE)}")
    else:
        lm = scripted_model()
        print("model: scripted model (no network)")
    print(f"question: {QUESTION}")

    with context:
        pred = ask(lm)

    for step in pred.metadata.history.messages:
        results = {r["id"]: r["result"] for r in step.get("tool_call_results", [])}
        for tool_call in step.get("tool_calls", []):
            print(f"tool call: {tool_call['name']}({tool_call['args']}) -> {results.get(tool_call['id'])!r}")
    print(f"answer: {pred.answer}")
    print(f"termination_reason: {pred.metadata.termination_reason}")


if __name__ == "__main__":
    main()
