"""Model requests that wait for a slot of the app's ``model_requests`` are seen waiting: in
``/readyz`` while they wait, in the turn's log line and in the GenAI metrics once they ran.

The model server holds every request until the test releases it, so which request waits is
decided by the bound alone, never by the machine's speed (``GUARD`` is a hang guard only).
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import warnings
from typing import Any

import dspy
import mcp_types as types
import pytest
from dspy.clients.engines.litellm_engine import LiteLLMEngine
from fake_openai_server import FakeOpenAIServer, HTTPReply, ReceivedRequest, text_completion
from mcp.server.mcpserver import Context, MCPServer
from mcp.shared.exceptions import MCPDeprecationWarning
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from web_helpers import agui_events
from web_scenarios import client, run_input

import dspy_imp
import dspy_imp.tracing
import dspy_imp.web
from dspy_imp import mcp
from dspy_imp.testing import ScriptedLM, call, reply

pytestmark = pytest.mark.block_network(allowed_hosts=[r"127\.0\.0\.1$"])
GUARD = 30  # seconds: a hang guard only


class Held(FakeOpenAIServer):
    """A model server that answers no request until ``released``; counts the most in flight."""

    def __init__(self) -> None:
        super().__init__([])
        self.in_flight, self.most = 0, 0
        self.released = threading.Event()

    def _next(self, request: ReceivedRequest) -> HTTPReply:
        with self._lock:
            self.requests.append(request)
            self.in_flight += 1
            self.most = max(self.most, self.in_flight)
        self.released.wait(GUARD)
        with self._lock:
            self.in_flight -= 1
        return HTTPReply(text_completion("Done."))


async def until(check: Any) -> Any:
    """Poll ``check()`` (an awaitable's result) until it is truthy, within the hang guard."""
    async with asyncio.timeout(GUARD):
        while not (seen := await check()):
            await asyncio.sleep(0.01)
    return seen


async def test_a_request_waiting_for_a_model_slot_shows_in_readyz_the_log_line_and_the_metrics(
    caplog: pytest.LogCaptureFixture,
) -> None:
    server = Held().start()
    reader = InMemoryMetricReader()
    dspy_imp.tracing.instrument(tracer_provider=TracerProvider(), meter_provider=MeterProvider(metric_readers=[reader]))
    try:
        agent = dspy_imp.ReActV2("question -> answer")
        agent.set_lm(
            dspy.LM("openai/gpt-4o-mini", api_base=server.base_url, api_key="sk-test", cache=False, num_retries=0)
        )
        app = dspy_imp.web.app(agent, model_requests=1)
        with caplog.at_level(logging.INFO, logger="dspy_imp.web"):
            async with client(app) as http:
                turns = [
                    asyncio.ensure_future(http.post("/ag-ui", json=run_input("Go", thread=f"t{n}"))) for n in (1, 2)
                ]

                async def one_waits() -> Any:  # one request at the model, the other waiting for its slot
                    ready = await http.get("/readyz")
                    return ready if ready.json()["model_requests_waiting"] == 1 and server.requests else None

                waiting = await until(one_waits)
                assert len(server.requests) == 1  # the other request was never sent: it waits in the app
                server.released.set()
                answers = await asyncio.wait_for(asyncio.gather(*turns), GUARD)
                after = await http.get("/readyz")
    finally:
        dspy_imp.tracing.uninstrument()
        server.stop()

    assert waiting.status_code == 200  # a wait for a model slot does not make the instance unready
    assert (waiting.json()["model_requests"], waiting.json()["model_requests_in_flight"]) == (1, 1)
    assert (after.json()["model_requests_waiting"], after.json()["model_requests_in_flight"]) == (0, 0)
    assert all(agui_events(a.text)[-1]["type"] == "RUN_FINISHED" for a in answers)
    assert server.most == 1  # never more than the app's bound at once
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("turn ")]
    assert len(lines) == 2 and sum(" waited=" in line for line in lines) == 1, lines  # the turn that waited says so
    found = {
        m.name: m for rm in reader.get_metrics_data().resource_metrics for sm in rm.scope_metrics for m in sm.metrics
    }
    (point,) = found["dspy_imp.model_request.wait_duration"].data.data_points
    assert point.count == 2 and point.sum > 0 and found["dspy_imp.model_request.wait_duration"].unit == "s"
    assert point.bucket_counts[0] == 1  # one request waited not at all (the first bucket is 0 s)


PASS = "[[ ## blocked ## ]]\nFalse\n\n[[ ## reason ## ]]\nfine\n\n[[ ## completed ## ]]"


class Judged(Held):
    """``Held``, answering a guardrail's judge (its prompt asks for ``blocked``) in its fields."""

    def _next(self, request: ReceivedRequest) -> HTTPReply:
        reply = super()._next(request)
        return HTTPReply(text_completion(PASS)) if "blocked" in json.dumps(request.body) else reply


class Judge(dspy.Module):
    """An input guardrail that asks a model."""

    def __init__(self) -> None:
        super().__init__()
        self.judge = dspy.Predict("text -> blocked: bool, reason: str")

    def forward(self, **inputs: str) -> dspy.Prediction:
        return self.judge(text=next(iter(inputs.values())))


