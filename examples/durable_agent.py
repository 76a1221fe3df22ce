"""A durable agent turn: kill the process mid-turn, start it again, the turn finishes.

The turn refunds an order: it calls ``refund`` (a side effect: a line in ``ledger.txt``), then
``send_email``, then answers. Offline with a scripted model (no network)::

    python examples/durable_agent.py                 # the whole story, in a temporary folder
    python examples/durable_agent.py run --crash     # SIGKILLs itself inside send_email
    python examples/durable_agent.py resume          # DBOS recovers the turn; refund is not run again
    python examples/durable_agent.py show refund-42  # the recorded outcome, by workflow id

The commands record in ``durable_agent.sqlite`` and ``ledger.txt`` next to this file (``--dir``
elsewhere). On Postgres, start any number of these processes against one database::

    DBOS_SYSTEM_DATABASE_URL=postgresql://postgres@127.0.0.1:5432/agents python examples/durable_agent.py run

Live against a real model: add ``--live`` (with ``DSPY_IMP_MODEL`` and the provider's API key).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import dspy
from dbos import DBOS

import dspy_imp
from dspy_imp import durable
from dspy_imp.testing import ScriptedLM, call, reply

LEDGER = Path(__file__).with_name("ledger.txt")
CRASH = False


def refund(order: str, amount: float) -> str:
    """Refund an amount to the customer of an order."""
    key = durable.idempotency_key()  # the same if this call runs again after a crash
    done = LEDGER.read_text().splitlines() if LEDGER.exists() else []
    if not any(line.startswith(f"{key} ") for line in done):
        with LEDGER.open("a") as ledger:
            ledger.write(f"{key} refund {order} {amount}\n")
    return f"refunded {amount} on {order}"


def send_email(to: str, text: str) -> str:
    """Email the customer."""
    if CRASH:
        print("send_email: killing this process (SIGKILL) before the email goes out", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    return f"emailed {to}"


def scripted_model() -> dspy.LM:
    """Answers by the turn's step, so a restarted process answers from where the turn stopped."""
    script = [
        reply(calls=[call("refund", {"order": "A-42", "amount": 19.9}, id="call_1")]),
        reply(calls=[call("send_email", {"to": "ada@example.com", "text": "Refunded."}, id="call_2")]),
        reply(calls=[call("submit", {"reply": "Your order A-42 was refunded (19.90)."}, id="call_3")]),
    ]

    def respond(request: Any) -> Any:
        return script[request.roles.count("assistant")]

    return ScriptedLM(respond)


def live_model() -> dspy.LM:
    model = os.environ.get("DSPY_IMP_MODEL")
    if not model:
        sys.exit("--live needs DSPY_IMP_MODEL (plus that provider's API key)")
    return dspy.LM(model)


def story() -> None:
    """Run the turn in a process that gets killed, then resume it in a new one."""
    print("model: scripted model (no network)")
    with tempfile.TemporaryDirectory() as folder:
        for command in (["run", "--crash"], ["resume"]):
            print(f"$ python durable_agent.py {' '.join(command)}", flush=True)
            done = subprocess.run([sys.executable, __file__, *command, "--dir", folder], check=False)
            if done.returncode == -signal.SIGKILL:
                print("(the process was killed: the turn is half done)")


def main() -> None:
    global CRASH, LEDGER
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", nargs="?", choices=["run", "resume", "show"])
    parser.add_argument("workflow_id", nargs="?", default="refund-42")
    parser.add_argument("--crash", action="store_true", help="die inside send_email")
    parser.add_argument("--dir", type=Path, default=Path(__file__).parent, help="where the database and ledger live")
    parser.add_argument("--live", action="store_true", help="use DSPY_IMP_MODEL instead of the scripted model")
    args = parser.parse_args()
    if args.command is None:
        return story()
    CRASH, LEDGER = args.crash, args.dir / "ledger.txt"

    # 1. Configure DBOS, 2. declare the durable agents, 3. launch: launch recovers interrupted turns.
    database = os.environ.get("DBOS_SYSTEM_DATABASE_URL") or f"sqlite:///{args.dir / 'durable_agent.sqlite'}"
    DBOS(config=durable.config("durable_agent", system_database_url=database, log_level="WARNING"))
    program = dspy_imp.ReActV2("ticket -> reply", tools=[refund, send_email], finish="submit")
    agent = durable.DurableAgent(program, name="refunds")
    dspy.configure(lm=live_model() if args.live else scripted_model())
    DBOS.launch()

    if args.command == "run":
        with dspy_imp.deadline(seconds=300):  # fixed as a wall-clock time: it holds across restarts
            pred = agent(ticket="Please refund order A-42.", workflow_id=args.workflow_id)
    else:  # "resume": the turn was recovered at launch; "show": it finished earlier
        pred = durable.handle(args.workflow_id).result(polling_interval_sec=0.2)
    print(f"reply: {pred.reply}")
    print(f"termination_reason: {pred.metadata.termination_reason}")
    print(f"ledger: {LEDGER.read_text().strip() if LEDGER.exists() else '(empty)'}")
    DBOS.destroy()


if __name__ == "__main__":
    main()
