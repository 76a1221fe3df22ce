"""Faults between the loop and its provider, injected by a TCP proxy, on both ``dspy.LM`` engines.

A loopback OpenAI-compatible server (``fake_openai_server.py``, answering from the request: a
``charge`` call, then a text answer once the tool's result is in) sits behind
``faultproxy.FaultProxy``; ``dspy.LM`` (native lm15 and LiteLLM, DSPy's retries off) talks to the
proxy. Each fault at each phase of a turn (the request, mid-stream, while a tool runs) must give a
clear error to the caller (a ``StepError`` carrying the history, or the deadline's documented
ending), run no tool twice and lose none (``charge`` counts its runs; the history keeps each), and
the next turn, given the history, works once the fault clears.

No timed assertions: a stall is ended by the turn's deadline (its only bound), everything else
fails at once; every wait has a guard.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from typing import Any

import dspy
import pytest
from fake_openai_server import FakeOpenAIServer, HTTPReply, ReceivedRequest, text_completion, tool_calls_completion
from faultproxy import FaultProxy
from streaming_helpers import stream_items
from web_helpers import agui_events
from web_scenarios import client, run_input

import dspy_imp
import dspy_imp.web
from dspy_imp._routes.warmup import warm_litellm

pytestmark = pytest.mark.block_network(allowed_hosts=[r"127\.0\.0\.1$"])
ENGINES = ["auto", "litellm"]
ANSWER = "Charged A-1 and all is well with the order now."


class Answering(FakeOpenAIServer):
    """Answers from the request as a model would: a ``charge`` call, or, once the conversation holds
    the charge's result, the text answer (so a resumed turn is answered, never charged again)."""

    def __init__(self) -> None:
        super().__init__([], keep_alive=True)

    def _next(self, request: ReceivedRequest) -> HTTPReply:
        with self._lock:
            self.requests.append(request)
            n = len(self.requests)
        messages = (request.body or {}).get("messages") or [{}]
        if any(m.get("role") == "tool" and "charged" in str(m.get("content")) for m in messages):
            return HTTPReply(text_completion(ANSWER))
        return HTTPReply(tool_calls_completion([(f"call_{n}", "charge", {"order": "A-1"})]))


@pytest.fixture(autouse=True, scope="module")
def _litellm_imported() -> None:
    warm_litellm()


@pytest.fixture
def proxy() -> Iterator[FaultProxy]:
    with Answering() as server, FaultProxy("127.0.0.1", server.port) as running:
        yield running


@pytest.fixture(params=ENGINES)
def lm(request: pytest.FixtureRequest, proxy: FaultProxy) -> dspy.LM:
    return dspy.LM(
        "openai/gpt-4o-mini",
        api_base=f"http://127.0.0.1:{proxy.port}/v1",
        api_key="sk-test",
        cache=False,
        num_retries=0,
        engine=request.param,
    )


class Ledger:
    """The ``charge`` tool, counting its runs; ``during`` runs inside it (the fault while a tool runs)."""

    def __init__(self) -> None:
        self.runs = 0
        self.during: Any = None

    def charge(self, order: str) -> str:
        """Charge an order."""
        self.runs += 1
        if self.during is not None:
            self.during()
        return f"charged {order}"


def agent_for(ledger: Ledger) -> dspy_imp.ReActV2:
    return dspy_imp.ReActV2("question -> answer", tools=[ledger.charge])


def results(history: dspy.History) -> list[str]:
    return [r["name"] for m in history.messages for r in m.get("tool_call_results") or []]


def call(agent: dspy_imp.ReActV2, mode: str, **kwargs: Any) -> Any:
    if mode == "sync":
        return agent(**kwargs)
    return asyncio.run(asyncio.wait_for(agent.acall(**kwargs), 60))


MODES = ["sync", "async"]
REQUEST_FAULTS = [("reset", {}), ("refuse", {}), ("drop", {}), ("cut", {"after": 40})]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(("fault", "options"), REQUEST_FAULTS, ids=[f for f, _ in REQUEST_FAULTS])
def test_a_fault_at_the_request_is_a_step_error_and_the_next_turn_works(
    lm: dspy.LM, proxy: FaultProxy, mode: str, fault: str, options: dict[str, Any]
) -> None:
    ledger = Ledger()
    agent = agent_for(ledger)
    proxy.set(fault, **options)
    with dspy.context(lm=lm), pytest.raises(dspy_imp.StepError) as failed:
        call(agent, mode, question="Charge A-1")
    proxy.clear()
    assert ledger.runs == 0 and results(failed.value.history) == []
    assert str(failed.value)  # says what failed

    with dspy.context(lm=lm):
        answered = call(agent, mode, question="Charge A-1", history=failed.value.history)
    assert answered.answer == ANSWER and ledger.runs == 1
    assert results(answered.metadata.history) == ["charge"]