def sync_only(server: Held) -> dspy.LM:
    """An LM with a sync engine and no async one: the app sends its requests from worker threads."""
    # ``wire_model``: DSPy 3.4 passes the engine's client options on legacy calls only with one
    engine = LiteLLMEngine(api_base=server.base_url, api_key="sk-test", wire_model="openai/gpt-4o-mini")
    return dspy.LM("openai/gpt-4o-mini", engine=engine, cache=False, num_retries=0)


def _lm(server: Held) -> dspy.LM:
    return dspy.LM("openai/gpt-4o-mini", api_base=server.base_url, api_key="sk-test", cache=False, num_retries=0)


@pytest.mark.parametrize(
    ("case", "sync"),
    [("a guardrail's call", False), ("a guardrail's call", True), ("a sync-only LM's request", True)],
)
async def test_every_model_request_the_app_sends_holds_one_of_its_slots(case: str, sync: bool) -> None:
    """A guardrail's own model call and a request sent from a worker thread (an LM with no async
    path, on a sync app) are bounded by ``model_requests`` and seen waiting, like the loop's own."""
    server = Judged().start()
    try:
        if case == "a guardrail's call":
            agent = dspy_imp.ReActV2("question -> answer", input_guardrails=[Judge()])
            agent.set_lm(_lm(server))
        else:
            agent = dspy_imp.ReActV2("question -> answer")
            agent.set_lm(sync_only(server))
        app = dspy_imp.web.app(agent, model_requests=1, sync=sync)
        async with client(app) as http:
            turns = [asyncio.ensure_future(http.post("/ag-ui", json=run_input("Go", thread=f"t{n}"))) for n in (1, 2)]

            async def settled() -> Any:  # one request at the model and one waiting, or both sent past the bound
                ready = (await http.get("/readyz")).json()
                return ready if (ready["model_requests_waiting"] == 1 and server.requests) or server.most > 1 else None

            waiting = await until(settled)
            sent = len(server.requests)
            server.released.set()
            answers = await asyncio.wait_for(asyncio.gather(*turns), GUARD)
    finally:
        server.stop()

    assert (sent, waiting["model_requests_waiting"], waiting["model_requests_in_flight"]) == (1, 1, 1)
    assert server.most == 1  # never more than the app's bound at once
    assert all(agui_events(a.text)[-1]["type"] == "RUN_FINISHED" for a in answers), [a.text[-300:] for a in answers]


async def test_an_mcp_servers_sampling_request_holds_one_of_the_apps_slots() -> None:
    """A sampling request answered during a tool call (the server asks the turn's side for a
    completion) is a model request the process sends: it holds a slot while the model answers, so
    another conversation's step waits for it rather than exceed ``model_requests``."""
    writer = MCPServer("writer")

    @writer.tool()
    async def summarize(text: str, ctx: Context) -> str:
        """Summarize a text with the client's model."""
        with warnings.catch_warnings():  # deprecated on 2026-07-28 sessions (SEP-2577), still in the protocol
            warnings.simplefilter("ignore", MCPDeprecationWarning)
            answer = await ctx.session.create_message(
                messages=[types.SamplingMessage(role="user", content=types.TextContent(type="text", text=text))],
                max_tokens=50,
            )
        return f"summary: {answer.content.text}"

    server = Held().start()
    toolset = mcp.memory(writer, mode="legacy", sampling=_lm(server))
    try:
        steps = [reply("calling", calls=[call("summarize", {"text": "a long text"}, id=f"c{n}")]) for n in (1, 2)]
        answers = [reply("[[ ## answer ## ]]\ndone\n\n[[ ## completed ## ]]") for _ in (1, 2)]
        agent = dspy_imp.ReActV2("question -> answer", tools=[toolset])
        agent.set_lm(ScriptedLM([*steps, *answers]))
        app = dspy_imp.web.app(agent, model_requests=1)
        async with client(app) as http:
            first = asyncio.ensure_future(http.post("/ag-ui", json=run_input("Go", thread="t1")))
            await until(lambda: _sent(server))  # the first turn's sampling request is at the model
            second = asyncio.ensure_future(http.post("/ag-ui", json=run_input("Go", thread="t2")))

            async def settled() -> Any:  # the second turn's step waits, or its own sampling went past the bound
                ready = (await http.get("/readyz")).json()
                return ready if ready["model_requests_waiting"] == 1 or server.most > 1 else None

            waiting = await until(settled)
            sent = len(server.requests)
            server.released.set()
            done = await asyncio.wait_for(asyncio.gather(first, second), GUARD)
    finally:
        toolset.close()
        server.stop()

    assert (sent, waiting["model_requests_waiting"], waiting["model_requests_in_flight"]) == (1, 1, 1)
    assert server.most == 1 and len(server.requests) == 2
    assert all(agui_events(d.text)[-1]["type"] == "RUN_FINISHED" for d in done), [d.text[-300:] for d in done]


async def _sent(server: Held) -> bool:
    return bool(server.requests)
