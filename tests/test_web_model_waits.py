"""Model requests that wait for a slot of the app's ``model_requests`` are seen waiting: in
``/readyz`` while they wait, in the turn's log line and in the GenAI metrics once they ran.

The model server holds every request until the test releases it, so which request waits is
decided by the bound alone, never by the machine's speed (``GUARD`` is a hang guard only).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any

import dspy
import pytest
from fake_openai_server import FakeOpenAIServer, HTTPReply, ReceivedRequest, text_completion
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from web_helpers import agui_events
from web_scenarios import client, run_input

import dspy_imp
import dspy_imp.tracing
import dspy_imp.web

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
