"""The two drivers: they perform the machine's effects, sync or async, and decide nothing.

``drive``/``adrive`` run a ``Turn.run()`` generator to its end. ``Effects`` dispatches each
effect to its I/O, a ``Job`` (``job``): a model request or an extraction (``requests``), one tool
or a parallel batch (``tools``, whose sync tools run where ``tool_threads`` puts them: under
``acall`` never on the event loop's thread), a sub-agent's turn (``child``), the guardrails
(``guarding``), a call that ran no tool reported to DSPy's tool callbacks (``tracing``), a token
count (``measure``), a call's arguments checked against an untrusted schema off the event loop
(``tools.check_job``) or a retry pause. A ``Watch`` sees each effect performed (``watched``). A sync
turn whose observer can stop it while an effect runs (the web app's Stop, ``stopping``) hands each
effect to the async path on its event loop. An observer may bound the model requests in flight
(``model_slot``, the web app's ``model_requests``): the async path holds one of its slots while a
request or an extraction runs, so a request waiting for one is seen waiting.

The tool boundary catches ``Exception`` (a raising tool is an observation) and the request
boundary too (the failed request's error goes to the machine unchanged).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import functools
import threading
from collections.abc import Awaitable, Callable, Generator, Iterator
from typing import Any

from dspy_imp._drivers import guard_books, guarding, stopping, tool_threads, tools
from dspy_imp._drivers.adapter import current_exchange
from dspy_imp._drivers.child import ChildCall, calling, ended, raised
from dspy_imp._drivers.child import current as current_child
from dspy_imp._drivers.finetune import install as install_finetune_data
from dspy_imp._drivers.interrupts import AGENT_HISTORY_ATTRIBUTE, HISTORY_ATTRIBUTE
from dspy_imp._drivers.job import Job, aoutcome, nothing, outcome, reraise, same
from dspy_imp._drivers.measure import ameasure, measure
from dspy_imp._drivers.requests import extraction_job, sends_async, step_job
from dspy_imp._drivers.watched import awatched, watched
from dspy_imp._records import clock
from dspy_imp._records.steps import now_iso
from dspy_imp._routes.caching import install as install_native_breakpoints
from dspy_imp._routes.chat_extras import install as install_chat_extras
from dspy_imp._routes.dspy_private import (
    install_built_messages_reuse,
    install_converted_rows_reuse,
    install_engine_routes_once,
    install_legacy_copies,
    install_model_info_once,
    install_offline_routes_once,
    install_planned_body_reuse,
    install_proxy_lookup_once,
    install_validated_messages_once,
)
from dspy_imp._routes.hosted_anthropic import install as install_anthropic_served
from dspy_imp._routes.hosted_gemini import install as install_gemini_served
from dspy_imp._routes.hosted_openai import install as install_openai_served
from dspy_imp._routes.hosted_openrouter import install as install_openrouter_server_tool
from dspy_imp._routes.nameless import install as install_nameless_reader
from dspy_imp._routes.responses_bridge import install as install_responses_bridge
from dspy_imp._turn.effects import (
    Alongside,
    CheckArguments,
    CheckGuardrails,
    DecidedCall,
    Extraction,
    Measure,
    ModelRequest,
    RunAgent,
    RunTool,
    RunTools,
    Sleep,
)
from dspy_imp._turn.plan import Program
from dspy_imp._watch import tracing
from dspy_imp._watch.streaming import Watch

__all__ = ["Effects", "adrive", "drive"]


def drive(turn: Generator[Any, Any, Any], effects: Effects) -> Any:
    sent: Any = None
    while True:
        try:
            effect = turn.send(sent)
        except StopIteration as stop:
            return effects.ended(stop.value)
        sent = effects.perform(effect)


async def adrive(turn: Generator[Any, Any, Any], effects: Effects) -> Any:
    sent: Any = None
    while True:
        try:
            effect = turn.send(sent)
        except StopIteration as stop:
            return await effects.aended(stop.value)
        sent = await effects.aperform(effect)


@contextlib.contextmanager
def _caller_history() -> Iterator[None]:
    """A stop out of a sub-agent's turn carries the caller's history, not the sub-agent's: the
    sub-agent's own, attached first, moves to ``dspy_imp_agent_history`` (the caller's turn keeps
    it in its record of the call), so the caller's turn attaches its own."""
    try:
        yield
    except BaseException as stop:
        with contextlib.suppress(AttributeError, TypeError):
            history = getattr(stop, HISTORY_ATTRIBUTE, None)
            if history is not None:
                setattr(stop, AGENT_HISTORY_ATTRIBUTE, history)
                setattr(stop, HISTORY_ATTRIBUTE, None)
        raise


