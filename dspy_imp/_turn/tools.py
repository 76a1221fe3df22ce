"""Executing one step's tool calls: decisions only, the running is yielded to a driver.

Every problem with a call is an *observation* recorded as that call's error result (the
sentences of reference Appendix B) and the loop goes on: a malformed call, an unknown
tool, a policy refusal, invalid arguments, a tool that raises, an invalid ``submit`` or
``finish_on`` result. A call that runs no tool here (a refusal, ``submit``, a result a host
supplied) is yielded as a ``DecidedCall``, so the driver reports it to tracers like a tool
that ran. Which calls run depends on the request: an ordinary step runs every
call; the last-text request runs only ``last_request_tools``; the forced request runs only
``submit``. Calls that are not run are listed, never recorded, and reported to tracers as
``DecidedCall`` (``stage="unexecuted"``) with a text saying why.

This module runs a step's calls in order (or in parallel) and names their ids; the records it
shares live in ``_turn.calls``, checking one call in ``_turn.checks``, and judging what a call
came to in ``_turn.results``.
"""

from __future__ import annotations

from collections.abc import Generator, Mapping, Sequence
from typing import Any, Literal

from dspy_imp._prompt import sentences
from dspy_imp._prompt.signature import SUBMIT, Rejection
from dspy_imp._records.errors import AsksInput
from dspy_imp._records.outcomes import Raised, RawCall, Returned
from dspy_imp._records.steps import PendingCall, ToolCall, ToolResult
from dspy_imp._turn import agents, elicitation
from dspy_imp._turn.calls import CallContext, CallMode, Checked, Running, StepCalls
from dspy_imp._turn.calls import Finish as Finish  # re-exported: dspy_imp.Finish
from dspy_imp._turn.checks import UNCHECKED, check_call, not_run, runs_in
from dspy_imp._turn.effects import CheckArguments, DecidedCall, RunTool, RunTools, Tool, carried
from dspy_imp._turn.results import error_result, finish_hook, judged, returned


def run_calls(
    ctx: CallContext,
    raw: Sequence[RawCall],
    mode: CallMode,
    step_index: int,
    taken: set[str],
    running: Running | None = None,
) -> Generator[RunTool | RunTools | DecidedCall | CheckArguments, Any, StepCalls]:
    """Check every call of a step, then run them; yields the tool runs to the driver.

    Every call is checked (policy included) before any runs. If one waits for a person or an
    external runner, none runs and ``pending`` lists them. Otherwise they run in call order,
    or all at once under ``parallel`` (sub-agent calls excepted: they run one at a time, in call
    order, after the batch); ``finish_on`` hooks are decided in call order either way. A
    sub-agent that pauses pauses the step after its calls ran (``_turn.agents``), and so does a
    call that asks for a person's input while it runs (``_turn.elicitation``).

    Calls without an id get ``call_{step}_{index}``; an id the conversation already holds
    (a provider reusing ids, or a made-up id of an earlier turn) gets a ``_2``, ``_3``...
    suffix, so every call in a request has its own id; ``renamed`` says which (a call sent with
    ``"id": ""`` too: the first such call is what ``""`` names). ``taken`` is updated.
    """
    running = running or Running()
    done = running.done
    checked = []
    for index, call in enumerate(raw):
        record = ToolCall(
            id=_unique(call.id or f"call_{step_index}_{index}", taken, done.renamed),
            name=call.name,
            args=dict(call.args) if isinstance(call.args, Mapping) else {},
            received=call.received,
        )
        if not call.id:  # a reasoning block naming the call "" (a compat signature, LiteLLM) follows it
            done.renamed.setdefault("", record.id)
        if not runs_in(ctx, call.name, mode):
            done.unexecuted.append({"id": record.id, "name": record.name, "args": dict(record.args)})
            checked.append(Checked(record, result=error_result(record, not_run(ctx, record, mode)), unexecuted=True))
            continue
        kept = _kept(ctx, record, running, done)
        if kept is None:
            arguments = yield from _arguments_checked(ctx, record, call.args)
            kept = check_call(ctx, record, call.args, mode, done, running.decisions, arguments)
        checked.append(kept)
    done.pending = [PendingCall(c.call.id, c.call.name, c.call.args, c.pending) for c in checked if c.pending]
    if done.pending:
        done.calls = [c.call for c in checked if not c.unexecuted]
        done.submitted = None
        return done
    yield from _execute(ctx, checked, done, mode, running)
    return done


