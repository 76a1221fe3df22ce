"""The incremental-rendering memo: what earlier requests of a turn rendered, reused.

Within a turn each request is the previous one plus the newest exchange (``_prompt.render``), so
the messages of the recorded steps a request shares with the previous one are already
known. ``RenderMemo`` keeps them: the steps whose messages can no longer change (all but
the last, and none from a thought moved to the user side on), the messages they rendered,
and the rendering context they were rendered in. A request whose context is the same and
whose steps start with those very step objects (identity, not equality: ``1`` and ``True``
compare equal but render differently) reuses them and renders only the rest; anything else
renders from scratch. The memo changes how much work a request costs, never a byte of it.

The context (``Guidance.context()``) is the request's ``Guidance`` without the fields that change on every request
(its kind, its steps and history, the memo itself), so a new rendering option added to
``Guidance`` invalidates the memo without anyone remembering to list it here.

One memo belongs to one turn (``Turn`` creates it); a turn runs on one thread or task.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dspy_imp._records.steps import Step, block_kinds, holds_reasoning
from dspy_imp._records.window import same_prefix, same_source, source_of

Message = dict[str, Any]
_IMMUTABLE = (str, int, float, bool, type(None))


@dataclass
class RenderMemo:
    """The rendered messages of a turn's settled steps, and the context they were rendered in."""

    context: Any = None
    steps: list[Step] = field(default_factory=list)
    after: Step | None = None
    messages: list[Message] = field(default_factory=list)
    source: Any = None  # the window ``steps`` came from (``_records.window.source_of``)
    scanned: tuple[Any, int, frozenset[str]] | None = None  # ``block_kinds``: window, steps read, kinds
    reasoned: tuple[Any, int, bool] | None = None  # ``holds_reasoning``: window, steps read, found
    inputs_written: tuple[Any, tuple[tuple[str, Any], ...], str] | None = None  # dialect, inputs, content
    converted: Any = None  # what DSPy last checked and converted of these rows (``dspy_private._RowMemo``)
    built: Any = None  # the wire messages lm15 last wrote of them, and their JSON (``dspy_private._BuiltMemo``)

    def block_kinds(self, steps: Sequence[Step]) -> frozenset[str]:
        """The kinds of reasoning blocks in ``steps``, reading only steps earlier requests did not."""
        source, known = source_of(steps), self.scanned
        if source is None:
            return block_kinds(steps)
        if known is None or not (same_source(known[0], source) and known[1] <= len(steps)):
            known = (source, 0, frozenset())
        kinds = known[2] | block_kinds(steps[known[1] :])
        self.scanned = (source, len(steps), kinds)
        return kinds

    def holds_reasoning(self, steps: Sequence[Step]) -> bool:
        """Whether any of ``steps`` carries ``reasoning_content``, reading only steps earlier requests did not
        (a server of your own, natively: every request asked it, and it used to read the whole history)."""
        source, known = source_of(steps), self.reasoned
        if source is None:
            return holds_reasoning(steps)
        if known is None or not (same_source(known[0], source) and known[1] <= len(steps)):
            known = (source, 0, False)
        found = known[2] or holds_reasoning(steps[known[1] :])
        self.reasoned = (source, len(steps), found)
        return found

    def inputs_content(self, dialect: Any, values: Mapping[str, Any], write: Callable[[], Any]) -> Any:
        """``write()``, the content ``dialect`` writes for ``values``, or what it wrote last for the same
        inputs. Kept only for text written from immutable values (str, numbers, bools, None), held
        here by reference and matched by identity, so what is handed back is what writing again
        would give."""
        pairs = tuple(values.items())
        known = self.inputs_written
        if (
            known is not None
            and len(known[1]) == len(pairs)
            and all(k == name and v is value for (k, v), (name, value) in zip(known[1], pairs, strict=True))
            and known[0] == dialect
        ):
            return known[2]
        content = write()
        if content and isinstance(content, str) and all(type(value) in _IMMUTABLE for _, value in pairs):
            self.inputs_written = (dialect, pairs, content)
        return content

    def reuse(self, context: Any, steps: Sequence[Step], moved: int | None, into: list[Message]) -> int:
        """How many of ``steps`` are already rendered; their messages are appended to ``into``.

        ``moved`` is the index of a thought this request moves to the user side (which
        renders differently from its settled form), if any. The settled messages are copied
        once, straight into the request's list (the memo's own list is never handed out).
        """
        settled = len(self.steps)
        if settled and not (
            context == self.context
            and len(steps) > settled
            and steps[settled] is self.after  # a thought's line depends on the step after it
            and same_prefix(steps, self.steps, self.source)  # O(1) for a window on the turn's steps
            and (moved is None or moved >= settled)
        ):
            settled = 0
        if not settled:
            self.context, self.steps, self.after, self.messages = context, [], None, []
            self.source = source_of(steps)
            return 0
        into.extend(self.messages)
        return settled

    def settle(self, steps: Sequence[Step], index: int, messages: Sequence[Message]) -> None:
        """Keep ``steps[index]``'s messages (rendered with ``steps[index + 1]`` after it)."""
        if index == len(self.steps):
            self.steps.append(steps[index])  # appended, not copied: settling stays O(1) a step
            self.after = steps[index + 1]
            self.messages.extend(messages)
