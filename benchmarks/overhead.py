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

Our value at N is the least disturbed of the requests sent with at least 95% of the N steps
recorded, from repeated turns when the turn is short (``SAMPLES``): noise only ever adds. Each
measurement runs in a new process (``fresh``). *Rendering alone* re-runs the turn's last
``format`` by itself (same request, same memo, 300 times, the least disturbed): our rendering's
own work at that history length, without DSPy's plumbing for a 2,000-message request running
between two of our calls.
``dspy.ReActV2`` is timed whole (minus the engine); it runs to a smaller N, since its
per-request cost grows with the history and a long turn would take minutes.

*Matched* (``matched``) is the interference control: the short turn again, with the scripted
engine building and dropping as many small objects per request as take DSPy's plumbing's
time at the longest history, so that our calls run after the same memory traffic.
"""

from __future__ import annotations

import contextlib
import gc
import json
import math
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import dspy

import dspy_imp
from dspy_imp import testing
from dspy_imp._drivers import adapter as _adapter
from dspy_imp._drivers import driver as _drivers
from dspy_imp._turn.effects import ModelRequest, RunTool
from dspy_imp.testing import call, reply

_ROOT = Path(__file__).resolve().parent.parent
WINDOW = 20  # dspy.ReActV2: the last requests of one turn
SAMPLES = 40  # ours: requests at about N steps, from repeated turns when the turn is short


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

    def render_alone(self, repeats: int = 300) -> float:
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

    churn = 0  # small objects built and dropped per request: the interference control (``matched``)
    churn_from = 0  # from this request on (0-based): the sampled requests and the one before

    def next(self, request: Any, asynchronous: bool) -> Any:
        self.position += 1
        if self.churn and self.position > self.churn_from:
            _churn(self.churn)
        assert self.responder is not None
        item = self.responder(None)
        return item, self.position, testing.RecordedRequest([], None, None, {}, asynchronous, request)


def _churn(count: int) -> int:
    """Build ``count`` small message-like dicts, read them, drop them: memory traffic, no answer."""
    junk = [{"role": "tool", "content": str(i), "parts": [i]} for i in range(count)]
    return sum(len(item) for item in junk)


def churn_matching(ms: float) -> int:
    """How many ``_churn`` objects take about ``ms`` milliseconds to build and drop here."""
    gc.collect()
    times = []
    for _ in range(5):
        start = time.perf_counter()
        _churn(20_000)
        times.append(time.perf_counter() - start)
    return int(ms / (min(times) * 1e3 / 20_000))


def _first_sample(steps: int) -> int:
    """The first request sampled in an N-step turn: the first with 95% of the steps recorded."""
    return min(steps, math.ceil(0.95 * steps))


def scripted(steps: int, meter: Meter | None = None, churn: int = 0, marked: bool = False) -> dspy.LM:
    """The scripted engine; ``marked``: its text in ChatAdapter field markers, as a model writes it for
    ``dspy.ReActV2`` (without them every stock reply fails to parse first)."""
    made = [0]

    def answer(_request: Any) -> Any:
        made[0] += 1
        if meter is not None:
            meter.mark()  # dspy.ReActV2: request boundaries are the engine's calls
        done = made[0] - 1
        if done >= steps:
            return reply(calls=[call("submit", {"answer": "found", "confidence": 0.9}, id=f"s{done}")])
        text = f"[[ ## next_thought ## ]]\nstep {done}\n\n[[ ## completed ## ]]" if marked else f"step {done}"
        return reply(text, calls=[call("look", {"where": f"place {done}"}, id=f"c{done}")])

    engine = _Instant(answer, native=True)
    engine.churn, engine.churn_from = churn, _first_sample(steps) - 1
    return dspy.LM("openai/scripted", engine=engine, cache=False, num_retries=0)


def _tail(values: list[float]) -> float:
    """The least disturbed of the turn's last requests: noise (other processes, a GC pass) only adds.

    For a cost that grows with the history this reads a little low, which favours the loop
    whose cost grows: ``dspy.ReActV2``.
    """
    return min(values[-WINDOW:])


def ours(steps: int, history: bool = True, churn: int = 0) -> dict[str, float]:
    """ms per request at about N recorded steps: ours, DSPy's plumbing, and the whole.

    The samples are the requests sent with at least 95% of the N steps recorded; short turns
    are repeated until there are ``SAMPLES`` of them (a 10-step turn gives one, a 1,000-step
    turn 51), and the least disturbed sample counts. ``history=False`` runs with
    ``dspy.configure(disable_history=True)``: DSPy then keeps no ``lm.history`` entry (with its
    converted request) per call, and the heap stays small. ``churn``: the engine also builds
    and drops that many small objects per request (its time is the engine's, left out).
    """
    rows: list[dict[str, float]] = []
    alone = float("inf")
    while len(rows) < SAMPLES:
        meter = Meter()
        lm = scripted(steps, churn=churn)
        agent = dspy_imp.ReActV2(Task, tools=[look], max_iters=steps + 1)
        with metered(meter), dspy.context(lm=lm, disable_history=not history):
            meter.mark()
            prediction = agent(question="where is it?")
            alone = min(alone, meter.render_alone())
        assert prediction.answer == "found", prediction
        rows += meter.intervals()[_first_sample(steps) :]
    own = [r["wall"] - r["request"] - r["tools"] + r["hooks"] for r in rows]
    plumbing = [r["request"] - r["hooks"] - r["engine"] for r in rows]
    whole = [r["wall"] - r["engine"] for r in rows]  # the tool step included, as in ``theirs``
    return {
        "ours_ms": min(own) * 1e3,
        "plumbing_ms": min(plumbing) * 1e3,
        "whole_ms": min(whole) * 1e3,
        "render_alone_ms": alone * 1e3,
        "samples": len(rows),
    }


def theirs(steps: int) -> dict[str, float]:
    """Median ms per request near the end of an N-step ``dspy.ReActV2`` turn (engine left out)."""
    meter = Meter()
    lm = scripted(steps, meter, marked=True)
    agent = dspy.ReActV2(Task, tools=[look], max_iters=steps + 1)
    with metered(meter), dspy.context(lm=lm, adapter=dspy.ChatAdapter(use_native_function_calling=True)):
        prediction = agent(question="where is it?")
    assert prediction.answer == "found", prediction
    rows = meter.intervals()
    return {"dspy_ms": _tail([r["wall"] - r["engine"] for r in rows]) * 1e3}


def fresh(measure: str, steps: int, **options: Any) -> dict[str, Any]:
    """``ours``/``theirs`` in a new process: each measurement starts from the same clean heap.

    In one process, a 10-step turn measured after a 1,000-step one runs markedly slower (the heap
    it leaves behind is spread over more memory), which would make the order of the
    measurements part of the result.
    """
    command = [sys.executable, "-m", "benchmarks.overhead", measure, str(steps), json.dumps(options)]
    done = subprocess.run(command, capture_output=True, text=True, check=False, cwd=_ROOT)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{done.stderr}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def curve(ours_steps: list[int], their_steps: list[int]) -> list[dict[str, Any]]:
    rows = []
    for steps in sorted(set(ours_steps) | set(their_steps)):
        row: dict[str, Any] = {"steps": steps}
        if steps in ours_steps:
            row.update(fresh("ours", steps))
        if steps in their_steps:
            row.update(fresh("theirs", steps))
        if steps in (ours_steps[1 if len(ours_steps) > 1 else 0], ours_steps[-1]):
            row["ours_no_history_ms"] = fresh("ours", steps, history=False)["ours_ms"]
        print(f"  steps={steps:<5} " + " ".join(f"{k}={v:.2f}" for k, v in row.items() if k != "steps"), flush=True)
        rows.append(row)
    matched(rows, ours_steps)
    return rows


def matched(rows: list[dict[str, Any]], ours_steps: list[int]) -> None:
    """The interference control: the short turn again, its engine moving as much memory per
    request as DSPy's plumbing takes time at the longest history (``ours_matched_ms``).

    Between two of our calls in a long turn, DSPy's plumbing builds and drops lm15 objects for
    the whole message list; our next calls then run on cold caches. A short turn whose engine
    does the same amount of throwaway work shows how much of the long turn's figure is that,
    with our work unchanged.
    """
    by_steps = {row["steps"]: row for row in rows}
    small = by_steps[10 if 10 in ours_steps else ours_steps[0]]
    churn = churn_matching(by_steps[ours_steps[-1]]["plumbing_ms"])
    small["ours_matched_ms"] = fresh("ours", small["steps"], churn=churn)["ours_ms"]
    small["matched_churn"] = churn
    print(
        f"  steps={small['steps']:<5} with {churn:,} objects churned per request: "
        f"ours_matched_ms={small['ours_matched_ms']:.2f}",
        flush=True,
    )


def _measure(measure: str, steps: int, options: dict[str, Any]) -> dict[str, Any]:
    """One measurement, after a warm-up turn (imports, first-call caches)."""
    if measure == "ours":
        ours(2)
        return ours(steps, **options)
    theirs(2)
    return theirs(steps)


if __name__ == "__main__":
    if len(sys.argv) == 4:  # benchmarks.overhead ours|theirs STEPS OPTIONS_JSON (see ``fresh``)
        print(json.dumps(_measure(sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3]))))
    else:
        print(json.dumps(curve([1, 10, 100, 300, 1000], [1, 10, 100, 300]), indent=1))
