"""Live progress of a turn: one updating line in a notebook or a terminal, nothing elsewhere.

On by default; ``dspy_imp.show_progress(False)`` turns it off (for the process, or as a
context manager for a block). It shows only where someone watches: in a Jupyter kernel
(an updating display that ends as one clean line, ``✓ Turn ended: answered``, or ``✗`` for a
turn that raised) or when standard error is a terminal (one line rewritten in place and
cleared at the end). Piped, captured or logged output gets nothing, and so do turns
run off the main thread (``dspy.Parallel`` workers, a sync program under ``streamify``),
whose lines would interleave.
"""

from __future__ import annotations

import sys
import threading
from typing import Any

_enabled = [True]  # process-wide: a notebook cell may run in a context of its own


_SPINNER = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"


class show_progress:
    """Turn live progress on or off: ``show_progress(False)``, or ``with show_progress(False): ...``."""

    def __init__(self, enabled: bool = True):
        self._previous = _enabled[0]
        _enabled[0] = bool(enabled)

    def __enter__(self) -> show_progress:
        return self

    def __exit__(self, *exc: object) -> None:
        _enabled[0] = self._previous


def _notebook() -> Any:
    """The running IPython kernel's ``display`` function, or ``None`` outside a notebook."""
    ipython = sys.modules.get("IPython")
    if ipython is None or "ipykernel" not in sys.modules:
        return None
    shell = ipython.get_ipython()
    if shell is None or getattr(shell, "kernel", None) is None:
        return None
    from IPython.display import display

    return display


class Progress:
    """One turn's progress line."""

    def __init__(self, display: Any):
        self.display = display
        self.handle: Any = None
        self.count = 0
        self.last = ""

    @classmethod
    def of(cls) -> Progress | None:
        if not _enabled[0] or threading.current_thread() is not threading.main_thread():
            return None  # turns in worker threads (dspy.Parallel, streamify) would interleave
        display = _notebook()
        if display is None and not (hasattr(sys.stderr, "isatty") and sys.stderr.isatty()):
            return None
        return cls(display)

    def show(self, message: str) -> None:
        self.count += 1
        self.last = message
        line = f"{_SPINNER[self.count % len(_SPINNER)]} {message}"
        if self.display is None:
            sys.stderr.write(f"\r\x1b[2K{line}")
            sys.stderr.flush()
        elif self.handle is None:
            self.handle = self.display({"text/plain": line}, raw=True, display_id=True)
        else:
            self.handle.update({"text/plain": line}, raw=True)

    def close(self, failed: bool = False) -> None:
        """A terminal's line is cleared; a notebook's display keeps the last line, marked done or failed."""
        if self.display is None:
            if self.count:
                sys.stderr.write("\r\x1b[2K")
                sys.stderr.flush()
        elif self.handle is not None:
            self.handle.update({"text/plain": f"{'✗' if failed else '✓'} {self.last}"}, raw=True)
