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
"""

from __future__ import annotations

import re
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from dspy_imp._prompt import sentences
from dspy_imp._prompt.signature import SUBMIT, OutputSpec, Rejection
from dspy_imp._records.errors import error_text
from dspy_imp._records.kinds import PendingKind
from dspy_imp._records.media import contains_media
from dspy_imp._records.outcomes import Raised, RawCall, Returned
from dspy_imp._records.steps import PendingCall, Step, ToolCall, ToolResult, now_iso
from dspy_imp._records.text import result_text
from dspy_imp._turn import agents
from dspy_imp._turn.approval import Decisions, asks_approval
from dspy_imp._turn.arguments import check_arguments
from dspy_imp._turn.effects import DecidedCall, RunTool, RunTools, Tool
from dspy_imp._turn.limits import ToolLimits, cut_result, misbehaved
from dspy_imp._turn.meter import Meter

_SURROGATE = re.compile("[\ud800-\udfff]")


CallMode = Literal["step", "last_text", "forced"]


Verdict = Rejection | Literal["approval"] | None


class Finish:
    """What a ``finish_on`` hook returns to end the turn with these outputs.

    Example:
        ```python
        def on_send(args, result, inputs):
            return dspy_imp.Finish(reply=args["text"])
        agent = dspy_imp.ReActV2("message -> reply", tools=[send], finish_on={"send": on_send})
        ```
    """

    def __init__(self, **outputs: Any):
        self.outputs = outputs

    def __repr__(self) -> str:
        return f"Finish({', '.join(f'{k}={v!r}' for k, v in self.outputs.items())})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Finish) and other.outputs == self.outputs

    __hash__ = None  # type: ignore[assignment]


@dataclass(frozen=True)
class CallContext:
    """What a step's calls are checked and run against (fixed for the call)."""

    roster: Mapping[str, Tool]
    runners: Mapping[str, Tool]
    outputs: OutputSpec
    inputs: Mapping[str, Any]
    policy: Callable[[str, dict[str, Any]], Any] | frozenset[str] | None = None
    finish_on: Mapping[str, Callable[..., Any]] = field(default_factory=dict)
    last_request_tools: tuple[str, ...] = ()
    parallel: bool = False
    needs_approval: frozenset[str] = frozenset()
    external: frozenset[str] = frozenset()
    limits: ToolLimits = field(default_factory=ToolLimits)
    renderer: Callable[[Any, Any], Any] | None = None


@dataclass
class StepCalls:
    """What came of a step's calls. ``pending``: the step paused; none of its calls ran, unless a
    sub-agent paused after them (then their results are here). ``agent_runs``: each sub-agent
    call's record, by call id (``_turn.agents``)."""

    calls: list[ToolCall] = field(default_factory=list)
    results: list[ToolResult] = field(default_factory=list)
    submitted: dict[str, Any] | None = None
    submit_denied: bool = False
    finished: tuple[str, dict[str, Any]] | None = None
    unexecuted: list[dict[str, Any]] = field(default_factory=list)
    pending: list[PendingCall] = field(default_factory=list)
    agent_runs: dict[str, Mapping[str, Any]] = field(default_factory=dict)
    renamed: dict[str, str] = field(default_factory=dict)  # the reply's call id -> the id recorded


@dataclass(frozen=True)
class _Checked:
    """One call after its checks: decided (``result``; ``recorded`` when a paused step had it
    already), to run (``runner``; ``resume``: a paused sub-agent's record), answered externally
    (``answer``), or waiting (``pending``)."""

    call: ToolCall
    result: ToolResult | None = None
    runner: Tool | None = None
    answer: Returned | Raised | None = None
    pending: PendingKind | None = None
    unexecuted: bool = False
    recorded: bool = False
    resume: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class Running:
    """What a step's calls run with beyond the call context: the caller's decisions on resume, the
    paused step being resumed (its recorded results and sub-agent records), and the turn's meter
    (a sub-agent's budget, and where its usage is counted)."""

    decisions: Decisions = field(default_factory=Decisions)
    resumed: Step | None = None
    meter: Meter | None = None