@pytest.mark.parametrize("mode", MODES)
def test_a_stalled_provider_ends_the_turn_at_its_deadline_and_the_next_turn_works(
    lm: dspy.LM, proxy: FaultProxy, mode: str
) -> None:
    ledger = Ledger()
    agent = agent_for(ledger)
    proxy.set("stall")
    with dspy.context(lm=lm), dspy_imp.deadline(seconds=1.5):
        stalled = call(agent, mode, question="Charge A-1")
    proxy.clear()
    assert stalled.metadata.termination_reason == "incomplete"
    assert stalled.metadata.termination_cause == "deadline_exceeded"
    assert ledger.runs == 0

    with dspy.context(lm=lm):
        answered = call(agent, mode, question="Charge A-1", history=stalled.metadata.history)
    assert answered.answer == ANSWER and ledger.runs == 1


@pytest.mark.parametrize("mode", MODES)
def test_a_slow_provider_only_slows_the_turn(lm: dspy.LM, proxy: FaultProxy, mode: str) -> None:
    ledger = Ledger()
    proxy.set("slow", latency=0.01, bandwidth=20_000)
    with dspy.context(lm=lm):
        answered = call(agent_for(ledger), mode, question="Charge A-1")
    assert answered.answer == ANSWER and ledger.runs == 1


@pytest.mark.parametrize("mode", MODES)
def test_connections_reset_while_a_tool_runs_do_not_fail_the_next_request(
    lm: dspy.LM, proxy: FaultProxy, mode: str
) -> None:
    """The provider (or a balancer in front of it) drops the pooled keep-alive connection while the
    tool runs: the next request opens a new one."""
    ledger = Ledger()
    ledger.during = proxy.reset_all
    with dspy.context(lm=lm):
        answered = call(agent_for(ledger), mode, question="Charge A-1")
    assert answered.answer == ANSWER and ledger.runs == 1
    assert results(answered.metadata.history) == ["charge"]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("fault", ["reset", "refuse", "stall"])
def test_a_fault_after_a_tool_ran_keeps_it_in_the_history_and_it_never_runs_again(
    lm: dspy.LM, proxy: FaultProxy, mode: str, fault: str
) -> None:
    ledger = Ledger()

    def gone() -> None:  # the provider goes away while the tool runs: its pooled connection too
        proxy.reset_all()
        proxy.set(fault)

    ledger.during = gone
    agent = agent_for(ledger)
    bound = dspy_imp.deadline(seconds=1.5) if fault == "stall" else contextlib.nullcontext()  # what ends a stall
    with dspy.context(lm=lm), bound:
        if fault == "stall":
            ended = call(agent, mode, question="Charge A-1")
            assert ended.metadata.termination_cause == "deadline_exceeded"
            history = ended.metadata.history
        else:
            with pytest.raises(dspy_imp.StepError) as failed:
                call(agent, mode, question="Charge A-1")
            history = failed.value.history
    proxy.clear()
    ledger.during = None
    assert ledger.runs == 1 and results(history) == ["charge"]  # the tool that ran is kept

    with dspy.context(lm=lm):
        answered = call(agent, mode, question="Charge A-1", history=history)
    assert answered.answer == ANSWER
    assert ledger.runs == 1  # resumed from the history: the charge is not run again


@pytest.mark.parametrize("how", MODES)
def test_a_stream_cut_mid_answer_is_a_step_error_with_the_tool_kept(lm: dspy.LM, proxy: FaultProxy, how: str) -> None:
    ledger = Ledger()
    ledger.during = lambda: proxy.set("cut", after=600)  # the answer's stream: cut a few chunks in
    agent = agent_for(ledger)
    with dspy.context(lm=lm), pytest.raises(dspy_imp.StepError) as failed:
        stream_items(agent, how, [dspy_imp.StreamListener("answer")], question="Charge A-1")
    proxy.clear()
    ledger.during = None
    assert ledger.runs == 1 and results(failed.value.history) == ["charge"]

    with dspy.context(lm=lm):
        items = stream_items(
            agent, how, [dspy_imp.StreamListener("answer")], question="Charge A-1", history=failed.value.history
        )
    assert items[-1].answer == ANSWER and ledger.runs == 1


@pytest.mark.parametrize("fault", ["reset", "cut"])
async def test_a_provider_fault_in_a_served_turn_is_a_run_error_and_the_conversation_goes_on(
    lm: dspy.LM, proxy: FaultProxy, fault: str
) -> None:
    """Through the web app: the provider fails after the tool ran (reset, or the answer's stream
    cut): the run ends with ``RUN_ERROR``, the saved conversation keeps the charge, and the next
    message is answered without charging again."""
    ledger = Ledger()

    def gone() -> None:
        proxy.reset_all()
        proxy.set(fault, after=600)

    ledger.during = gone
    agent = agent_for(ledger)
    agent.set_lm(lm)
    store = dspy_imp.web.MemoryStore()
    app = dspy_imp.web.app(agent, store=store)
    async with client(app) as http:
        failed = await asyncio.wait_for(http.post("/ag-ui", json=run_input("Charge A-1")), 60)
        proxy.clear()
        ledger.during = None
        again = await asyncio.wait_for(http.post("/ag-ui", json=run_input("Charge A-1", run="r2")), 60)
    last = agui_events(failed.text)[-1]
    assert last["type"] == "RUN_ERROR" and last["message"], last
    assert agui_events(again.text)[-1]["type"] == "RUN_FINISHED", again.text[-500:]
    assert ledger.runs == 1
    stored = await store.load("t1")
    assert stored is not None and results(stored.history) == ["charge"]
