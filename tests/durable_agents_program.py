"""The program ``test_durable_agents.py`` runs (and SIGKILLs) in subprocesses: a durable caller whose
tool is a sub-agent.

``triage`` (``ticket -> reply``) calls ``researcher`` (``question -> findings``, an ``as_tool()``),
which calls ``charge`` then ``email`` and answers. Each agent's scripted model answers by the
request's step (its assistant messages), so a recovered turn is answered from where it stopped.
Files in ``--dir``: ``attempts.log`` (every tool run), ``replies.log`` (every reply given, by agent
and step), ``results/<turn>.json``.

``--doomed`` starts ``kill`` (killed inside the researcher's ``email``: ``charge`` finished and was
recorded) and ``wait`` (the approving agents: the researcher's ``charge`` needs approval, so the
durable caller waits for a decision), then SIGKILLs itself once both are there. The next process
(``--recover``) approves ``wait``'s namespaced call from outside, waits for both recovered turns,
and runs both on the plain loop as the references (``plain-kill``, ``plain-wait``).
"""

from __future__ import annotations

import argparse
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import dspy
from dbos import DBOS

import dspy_imp
from dspy_imp import durable
from dspy_imp.testing import ScriptedLM, call, reply

ARGS: argparse.Namespace
REFERENCE = ["plain"]
_LOCK = threading.Lock()
_ARRIVED = threading.Barrier(2, action=lambda: os.kill(os.getpid(), signal.SIGKILL))

TRIAGE = [reply(calls=[call("researcher", {"question": "refund order 7"}, id="p1")]), reply("Refunded, receipt sent.")]
RESEARCH = [
    reply(calls=[call("charge", {"amount": 5}, id="c1")]),
    reply(calls=[call("email", {"to": "ada@example.com"}, id="c2")]),
    reply("Charged 5 and emailed the receipt."),
]


def turn_id() -> str:
    return DBOS.workflow_id or REFERENCE[0]


def log(name: str, *fields: Any) -> None:
    with _LOCK, open(Path(ARGS.dir) / name, "a") as file:
        file.write(" ".join(str(f) for f in fields) + "\n")


def answering(agent: str, script: list[Any]) -> Any:
    def respond(request: Any) -> Any:
        step = request.roles.count("assistant")
        log("replies.log", turn_id(), agent, step)
        return script[step]

    return respond


def charge(amount: int) -> str:
    """Charge the customer's card."""
    log("attempts.log", turn_id(), "charge")
    return f"charged {amount}"


def email(to: str) -> str:
    """Email a receipt."""
    log("attempts.log", turn_id(), "email")
    if ARGS.doomed and turn_id() == "kill":
        _ARRIVED.wait()  # killed here: charge is recorded, email is in flight
    return f"sent to {to}"


def programs() -> dict[str, dspy_imp.ReActV2]:
    made = {}
    for name, approving in (("refunds", False), ("approving", True)):
        researcher = dspy_imp.ReActV2(
            "question -> findings", tools=[charge, email], needs_approval=["charge"] if approving else ()
        )
        researcher.set_lm(ScriptedLM(answering("researcher", RESEARCH)))
        made[name] = dspy_imp.ReActV2("ticket -> reply", tools=[researcher.as_tool(name="researcher")])
    return made


def save(turn: str, pred: dspy.Prediction) -> None:
    folder = Path(ARGS.dir) / "results"
    folder.mkdir(exist_ok=True)
    result = {
        "reply": pred.reply,
        "reason": pred.metadata.termination_reason,
        "history": dspy_imp.dump_history(pred.metadata.history),
    }
    (folder / f"{turn}.json").write_text(__import__("json").dumps(result))


def main() -> None:
    global ARGS
    parser = argparse.ArgumentParser()
    parser.add_argument("--db", default="")
    parser.add_argument("--dir", default="")
    parser.add_argument("--doomed", action="store_true")
    parser.add_argument("--recover", action="store_true")
    ARGS = parser.parse_args()
    DBOS(config=durable.config("dspy-imp-agents-test", system_database_url=ARGS.db, log_level="WARNING"))
    made = programs()
    agents = {name: durable.DurableAgent(program, name=name) for name, program in made.items()}
    dspy.configure(lm=ScriptedLM(answering("triage", TRIAGE)))
    DBOS.launch()
    if ARGS.doomed:
        doomed(agents)
    if ARGS.recover:
        recover(agents, made)
    DBOS.destroy()


def doomed(agents: dict[str, durable.DurableAgent]) -> None:
    def one(agent: durable.DurableAgent, turn: str) -> None:
        with dspy_imp.deadline(seconds=600):
            agent(ticket="Refund order 7.", workflow_id=turn)

    def watch() -> None:
        while not durable.pending("wait"):
            time.sleep(0.02)
        _ARRIVED.wait()

    threading.Thread(target=one, args=(agents["refunds"], "kill"), daemon=True).start()
    threading.Thread(target=one, args=(agents["approving"], "wait"), daemon=True).start()
    threading.Thread(target=watch, daemon=True).start()
    time.sleep(600)


def recover(agents: dict[str, durable.DurableAgent], made: dict[str, dspy_imp.ReActV2]) -> None:
    while not durable.pending("wait"):  # recovered at launch, paused again (replayed) for its decision
        time.sleep(0.05)
    log("pending.log", *(c["id"] for c in durable.pending("wait")))
    with dspy_imp.deadline(seconds=600):
        agents["approving"].decide("wait", approvals={"p1/c1": True})
    for turn in ("kill", "wait"):
        save(turn, durable.handle(turn).result(polling_interval_sec=0.1))
    with dspy_imp.deadline(seconds=600):
        REFERENCE[0] = "plain-kill"
        save("plain-kill", made["refunds"](ticket="Refund order 7."))
        REFERENCE[0] = "plain-wait"
        paused = made["approving"](ticket="Refund order 7.")
        save("plain-wait", made["approving"](history=paused.metadata.history, approvals={"p1/c1": True}))


if __name__ == "__main__":
    main()
