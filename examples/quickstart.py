"""dspy_imp quick start: what makes this loop different, in two short turns.

1. A weather agent calls a tool, then answers in text (`"answered"`).
2. A research agent under `finish="submit"`: the model first writes a thought instead of acting.
   `dspy.ReActV2` would end the turn there (and force `submit`); here the thought is recorded, the
   model is told its message was not sent, it looks the answer up, and it submits.

Every prediction says how its turn ended (`pred.metadata`). Offline with a scripted model (no
network), replayed through the real HTTP stack from a cassette (offline, no key: LiteLLM -> OpenAI
SDK -> httpx, answered by ``cassettes/quickstart.yaml``, which ``make record`` writes from a local
emulator), or live against a real model::

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

WEATHER_QUESTION = "What's the weather in Paris?"
RESEARCH_QUESTION = "How tall is the Eiffel Tower?"


def get_weather(city: str) -> str:
    """Get the current weather for a city."""
    return f"sunny, 21°C in {city}"


def search(query: str) -> str:
    """Search the encyclopedia."""
    return "The Eiffel Tower is 330 m tall (since 2022)."


def scripted_model() -> dspy.LM:
    """A model that answers from a script. It records requests and sends none."""
    return ScriptedLM(
        [
            # Turn 1: a tool call, then the answer in text.
            reply(calls=[call("get_weather", {"city": "Paris"}, id="call_1")]),
            reply("It is sunny and 21°C in Paris."),
            # Turn 2: a thought first (no tool call), then a search, then submit.
            reply("I should check the current height rather than rely on memory."),
            reply(calls=[call("search", {"query": "Eiffel Tower height"}, id="call_2")]),
            reply(calls=[call("submit", {"answer": "330 m", "confident": True}, id="call_3")]),
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


def ask(lm: dspy.LM) -> tuple[dspy.Prediction, dspy.Prediction]:
    """The quickstart's two turns: a weather question, then a research question under "submit"."""
    weather = dspy_imp.ReActV2("question -> answer", tools=[get_weather])
    research = dspy_imp.ReActV2("question -> answer, confident: bool", tools=[search], finish="submit")
    with dspy.context(lm=lm):
        return weather(question=WEATHER_QUESTION), research(question=RESEARCH_QUESTION)


def show(pred: dspy.Prediction) -> None:
    for step in pred.metadata.history.messages:
        results = {r["id"]: r["result"] for r in step.get("tool_call_results", [])}
        if step.get("next_thought") and not step.get("tool_calls") and not set(pred.keys()) & step.keys():
            print(f"  thought (not sent; the loop continued): {step['next_thought']}")
        for tool_call in step.get("tool_calls", []):
            print(f"  tool call: {tool_call['name']}({tool_call['args']}) -> {results.get(tool_call['id'])!r}")
    meta = pred.metadata
    print(f"  outputs: {dict(pred.items())}")
    print(f"  termination_reason: {meta.termination_reason}")
    print(f"  termination_cause: {meta.termination_cause}")
    print(f"  complete: {meta.complete}; history: {len(meta.history.messages)} step(s) to pass back as history=")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--live", action="store_true", help="use DSPY_IMP_MODEL instead of the scripted model")
    mode.add_argument("--replay", action="store_true", help="replay gpt-4o-mini over HTTP from the cassette")
    args = parser.parse_args()

    context: AbstractContextManager[object] = nullcontext()
    if args.live:
        from _shared import live_model  # one clear line for a missing model name or API key

        lm = live_model()
        print(f"model: {lm.model}")
    elif args.replay:
        lm, context = replay_model(), replaying()
        print(f"model: {lm.model}, replayed over HTTP from {os.path.relpath(CASSETTE)}")
    else:
        lm = scripted_model()
        print("model: scripted model (no network)")

    try:
        with context:
            weather, research = ask(lm)
    except dspy_imp.StepError as error:
        if not args.live:
            raise
        from _shared import one_line

        sys.exit(f"live run failed: {one_line(error.reason)}")  # a refused key, an unknown model, ...
    print(f"\n1. question: {WEATHER_QUESTION}")
    show(weather)
    print(f'\n2. question: {RESEARCH_QUESTION}   (finish="submit")')
    show(research)
    print(
        "\nRead next: docs/why.md (dspy.ReActV2 and this loop side by side), docs/finish-modes.md,"
        "\ndocs/termination.md (every reason and cause), and the examples/ folder."
    )


if __name__ == "__main__":
    main()
