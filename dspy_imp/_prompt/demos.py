"""Demos: what an optimizer put on ``agent.react``, as example exchanges the model learns from.

Three shapes of demo reach the inner predictor:

- a *bootstrapped step* (``BootstrapFewShot`` and its random search, ``MIPROv2``, SIMBA's
  ``append_a_demo``): the step's inputs (the task inputs on a turn's first step only, the
  ``history`` as it was at that step, ``tools``) and its outputs ``next_thought`` and
  ``tool_calls``, with the ``tool_call_results`` the loop adds to the trace (``complete_trace``);
- a *labeled example* (``LabeledFewShot``, the labeled demos of the Bootstrap optimizers):
  task inputs and task outputs;
- a step recorded by ``dspy.ReActV2`` (a state saved by the stock program): ``ToolCalls`` with
  their results nested.

Each becomes a short list of ``Step`` records that ``_prompt.render`` shows exactly like live steps,
so in the live request's tool-call format (native calls with their tool messages, or
written). A later step comes with the turn it was taken in: its task inputs and at most the
last ``CONTEXT_STEPS`` steps before it. A call whose result the demo does not carry gets
``DEMO_RESULT_NOT_SHOWN`` as its result, so no call is ever shown without one. A labeled
example ends the way a turn ends: the answer as text, or a ``submit`` call and its result.
Provider reasoning is never shown in a demo (it belongs to another conversation). Call ids
are renamed ``demo{n}_{step}_{index}``, so they never collide with the live history's.

A demo that cannot be shown (no task input anywhere, a labeled example under
``finish="tools"``, neither step fields nor task outputs) raises ``ConfigurationError``:
nothing an optimizer sets is silently dropped.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import dspy

from dspy_imp._prompt import sentences
from dspy_imp._prompt.dialect import jsonable
from dspy_imp._prompt.guidance import Guidance
from dspy_imp._prompt.signature import STEP_CALLS, STEP_TEXT, SUBMIT
from dspy_imp._records.errors import ConfigurationError
from dspy_imp._records.steps import (
    Step,
    ToolCall,
    ToolResult,
    coerce_history,
    from_entry,
    read_steps,
    to_entry,
)

CONTEXT_STEPS = 2


_STEP_KEYS = (STEP_TEXT, STEP_CALLS, "tool_call_results")


def demo_examples(guidance: Guidance, demos: Sequence[Any]) -> list[list[Step]]:
    """Each demo as the steps to render, in order."""
    return [_renamed(number, demo_steps(guidance, demo, number)) for number, demo in enumerate(demos)]


def demo_steps(guidance: Guidance, demo: Any, number: int = 0) -> list[Step]:
    data = _as_dict(demo)
    task = guidance.task
    inputs = {n: data[n] for n in task.input_names if data.get(n) is not None}
    outputs = {n: data[n] for n in task.output_names if n in data}
    if any(k in data for k in (STEP_TEXT, STEP_CALLS)):
        return _step_demo(guidance, data, inputs, outputs, number)
    if outputs:
        return [_labeled(guidance, inputs, outputs, number)]
    raise ConfigurationError(
        f"demo {number} on `react` has neither the step fields (`next_thought`, `tool_calls`) nor the task's "
        f"outputs {list(task.output_names)!r}; it cannot be shown to the model (keys: {sorted(data)!r})"
    )


def _as_dict(demo: Any) -> dict[str, Any]:
    if isinstance(demo, dspy.Example):
        return dict(demo.items())
    if isinstance(demo, Mapping):
        return dict(demo)
    raise ConfigurationError(f"demos must be dspy.Example or dicts, got {demo!r}")


def _step_demo(
    guidance: Guidance, data: dict[str, Any], inputs: dict[str, Any], outputs: dict[str, Any], number: int
) -> list[Step]:
    task = guidance.task
    entry = {k: data[k] for k in _STEP_KEYS if data.get(k) is not None}
    thought = entry.get(STEP_TEXT)
    if isinstance(thought, dspy.Reasoning):
        entry[STEP_TEXT] = thought.content
    step = from_entry({**inputs, **outputs, **entry}, task.input_names, task.output_names, number)
    step = _with_every_result(_bare_of_reasoning(step))
    context = [] if inputs else _context(guidance, data.get("history"))
    if not inputs and not any(s.inputs for s in context):
        raise ConfigurationError(
            f"demo {number} on `react` is a later step whose history carries none of the task's inputs "
            f"{list(task.input_names)!r}; it cannot be shown with the context it was taken in"
        )
    return [*context, step]


def _context(guidance: Guidance, history: Any) -> list[Step]:
    """The turn a later step was taken in: its task inputs and its last ``CONTEXT_STEPS`` steps."""
    try:
        entries = coerce_history(history)
    except ConfigurationError:  # e.g. SIMBA truncated a long history to text
        return []
    task = guidance.task
    steps = read_steps(entries, task.input_names, task.output_names)
    start = next((i for i in range(len(steps) - 1, -1, -1) if steps[i].inputs), None)
    if start is None:
        return []
    turn = [_with_every_result(_bare_of_reasoning(s)) for s in steps[start:]]
    kept = turn[-CONTEXT_STEPS:]
    if kept[0] is not turn[0]:
        kept[0] = replace(kept[0], inputs={**turn[0].inputs, **kept[0].inputs})
    return kept


def _labeled(guidance: Guidance, inputs: dict[str, Any], outputs: dict[str, Any], number: int) -> Step:
    """A labeled example: the inputs, then the answer as the turn would end with it."""
    task = guidance.task
    if not inputs:
        raise ConfigurationError(
            f"labeled demo {number} on `react` carries none of the inputs {list(task.input_names)!r}"
        )
    if guidance.has_submit:
        complete = {n: outputs.get(n) for n in task.output_names}
        call = ToolCall(f"submit_{number}", SUBMIT, complete)
        result = ToolResult(call.id, SUBMIT, jsonable(complete), False, "")
        return Step(inputs=inputs, calls=(call,), results=(result,), outputs=complete)
    if guidance.finish == "tools":
        raise ConfigurationError(
            f"labeled demo {number} on `react` cannot be shown under finish='tools': the turn ends only "
            "through a finish_on tool, and the example does not say which call ends it"
        )
    return Step(inputs=inputs, outputs=outputs, bare=True)


def _bare_of_reasoning(step: Step) -> Step:
    return replace(step, reasoning_content=None, reasoning_details=None)


def _with_every_result(step: Step) -> Step:
    """Every call with a result: the one the demo carries, else the not-shown note."""
    have = {r.id for r in step.results}
    note = sentences.DEMO_RESULT_NOT_SHOWN
    missing = tuple(ToolResult(c.id, c.name, note, False, "") for c in step.calls if c.id not in have)
    return replace(step, results=step.results + missing) if missing else step


def _renamed(number: int, steps: list[Step]) -> list[Step]:
    """Call ids unique to this demo: ``demo{number}_{step}_{index}``."""
    renamed = []
    for index, step in enumerate(steps):
        ids = {c.id: f"demo{number}_{index}_{i}" for i, c in enumerate(step.calls)}
        calls = tuple(replace(c, id=ids[c.id]) for c in step.calls)
        results = tuple(replace(r, id=ids.get(r.id, r.id)) for r in step.results)
        renamed.append(replace(step, calls=calls, results=results))
    return renamed


def complete_trace(trace: Sequence[Any], react: Any, steps: Sequence[Step]) -> None:
    """Give each traced step prediction of this turn the calls and results the loop recorded.

    The trace holds each step's prediction as the model made it; the tools ran after it was
    traced. Bootstrapping optimizers build demos from these predictions, so they get the
    recorded ``tool_calls`` (ids as replayed) and their ``tool_call_results`` (JSON-safe,
    without ``returned_at``: the Bootstrap optimizers hash demos to pick among them), and a demo
    shows each call with its result. Predictions are matched to recorded steps in order, by
    the calls' names and arguments.

    Each traced step's ``history`` input loses its results' ``returned_at`` too (sub-agents' runs
    included), so nothing in a demo depends on when it was made (issue 47). The turn's own history
    (``metadata.history``, ``dump_history``) keeps the stamps: the trace holds a copy.
    """
    unclaimed = [s for s in steps if s.calls]
    copies: dict[int, Any] = {}  # each step's history holds the entries before it: one copy per entry
    for predictor, inputs, prediction in trace:
        if predictor is not react or not isinstance(prediction, dspy.Prediction):
            continue
        if isinstance(inputs, dict) and isinstance(inputs.get("history"), dspy.History):
            inputs["history"] = dspy.History(messages=_timeless_all(inputs["history"].messages, copies))
        key = _call_key(prediction.get(STEP_CALLS))
        if not key:
            continue
        step = next((s for s in unclaimed if [(c.name, dict(c.args)) for c in s.calls] == key), None)
        if step is None:
            continue
        unclaimed.remove(step)
        entry = to_entry(step)
        prediction[STEP_CALLS] = entry["tool_calls"]
        prediction["tool_call_results"] = [_demo_result(r) for r in entry["tool_call_results"]]


def _timeless_all(messages: list[Any], copies: dict[int, Any]) -> list[Any]:
    """``_timeless`` of each entry, once per entry object: the steps of one turn share their history's
    entries (the originals stay alive in the trace for the whole call, so an id names one entry).

    Step k's history holds the k entries before it, so a Python call per entry and step was N²/2
    calls in an N-step turn; only the entries no earlier step held are copied here, and the
    lookups of the rest run in C.
    """
    ids = list(map(id, messages))
    missing = set(ids).difference(copies)
    if missing:
        by_id = dict(zip(ids, messages, strict=True))
        for key in missing:
            copies[key] = _timeless(by_id[key])
    return list(map(copies.__getitem__, ids))


def _timeless(entry: Any) -> Any:
    """A history entry without its results' ``returned_at``, nor its sub-agents' (a copy)."""
    if not isinstance(entry, Mapping):
        return entry
    out = dict(entry)
    results = out.get("tool_call_results")
    if isinstance(results, list):
        out["tool_call_results"] = [
            {k: v for k, v in r.items() if k != "returned_at"} if isinstance(r, Mapping) else r for r in results
        ]
    runs = out.get("agent_runs")
    if isinstance(runs, Mapping):
        out["agent_runs"] = {key: _timeless_run(run) for key, run in runs.items()}
    return out


def _timeless_run(run: Any) -> Any:
    if not isinstance(run, Mapping) or not isinstance(run.get("history"), list):
        return run
    return {**run, "history": [_timeless(e) for e in run["history"]]}


def _demo_result(result: Mapping[str, Any]) -> dict[str, Any]:
    """A result as a demo keeps it: JSON-safe, and without its time (demos are hashed to pick among them)."""
    return {**{k: v for k, v in result.items() if k != "returned_at"}, "result": jsonable(result["result"])}


def _call_key(calls: Any) -> list[tuple[Any, Any]]:
    if not isinstance(calls, list):
        return []
    return [(c.get("name"), c.get("args")) for c in calls if isinstance(c, Mapping)]
