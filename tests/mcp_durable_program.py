"""The crash scenario of ``test_mcp_durable.py``: durable turns calling a stdio MCP server, killed.

``--doomed``: starts two turns (sync and async drivers); each calls the server's ``mark`` twice,
then ``crash``, which SIGKILLs the process once both turns are there. ``--recover``: the next
process; ``DBOS.launch()`` recovers both turns, which finish (``crash`` now returns); their
outcomes are written to ``results``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
import time
from pathlib import Path

from dbos import DBOS

import dspy_imp
from dspy_imp import durable, mcp
from dspy_imp.testing import ScriptedLM, call, reply

parser = argparse.ArgumentParser()
parser.add_argument("--db", required=True)
parser.add_argument("--dir", required=True, type=Path)
parser.add_argument("--doomed", action="store_true")
parser.add_argument("--recover", action="store_true")
options = parser.parse_args()
FOLDER: Path = options.dir
HOWS = ("sync", "async")


def crash() -> str:
    """Stop here."""
    if not options.doomed:
        return "went on"
    arrivals = FOLDER / "arrivals"
    with arrivals.open("a", encoding="utf-8") as file:
        file.write("arrived\n")
    if len(arrivals.read_text().split()) >= len(HOWS):
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(120)  # the other turn's arrival kills the process
    return "never"


server = mcp.stdio(
    sys.executable,
    [str(Path(__file__).with_name("mcp_durable_server.py"))],
    env={"MCP_TEST_MARKS": str(FOLDER / "marks")},
)
programs = {how: dspy_imp.ReActV2("question -> answer", tools=[server, crash], finish="submit") for how in HOWS}
agents = {how: durable.DurableAgent(program, name=f"marks-{how}") for how, program in programs.items()}


def script(how: str) -> list[object]:
    submit = reply(calls=[call("submit", {"answer": "done"}, id="c4")])
    if not options.doomed:
        return [submit]  # the replies before the crash are recorded
    return [
        reply(calls=[call("mark", {"tag": f"{how}-1"}, id="c1")]),
        reply(calls=[call("mark", {"tag": f"{how}-2"}, id="c2")]),
        reply(calls=[call("crash", id="c3")]),
        submit,
    ]


for how, program in programs.items():
    program.set_lm(ScriptedLM(script(how)))
DBOS(config=durable.config("dspy-imp-mcp-crash", system_database_url=options.db, log_level="ERROR"))
DBOS.launch()  # the recovering process picks its turns up here

if options.doomed:
    agents["sync"].start(question="Mark?", workflow_id="sync")

    async def start_async() -> None:
        await agents["async"].astart(question="Mark?", workflow_id="async")
        await asyncio.sleep(120)

    asyncio.run(start_async())
    sys.exit("not killed")

outcomes = [f"{how}:{durable.handle(how).result(polling_interval_sec=0.1).answer}" for how in HOWS]
(FOLDER / "results").write_text("\n".join(outcomes) + "\n")
server.close()
DBOS.destroy()