def _arguments_checked(ctx: CallContext, call: ToolCall, args: Any) -> Generator[CheckArguments, Any, Any]:
    """The verdict on a call's arguments, checked by the driver off the event loop within the
    tool's ``arguments_bound`` when it has one (a schema someone else wrote); ``UNCHECKED`` else."""
    tool = ctx.roster.get(call.name or "") if call.name != SUBMIT else None
    bound = carried(tool, "arguments_bound")
    if tool is None or not isinstance(bound, int | float) or isinstance(bound, bool):
        return UNCHECKED
    return (yield CheckArguments(tool, args, float(bound)))


def _kept(ctx: CallContext, call: ToolCall, running: Running, done: StepCalls) -> Checked | None:
    """A call of the resumed paused step that ran already (its result is kept, it does not run
    again), a sub-agent that paused (it resumes, without being checked again), or a call that
    paused on a person's input (it runs again with the answer, without being checked again)."""
    resumed = running.resumed
    if resumed is None or call.name == SUBMIT:  # submit is checked again: it is what ends the turn
        return None
    run = resumed.agent_runs.get(call.id)
    runner = ctx.runners.get(call.name or "")
    if agents.paused_run(run) and runner is not None:
        return Checked(call, runner=runner, resume=run)
    asked = next((p for p in resumed.pending if p.id == call.id and p.kind == "elicitation"), None)
    if asked is not None:
        return _answered(ctx, call, asked, runner, running)
    result = next((r for r in resumed.results if r.id == call.id), None)
    if result is None:
        return None
    if run is not None:
        done.agent_runs[call.id] = run
    return Checked(call, result=result, recorded=True)


def _answered(ctx: CallContext, call: ToolCall, asked: PendingCall, runner: Tool | None, running: Running) -> Checked:
    """A call that paused on a person's input, to run again with the caller's answer (checked
    against the form by ``check_resume`` already); a tool that cannot take it: an error observation."""
    answering = carried(runner, "answered")
    if runner is None or not callable(answering):
        why = sentences.cannot_answer(call.name or "the call")
        return Checked(call, result=error_result(call, Rejection("tool_error", why)))
    given = elicitation.answer(asked, running.decisions.given(call.id), f"approvals[{call.id!r}]")
    return Checked(call, runner=answering(dict(asked.elicitation or {}), given))


def _execute(
    ctx: CallContext, checked: list[Checked], done: StepCalls, mode: CallMode, running: Running
) -> Generator[RunTool | RunTools | DecidedCall, Any, None]:
    runs = [c for c in checked if c.runner is not None and not agents.is_agent(c.runner)]
    outcomes: dict[str, Returned | Raised] = {}
    if ctx.parallel and len(runs) > 1:
        answers = yield RunTools(tuple(_run(ctx, c.runner, c.call, running) for c in runs if c.runner))
        outcomes = {c.call.id: answer for c, answer in zip(runs, answers, strict=True)}
    for item in checked:
        result = item.result
        stage: Literal["call", "finish_on", "unexecuted"] | None = "unexecuted" if item.unexecuted else "call"
        if item.recorded:  # its finish_on hook decides again, in call order, on the recorded value
            stage = None
            if result is not None and not result.error and item.call.name in ctx.finish_on:
                result = finish_hook(ctx, item.call, result.value, done, result.returned_at)
        elif item.runner is not None:
            result, stage = yield from _ran(ctx, item, outcomes, done, mode, running)
            if result is None:  # the call waits, with no result: a sub-agent paused, or it asked for input
                done.calls.append(item.call)
                continue
        elif item.answer is not None:
            result = returned(ctx, item.call, item.answer, done)
        assert result is not None
        if stage is not None:  # no tool ran here, or its hook rejected it: reported, as a tool that ran
            tool = ctx.roster.get(item.call.name or "")
            yield DecidedCall(item.call, result, item.call.args, tool.desc if tool is not None else None, stage)
        if not item.unexecuted:
            done.calls.append(item.call)
            done.results.append(result)


