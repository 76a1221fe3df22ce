"""Stop closes the model request's HTTP connection, over the real HTTP path: both of DSPy's engines
(native and LiteLLM), a turn played async or with ``sync=True``, Stop pressed before the first
byte (a model still thinking) or mid-stream. The server never finishes its answer and says when
the client hung up: a Stop that does not close the request leaves the turn hanging, and the
guard fails the test instead.
"""

from __future__ import annotations

import asyncio
from typing import Any

import dspy
import pytest
from stalling_server import StallingServer
from web_helpers import agui_events, verify_agui
from web_scenarios import client, run_input

import dspy_imp
import dspy_imp.web

pytestmark = pytest.mark.block_network(allowed_hosts=[r"127\.0\.0\.1$"])

GUARD = 30  # seconds: a failure guard only, never a timing assertion
JSON = {"content-type": "application/json"}
STOPPED = {"type": "RUN_ERROR", "message": "StreamClosed: the turn was stopped", "code": "StreamClosed"}


async def stop_while_stalled(app: Any, server: StallingServer) -> tuple[Any, list[dict[str, Any]], Any]:
    """Stop pressed once the request is in flight (the server sent its chunks and waits)."""
    async with client(app) as http:
        running = asyncio.ensure_future(http.post("/ag-ui", json=run_input("Where is order 42?", thread="w1")))
        assert await asyncio.wait_for(asyncio.to_thread(server.waiting.wait, GUARD), GUARD)
        stopped = await http.post("/api/conversations/w1/stop", json={}, headers=JSON)
        events = agui_events((await asyncio.wait_for(running, GUARD)).text)
        kept = (await http.get("/api/conversations/w1")).json()
    return stopped, events, kept


@pytest.mark.parametrize("sent", [0, 2], ids=["before-the-first-byte", "mid-stream"])
@pytest.mark.parametrize("engine", ["auto", "litellm"])
@pytest.mark.parametrize("sync", [False, True], ids=["async", "sync"])
async def test_stop_closes_the_request_connection(sync: bool, engine: str, sent: int) -> None:
    with StallingServer(sent) as server:
        agent = dspy_imp.ReActV2("question -> answer")
        lm = dspy.LM("openai/gpt-4o-mini", api_base=server.base_url, api_key="sk-test", cache=False, num_retries=0)
        agent.set_lm(lm.copy(engine=engine))
        stopped, events, kept = await stop_while_stalled(dspy_imp.web.app(agent, sync=sync), server)
        assert (stopped.status_code, stopped.json()) == (200, {"stopping": "w1"})
        assert await asyncio.wait_for(asyncio.to_thread(server.closed.wait, GUARD), GUARD)  # the connection closed
        assert len(server.bodies) == 1 and server.bodies[0]["stream"] is True
    verify_agui(events)
    assert events[-1] == STOPPED
    deltas = "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")
    assert deltas in {"".join(f"word{n} " for n in range(seen)) for seen in range(sent + 1)}  # what came before Stop
    question, entry = kept["messages"]  # the cut reply is no step: the history keeps the question, no answer
    assert question["content"] == "Where is order 42?"
    assert "content" not in entry and entry["metadata"]["dspy_imp"]["entry"]["tool_calls"] == []
