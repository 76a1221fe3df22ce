"""Programs and scripts for ``test_fresh_process.py``: importable in a fresh interpreter.

A program saved with ``save_program=True`` is cloudpickled; its functions and classes are pickled
by reference, so they must live in a module the loading process can import (this one).
"""

from __future__ import annotations

import dspy

import dspy_imp
from dspy_imp.testing import ScriptedLM, call, reply


def lookup_order(order_id: str) -> dict:
    """Look an order up: its charges."""
    return {"order_id": order_id, "charges": [19.9, 19.9]}


def _refund(order_id: str) -> str:
    return f"refund queued for {order_id}"


def build() -> dspy_imp.ReActV2:
    """A triage agent with a plain function, a ``dspy.Tool`` and a sub-agent as its tools."""
    researcher = dspy_imp.ReActV2("question -> findings", tools=[lookup_order])
    refund = dspy.Tool(_refund, name="refund", desc="Queue a refund for an order.")
    sub = researcher.as_tool(name="researcher", description="Find out the facts of a case.")
    return dspy_imp.ReActV2("ticket -> reply", tools=[lookup_order, refund, sub])


def script() -> ScriptedLM:
    """One turn calling each of the three tools (the researcher calls its own plain function)."""
    return ScriptedLM(
        [
            reply(
                calls=[
                    call("lookup_order", {"order_id": "A-42"}, id="t1"),
                    call("refund", {"order_id": "A-42"}, id="t2"),
                    call("researcher", {"question": "Was A-42 charged twice?"}, id="t3"),
                ]
            ),
            reply(calls=[call("lookup_order", {"order_id": "A-42"}, id="r1")]),
            reply("Yes: charged twice."),
            reply("Refunded."),
        ]
    )


def _results(pred: dspy.Prediction) -> list[object]:
    step = pred.metadata.history.messages[0]
    return [r["result"] for r in step["tool_call_results"]]


def _turn(program: dspy_imp.ReActV2, asynchronous: bool) -> dspy.Prediction:
    import asyncio

    with dspy.context(lm=script()):
        if asynchronous:
            return asyncio.run(program.acall(ticket="I was charged twice for A-42."))
        return program(ticket="I was charged twice for A-42.")


def _compiled_state(start: float) -> object:
    """``BootstrapFewShot``'s program on ``teaching``'s world, compiled on a clock started at ``start``."""
    import teaching

    from dspy_imp.testing import FakeClock

    with FakeClock(start).running(), dspy.context(lm=teaching.task_lm()):
        optimizer = dspy.BootstrapFewShot(metric=teaching.metric, max_bootstrapped_demos=2, max_labeled_demos=0)
        return optimizer.compile(teaching.agent(), trainset=teaching.TRAINSET).dump_state()


def main(argv: list[str]) -> None:
    """``save-program DIR`` / ``save-state FILE`` / ``run-program DIR`` / ``run-state FILE`` /
    ``dump-history FILE`` / ``run-history FILE`` / ``compile START``: each prints one JSON line."""
    import json

    action, path = argv
    if action == "save-program":
        build().save(path, save_program=True)
        out: object = "saved"
    elif action == "save-state":
        build().save(path)
        out = "saved"
    elif action == "dump-history":
        pred = _turn(build(), asynchronous=False)
        with open(path, "w") as f:
            json.dump(dspy_imp.dump_history(pred.metadata.history), f)
        out = _results(pred)
    elif action == "compile":  # path: the wall clock's start, epoch seconds
        out = _compiled_state(float(path))
    elif action == "run-history":
        with open(path) as f:
            history = dspy_imp.load_history(json.load(f))
        out = [r["result"] for r in history.messages[0]["tool_call_results"]]
    else:
        if action == "run-program":
            program = dspy.load(path, allow_pickle=True)
        else:
            program = build()
            program.load(path)
        out = {"sync": _results(_turn(program, False)), "async": _results(_turn(program, True))}
    print(json.dumps(out))


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
