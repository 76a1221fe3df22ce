"""``dspy_imp.StreamListener``: the listener ``dspy.streamify`` is given for a ``dspy_imp`` program's fields.

It only names what to listen to; the turn's relay (``_watch.streaming``) reads the chunks and
``_watch.reading`` turns them into ``StreamResponse``s.
"""

from __future__ import annotations

from typing import Any

import dspy

from dspy_imp._turn.plan import Program


class StreamListener(dspy.streaming.StreamListener):
    """Listens to one field of a ``dspy_imp.ReActV2`` turn under ``dspy.streamify``.

    A drop-in for ``dspy.streaming.StreamListener`` where the program is a ``dspy_imp``
    agent. The field may be:

    - the output of a one-text-output signature (``"answer"``): the text of each step and
      last-text request, as the model writes it;
    - ``"next_thought"``: the text the model writes before its calls (every other signature);
    - any output of a ``submit`` signature: ``submit``'s argument, read from the provider's
      streamed tool-call arguments (native calls), and the extractor's output.

    Each request the field appears in yields its chunks and ends with one
    ``is_last_chunk=True`` chunk (DSPy's ``allow_reuse=True`` behaviour, so a thought
    listener follows every step).

    Args:
        signature_field_name: The field to listen to.
        predict: The ``dspy_imp.ReActV2`` (or its ``.react``) to listen to; ``None``: every
            ``dspy_imp`` program in the streamed program.
        predict_name: The ``predict_name`` of the chunks; defaults to ``"react"`` (the
            inner predictor's name), ``"extract"`` for the extractor's outputs.
        allow_reuse: Accepted for compatibility; a ``dspy_imp`` listener is always reusable.

    Example:
        ```python
        stream = dspy.streamify(agent, stream_listeners=[dspy_imp.StreamListener("answer")])
        ```
    """

    def __init__(
        self,
        signature_field_name: str,
        predict: Any = None,
        predict_name: str | None = None,
        allow_reuse: bool = True,
    ):
        # ``streamify`` maps listeners to predictors by ``predict``; a set one skips its lookup
        # by field name (which fails for a task output: no predictor has that field).
        super().__init__(signature_field_name, predict=predict or _ANY_PROGRAM, predict_name=predict_name)
        self.allow_reuse = True
        self.target = predict

    def follows(self, program: Program) -> bool:
        return self.target is None or self.target is program or self.target is program.react

    def receive(self, chunk: Any) -> None:
        """Never fed by ``streamify``: the turn reads the model's chunks itself and sends the field's text."""
        return None

    def finalize(self) -> None:
        return None


class _AnyProgram:
    """Stands in as the ``predict`` of a listener that follows every ``dspy_imp`` program."""

    signature = None

    def __repr__(self) -> str:
        return "<any dspy_imp program>"


_ANY_PROGRAM = _AnyProgram()
