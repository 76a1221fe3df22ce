"""A process that starts a durable turn with sync ``agent.start()``, waits until it pauses for an
approval, then ends: ``destroy`` calls ``DBOS.destroy()`` first, ``return`` just returns.
``resume`` (the next process) approves the call and prints the turn's answer.
``python durable_exit.py DATABASE_URL start destroy|return`` or ``... resume``.
"""

from __future__ import annotations

import sys
import time

from dbos import DBOS

import dspy_imp
from dspy_imp import durable
from dspy_imp.testing import ScriptedLM, call, reply

RUNS: list[str] = []


def look(where: str) -> str:
    """Look somewhere."""
    RUNS.append(where)
    return "found"


def answer(request) -> object:
    if len(request.messages) < 3:  # the first request: ask to look (needs approval)
        return reply(calls=[call("look", {"where": "shelf"}, id="a1")])
    return reply(calls=[call("submit", {"answer": "on the shelf"}, id="s1")])


def main(database: str, mode: str, ending: str = "") -> None:
    DBOS(config=durable.config("dspy-imp-exit", system_database_url=database, log_level="ERROR"))
    program = dspy_imp.ReActV2("question -> answer", tools=[look], finish="submit", needs_approval=["look"])
    program.set_lm(ScriptedLM(answer))
    agent = durable.DurableAgent(program, name="exiting")
    DBOS.launch()
    if mode == "start":
        agent.start(question="Where?", workflow_id="paused-turn")
        while not durable.pending("paused-turn"):
            time.sleep(0.05)
        print("paused", flush=True)
        if ending == "destroy":
            DBOS.destroy()
        return
    agent.decide("paused-turn", approvals={"a1": True})
    print("answer:", durable.handle("paused-turn").result(polling_interval_sec=0.1).answer, "looked:", RUNS, flush=True)
    DBOS.destroy()


if __name__ == "__main__":
    main(*sys.argv[1:])