def run_calls(
    ctx: CallContext,
    raw: Sequence[RawCall],
    mode: CallMode,
    step_index: int,
    taken: set[str],
    running: Running | None = None,
) -> Generator[RunTool | RunTools | DecidedCall, Any, StepCalls]:
    """Check every call of a step, then run them; yields the tool runs to the driver.

    Every call is checked (policy included) before any runs. If one waits for a person or an
    external runner, none runs and ``pending`` lists them. Otherwise they run in call order,
    or all at once under ``parallel`` (sub-agent calls excepted: they run one at a time, in call
    order, after the batch); ``finish_on`` hooks are decided in call order either way. A
    sub-agent that pauses pauses the step after its calls ran (``_turn.agents``).

    Calls without an id get ``call_{step}_{index}``; an id the conversation already holds
    (a provider reusing ids, or a made-up id of an earlier turn) gets a ``_2``, ``_3``...
    suffix, so every call in a request has its own id; ``renamed`` says which. ``taken`` is updated.
    """
    running = running or Running()
    done = StepCalls()
    checked = []
    for index, call in enumerate(raw):
        record = ToolCall(
            id=_unique(call.id or f"call_{step_index}_{index}", taken, done.renamed),
            name=call.name,
            args=dict(call.args) if isinstance(call.args, Mapping) else {},
            received=call.received,
        )
        if not _runs_in(ctx, call.name, mode):
            done.unexecuted.append({"id": record.id, "name": record.name, "args": dict(record.args)})
            checked.append(_Checked(record, result=_error(record, _not_run(ctx, record, mode)), unexecuted=True))
            continue
        kept = _kept(ctx, record, running.resumed, done)
        checked.append(kept or _check(ctx, record, call.args, mode, done, running.decisions))
    done.pending = [PendingCall(c.call.id, c.call.name, c.call.args, c.pending) for c in checked if c.pending]
    if done.pending:
        done.calls = [c.call for c in checked if not c.unexecuted]
        done.submitted = None
        return done
    yield from _execute(ctx, checked, done, mode, running)
    return done


def _kept(ctx: CallContext, call: ToolCall, resumed: Step | None, done: StepCalls) -> _Checked | None:
    """A call of the resumed paused step that ran already (its result is kept, it does not run
    again), or a sub-agent that paused (it resumes, without being checked again)."""
    if resumed is None or call.name == SUBMIT:  # submit is checked again: it is what ends the turn
        return None
    run = resumed.agent_runs.get(call.id)
    runner = ctx.runners.get(call.name or "")
    if agents.paused_run(run) and runner is not None:
        return _Checked(call, runner=runner, resume=run)
    result = next((r for r in resumed.results if r.id == call.id), None)
    if result is None:
        return None
    if run is not None:
        done.agent_runs[call.id] = run
    return _Checked(call, result=result, recorded=True)


def _execute(
    ctx: CallContext, checked: list[_Checked], done: StepCalls, mode: CallMode, running: Running
) -> Generator[RunTool | RunTools | DecidedCall, Any, None]:
    runs = [c for c in checked if c.runner is not None and not agents.is_agent(c.runner)]
    outcomes: dict[str, Returned | Raised] = {}
    if ctx.parallel and len(runs) > 1:
        answers = yield RunTools(tuple(_run(ctx, c.runner, c.call) for c in runs if c.runner))
        outcomes = {c.call.id: answer for c, answer in zip(runs, answers, strict=True)}
    for item in checked:
        result = item.result
        stage: Literal["call", "finish_on", "unexecuted"] | None = "unexecuted" if item.unexecuted else "call"
        if item.recorded:  # its finish_on hook decides again, in call order, on the recorded value
            stage = None
            if result is not None and not result.error and item.call.name in ctx.finish_on:
                result = _finish_hook(ctx, item.call, result.value, done, result.returned_at)
        elif agents.is_agent(item.runner):
            result, stage = yield from _run_agent(ctx, item, done, mode, running)
            if result is None:  # the sub-agent paused: the call waits, with no result
                done.calls.append(item.call)
                continue
        elif item.runner is not None:
            outcome = outcomes.get(item.call.id) or (yield _run(ctx, item.runner, item.call))
            result, rejected = _judged(ctx, item.call, outcome, done)
            stage = "finish_on" if rejected else None
        elif item.answer is not None:
            result = _returned(ctx, item.call, item.answer, done)
        assert result is not None
        if stage is not None:  # no tool ran here, or its hook rejected it: reported, as a tool that ran
            tool = ctx.roster.get(item.call.name or "")
            yield DecidedCall(item.call, result, item.call.args, tool.desc if tool is not None else None, stage)
        if not item.unexecuted:
            done.calls.append(item.call)
            done.results.append(result)


