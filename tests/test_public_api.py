"""The public surface is explicit: a sorted ``__all__``, private modules, nothing else exported."""

from __future__ import annotations

import pathlib

import dspy

import dspy_imp
import dspy_imp.testing
import dspy_imp.tracing
from dspy_imp import durable


def test_all_is_sorted_and_exact():
    assert dspy_imp.__all__ == sorted(dspy_imp.__all__)
    assert set(dspy_imp.__all__) == {
        "CacheBustReason",
        "ConfigurationError",
        "Context",
        "Finish",
        "Guardrail",
        "GuardrailStage",
        "HistoryView",
        "Metadata",
        "ModelFacts",
        "NeedsApproval",
        "Prediction",
        "ProgramOptions",
        "ReActAdapter",
        "ReAct",
        "ReActV2",
        "RequestKind",
        "RequestUsage",
        "RetryTool",
        "StatusMessageProvider",
        "StepError",
        "StreamClosed",
        "StreamListener",
        "TerminationCause",
        "TerminationReason",
        "ToolCallRejected",
        "Usage",
        "UsageLimits",
        "deadline",
        "dump_history",
        "is_complete",
        "load_history",
        "model_facts",
        "redact_history",
        "register_model_facts",
        "show_progress",
        "to_dspy_history",
    }
    assert all(hasattr(dspy_imp, name) for name in dspy_imp.__all__)
    assert dspy_imp.testing.__all__ == sorted(dspy_imp.testing.__all__)
    assert durable.__all__ == sorted(durable.__all__)  # the optional extra dspy-imp[dbos]; [dev] has it
    assert all(hasattr(durable, name) for name in durable.__all__)
    assert dspy_imp.tracing.__all__ == ["conversation", "instrument", "uninstrument"]


def test_modules_other_than_the_public_ones_are_private():
    package = pathlib.Path(dspy_imp.__file__).parent
    public = {"__init__.py", "testing.py", "durable.py", "tracing.py"}
    assert all(p.name in public or p.name.startswith("_") for p in package.glob("*.py"))


def test_the_error_tree():
    assert issubclass(dspy_imp.ConfigurationError, ValueError)
    assert issubclass(dspy_imp.StepError, Exception) and not issubclass(dspy_imp.StepError, ValueError)
    assert issubclass(dspy_imp.ReActV2, dspy.Module)
    assert issubclass(dspy_imp.ReActAdapter, dspy.ChatAdapter)
    assert issubclass(dspy_imp.Prediction, dspy.Prediction)