def _turn_memo() -> Any:
    """The rendering memo of the turn whose step request is in flight, or None (``install_converted_rows_reuse``)."""
    exchange = current_exchange().get()
    return None if exchange is None else exchange.guidance.memo


class Effects:
    """Performs effects for one program; ``perform`` and ``aperform`` differ only in awaiting.

    Under ``dspy.streamify`` or live progress, a ``Watch`` (``_watch.streaming``) sees each effect
    before and after it is performed, and the outcome of the turn; it decides nothing.
    """

    def __init__(self, program: Program):
        self.program = program
        child = current_child(program)  # a sub-agent's turn: its lines and events name it
        self.watch = Watch.of(program, child.name, child.call_id) if child is not None else Watch.of(program)
        install_built_messages_reuse(_turn_memo)  # first: it must see lm15's own writer (``dspy_private`` says why)
        install_chat_extras()
        install_native_breakpoints()
        install_responses_bridge()
        install_anthropic_served()
        install_openai_served()
        install_gemini_served()
        install_openrouter_server_tool()
        install_nameless_reader(lambda: current_exchange().get() is not None)
        # What DSPy's native engine pays per request and need not: ``dspy_private`` says why each is safe.
        install_planned_body_reuse(lambda: current_exchange().get() is not None)
        install_proxy_lookup_once()
        install_model_info_once()
        install_offline_routes_once()
        install_engine_routes_once()
        install_converted_rows_reuse(_turn_memo)
        install_validated_messages_once()
        install_legacy_copies(_turn_memo)
        install_finetune_data()

    def listing(self, program: Any) -> Any:
        """The tools ``program``'s toolsets (MCP servers) offer the turn it starts: listed now here; a
        durable driver lists them in a recorded step, so a resumed turn has the tools it started with."""
        return program._listed()

    async def alisting(self, program: Any) -> Any:
        return await program._alisted()

    def perform(self, effect: Any) -> Any:
        if self.watch is not None:
            self.watch.check()  # a closed stream stops the turn here (``StreamClosed``)
        until_stopped = stopping.stoppable(self.watch)
        if until_stopped is not None and not isinstance(effect, RunAgent):  # a stop ends it while it runs
            return stopping.perform(self._stoppable(effect), until_stopped)
        return self._perform(effect)  # a sub-agent's turn runs here: each of its effects is stoppable

    def _stoppable(self, effect: Any) -> Callable[[], Awaitable[Any]]:
        """How a stoppable sync turn performs ``effect`` on its loop: a request whose LM has an async
        engine as the async driver does (so a stop closes its HTTP stream); anything else as this
        driver does, in a worker thread a stop leaves behind (a sync tool, as ``tool_timeouts`` does)."""
        if isinstance(effect, ModelRequest | Extraction) and sends_async(self.program, effect):
            return functools.partial(Effects.aperform, self, effect)
        work = functools.partial(tool_threads.arun, functools.partial(self._perform, effect))
        slot = self.watch.model_slot if self.watch is not None else None
        if slot is None or not isinstance(effect, ModelRequest | Extraction):
            return work

        async def held() -> Any:  # a sync-only LM's request holds one of the app's slots too
            async with slot():
                return await work()

        return held

    def _perform(self, effect: Any) -> Any:
        if isinstance(effect, RunTools):
            return tools.run_batch(effect, self.perform, self._check)
        if isinstance(effect, Alongside):
            return self._alongside(effect)
        return watched(self.watch, effect, self._job(effect), outcome)

    async def aperform(self, effect: Any) -> Any:
        if self.watch is not None:
            self.watch.check()
        if isinstance(effect, RunTools):
            return await tools.arun_batch(effect, self.aperform)
        if isinstance(effect, Alongside):  # both inside this effect (one durable step): not self.aperform
            check = aoutcome(self._job(effect.check))
            answer_of_request, answer = await asyncio.gather(Effects.aperform(self, effect.request), check)
            if self.watch is not None:
                await self.watch.asend(self.watch.after(effect.check, answer))
            return answer_of_request, answer
        slot = self.watch.model_slot if self.watch is not None else None
        if slot is not None and isinstance(effect, ModelRequest | Extraction):  # the app's bound on requests
            async with slot():
                return await awatched(self.watch, effect, self._job(effect), aoutcome)
        return await awatched(self.watch, effect, self._job(effect), aoutcome)

    def ended(self, outcome: Any) -> Any:
        if self.watch is not None:
            self.watch.send(self.watch.ended(outcome))
            self.watch.flush(outcome)
            self.watch.close()
        return outcome

    async def aended(self, outcome: Any) -> Any:
        if self.watch is not None:
            await self.watch.asend(self.watch.ended(outcome))
            await self.watch.aflush(outcome)
            self.watch.close()
        return outcome

    def _check(self) -> None:
        if self.watch is not None:
            self.watch.check()

    def _alongside(self, effect: Alongside) -> tuple[Any, Any]:
        """The first request here, the input guardrails in a worker thread with this context (both
        inside this one effect, so one durable step: not through ``self.perform``)."""
        box: dict[str, Any] = {}
        context = contextvars.copy_context()
        job = self._job(effect.check)
        worker = threading.Thread(target=lambda: box.update(answer=context.run(outcome, job)))
        worker.start()
        answer_of_request = Effects.perform(self, effect.request)
        worker.join()
        if self.watch is not None:
            self.watch.send(self.watch.after(effect.check, box.get("answer")))
        return answer_of_request, box.get("answer")

    def child(self, program: Program) -> Effects:
        """The driver of a sub-agent's turn: the same kind as this one (``_drivers.child``)."""
        return Effects(program)

    def _agent_job(self, effect: RunAgent) -> Job:
        """A sub-agent's turn, run through its tool (so tracers nest it under the tool's span)."""
        tool, args = effect.tool, effect.args

        def call(asynchronous: bool) -> ChildCall:
            program = getattr(tool, "program", None)
            chain = tuple(self.program.fallback_chain())  # the child's, unless it has its own
            caller = current_child(self.program)
            name = f"{caller.name}/{tool.name}" if caller is not None and caller.name else tool.name
            own = effect.call.id if effect.call is not None else ""
            call_id = f"{caller.call_id}/{own}" if caller is not None and caller.call_id else own
            return ChildCall(
                program, effect.history, effect.decisions, effect.budget, self.child, asynchronous, chain, name, call_id
            )

        def run() -> Any:
            with calling(call(False)), _caller_history():
                return tool(**args)

        async def arun() -> Any:
            with calling(call(True)), _caller_history():
                return await tool.acall(**args)

        return Job(run, arun, lambda value: ended(value, now_iso()), lambda error: raised(error, now_iso()))

    def _slotted(self, job: Job) -> Job:
        """``job`` with the app's bound on model requests over the LM calls made inside it that the
        machine never sees (a guardrail's, an MCP server's sampling requests: ``guard_books``)."""
        slot = self.watch.model_slot if self.watch is not None else None
        if slot is None:
            return job
        inner, loop = job.scope, self.watch.model_loop if self.watch is not None else None

        @contextlib.contextmanager
        def scope() -> Iterator[None]:
            with guard_books.slotted(slot, loop), inner():
                yield

        return dataclasses.replace(job, scope=scope)

    def _job(self, effect: Any) -> Job:
        if isinstance(effect, RunAgent):
            return self._agent_job(effect)
        if isinstance(effect, RunTool):
            return self._slotted(tools.tool_job(effect))
        if isinstance(effect, CheckArguments):
            return tools.check_job(effect)
        if isinstance(effect, CheckGuardrails):
            return self._slotted(Job(lambda: guarding.check(effect), lambda: guarding.acheck(effect), same, reraise))
        if isinstance(effect, DecidedCall):
            renderer = self.program.options.tool_result_renderer
            report, areport = tracing.report, tracing.areport
            return Job(lambda: report(effect, renderer), lambda: areport(effect, renderer), nothing, reraise)
        if isinstance(effect, Sleep):
            return Job(lambda: clock.sleep(effect.seconds), lambda: clock.asleep(effect.seconds), nothing, reraise)
        if isinstance(effect, Measure):
            return Job(lambda: measure(self.program, effect), lambda: ameasure(self.program, effect), same, reraise)
        if isinstance(effect, ModelRequest):
            return step_job(self.program, effect)
        return extraction_job(self.program, effect)