def _run(ctx: CallContext, runner: Tool, call: ToolCall) -> RunTool:
    """The run of one call, bounded by its tool's timeout and the deadline (``_turn.limits``)."""
    timeout, by_deadline = ctx.limits.bound(call.name)
    return RunTool(runner, dict(call.args), timeout, by_deadline, call)


def _run_agent(
    ctx: CallContext, item: _Checked, done: StepCalls, mode: CallMode, running: Running
) -> Generator[RunTool, Any, tuple[ToolResult | None, Literal["finish_on"] | None]]:
    """Run (or resume) a sub-agent's turn; its result, or ``None`` when it paused."""
    assert item.runner is not None
    meter = running.meter
    budget = meter.remaining() if meter is not None else None
    ended = yield agents.effect(item.runner, item.call, item.resume, running.decisions, budget)
    came = agents.came_to(item.runner, item.call, ended, can_wait=mode == "step")
    if meter is not None:
        meter.add(came.usage)
    done.agent_runs[item.call.id] = came.record
    if came.pending:
        done.pending.extend(came.pending)
        return None, None
    if came.rejection is not None:
        return _error(item.call, came.rejection, ended.at), None
    assert came.outcome is not None
    result, rejected = _judged(ctx, item.call, came.outcome, done)
    return result, "finish_on" if rejected else None


def _not_run(ctx: CallContext, call: ToolCall, mode: CallMode) -> Rejection:
    """Why a call of a last request was not run: what tracers show (the model reads nothing)."""
    name = call.name or "the call"
    if mode == "forced":
        return Rejection("unexecuted", f"{name} was not run: the forced submit request runs only {SUBMIT}.")
    tools = ", ".join(ctx.last_request_tools) or "no tools"
    return Rejection("unexecuted", f"{name} was not run: the last-text request runs only last_request_tools ({tools}).")


def _unique(call_id: str, taken: set[str], renamed: dict[str, str]) -> str:
    unique, suffix = call_id, 1
    while unique in taken:
        suffix += 1
        unique = f"{call_id}_{suffix}"
    taken.add(unique)
    if unique != call_id:  # what the reply's reasoning blocks name must follow (Gemini's signatures)
        renamed[call_id] = unique
    return unique


def _runs_in(ctx: CallContext, name: str | None, mode: CallMode) -> bool:
    if mode == "forced":
        return name == SUBMIT
    if mode == "last_text":
        return name in ctx.last_request_tools
    return True


def _check(
    ctx: CallContext, call: ToolCall, args: Any, mode: CallMode, done: StepCalls, decisions: Decisions
) -> _Checked:
    refusal = _refuse(ctx, call, args, mode, decisions)
    if isinstance(refusal, Rejection):
        if refusal.kind == "tool_denied" and call.name == SUBMIT:
            done.submit_denied = True
        return _Checked(call, result=_error(call, refusal))
    if refusal is not None:
        return _Checked(call, pending=refusal)
    if call.name == SUBMIT:
        outputs = ctx.outputs.validate(args)
        if isinstance(outputs, Rejection):
            return _Checked(call, result=_error(call, outputs))
        done.submitted = outputs
        return _Checked(call, result=_ok(call, outputs))
    assert call.name is not None
    if call.id in decisions.results:
        value = decisions.results[call.id]
        return _Checked(call, answer=Raised(value) if isinstance(value, BaseException) else Returned(value))
    if call.name in ctx.external:
        return _Checked(call, pending="external")
    return _Checked(call, runner=ctx.runners[call.name])


def _refuse(ctx: CallContext, call: ToolCall, args: Any, mode: CallMode, decisions: Decisions) -> Verdict:
    """An observation refusing the call, ``"approval"`` (a person must decide), or ``None``."""
    if call.name is None:
        return Rejection("malformed_tool_call", sentences.malformed_call(call.received))
    if call.name not in ctx.roster:
        return Rejection("unknown_tool", sentences.unknown_tool(call.name))
    decided = _decided(call, decisions)
    if isinstance(decided, Rejection):
        return decided
    verdict = _policy_verdict(ctx, call.name, dict(call.args))  # an approval never overrides the policy
    if decided == "approved" and verdict == "approval":
        verdict = None
    if isinstance(verdict, Rejection):
        return verdict
    if verdict == "approval" and mode != "step":  # a last request cannot wait for a person
        return Rejection("tool_denied", sentences.tool_not_allowed(call.name, sentences.NO_APPROVAL_NOW))
    if call.name == SUBMIT:
        return verdict
    return check_arguments(ctx.roster[call.name], args) or verdict


