"""The stop-at-every-step scenario (``stop_every_step.Scenario``) as DBOS workflows, crashed at each
effect: the program ``test_stop_every_step.py`` runs in two processes sharing one SQLite database.

``--doomed`` runs workflow ``w0`` uncancelled (its approval sent), counting its effects: ``n``
(every effect a driver is handed, ``Effects.aperform``, a sub-agent's too).
It then starts ``w1`` .. ``wn``; workflow ``wk`` freezes as its k-th effect begins (nothing of it
is performed or recorded, as when the process dies there), approvals are sent to those that
pause first, and once every one is frozen the process SIGKILLs itself. ``--recover`` launches
DBOS again (which recovers ``w1`` .. ``wn``), sends the approvals they still wait for, and saves
each workflow's end in ``results/<id>.json``. Every tool execution, in either process, is a line
of ``ran.log``: ``<workflow> <tool> <value>``. The models answer by what each request holds, so a
recovered workflow is asked only what its records lack.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

import litellm  # noqa: F401  (warm: its cold import would block the workflows' event loop)
from dbos import DBOS
from stop_every_step import Scenario

import dspy_imp
from dspy_imp import durable
from dspy_imp._drivers.driver import Effects as DriverEffects

ARGS: argparse.Namespace
_LOCK = threading.Lock()
COUNTS: dict[str, int] = {}
FROZEN: set[str] = set()
EARLY_TOOLS: list[str] = []  # tools run in a workflow after it froze (none may)


def log(workflow: str | None, tool: str, value: str) -> None:
    with _LOCK, open(Path(ARGS.dir) / "ran.log", "a") as file:
        file.write(json.dumps([workflow, tool, value]) + "\n")


def on_run(tool: str, value: str) -> None:
    workflow = DBOS.workflow_id
    if workflow in FROZEN:
        EARLY_TOOLS.append(tool)
    log(workflow, tool, value)


def install_counter(doomed: bool) -> None:
    aperform = DriverEffects.aperform

    async def counted(driver: Any, effect: Any) -> Any:
        workflow = DBOS.workflow_id or ""
        with _LOCK:
            COUNTS[workflow] = COUNTS.get(workflow, 0) + 1
            number = COUNTS[workflow]
        if doomed and workflow.startswith("w") and workflow != "w0" and number == int(workflow[1:]):
            FROZEN.add(workflow)
            await asyncio.Event().wait()  # frozen here until the process dies
        return await aperform(driver, effect)

    DriverEffects.aperform = counted  # type: ignore[method-assign]


async def approve_when_paused(agent: durable.DurableAgent, workflow: str, decided: set[str]) -> None:
    if workflow not in decided and await durable.apending(workflow):
        decided.add(workflow)
        await agent.adecide(workflow, approvals={"c4": True})


async def doomed(agent: durable.DurableAgent) -> None:
    handle = await agent.astart(workflow_id="w0", **Scenario.FIRST)
    decided: set[str] = set()
    while await handle.astatus() == "PENDING":
        await approve_when_paused(agent, "w0", decided)
        await asyncio.sleep(0.05)
    await asave("w0", handle)
    n = COUNTS["w0"]
    (Path(ARGS.dir) / "n").write_text(str(n))
    for k in range(1, n + 1):
        await agent.astart(workflow_id=f"w{k}", **Scenario.FIRST)
    while len(FROZEN) < n:
        for k in range(1, n + 1):
            if f"w{k}" not in FROZEN:
                await approve_when_paused(agent, f"w{k}", decided)
        await asyncio.sleep(0.05)
    (Path(ARGS.dir) / "early").write_text(json.dumps(EARLY_TOOLS))
    os.kill(os.getpid(), signal.SIGKILL)


def recover(agent: durable.DurableAgent) -> None:
    """Waits (sync, as any caller may) for the workflows DBOS recovered at launch; approves those that pause."""
    n = int((Path(ARGS.dir) / "n").read_text())
    waiting, decided = {f"w{k}" for k in range(1, n + 1)}, set()
    while waiting:
        for workflow in sorted(waiting):
            status = durable.handle(workflow).status()
            if status in ("PENDING", "ENQUEUED"):  # recovery re-enqueues it first
                if workflow not in decided and durable.pending(workflow):
                    decided.add(workflow)
                    agent.decide(workflow, approvals={"c4": True})
                continue
            write(workflow, durable.handle(workflow).result(polling_interval_sec=0.01))
            waiting.discard(workflow)
        time.sleep(0.1)


def write(workflow: str, prediction: Any) -> None:
    folder = Path(ARGS.dir) / "results"
    folder.mkdir(exist_ok=True)
    record = {"reply": prediction.reply, "history": dspy_imp.dump_history(prediction.metadata.history)}
    (folder / f"{workflow}.json").write_text(json.dumps(record))


async def asave(workflow: str, handle: Any) -> None:
    folder = Path(ARGS.dir) / "results"
    folder.mkdir(exist_ok=True)
    write(workflow, await handle.aresult(polling_interval_sec=0.01))


def main() -> None:
    global ARGS
    parser = argparse.ArgumentParser()
    parser.add_argument("--db", required=True)
    parser.add_argument("--dir", required=True)
    parser.add_argument("--doomed", action="store_true")
    ARGS = parser.parse_args()
    DBOS(config=durable.config("stop-every-step", system_database_url=ARGS.db, log_level="ERROR"))
    scenario = Scenario(by_content=True, on_run=on_run)
    agent = durable.DurableAgent(scenario.agent, name="stop-every-step")
    install_counter(ARGS.doomed)
    DBOS.launch()
    if ARGS.doomed:
        asyncio.run(doomed(agent))
    else:
        recover(agent)
    DBOS.destroy()


if __name__ == "__main__":
    main()
