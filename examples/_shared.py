"""What every example shares: offline by default, ``--live`` for a real model.

Offline, an example runs against ``dspy_imp.testing.ScriptedLM``: a model that answers from the
script the example gives and sends nothing anywhere. ``--live`` uses the model named by
``DSPY_IMP_MODEL`` (e.g. ``openai/gpt-4o-mini``, with that provider's API key set).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence

# Use the model metadata bundled with DSPy/LiteLLM instead of fetching it (keeps offline runs offline).
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import dspy

from dspy_imp.testing import RecordedRequest, ScriptedLM, ScriptItem

Script = Sequence[ScriptItem] | Callable[[RecordedRequest], ScriptItem]


def choose_model(description: str | None, script: Script) -> tuple[dspy.LM, bool]:
    """Parse ``--live``; return the model to use (``ScriptedLM(script)`` offline) and whether it is live."""
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--live", action="store_true", help="use DSPY_IMP_MODEL instead of the scripted model")
    if not parser.parse_args().live:
        print("model: scripted (offline; --live for a real model)")
        return ScriptedLM(script), False
    lm = live_model()
    print(f"model: {lm.model}")
    return lm, True


def live_model() -> dspy.LM:
    """``dspy.LM(DSPY_IMP_MODEL)``; without the model's name or its API key, one line and exit 1."""
    model = os.environ.get("DSPY_IMP_MODEL")
    if not model:
        sys.exit(
            "--live needs DSPY_IMP_MODEL, e.g. DSPY_IMP_MODEL=openai/gpt-4o-mini "
            "(plus that provider's API key, e.g. OPENAI_API_KEY)"
        )
    missing = missing_keys(model)
    if missing:
        keys = " or ".join(missing)
        sys.exit(f"--live: {model} needs {keys} in the environment (offline: drop --live, or run `make demo`)")
    return dspy.LM(model)


# The API key variables of the providers people try first (any one of a tuple will do). A model of
# another provider is not checked here: its first request says what is missing (see ``one_line``).
_KEYS = {
    "openai": ("OPENAI_API_KEY",),
    "anthropic": ("ANTHROPIC_API_KEY",),
    "gemini": ("GEMINI_API_KEY", "GOOGLE_API_KEY"),
    "deepseek": ("DEEPSEEK_API_KEY",),
    "groq": ("GROQ_API_KEY",),
    "mistral": ("MISTRAL_API_KEY",),
    "openrouter": ("OPENROUTER_API_KEY",),
    "xai": ("XAI_API_KEY",),
}


def missing_keys(model: str) -> list[str]:
    """The API key variables ``model``'s provider reads, when the environment has none of them."""
    keys = _KEYS.get(model.split("/", 1)[0], ())
    return [] if any(os.environ.get(key) for key in keys) else list(keys)


def one_line(error: BaseException) -> str:
    """An error's first line: what a failed live run prints instead of a traceback."""
    text = str(error).strip().splitlines()
    return text[0] if text else type(error).__name__


def show_turn(pred: dspy.Prediction, since: int = 0) -> None:
    """Print what the agent did this turn (history steps from ``since`` on) and how it ended."""
    meta = pred.metadata
    for step in meta.history.messages[since:]:
        if step.get("next_thought") and not set(pred.keys()) & step.keys():  # an answer step is shown below
            print(f"  thought: {step['next_thought']}")
        results = {r["id"]: r for r in step.get("tool_call_results", [])}
        for tool_call in step.get("tool_calls", []):
            result = results.get(tool_call["id"], {})
            print(f"  tool call: {tool_call['name']}({tool_call['args']}) -> {result.get('result')!r}")
    print(f"  outputs: {dict(pred.items())}")
    cause = f" (cause: {meta.termination_cause})" if meta.termination_cause else ""
    print(f"  termination_reason: {meta.termination_reason}{cause}")
