"""A durable agent's web app with its conversations and its workflows in one Postgres database:
``python tests/web_database_durable.py URL`` pauses a refund, approves it through a second app (as
after a restart), and prints what happened as JSON (``test_web_database_instances``)."""

from __future__ import annotations

import asyncio
import json
import sys

import httpx
from dbos import DBOS
from web_helpers import agui_events
from web_scenarios import paused_script, run_input, support_agent

import dspy_imp.web
from dspy_imp import durable
from dspy_imp.testing import ScriptedLM

URL = sys.argv[1]


async def main() -> dict[str, object]:
    program = support_agent()
    program.set_lm(ScriptedLM(paused_script()))
    agent = durable.DurableAgent(program, name="one-database")
    DBOS.launch()

    async def post(app: object, body: dict[str, object]) -> list[dict[str, object]]:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as http:
            return agui_events((await http.post("/ag-ui", json=body)).text)

    first = dspy_imp.web.DatabaseStore(URL)
    paused = await post(dspy_imp.web.app(agent, store=first), run_input("Refund order 42", thread="d1"))
    first.close()
    second = dspy_imp.web.DatabaseStore(URL)  # a new app on the same one database
    resume = [{"interruptId": "c9", "status": "resolved", "payload": {"approved": True}}]
    resumed = await post(dspy_imp.web.app(agent, store=second), run_input(thread="d1", run="r2", resume=resume))
    stored = await second.load("d1")
    second.close()
    return {
        "paused": paused[-1]["outcome"]["type"],
        "resumed": resumed[-1]["result"]["termination_reason"],
        "entries": len(stored.history.messages) if stored else 0,
    }


if __name__ == "__main__":
    DBOS(config=durable.config("one-database", system_database_url=URL, log_level="ERROR"))
    try:
        print(json.dumps(asyncio.run(main())))
    finally:
        DBOS.destroy(destroy_registry=True)
