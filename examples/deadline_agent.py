"""An agent bounded by a deadline.

`with dspy_imp.deadline(seconds=...)` bounds a whole turn in time: each request's timeout is the
time left, no retry runs past it, and once it has passed no further request is sent. The turn
then ends `"incomplete"` with cause `"deadline_exceeded"`, keeping everything it did: nothing is
raised, and the history can be passed back to continue later.

    python examples/deadline_agent.py          # offline, scripted model (a slow tool)
    python examples/deadline_agent.py --live   # DSPY_IMP_MODEL, e.g. openai/gpt-4o-mini
"""

from __future__ import annotations

import time

import dspy
from _shared import choose_model, show_turn

import dspy_imp
from dspy_imp.testing import call, reply


def crawl(url: str) -> str:
    """Fetch a web page (slow)."""
    time.sleep(0.6)
    return f"<html>contents of {url}</html>"


agent = dspy_imp.ReActV2("task -> report", tools=[crawl])

SCRIPT = [
    reply(calls=[call("crawl", {"url": "https://example.com/a"}, id="c1")]),
    reply(calls=[call("crawl", {"url": "https://example.com/b"}, id="c2")]),
    reply("Both pages are about examples."),  # never requested: the deadline passes during the second crawl
]


def main() -> None:
    lm, live = choose_model(__doc__, SCRIPT)
    task = "Crawl example.com/a and example.com/b and report what they are about."
    print(f"task: {task}")
    started = time.monotonic()
    with dspy.context(lm=lm), dspy_imp.deadline(seconds=1.0):
        pred = agent(task=task)
    show_turn(pred)
    print(f"  took {time.monotonic() - started:.1f} s with a 1.0 s deadline; complete: {dspy_imp.is_complete(pred)}")
    if not live:
        print(f"  requests sent: {len(lm.requests)} (the third was never sent)")


if __name__ == "__main__":
    main()
