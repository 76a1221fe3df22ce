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


REFUNDS: list[str] = []  # this process's refunds (a refund that ran twice would show here or in a file)


def refund_order(order_id: str) -> str:
    """Refund an order (it needs approval)."""
    REFUNDS.append(order_id)
    return f"refunded {order_id}"


def _approval_lm() -> ScriptedLM:
    """A refund that needs approval, then the reply once its result is in (answered from the request)."""

    def answer(request: object) -> object:
        last = request.messages[-1]  # type: ignore[attr-defined]
        if last["role"] == "tool":
            return reply(f"Done: {last['content']}")
        return reply(calls=[call("refund_order", {"order_id": "A-42"}, id="r1")])

    return ScriptedLM(answer)


def _durable(folder: str, *, lm: ScriptedLM) -> object:
    """DBOS on ``folder/records.sqlite`` with the agent every process declares, launched."""
    from dbos import DBOS

    from dspy_imp import durable

    DBOS(config=durable.config("fresh-process", system_database_url=f"sqlite:///{folder}/records.sqlite"))
    program = dspy_imp.ReActV2("ticket -> reply", tools=[refund_order], needs_approval=[refund_order])
    agent = durable.DurableAgent(program, name="fresh")
    dspy.configure(lm=lm)
    DBOS.launch()
    return agent


def _durable_write(folder: str) -> object:
    """A finished durable turn and one paused on its approval; this process ends with it waiting."""
    import time

    from dbos import DBOS

    from dspy_imp import durable

    agent = _durable(folder, lm=_approval_lm())
    paused = agent.start(ticket="Refund A-42.", workflow_id="paused")  # type: ignore[attr-defined]
    end = time.monotonic() + 120
    while not durable.pending("paused") and time.monotonic() < end:
        time.sleep(0.05)
    finished_lm = ScriptedLM([reply("Nothing to refund.")])
    with dspy.context(lm=finished_lm):
        finished = agent(ticket="Anything?", workflow_id="finished")  # type: ignore[operator]
    out = {"finished": finished.reply, "pending": [c["id"] for c in durable.pending("paused")]}
    del paused
    DBOS.destroy()
    return out


def _durable_read(folder: str) -> object:
    """The records read back in a fresh process: the finished turn's prediction (no request: the
    LM here would fail one), then the paused turn approved here and finished, its refund run once."""
    from dbos import DBOS

    from dspy_imp import durable

    agent = _durable(folder, lm=_approval_lm())
    recorded = durable.handle("finished").result()
    again = agent(ticket="Anything?", workflow_id="finished")  # type: ignore[operator]
    pending = [c["id"] for c in durable.pending("paused")]
    agent.decide("paused", approvals={"r1": True})  # type: ignore[attr-defined]
    resumed = durable.handle("paused").result(polling_interval_sec=0.05)
    history = dspy_imp.dump_history(resumed.metadata.history)
    out = {
        "finished": recorded.reply,
        "again": again.reply,
        "pending": pending,
        "resumed": resumed.reply,
        "refunds": REFUNDS,
        "results": [r["result"] for m in history["messages"] for r in m.get("tool_call_results") or []],
    }
    DBOS.destroy()
    return out


def _web(database: str) -> object:
    import dspy_imp.web

    program = dspy_imp.ReActV2("message -> reply", tools=[refund_order], needs_approval=[refund_order])
    program.set_lm(_approval_lm())
    store = dspy_imp.web.DatabaseStore(f"sqlite:///{database}")
    return dspy_imp.web.app(program, store=store), store


def _web_turn(database: str, body: dict) -> object:
    """One AG-UI run on a fresh app over the store in ``database``; its last event and the stored conversation."""
    import asyncio
    import json

    import httpx

    app, store = _web(database)

    async def run() -> object:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as http:
            response = await http.post("/ag-ui", json=body)
            listed = await http.get("/api/conversations")
            stored = await http.get("/api/conversations/fresh")
        events = [json.loads(line[6:]) for line in response.text.splitlines() if line.startswith("data: ")]
        return {
            "status": response.status_code,
            "last": events[-1]["type"] if events else None,
            "outcome": (events[-1].get("outcome") or {}).get("type") if events else None,
            "listed": [c["id"] for c in listed.json()],
            "messages": stored.json()["messages"],
            "refunds": REFUNDS,
        }

    try:
        return asyncio.run(run())
    finally:
        store.close()


def main(argv: list[str]) -> None:
    """``save-program DIR`` / ``save-state FILE`` / ``run-program DIR`` / ``run-state FILE`` /
    ``dump-history FILE`` / ``run-history FILE`` / ``compile START`` / ``durable-write DIR`` /
    ``durable-read DIR`` / ``web-start DB`` / ``web-approve DB``: each prints one JSON line."""
    import json

    action, path = argv
    if action == "durable-write":
        out: object = _durable_write(path)
    elif action == "durable-read":
        out = _durable_read(path)
    elif action == "web-start":
        message = [{"id": "u1", "role": "user", "content": "Refund A-42."}]
        out = _web_turn(path, {"threadId": "fresh", "runId": "r1", "messages": message})
    elif action == "web-approve":
        resume = [{"interruptId": "r1", "status": "resolved", "payload": {"approved": True}}]
        out = _web_turn(path, {"threadId": "fresh", "runId": "r2", "messages": [], "resume": resume})
    elif action == "save-program":
        build().save(path, save_program=True)
        out = "saved"
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
