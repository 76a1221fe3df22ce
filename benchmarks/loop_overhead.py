"""The loop's own cost per request, against dspy.ReActV2, in the same run.

Both agents run the same scripted turn: N tool steps, then a submit. The scripted engine
answers instantly, so the time measured is the loop's own: rendering, parsing, recording.
Prints seconds per request and the ratio dspy_imp / dspy for several history lengths, and
the peak memory of one turn (tracemalloc). Run: ``.venv/bin/python benchmarks/loop_overhead.py``.
"""

from __future__ import annotations

import argparse
import os
import time
import tracemalloc

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import dspy

import dspy_imp
from dspy_imp.testing import ScriptedLM, call, reply


class Task(dspy.Signature):
    """Answer with a confidence."""

    question: str = dspy.InputField()
    answer: str = dspy.OutputField()
    confidence: float = dspy.OutputField()


def look(where: str) -> str:
    """Look somewhere."""
    return f"nothing at {where}"


def script(steps: int) -> ScriptedLM:
    def answer(request):
        done = sum(1 for role in request.roles if role == "tool")
        if done >= steps:
            return reply(calls=[call("submit", {"answer": "found", "confidence": 0.9}, id=f"s{done}")])
        return reply(f"step {done}", calls=[call("look", {"where": f"place {done}"}, id=f"c{done}")])

    return ScriptedLM(answer)


def run_turn(make_agent, steps: int, trace_memory: bool) -> tuple[float, int]:
    lm = script(steps)
    agent = make_agent()
    # dspy.ReActV2 calls tools natively only when the adapter is told to; ours always does.
    with dspy.context(lm=lm, adapter=dspy.ChatAdapter(use_native_function_calling=True)):
        if trace_memory:
            tracemalloc.start()
        start = time.perf_counter()
        pred = agent(question="where is it?", max_iters=steps + 1)
        elapsed = time.perf_counter() - start
        peak = tracemalloc.get_traced_memory()[1] if trace_memory else 0
        if trace_memory:
            tracemalloc.stop()
    assert pred.answer == "found", pred
    return elapsed / len(lm.requests), peak


def measure(make_agent, steps: int, repeats: int) -> tuple[float, int]:
    """Best seconds per request over ``repeats`` turns, and one turn's peak memory."""
    best = min(run_turn(make_agent, steps, trace_memory=False)[0] for _ in range(repeats))
    return best, run_turn(make_agent, steps, trace_memory=True)[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, nargs="*", default=[5, 25, 100])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print(f"{'steps':>6} {'dspy ms/req':>12} {'imp ms/req':>11} {'time ratio':>11} {'dspy peak':>10} {'imp peak':>9}")
    for steps in args.steps:
        theirs, their_peak = measure(lambda: dspy.ReActV2(Task, tools=[look], max_iters=200), steps, args.repeats)
        ours, our_peak = measure(lambda: dspy_imp.ReActV2(Task, tools=[look], max_iters=200), steps, args.repeats)
        print(
            f"{steps:>6} {theirs * 1e3:>12.2f} {ours * 1e3:>11.2f} {ours / theirs:>11.2f} "
            f"{their_peak / 1e6:>9.1f}M {our_peak / 1e6:>8.1f}M"
        )


if __name__ == "__main__":
    main()