def _ran(
    ctx: CallContext,
    item: Checked,
    outcomes: Mapping[str, Returned | Raised],
    done: StepCalls,
    mode: CallMode,
    running: Running,
) -> Generator[RunTool, Any, tuple[ToolResult | None, Literal["finish_on"] | None]]:
    """A call's run (or a sub-agent's turn), judged; no result when the call waits: its sub-agent
    paused, or it asked for a person's input while it ran (``AsksInput``) in an ordinary step (in a
    last request, where nobody can answer, that is its error observation)."""
    assert item.runner is not None
    if agents.is_agent(item.runner):
        return (yield from _run_agent(ctx, item, done, mode, running))
    outcome = outcomes.get(item.call.id) or (yield _run(ctx, item.runner, item.call, running))
    if running.meter is not None and outcome.usage:  # the model calls made for the turn during it
        running.meter.add(outcome.usage)
    if isinstance(outcome, Raised) and isinstance(outcome.error, AsksInput) and mode == "step":
        call = item.call
        done.pending.append(PendingCall(call.id, call.name, call.args, "elicitation", outcome.error.elicitation))
        return None, None
    result, rejected = judged(ctx, item.call, outcome, done)
    return result, "finish_on" if rejected else None


def _run(ctx: CallContext, runner: Tool, call: ToolCall, running: Running | None = None) -> RunTool:
    """The run of one call, bounded by its tool's timeout and the deadline (``_turn.limits``), and by
    what the usage limits leave for model calls made during it (an MCP server's sampling)."""
    timeout, by_deadline = ctx.limits.bound(call.name)
    budget = running.meter.remaining() if running is not None and running.meter is not None else None
    return RunTool(runner, dict(call.args), timeout, by_deadline, call, budget)


def _run_agent(
    ctx: CallContext, item: Checked, done: StepCalls, mode: CallMode, running: Running
) -> Generator[RunTool, Any, tuple[ToolResult | None, Literal["finish_on"] | None]]:
    """Run (or resume) a sub-agent's turn; its result, or ``None`` when it paused."""
    assert item.runner is not None
    meter = running.meter
    budget = meter.remaining() if meter is not None else None
    done.running_agent = item.call  # a stop meanwhile records the call as stopped, with what it did
    ended = yield agents.effect(item.runner, item.call, item.resume, running.decisions, budget)
    done.running_agent = None
    came = agents.came_to(item.runner, item.call, ended, can_wait=mode == "step")
    if meter is not None:
        meter.add(came.usage)
    done.agent_runs[item.call.id] = came.record
    if came.pending:
        done.pending.extend(came.pending)
        return None, None
    if came.rejection is not None:
        return error_result(item.call, came.rejection, ended.at), None
    assert came.outcome is not None
    result, rejected = judged(ctx, item.call, came.outcome, done)
    return result, "finish_on" if rejected else None


def _unique(call_id: str, taken: set[str], renamed: dict[str, str]) -> str:
    unique, suffix = call_id, 1
    while unique in taken:
        suffix += 1
        unique = f"{call_id}_{suffix}"
    taken.add(unique)
    if unique != call_id:  # what the reply's reasoning blocks name must follow (Gemini's signatures)
        renamed[call_id] = unique
    return unique
