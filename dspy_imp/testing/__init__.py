"""`ScriptedLM`: a scripted, recording `dspy.LM` for testing DSPy programs offline.

It runs on DSPy's custom-engine API, so every call goes through DSPy's own plumbing (adapters,
callbacks, history, error projection) to an engine that answers from a script and records requests.

Example:
    ```python
    lm = ScriptedLM([reply(calls=[call("look", {"where": "shelf"}, id="c1")]), fail.server_error()])
    ```

The parts stand alone, like the whole (it imports nothing else of ``dspy_imp``): what a script is
made of in ``_script``, the failures in ``_failures``, the Chat Completions wire they are read
and recorded in in ``_wire``, and the engine that answers in ``_engine``. ``FakeClock`` (``_clock``)
is the time a deadline reads, moved by the test, so deadline tests do not depend on the machine.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import dspy

from dspy_imp.testing._clock import FakeClock
from dspy_imp.testing._engine import _AsyncScript, _Script
from dspy_imp.testing._failures import Fail, fail
from dspy_imp.testing._script import (
    Call,
    Failure,
    RecordedRequest,
    Reply,
    Responder,
    ScriptError,
    ScriptItem,
    call,
    reply,
)

__all__ = [
    "Call",
    "Fail",
    "Failure",
    "FakeClock",
    "RecordedRequest",
    "Reply",
    "Responder",
    "ScriptError",
    "ScriptItem",
    "ScriptedLM",
    "call",
    "fail",
    "reply",
]


class ScriptedLM(dspy.LM):
    """A `dspy.LM` that answers from a script and records every request (`lm.requests`).

    Items are used in order, one per request, sync (`lm(...)`, `Predict.forward`) and async
    (`lm.acall`, `Predict.aforward`) alike. Copies (`lm.copy()`, `copy.deepcopy`) share the script
    and the recording, like two handles on one server; each keeps its own DSPy `history`. Not
    savable (`dump_state` refuses its engine); streaming works except for calls scripted with `id=""`.

    Args:
        script: A list of `reply(...)`, `fail.*(...)`, or callables `fn(RecordedRequest) -> reply/fail
            item`, used one per request; or a single callable that answers every request.
        native: True (default): `supports_function_calling` is True and replies may carry native
            calls. False: a model without native function calling (it writes calls as text).
        reasoning: True: `supports_reasoning` is True (a reasoning model: DSPy and the loop send
            `reasoning_effort` where they would to one). Default False.
        model: The model string DSPy sees (the response's model is the part after the slash).
        **kwargs: Passed to `dspy.LM` (e.g. `temperature`, `callbacks`). `cache` defaults to
            False and `num_retries` to 0, so a scripted failure is raised once, with no sleep.

    Example:
        ```python
        lm = ScriptedLM([reply("[[ ## answer ## ]]\\ncat\\n\\n[[ ## completed ## ]]")])
        with dspy.context(lm=lm):
            dspy.Predict("question -> answer")(question="What is it?").answer  # 'cat'
        ```
    """

    def __init__(
        self,
        script: Sequence[ScriptItem] | Responder,
        *,
        native: bool = True,
        reasoning: bool = False,
        model: str = "openai/scripted",
        **kwargs: Any,
    ) -> None:
        engine = _Script(script, native, reasoning)
        kwargs.setdefault("cache", False)
        kwargs.setdefault("num_retries", 0)
        super().__init__(model, engine=engine, async_engine=_AsyncScript(engine), **kwargs)

    @property
    def requests(self) -> list[RecordedRequest]:
        """Every request received so far, in order, including failed and unscripted ones."""
        return list(self._engine_spec.requests)

    @property
    def remaining(self) -> int:
        """How many script items are still unused."""
        return len(self._engine_spec.items) - self._engine_spec.position

    def assert_complete(self) -> None:
        """Raise AssertionError unless every item was used and no request ran past the script."""
        script = self._engine_spec
        if script.overruns:
            raise AssertionError(f"ScriptedLM: request(s) {script.overruns} arrived after the script ran out")
        if self.remaining:
            raise AssertionError(
                f"ScriptedLM: {self.remaining} scripted item(s) unused after "
                f"{len(script.requests)} request(s): {script.items[script.position :]!r}"
            )
