"""The program the durable tests run (and SIGKILL) in subprocesses.

One turn: ``charge`` a card, ``email`` a receipt, a rate-limited request (a retry pause), then
``submit``. The scripted model answers by the request's step (its assistant messages), so a
restarted process answers a replayed turn from where it stopped. Files in ``--dir``:
``effects.log`` (a tool's side effect, once per idempotency key), ``attempts.log`` (every tool
run), ``replies.log`` (every reply given), ``results/<turn>.json``.

``--doomed`` starts the turns of ``KILLS`` at once, each stopping at its kill point:
``before_request`` (the second request is being sent), ``after_reply`` (``email`` starts: its
reply was recorded), ``mid_tool`` (``charge`` acted, its result not yet recorded),
``retry_pause`` (during the pause after the rate limit), and ``t5`` of the agent whose ``charge``
needs approval, ``waiting`` for the decision. When all five have arrived, the process SIGKILLs
itself. ``--decide`` (in the next process) approves ``t5``'s charge; ``--wait`` waits for recovered
turns and saves them; ``--plain`` runs the turn on the plain loop (and the approval turn, paused
and resumed, as ``plain-approval``). ``--worker`` runs a queue worker instead (see
``test_durable_postgres.py``).
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
KILLS = {"t1": ("sync", "before_request"), "t2": ("async", "after_reply"), "t3": ("sync", "mid_tool"),
         "t5": ("sync", "waiting"), "t4": ("async", "retry_pause")}  # fmt: skip
PLAIN = ["plain"]  # the id the plain reference runs log under
_LOCK = threading.Lock()
_TOOLS_RUN = 0

SCRIPT = [
    reply(calls=[call("charge", {"amount": 5}, id="c1")]),
    reply("Receipt next.", calls=[call("email", {"to": "ada@example.com"}, id="c2")]),
    reply(calls=[call("submit", {"answer": "refunded"}, id="c3")]),
]


def log(name: str, *fields: Any) -> None:
    with _LOCK, open(Path(ARGS.dir) / name, "a") as file:
        file.write(" ".join(str(f) for f in fields) + "\n")


def logged(name: str, *fields: Any) -> bool:
    path = Path(ARGS.dir) / name
    return path.exists() and " ".join(str(f) for f in fields) in path.read_text().splitlines()


def turn_id() -> str:
    return DBOS.workflow_id or PLAIN[0]


def die_all() -> None:
    """Every doomed turn is at its kill point: kill the process."""
    os.kill(os.getpid(), signal.SIGKILL)


_ARRIVED = threading.Barrier(len(KILLS), action=die_all)


def stop_here(point: str) -> None:
    """Wait here, at this turn's kill point, for the SIGKILL."""
    if ARGS.doomed and KILLS.get(turn_id(), ("", ""))[1] == point:
        _ARRIVED.wait()


def respond(request: Any) -> Any:
    turn = turn_id()
    step = request.roles.count("assistant")
    if step == 1:
        stop_here("before_request")
    if step == 2 and not logged("replies.log", turn, "rate_limit"):
        log("replies.log", turn, "rate_limit")
        if ARGS.doomed and KILLS.get(turn, ("", ""))[1] == "retry_pause":
            threading.Timer(0.15, _ARRIVED.wait).start()  # started last: the others are waiting already
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
    if ARGS.kill_nth_tool and ARGS.kill_nth_tool == _TOOLS_RUN:
        die_all()


def charge(amount: int) -> str:
    """Charge the customer's card."""
    act("charge")
    stop_here("mid_tool")
    return f"charged {amount}"


def email(to: str) -> str:
    """Email a receipt."""
    stop_here("after_reply")
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
    for flag in ("--db", "--dir", "--wait", "--worker", "--enqueue", "--dead", "--decide"):
        parser.add_argument(flag, default="")
    parser.add_argument("--doomed", action="store_true")
    parser.add_argument("--plain", action="store_true")
    parser.add_argument("--kill-nth-tool", type=int, default=0)
    parser.add_argument("--retry-after", type=float, default=0.5)
    ARGS = parser.parse_args()
    options: dict[str, Any] = {"log_level": "WARNING"}
    if ARGS.worker:
        options["executor_id"] = ARGS.worker
    DBOS(config=durable.config("dspy-imp-test", system_database_url=ARGS.db, **options))
    programs = {
        "refunds": dspy_imp.ReActV2("question -> answer", tools=[charge, email], finish="submit"),
        "approved": dspy_imp.ReActV2(
            "question -> answer", tools=[charge, email], finish="submit", needs_approval=[charge]
        ),
    }
    agents = {name: durable.DurableAgent(program, name=name) for name, program in programs.items()}
    dspy.configure(lm=ScriptedLM(respond))
    DBOS.launch()
    if ARGS.worker:
        work(agents["refunds"], DBOS.register_queue("turns", worker_concurrency=1, polling_interval_sec=0.2))
    else:
        steps(agents, programs)
    DBOS.destroy()


def steps(agents: dict[str, durable.DurableAgent], programs: dict[str, dspy_imp.ReActV2]) -> None:
    if ARGS.doomed:
        doomed(agents)
    if ARGS.decide:  # from another process than the one the turn started in
        with dspy_imp.deadline(seconds=600):  # bounds the resumed part, as around a plain resume
            agents["approved"].decide(ARGS.decide, approvals={"c1": True})
    for turn in filter(None, ARGS.wait.split(",")):
        save(turn, durable.handle(turn).result(polling_interval_sec=0.1))
    if ARGS.plain:
        with dspy_imp.deadline(seconds=600):
            save("plain", programs["refunds"](question="Refund order 7."))
            PLAIN[0] = "plain-approval"
            paused = programs["approved"](question="Refund order 7.")
            save("plain-approval", programs["approved"](history=paused.metadata.history, approvals={"c1": True}))


def doomed(agents: dict[str, durable.DurableAgent]) -> None:
    def one(turn: str, driver: str) -> None:
        agent = agents["approved" if turn == "t5" else "refunds"]
        with dspy_imp.deadline(seconds=600):
            if driver == "sync":
                agent(question="Refund order 7.", workflow_id=turn)
            else:
                asyncio.run(agent.acall(question="Refund order 7.", workflow_id=turn))

    def watch(turn: str) -> None:
        while not durable.pending(turn):
            time.sleep(0.02)
        _ARRIVED.wait()

    for turn, (driver, point) in KILLS.items():
        if point == "retry_pause":  # last, so that its pause is running when the process dies
            while _ARRIVED.n_waiting < len(KILLS) - 1:
                time.sleep(0.01)
        threading.Thread(target=one, args=(turn, driver), daemon=True).start()
        if point == "waiting":
            threading.Thread(target=watch, args=(turn,), daemon=True).start()
    time.sleep(600)


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
        save(turn, durable.handle(turn).result(polling_interval_sec=0.1))


if __name__ == "__main__":
    main()
