"""A sync durable turn's wait for its decisions, which never keeps the process from exiting.

A paused turn waits in ``DBOS.recv`` for up to a day. Started with ``DurableAgent.start`` (or from
a queue, or recovered), a sync turn runs on a thread of DBOS's executor, and the interpreter joins
those threads at exit, ``DBOS.destroy()`` or not: the process would hang until the wait timed out.
(An async turn waits on DBOS's event-loop thread, a daemon: it never held the process.)

So the one ``DBOS.recv`` runs on a daemon thread of its own, in the workflow's context (the same
recorded call, at the same position, as before), and the workflow's thread waits for it in short
slices. When the interpreter begins to exit, the workflow's thread stops waiting with
``ProcessExiting``, a ``BaseException`` that DBOS does not record as the workflow's error: the
turn stays pending, as if the process had been killed, and the next process recovers it and
waits again (``DBOS`` startup recovery, ``dspy_imp.durable.recover``). A slice costs a thread
wake-up and writes nothing to the database.

"Begins to exit" is the one moment before the executor's threads are joined: the interpreter's
``threading._shutdown`` calls the hooks registered with ``threading._register_atexit`` (the
private CPython hook ``concurrent.futures`` itself stops its workers with), newest first, then
joins the threads; a plain ``atexit`` hook would run after that join, too late. Where that hook
is missing (another Python), the wait is as before: the process exits when the wait ends.
"""

from __future__ import annotations

import contextvars
import threading
from typing import Any

from dbos import DBOS

SLICE_SECONDS = 0.25
"""How often the waiting workflow thread looks whether the interpreter is exiting."""


_EXITING = threading.Event()
_register = getattr(threading, "_register_atexit", None)
if callable(_register):  # registered after ``concurrent.futures``' own (DBOS imports it): runs first
    _register(_EXITING.set)


class ProcessExiting(BaseException):
    """The interpreter is exiting while a durable turn waits for its decisions: the turn stays
    pending in the database (not an ``Exception``, so DBOS records no error for it)."""


def receive(topic: str, timeout_seconds: float) -> Any:
    """``DBOS.recv(topic, timeout_seconds)``, waited for in slices (see the module's docstring)."""
    done = threading.Event()
    box: dict[str, Any] = {}
    context = contextvars.copy_context()

    def run() -> None:
        try:
            box["sent"] = context.run(DBOS.recv, topic, timeout_seconds=timeout_seconds)
        except BaseException as error:  # handed to the workflow's thread as it was raised
            box["error"] = error
        finally:
            done.set()

    threading.Thread(target=run, name="dspy-imp-decisions", daemon=True).start()
    while not done.wait(SLICE_SECONDS):
        if _EXITING.is_set():
            raise ProcessExiting("the process is exiting: the paused turn stays pending for the next process")
    if "error" in box:
        raise box["error"]
    return box["sent"]
