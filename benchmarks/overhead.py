"""Per-request cost against the number of recorded steps: ours, DSPy's plumbing, ``dspy.ReActV2``.

One turn of N tool steps, then a ``submit``, runs in-process against ``ScriptedLM``'s engine
(answering at once, keeping nothing). Timers wrapped around a few functions split each request's
time into buckets, recorded when the request's effect completes:

- *engine*: the scripted engine itself (it stands for the provider; left out of everything);
- *ours*: everything that is not DSPy's or the engine's: the state machine and bookkeeping,
  and ``ReActAdapter``'s hooks (rendering, reading the reply);
- *DSPy's plumbing*: ``Predict``, the adapter base and ``dspy.LM`` (for the native engine:
  canonicalising the message list into an lm15 request) around our hooks;
- *tools*: running the tool through ``dspy.Tool`` (which validates its arguments again).

Hooks run inside DSPy's adapter call, but only our own hook bodies are counted as ours: DSPy's
``with_callbacks`` wrapper around ``format`` is timed with them (with no callbacks configured it
only reads the callback lists). Our code that runs inside ``Effects.perform`` outside the hooks
(building the predictor's inputs, the tracing annotations in ``StepPredictor``) is counted as
plumbing.

The value at N is the least disturbed of the last 20 requests of the N-step turn (cost at history
length about N). *Rendering alone* re-runs the turn's last ``format`` by itself (same request,
same memo, 50 times, the least disturbed): our rendering's own work at that history length,
without DSPy's plumbing for a 2,000-message request running between two of our calls.
``dspy.ReActV2`` is timed whole (minus the engine); it runs to a smaller N, since its
per-request cost grows with the history and a long turn would take minutes.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import dspy

import dspy_imp
from dspy_imp import _adapter, _drivers, testing
from dspy_imp._effects import ModelRequest, RunTool
from dspy_imp.testing import call, reply

WINDOW = 20


class Task(dspy.Signature):
    """Answer with a confidence."""

    question: str = dspy.InputField()
    answer: str = dspy.OutputField()
    confidence: float = dspy.OutputField()


def look(where: str) -> str:
    """Look somewhere."""
    return f"nothing at {where}"


class Meter:
    """Cumulative seconds per bucket, and a snapshot at the end of every request."""

    def __init__(self) -> None:
        self.totals = {"engine": 0.0, "request": 0.0, "hooks": 0.0, "tools": 0.0}
        self.snapshots: list[tuple[float, dict[str, float]]] = []
        self.last_format: tuple[Any, ...] | None = None

    def render_alone(self, repeats: int = 50) -> float:
        """Seconds for the last request's ``format`` run by itself, the least disturbed of ``repeats``."""
        assert self.last_format is not None
        render, adapter, args, kwargs, exchange = self.last_format
        token = _adapter.current_exchange().set(exchange)
        try:
            times = []
            for _ in range(repeats):
                start = time.perf_counter()
                render(adapter, *args, **kwargs)
                times.append(time.perf_counter() - start)
        finally:
            _adapter.current_exchange().reset(token)
        return min(times)

    def mark(self) -> None:
        self.snapshots.append((time.perf_counter(), dict(self.totals)))

    def timed(self, bucket: str, function: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                self.totals[bucket] += time.perf_counter() - start

        return wrapper

    def intervals(self) -> list[dict[str, float]]:
        """Seconds per bucket between consecutive snapshots, plus ``wall``."""
        out = []
        for (t0, a), (t1, b) in zip(self.snapshots, self.snapshots[1:], strict=False):
            out.append({"wall": t1 - t0, **{k: b[k] - a[k] for k in b}})
        return out


@contextlib.contextmanager
def metered(meter: Meter) -> Iterator[None]:
    """Timers around the scripted engine, our adapter hooks, and the drivers' effects."""
    patches: list[tuple[Any, str, Any]] = []

    def patch(owner: Any, name: str, bucket: str) -> None:
        original = owner.__dict__[name]
        patches.append((owner, name, original))
        setattr(owner, name, meter.timed(bucket, original))

    patch(testing._Script, "complete", "engine")
    original_format = _adapter.ReActAdapter.__dict__["format"]

    def remembered(self: Any, *args: Any, **kwargs: Any) -> Any:
        meter.last_format = (original_format, self, args, kwargs, _adapter.current_exchange().get())
        return original_format(self, *args, **kwargs)

    patches.append((_adapter.ReActAdapter, "format", original_format))
    _adapter.ReActAdapter.format = remembered  # type: ignore[method-assign]
    for hook in ("_call_preprocess", "format", "_call_postprocess"):
        patch(_adapter.ReActAdapter, hook, "hooks")
    perform = _drivers.Effects.perform

    def performing(self: Any, effect: Any) -> Any:
        bucket = "tools" if isinstance(effect, RunTool) else "request"
        start = time.perf_counter()
        try:
            return perform(self, effect)
        finally:
            meter.totals[bucket] += time.perf_counter() - start
            if isinstance(effect, ModelRequest):
                meter.mark()

    _drivers.Effects.perform = performing  # type: ignore[method-assign]
    try:
        yield
    finally:
        _drivers.Effects.perform = perform  # type: ignore[method-assign]
        for owner, name, original in reversed(patches):
            setattr(owner, name, original)


class _Instant(testing._Script):
    """``ScriptedLM``'s engine without its recording: it answers at once and keeps nothing.

    ``ScriptedLM`` keeps every request, converted back to Chat Completions form, which at a
    thousand steps is a heap of hundreds of megabytes that slows everything in the process;
    a provider keeps nothing on our side.
    """

    def next(self, request: Any, asynchronous: bool) -> Any:
        self.position += 1
        assert self.responder is not None
        item = self.responder(None)
        return item, self.position, testing.RecordedRequest([], None, None, {}, asynchronous, request)


def scripted(steps: int, meter: Meter | None = None) -> dspy.LM:
    made = [0]

    def answer(_request: Any) -> Any:
        made[0] += 1
        if meter is not None:
            meter.mark()  # dspy.ReActV2: request boundaries are the engine's calls
        done = made[0] - 1
        if done >= steps:
            return reply(calls=[call("submit", {"answer": "found", "confidence": 0.9}, id=f"s{done}")])
        return reply(f"step {done}", calls=[call("look", {"where": f"place {done}"}, id=f"c{done}")])

    return dspy.LM("openai/scripted", engine=_Instant(answer, native=True), cache=False, num_retries=0)


def _tail(values: list[float]) -> float:
    """The least disturbed of the turn's last requests: noise (other processes, a GC pass) only adds.

    For a cost that grows with the history this reads a little low, which favours the loop
    whose cost grows: ``dspy.ReActV2``.
    """
    return min(values[-WINDOW:])


def ours(steps: int, history: bool = True) -> dict[str, float]:
    """ms per request near the end of an N-step turn: ours, DSPy's plumbing, and the whole.

    ``history=False`` runs with ``dspy.configure(disable_history=True)``: DSPy then keeps no
    ``lm.history`` entry (with its converted request) per call, and the heap stays small.
    """
    meter = Meter()
    lm = scripted(steps)
    agent = dspy_imp.ReActV2(Task, tools=[look], max_iters=steps + 1)
    with metered(meter), dspy.context(lm=lm, disable_history=not history):
        meter.mark()
        prediction = agent(question="where is it?")
        alone = meter.render_alone()
    assert prediction.answer == "found", prediction
    rows = meter.intervals()
    own = [r["wall"] - r["request"] - r["tools"] + r["hooks"] for r in rows]
    plumbing = [r["request"] - r["hooks"] - r["engine"] for r in rows]
    whole = [r["wall"] - r["engine"] - r["tools"] for r in rows]
    return {
        "ours_ms": _tail(own) * 1e3,
        "plumbing_ms": _tail(plumbing) * 1e3,
        "whole_ms": _tail(whole) * 1e3,
        "render_alone_ms": alone * 1e3,
    }


def theirs(steps: int) -> dict[str, float]:
    """Median ms per request near the end of an N-step ``dspy.ReActV2`` turn (engine left out)."""
    meter = Meter()
    lm = scripted(steps, meter)
    agent = dspy.ReActV2(Task, tools=[look], max_iters=steps + 1)
    with metered(meter), dspy.context(lm=lm, adapter=dspy.ChatAdapter(use_native_function_calling=True)):
        prediction = agent(question="where is it?")
    assert prediction.answer == "found", prediction
    rows = meter.intervals()
    return {"dspy_ms": _tail([r["wall"] - r["engine"] for r in rows]) * 1e3}


def curve(ours_steps: list[int], their_steps: list[int]) -> list[dict[str, Any]]:
    ours(2)  # warm-up
    theirs(2)
    rows = []
    for steps in sorted(set(ours_steps) | set(their_steps)):
        row: dict[str, Any] = {"steps": steps}
        if steps in ours_steps:
            row.update(ours(steps))
        if steps in their_steps:
            row.update(theirs(steps))
        if steps in (ours_steps[1 if len(ours_steps) > 1 else 0], ours_steps[-1]):
            row["ours_no_history_ms"] = ours(steps, history=False)["ours_ms"]
        print(f"  steps={steps:<5} " + " ".join(f"{k}={v:.2f}" for k, v in row.items() if k != "steps"), flush=True)
        rows.append(row)
    return rows


if __name__ == "__main__":
    curve([1, 10, 100, 300, 1000], [1, 10, 100, 300])
