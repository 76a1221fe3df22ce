"""dspy-imp: a tool-using agent loop for DSPy.

``dspy_imp.ReActV2`` is a drop-in replacement for ``dspy.ReActV2`` whose turns end the way
the program means them to, whose prompts are cache-friendly, and which never loses a
reply. See the README and ``docs/``.
"""

from ._adapter import ReActAdapter
from ._approval import NeedsApproval
from ._deadline import deadline
from ._errors import ConfigurationError, StepError, ToolCallRejected
from ._history import dump_history, load_history, redact_history
from ._html import HistoryView
from ._module import ReActV2
from ._prediction import Metadata, Prediction, is_complete
from ._progress import show_progress
from ._status import StatusMessageProvider
from ._stock import to_dspy_history
from ._streaming import StreamListener
from ._tools import Finish
from ._usage import Usage, UsageLimits

__all__ = [
    "ConfigurationError",
    "Finish",
    "HistoryView",
    "Metadata",
    "NeedsApproval",
    "Prediction",
    "ReActAdapter",
    "ReActV2",
    "StatusMessageProvider",
    "StepError",
    "StreamListener",
    "ToolCallRejected",
    "Usage",
    "UsageLimits",
    "deadline",
    "dump_history",
    "is_complete",
    "load_history",
    "redact_history",
    "show_progress",
    "to_dspy_history",
]

__version__ = "0.1.0"
