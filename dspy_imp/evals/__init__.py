"""Agent evals that feed the optimizers: metrics over a turn's record, simulated users, pass^k.

Every metric here is a plain DSPy metric, ``metric(example, pred, trace=None)``, for
``dspy.Evaluate`` and every optimizer, and a GEPA feedback metric (``metric(gold, pred, trace,
pred_name, pred_trace)`` returns ``dspy.Prediction(score=..., feedback=...)``) whose feedback
says what went wrong in the agent's terms: "Called `refund` before `lookup_order`.", "The turn
ended `incomplete` (`max_iters`) after 12 requests", "argument `amount` of `refund` was 99.0,
expected 19.9". See ``docs/evals.md``.

Example:
    ```python
    from dspy_imp import evals

    metric = evals.AllOf(evals.ToolTrajectory(match="in_order"), evals.Ended())
    result = dspy.Evaluate(devset=devset, metric=metric)(agent)
    evals.report(result, metric)  # a table: score, feedback, reason, requests, cost
    ```
"""

from dspy_imp.evals._checks import Answer, Budget, Ended, Judge, JudgeAnswer
from dspy_imp.evals._conversation import (
    Conversing,
    GoalReached,
    Trials,
    TurnsTaken,
    conversation_of,
    pass_hat_k,
    repeat,
)
from dspy_imp.evals._metric import AllOf, Check, Metric, Verdict, Weighted
from dspy_imp.evals._record import Called, NotARecord, Record, read
from dspy_imp.evals._report import Failing, Report, Row, report
from dspy_imp.evals._trajectory import ArgsMode, Call, Match, ToolTrajectory
from dspy_imp.evals._users import (
    Conversation,
    ConversationEnd,
    Exchange,
    SimulatedUser,
    UserTurn,
    aconverse,
    converse,
)

__all__ = [
    "AllOf",
    "Answer",
    "ArgsMode",
    "Budget",
    "Call",
    "Called",
    "Check",
    "Conversation",
    "ConversationEnd",
    "Conversing",
    "Ended",
    "Exchange",
    "Failing",
    "GoalReached",
    "Judge",
    "JudgeAnswer",
    "Match",
    "Metric",
    "NotARecord",
    "Record",
    "Report",
    "Row",
    "SimulatedUser",
    "ToolTrajectory",
    "Trials",
    "TurnsTaken",
    "UserTurn",
    "Verdict",
    "Weighted",
    "aconverse",
    "conversation_of",
    "converse",
    "pass_hat_k",
    "read",
    "repeat",
    "report",
]
