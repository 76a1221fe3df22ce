"""The program the durable tests run (and SIGKILL) in subprocesses.

One turn: ``charge`` a card, ``email`` a receipt, a rate-limited request (a retry pause), then
``submit``. The scripted model answers by the request's step (its assistant messages), so a
restarted process answers a replayed turn from where it stopped. Files in ``--dir``:
``effects.log`` (a tool's side effect, once per idempotency key), ``attempts.log`` (every tool
run), ``replies.log`` (every reply given), ``results/<turn>.json``.

Kill points (``--kill``, for the turn ``--run``): ``before_request`` (the second request is being
sent), ``after_reply`` (``email`` starts: its reply was recorded), ``mid_tool`` (``charge`` acted,
its result not yet recorded), ``retry_pause`` (during the pause after the rate limit).
``--worker`` runs a queue worker instead (see ``test_durable_postgres.py``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import dspy
from dbos import DBOS, Queue

import dspy_imp
from dspy_imp import durable
from dspy_imp.testing import ScriptedLM, call, fail, reply

ARGS: argparse.Namespace
_LOCK = threading.Lock()
_TOOLS_RUN = 0

SCRIPT = [
    reply(calls=[call("charge", {"amount": 5}, id="c1")]),
    reply("Receipt next.", calls=[call("email", {"to": "ada@example.com"}, id="c2")]),
    reply(calls=[call("submit", {"answer": "refunded"}, id="c3")]),
]


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def log(name: str, *fields: Any) -> None:
    with _LOCK, open(Path(ARGS.dir) / name, "a") as file:
        file.write(" ".join(str(f) for f in fields) + "\n")


def logged(name: str, *fields: Any) -> bool:
    path = Path(ARGS.dir) / name
    return path.exists() and " ".join(str(f) for f in fields) in path.read_text().splitlines()


def turn_id() -> str:
    return DBOS.workflow_id or "plain"


def killing(point: str) -> bool:
    return ARGS.kill == point and turn_id() == ARGS.run


def respond(request: Any) -> Any:
    turn = turn_id()
    step = request.roles.count("assistant")
    if step == 1 and killing("before_request"):
        die()
    if step == 2 and not logged("replies.log", turn, "rate_limit"):
        log("replies.log", turn, "rate_limit")
        if killing("retry_pause"):
            threading.Timer(0.3, die).start()
        return fail.rate_limit(retry_after=ARGS.retry_after)
    log("replies.log", turn, step)
    return SCRIPT[step]


def act(tool: str) -> None:
    """The tool's side effect, done once per idempotency key."""
    global _TOOLS_RUN
    turn, key = turn_id(), durable.idempotency_key() or "plain"
    log("attempts.log", turn, tool, ARGS.worker or "-")
    if not logged("effects.log", turn, tool, key):
        log("effects.log", turn, tool, key)
    _TOOLS_RUN += 1
    if ARGS.kill_nth_tool and _TOOLS_RUN == ARGS.kill_nth_tool:
        die()


def charge(amount: int) -> str:
    """Charge the customer's card."""
    act("charge")
    if killing("mid_tool"):
        die()
    return f"charged {amount}"


def email(to: str) -> str:
    """Email a receipt."""
    if killing("after_reply"):
        die()
    act("email")
    return f"sent to {to}"


def save(turn: str, pred: dspy.Prediction) -> None:
    folder = Path(ARGS.dir) / "results"
    folder.mkdir(exist_ok=True)
    result = {
        "answer": pred.answer,
        "reason": pred.metadata.termination_reason,
        "history": dspy_imp.dump_history(pred.metadata.history),
    }
    (folder / f"{turn}.json").write_text(json.dumps(result))


def main() -> None:
    global ARGS
    parser = argparse.ArgumentParser()
    for flag in ("--db", "--dir", "--wait", "--run", "--kill", "--worker", "--enqueue", "--dead"):
        parser.add_argument(flag, default="")
    parser.add_argument("--mode", default="sync")
    parser.add_argument("--plain", action="store_true")
    parser.add_argument("--kill-nth-tool", type=int, default=0)
    parser.add_argument("--retry-after", type=float, default=1.0)
    ARGS = parser.parse_args()
    options: dict[str, Any] = {"log_level": "WARNING"}
    if ARGS.worker:
        options["executor_id"] = ARGS.worker
    DBOS(config=durable.config("dspy-imp-test", system_database_url=ARGS.db, **options))
    program = dspy_imp.ReActV2("question -> answer", tools=[charge, email], finish="submit")
    agent = durable.DurableAgent(program, name="refunds")
    dspy.configure(lm=ScriptedLM(respond))
    DBOS.launch()
    if ARGS.worker:
        work(agent, DBOS.register_queue("turns", worker_concurrency=1, polling_interval_sec=0.2))
    else:
        steps(agent, program)
    DBOS.destroy()


def steps(agent: durable.DurableAgent, program: dspy_imp.ReActV2) -> None:
    for turn in filter(None, ARGS.wait.split(",")):
        save(turn, durable.handle(turn).result())
    with dspy_imp.deadline(seconds=600):
        if ARGS.run and ARGS.mode == "sync":
            save(ARGS.run, agent(question="Refund order 7.", workflow_id=ARGS.run))
        elif ARGS.run:
            save(ARGS.run, asyncio.run(agent.acall(question="Refund order 7.", workflow_id=ARGS.run)))
        if ARGS.plain:
            save("plain", program(question="Refund order 7."))


def work(agent: durable.DurableAgent, queue: Queue) -> None:
    """A queue worker: enqueue turns (``--enqueue``), or finish them all, recovering ``--dead``'s."""
    turns = [turn for turn in ARGS.enqueue.split(",") if turn]
    if turns and not ARGS.dead:
        with dspy_imp.deadline(seconds=600):
            for turn in turns:
                agent.start(question="Refund order 7.", workflow_id=turn, queue=queue)
        log("enqueued", "yes")
        while True:
            time.sleep(1)
    marker = Path(ARGS.dir) / "dead"
    while not marker.exists():
        time.sleep(0.05)
    durable.recover([ARGS.dead])
    for turn in turns:
        save(turn, durable.handle(turn).result())


if __name__ == "__main__":
    main()
