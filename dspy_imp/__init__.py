"""dspy-imp: a tool-using agent loop for DSPy.

``dspy_imp.ReActV2`` is a drop-in replacement for ``dspy.ReActV2`` whose turns end the way
the program means them to, whose prompts are cache-friendly, and which never loses a
reply. See the README and ``docs/``.
"""

from dspy_imp._drivers.adapter import ReActAdapter
from dspy_imp._program.module import ReActV2
from dspy_imp._program.prediction import Metadata, Prediction, is_complete
from dspy_imp._records.clock import deadline
from dspy_imp._records.errors import ConfigurationError, RetryTool, StreamClosed, ToolCallRejected
from dspy_imp._records.history import dump_history, load_history, redact_history
from dspy_imp._records.kinds import CacheBustReason, GuardrailStage, RequestKind, TerminationCause, TerminationReason
from dspy_imp._records.step_error import StepError
from dspy_imp._records.stock import to_dspy_history
from dspy_imp._records.usage import RequestUsage, Usage, UsageLimits
from dspy_imp._routes.model_facts import ModelFacts, model_facts, register_model_facts
from dspy_imp._turn.approval import NeedsApproval
from dspy_imp._turn.context import Context
from dspy_imp._turn.guardrails import Guardrail
from dspy_imp._turn.plan import ProgramOptions
from dspy_imp._turn.tools import Finish
from dspy_imp._watch.html import HistoryView
from dspy_imp._watch.progress import show_progress
from dspy_imp._watch.status import StatusMessageProvider
from dspy_imp._watch.streaming import StreamListener

ReAct = ReActV2
"""DSPy 3.5 renames ``dspy.ReActV2`` to ``dspy.ReAct``: the same class under that name, for a drop-in."""

__all__ = [
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
    "ReAct",
    "ReActAdapter",
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
]

__version__ = "0.1.0"