def _decided(call: ToolCall, decisions: Decisions) -> Rejection | Literal["approved"] | None:
    answer = decisions.approvals.get(call.id)
    if answer is None:
        return None
    if answer is True:
        return "approved"
    reason = answer if isinstance(answer, str) else None
    return Rejection("tool_denied", sentences.tool_not_allowed(call.name or "", reason))


def _policy_verdict(ctx: CallContext, name: str, args: dict[str, Any]) -> Verdict:
    policy = ctx.policy
    verdict: Any = True
    if isinstance(policy, frozenset):
        verdict = name in policy
    elif policy is not None:
        try:
            verdict = policy(name, args)
        except Exception as exc:  # host code at the tool boundary: the call is refused, the turn goes on
            return Rejection("tool_denied", sentences.policy_failed(name, _message(exc)))
    if asks_approval(verdict) or (verdict is True and name in ctx.needs_approval):
        return "approval"
    if verdict is True:
        return None
    reason = verdict if isinstance(verdict, str) and verdict.strip() else None
    return Rejection("tool_denied", sentences.tool_not_allowed(name, reason))


def _returned(ctx: CallContext, call: ToolCall, outcome: Returned | Raised, done: StepCalls) -> ToolResult:
    return _judged(ctx, call, outcome, done)[0]


def _judged(ctx: CallContext, call: ToolCall, outcome: Returned | Raised, done: StepCalls) -> tuple[ToolResult, bool]:
    """The call's result, and whether its ``finish_on`` hook rejected what the tool returned
    (the tool's own span is OK then, so the rejection is reported on its own)."""
    if isinstance(outcome, Raised):
        failed = misbehaved(call.name or "", outcome.error) or Rejection(
            "tool_error", sentences.tool_failed(call.name or "", _message(outcome.error))
        )
        return _error(call, failed, outcome.at), False
    value = readable_result(outcome.value)
    if isinstance(value, Rejection):
        unreadable = Rejection("tool_error", sentences.unreadable_result(call.name or "", value.sentence))
        return _error(call, unreadable), False
    result = _finish_hook(ctx, call, value, done, outcome.at)
    return cut_result(ctx.limits, ctx.renderer, call, result), result.error


def _finish_hook(ctx: CallContext, call: ToolCall, value: Any, done: StepCalls, at: str | None) -> ToolResult:
    hook = ctx.finish_on.get(call.name or "")
    if hook is None:
        return _ok(call, value, at)
    try:
        verdict = hook(dict(call.args), value, dict(ctx.inputs))
    except Exception as exc:  # the hook is host code at the tool boundary: an observation
        return _error(call, Rejection("tool_error", sentences.tool_failed(call.name or "", _message(exc))))
    if not isinstance(verdict, Finish):
        return _ok(call, value, at)
    outputs = ctx.outputs.validate(verdict.outputs)
    if isinstance(outputs, Rejection):
        return _error(call, outputs, at)
    if done.finished is None:
        done.finished = (call.name or "", outputs)
    return _ok(call, value, at)


def readable_result(value: Any) -> Any:
    """``value`` if the model can be shown it as UTF-8 text; the text with lone surrogates
    replaced when only its encoding fails; a ``Rejection`` saying why when it cannot be
    rendered at all (a circular structure, a ``__str__`` that raises). Media are sent as media."""
    if contains_media(value):
        return value
    try:
        text = result_text(value)
    except (Exception, RecursionError) as exc:
        return Rejection("tool_error", _message(exc))
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return _SURROGATE.sub("\ufffd", text)
    return value


def _ok(call: ToolCall, value: Any, at: str | None = None) -> ToolResult:
    return ToolResult(call.id, call.name, value, False, at or now_iso())


def _error(call: ToolCall, rejection: Rejection, at: str | None = None) -> ToolResult:
    return ToolResult(call.id, call.name, rejection.sentence, True, at or now_iso(), rejection.kind)


def _message(error: BaseException) -> str:
    text = " ".join(error_text(error).split())
    return text or type(error).__name__
