"""Durable turns (DBOS, embedded SQLite) in this process: same turn as the plain loop, records that
round-trip, recorded time that replays to the same decisions. Crashes: ``test_durable_crash.py``."""

from __future__ import annotations

import asyncio
import base64
import json
import pickle
import sqlite3
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dspy
import pytest
from dbos import DBOS, DBOSPortableJSONSerializer
from dspy.utils.exceptions import LMAuthError, LMRateLimitError

import dspy_imp
from dspy_imp import durable
from dspy_imp._durable.codec import (
    RecordedError,
    decode_error,
    decode_outcome,
    decode_value,
    encode_error,
    encode_outcome,
    encode_value,
)
from dspy_imp._durable.driver import DECISIONS_TOPIC, decision
from dspy_imp._records.history import _json as to_json
from dspy_imp._records.outcomes import Extracted, Failed, Raised, RawCall, Reply, Returned
from dspy_imp.testing import ScriptedLM, call, fail, reply

SEEN: list[dict[str, Any]] = []


def look(thing: str) -> dict[str, Any]:
    """Look at a thing."""
    SEEN.append({"thing": thing, "key": durable.idempotency_key()})
    return {"seen": thing}


NAPS: dict[str, Any] = {"clock": None, "release": threading.Event()}


def nap(seconds: float) -> str:
    """Wait a while."""
    # ``seconds`` pass on the test's clock; a nap that takes time is still running when the test lets it go
    NAPS["clock"].advance(seconds)
    if seconds:
        NAPS["release"].wait(30)
    return "rested"


@pytest.fixture
def napping(fake_clock: Any) -> Iterator[Any]:
    NAPS["clock"] = fake_clock
    NAPS["release"].clear()
    yield fake_clock
    NAPS["release"].set()


GATE = threading.Event()


def wait_for_gate() -> str:
    """Wait until the test opens the gate."""
    GATE.wait(30)
    return "through"


PROGRAMS = {
    "look": dspy_imp.ReActV2("question -> answer", tools=[look], finish="submit"),
    "queued": dspy_imp.ReActV2("question -> answer", tools=[look], finish="submit"),
    "approve": dspy_imp.ReActV2("question -> answer", tools=[look], finish="submit", needs_approval=["look"]),
    "gate": dspy_imp.ReActV2("question -> answer", tools=[wait_for_gate], finish="submit"),
    "auto": dspy_imp.ReActV2("question -> answer", tools=[look], max_iters=2),
    "parallel": dspy_imp.ReActV2("question -> answer", tools=[look], finish="submit", parallel_tools=True),
    "nap": dspy_imp.ReActV2("question -> answer", tools=[nap], finish="submit"),
    "miscounted": dspy_imp.ReActV2(
        "question -> answer",
        tools=[look],
        context=dspy_imp.Context(
            trigger=10_000, window=100_000, counter=lambda m, t, model: 10 if len(m) < 3 else None
        ),
    ),
    "context": dspy_imp.ReActV2(
        "question -> answer",
        tools=[look],
        context=dspy_imp.Context(trigger=34, target=24, window=1000, counter=lambda m, t, model: len(str(m)) // 10),
    ),
}
AGENTS: dict[str, durable.DurableAgent] = {}
DATABASE: list[Path] = []


@pytest.fixture(scope="module", autouse=True)
def dbos(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    folder = tmp_path_factory.mktemp("dbos")
    DATABASE.append(folder / "sys.sqlite")
    DBOS(
        config=durable.config("dspy-imp-tests", system_database_url=f"sqlite:///{folder}/sys.sqlite", log_level="ERROR")
    )
    AGENTS.update({name: durable.DurableAgent(program, name=name) for name, program in PROGRAMS.items()})
    DBOS.launch()
    DBOS.register_queue("tests", worker_concurrency=1, polling_interval_sec=0.1)
    yield
    DBOS.destroy(destroy_registry=True)


SCRIPTS = {
    "tools then submit": lambda: [
        reply("Looking.", calls=[call("look", {"thing": "shelf"}, id="c1"), call("look", {"thing": "desk"})]),
        reply(calls=[call("look", {"thing": 7})]),  # invalid arguments: an observation, no tool run
        reply(calls=[call("submit", {"answer": "on the shelf"}, id="c3")], reasoning="found it"),
    ],
    "failed step then last text": lambda: [
        reply(calls=[call("look", {"thing": "shelf"}, id="c1")]),
        fail.invalid_request("bad request"),
        reply("It is on the shelf."),
    ],
}


def _both(name: str, script: str, run: Any, **kwargs: Any) -> tuple[Any, Any, ScriptedLM, ScriptedLM]:
    plain_lm, durable_lm = ScriptedLM(SCRIPTS[script]()), ScriptedLM(SCRIPTS[script]())
    with dspy.context(lm=plain_lm):
        plain = run(PROGRAMS[name], **kwargs)
    with dspy.context(lm=durable_lm):
        recorded = run(AGENTS[name], **kwargs)
    return plain, recorded, plain_lm, durable_lm


def _timeless(history: dspy.History) -> list[Any]:
    messages = dspy_imp.dump_history(history)["messages"]
    for message in messages:
        for result in message["tool_call_results"]:
            result.pop("returned_at")
    return messages


@pytest.mark.parametrize(
    ("name", "script"),
    [("look", "tools then submit"), ("auto", "failed step then last text"), ("parallel", "tools then submit")],
)
def test_a_durable_turn_is_the_plain_turn(run: Any, name: str, script: str) -> None:
    plain, recorded, plain_lm, durable_lm = _both(name, script, run, question="Where is the key?")
    assert [r.messages for r in durable_lm.requests] == [r.messages for r in plain_lm.requests]
    assert [(r.tools, r.tool_choice, r.options) for r in durable_lm.requests] == [
        (r.tools, r.tool_choice, r.options) for r in plain_lm.requests
    ]
    assert dict(recorded) == dict(plain)
    assert _timeless(recorded.metadata.history) == _timeless(plain.metadata.history)
    meta, expected = recorded.metadata, plain.metadata
    assert (meta.termination_reason, meta.termination_cause, meta.termination_error) == (
        expected.termination_reason,
        expected.termination_cause,
        expected.termination_error,
    )
    assert recorded.metadata.usage == plain.metadata.usage
    assert type(recorded) is type(plain)


def test_parallel_calls_run_in_one_step_each_with_its_own_key(run: Any) -> None:
    SEEN.clear()
    with dspy.context(lm=ScriptedLM(SCRIPTS["tools then submit"]())):
        run(AGENTS["parallel"], question="Where?", workflow_id=f"batch-{run.mode}")
    assert sorted(seen["key"] for seen in SEEN) == [f"batch-{run.mode}:3.0", f"batch-{run.mode}:3.1"]
    names = [step["function_name"] for step in DBOS.list_workflow_steps(f"batch-{run.mode}")]
    assert names[:3] == ["dspy_imp.clock", "dspy_imp.request.step", "dspy_imp.tools.look+look"]


def test_a_summary_request_is_a_checkpointed_step_and_measures_are_not(run: Any) -> None:
    prior = [
        {"question": f"q{i}", "answer": f"answer {i} " * 20, "tool_calls": [], "tool_call_results": []}
        for i in range(3)
    ]
    script = [reply("Three questions, answered."), reply("It is here.")]
    plain_lm, durable_lm = ScriptedLM(list(script)), ScriptedLM(list(script))
    with dspy.context(lm=plain_lm):
        plain = run(PROGRAMS["context"], question="Where?", history=dspy.History(messages=prior))
    with dspy.context(lm=durable_lm):
        recorded = run(
            AGENTS["context"], question="Where?", history=dspy.History(messages=prior), workflow_id=f"ctx-{run.mode}"
        )
    assert [r.messages for r in durable_lm.requests] == [r.messages for r in plain_lm.requests]
    assert recorded.metadata.context == plain.metadata.context
    assert recorded.metadata.usage.requests == {"summary": 1, "step": 1}
    names = [step["function_name"] for step in DBOS.list_workflow_steps(f"ctx-{run.mode}")]
    assert names == ["dspy_imp.clock", "dspy_imp.request.summary", "dspy_imp.request.step"]
    idle = ScriptedLM([])
    with dspy.context(lm=idle):  # replayed from the record: no request, the same view
        again = run(
            AGENTS["context"], question="Where?", history=dspy.History(messages=prior), workflow_id=f"ctx-{run.mode}"
        )
    assert idle.requests == [] and again.metadata.history.messages[-1]["prompt_view"]["summarized"] == 3


def test_a_finished_workflow_id_returns_the_recorded_prediction_without_requests(run: Any) -> None:
    workflow_id = f"again-{run.mode}"
    with dspy.context(lm=ScriptedLM(SCRIPTS["tools then submit"]())):
        first = run(AGENTS["look"], question="Where?", workflow_id=workflow_id)
    runs, idle = len(SEEN), ScriptedLM([])
    with dspy.context(lm=idle):
        again = run(AGENTS["look"], question="Where?", workflow_id=workflow_id)
    assert idle.requests == [] and len(SEEN) == runs
    assert dspy_imp.dump_history(again.metadata.history) == dspy_imp.dump_history(first.metadata.history)
    assert durable.handle(workflow_id).status() == "SUCCESS"
    assert durable.handle(workflow_id).result().answer == "on the shelf"


def test_tools_see_an_idempotency_key_stable_per_call(run: Any) -> None:
    SEEN.clear()
    with dspy.context(lm=ScriptedLM(SCRIPTS["tools then submit"]())):
        run(AGENTS["look"], question="Where?", workflow_id=f"keys-{run.mode}")
    assert [seen["key"] for seen in SEEN] == [f"keys-{run.mode}:3", f"keys-{run.mode}:4"]
    assert durable.idempotency_key() is None
    names = [step["function_name"] for step in DBOS.list_workflow_steps(f"keys-{run.mode}")]
    assert names == [
        "dspy_imp.clock",
        "dspy_imp.request.step",
        "dspy_imp.tool.look",
        "dspy_imp.tool.look",
        "dspy_imp.request.step",
        "dspy_imp.decided.look",  # invalid arguments: no tool ran; its tracer report is recorded
        "dspy_imp.request.step",
        "dspy_imp.decided.submit",
    ]


def test_a_step_error_crosses_with_its_class_message_and_history(run: Any) -> None:
    script = [reply(calls=[call("look", {"thing": "shelf"}, id="c1")]), fail.raises(LMAuthError("key revoked"))]
    with dspy.context(lm=ScriptedLM(script)), pytest.raises(dspy_imp.StepError) as plain:
        run(PROGRAMS["look"], question="Where?")
    with dspy.context(lm=ScriptedLM(script)), pytest.raises(dspy_imp.StepError) as recorded:
        run(AGENTS["look"], question="Where?")
    assert type(recorded.value.reason) is LMAuthError and str(recorded.value.reason) == str(plain.value.reason)
    assert recorded.value.__cause__ is recorded.value.reason
    assert _timeless(recorded.value.history) == _timeless(plain.value.history)
    assert recorded.value.usage == plain.value.usage


def test_bad_input_is_refused_before_a_workflow_starts() -> None:
    before = len(DBOS.list_workflows())
    with pytest.raises(dspy_imp.ConfigurationError, match="max_iters"):
        AGENTS["look"](question="Where?", max_iters=-1)
    with pytest.raises(dspy_imp.ConfigurationError, match="history"):
        AGENTS["look"](question="Where?", history=42)
    assert len(DBOS.list_workflows()) == before
    with pytest.raises(dspy_imp.ConfigurationError, match="name"):
        durable.DurableAgent(PROGRAMS["look"], name="no spaces")
    with pytest.raises(dspy_imp.ConfigurationError, match="ReActV2"):
        durable.DurableAgent(dspy.Predict("q -> a"), name="predict")  # type: ignore[arg-type]


def test_a_started_turn_is_looked_up_and_awaited_by_its_workflow_id() -> None:
    with dspy.context(lm=ScriptedLM(SCRIPTS["tools then submit"]())):
        started = AGENTS["look"](question="Where?", workflow_id="looked-up")
    handle = durable.handle("looked-up")
    assert handle.workflow_id == "looked-up" and handle.result().answer == started.answer

    async def lookup() -> Any:
        found = await durable.ahandle("looked-up")
        return await found.astatus(), (await found.aresult()).answer

    assert asyncio.run(lookup()) == ("SUCCESS", "on the shelf")
    with pytest.raises(TypeError, match="sync handle"):
        asyncio.run(handle.aresult())


def test_turns_started_in_the_background_and_on_a_queue_finish_with_their_handles() -> None:
    # a background turn has no caller context: the program carries its LM (or dspy.configure does)
    PROGRAMS["queued"].set_lm(ScriptedLM(SCRIPTS["tools then submit"]()))
    started = AGENTS["queued"].start(question="Where?", workflow_id="background")
    assert started.workflow_id == "background"
    assert started.result(polling_interval_sec=0.1).answer == "on the shelf"
    PROGRAMS["queued"].set_lm(ScriptedLM(SCRIPTS["tools then submit"]()))

    queue = DBOS.retrieve_queue("tests")

    async def enqueue() -> Any:
        handle = await AGENTS["queued"].astart(question="Where?", workflow_id="queued", queue=queue)
        prediction = await handle.aresult(polling_interval_sec=0.1)
        return await handle.astatus(), prediction.answer, len(prediction.metadata.history.messages)

    assert asyncio.run(enqueue()) == ("SUCCESS", "on the shelf", 3)
    with pytest.raises(TypeError, match="async handle"):
        durable.TurnHandle(object(), asynchronous=True).result()


def test_a_cancelled_turn_resumes_from_its_last_recorded_step() -> None:
    script = [reply(calls=[call("wait_for_gate", id="g1")]), reply(calls=[call("submit", {"answer": "a"})])]
    PROGRAMS["gate"].set_lm(ScriptedLM(script))
    GATE.clear()
    AGENTS["gate"].start(question="Go?", workflow_id="cancelled")
    while not [s for s in DBOS.list_workflow_steps("cancelled") if s["function_name"].startswith("dspy_imp.request")]:
        time.sleep(0.05)
    DBOS.cancel_workflow("cancelled")
    GATE.set()
    assert durable.handle("cancelled").status() == "CANCELLED"
    resumed = durable.resume("cancelled").result(polling_interval_sec=0.1)
    assert resumed.answer == "a" and resumed.metadata.termination_reason == "submit"
    assert len(PROGRAMS["gate"].react.lm.requests) == 2  # the recorded first reply was not asked again


APPROVAL_SCRIPT = [
    reply(calls=[call("look", {"thing": "safe"}, id="a1"), call("look", {"thing": "desk"}, id="a2")]),
    reply(calls=[call("submit", {"answer": "in the safe"}, id="a3")]),
]


def _wait_for_pending(workflow_id: str) -> tuple[dict[str, Any], ...]:
    for _ in range(600):
        found = durable.pending(workflow_id)
        if found or durable.handle(workflow_id).status() != "PENDING":
            return found
        time.sleep(0.05)
    raise AssertionError(f"{workflow_id} never paused")


def _approval_reference() -> tuple[Any, Any]:
    program = dspy_imp.ReActV2("question -> answer", tools=[look], finish="submit", needs_approval=["look"])
    with dspy.context(lm=ScriptedLM(APPROVAL_SCRIPT)):
        paused = program(question="Where?")
        return paused, program(history=paused.metadata.history, approvals=DECISIONS)


DECISIONS = {"a1": True, "a2": "not the desk"}


def test_a_paused_turn_waits_durably_for_its_decisions_then_resumes() -> None:
    paused, plain = _approval_reference()
    PROGRAMS["approve"].set_lm(ScriptedLM(APPROVAL_SCRIPT))
    agent = AGENTS["approve"]
    SEEN.clear()
    handle = agent.start(question="Where?", workflow_id="approval")
    assert _wait_for_pending("approval") == paused.metadata.pending_calls
    assert handle.status() == "PENDING" and SEEN == []
    with pytest.raises(dspy_imp.ConfigurationError, match="undecided"):
        agent.decide("approval", approvals={"a1": True})
    agent.decide("approval", approvals=DECISIONS)
    resumed = handle.result(polling_interval_sec=0.1)
    assert resumed.answer == plain.answer == "in the safe"
    assert _timeless(resumed.metadata.history) == _timeless(plain.metadata.history)
    assert [seen["thing"] for seen in SEEN] == ["safe"]
    assert durable.pending("approval") == ()
    with pytest.raises(dspy_imp.ConfigurationError, match="not waiting"):
        agent.decide("approval", approvals=DECISIONS)


def test_an_async_paused_turn_waits_and_resumes() -> None:
    paused, plain = _approval_reference()
    PROGRAMS["approve"].set_lm(ScriptedLM(APPROVAL_SCRIPT))
    agent = AGENTS["approve"]

    async def scenario() -> Any:
        handle = await agent.astart(question="Where?", workflow_id="aapproval")  # runs on this event loop
        while not (found := await durable.apending("aapproval")):
            await asyncio.sleep(0.05)
        await agent.adecide("aapproval", approvals=DECISIONS)
        return found, await handle.aresult(polling_interval_sec=0.1)

    found, resumed = asyncio.run(scenario())
    assert found == paused.metadata.pending_calls
    assert _timeless(resumed.metadata.history) == _timeless(plain.metadata.history)


TWO_PAUSES = [
    reply(calls=[call("look", {"thing": "safe"}, id="p1")]),
    reply(calls=[call("look", {"thing": "desk"}, id="p2")]),
    reply(calls=[call("submit", {"answer": "on the desk"}, id="p3")]),
]


def test_a_duplicate_decision_is_ignored_at_the_next_pause_not_fatal(caplog: pytest.LogCaptureFixture) -> None:
    PROGRAMS["approve"].set_lm(ScriptedLM(TWO_PAUSES))
    agent = AGENTS["approve"]
    handle = agent.start(question="Where?", workflow_id="double-click")
    assert [c["id"] for c in _wait_for_pending("double-click")] == ["p1"]
    for _ in range(2):  # a double-clicked approve: both sent before the turn took the first
        DBOS.send("double-click", decision({"p1": True}, None), topic=DECISIONS_TOPIC)
    for _ in range(600):
        if [c["id"] for c in durable.pending("double-click")] == ["p2"]:
            break
        time.sleep(0.05)
    agent.decide("double-click", approvals={"p2": True})
    resumed = handle.result(polling_interval_sec=0.1)
    assert (handle.status(), resumed.answer) == ("SUCCESS", "on the desk")
    assert "ignored a decision that does not answer this pause" in caplog.text


def test_an_async_turn_ignores_a_duplicate_decision_too() -> None:
    PROGRAMS["approve"].set_lm(ScriptedLM(TWO_PAUSES))
    agent = AGENTS["approve"]

    async def scenario() -> Any:
        handle = await agent.astart(question="Where?", workflow_id="adouble-click")
        while not await durable.apending("adouble-click"):
            await asyncio.sleep(0.05)
        for _ in range(2):
            await DBOS.send_async("adouble-click", decision({"p1": True}, None), topic=DECISIONS_TOPIC)
        while [c["id"] for c in await durable.apending("adouble-click")] != ["p2"]:
            await asyncio.sleep(0.05)
        await agent.adecide("adouble-click", approvals={"p2": True})
        return await handle.aresult(polling_interval_sec=0.1)

    assert asyncio.run(scenario()).answer == "on the desk"


def test_every_row_a_durable_turn_writes_is_json_never_a_pickle() -> None:
    with dspy.context(lm=ScriptedLM(SCRIPTS["tools then submit"]())):
        AGENTS["look"](question="Where is the key?", workflow_id="json-rows")
    with sqlite3.connect(DATABASE[0]) as db:
        steps = db.execute("SELECT DISTINCT serialization FROM operation_outputs WHERE workflow_uuid = 'json-rows'")
        status = db.execute("SELECT DISTINCT serialization FROM workflow_status WHERE workflow_uuid = 'json-rows'")
        assert {row[0] for row in steps} | {row[0] for row in status} == {"portable_json"}
        outputs = [
            row[0] for row in db.execute("SELECT output FROM operation_outputs WHERE workflow_uuid = 'json-rows'")
        ]
    assert outputs and all(json.loads(output) is not None for output in outputs if output is not None)


FIRED: list[str] = []


class _Armed:
    def __reduce__(self) -> Any:
        return (FIRED.append, ("unpickled",))


def test_a_record_holding_a_pickle_is_refused_without_unpickling_it() -> None:
    armed = {"pickle": base64.b64encode(pickle.dumps(_Armed())).decode()}
    with pytest.raises(dspy_imp.ConfigurationError, match="tagged 'pickle'"):
        decode_value(armed)
    with pytest.raises(dspy_imp.ConfigurationError):
        decode_outcome({"kind": "returned", "value": armed, "at": None})
    assert FIRED == []
    assert "pickle" not in json.dumps(encode_value({"k": Opaque(4), "t": (1, Opaque(5))}))


def test_an_error_record_never_imports_a_module_it_names() -> None:
    sys.modules.pop("this_is_not_imported", None)
    record = {
        "chain": [{"type": "antigravity:Boom", "args": {"json": []}, "state": {}, "text": "boom", "explicit": False}]
    }
    assert "antigravity" not in sys.modules
    error = decode_error(record)
    assert isinstance(error, RecordedError) and type(error).__name__ == "Boom" and str(error) == "boom"
    assert "antigravity" not in sys.modules


def test_recorded_time_replays_to_the_same_deadline_decisions(napping: Any) -> None:
    """A turn that beat its deadline, replayed from its records after the deadline passed, still
    beats it: the machine reads the recorded times, not the clock (a fork replays every step)."""
    script = [reply(calls=[call("nap", {"seconds": 0.0}, id="c1")]), reply(calls=[call("submit", {"answer": "a"})])]
    with dspy.context(lm=ScriptedLM(script)), dspy_imp.deadline(seconds=1.5):
        first = AGENTS["nap"](question="Rest?", workflow_id="in-time")
    assert first.metadata.termination_reason == "submit"
    steps = DBOS.list_workflow_steps("in-time")
    assert steps[0]["function_name"] == "dspy_imp.clock"
    assert steps[0]["output"] == napping.now  # the recorded time is the test's clock
    napping.advance(1.6)  # the deadline has passed
    replay = DBOS.fork_workflow("in-time", len(steps) + 1)
    again = durable.TurnHandle(replay).result()
    assert again.metadata.termination_reason == "submit"
    assert dspy_imp.dump_history(again.metadata.history) == dspy_imp.dump_history(first.metadata.history)


def test_a_durable_turns_duration_is_the_time_between_its_records_the_same_on_replay(fake_clock: Any) -> None:
    """``metadata.duration`` reads the recorded clock: from the turn's first clock step to its last
    record, so a replay long after gives the same duration."""
    script = [
        fake_clock.after(1.5, reply(calls=[call("look", {"thing": "shelf"}, id="c1")])),
        fake_clock.after(0.5, reply(calls=[call("submit", {"answer": "on the shelf"})])),
    ]
    with dspy.context(lm=ScriptedLM(script)):
        first = AGENTS["look"](question="Where?", workflow_id="timed")
    assert first.metadata.duration == 2.0
    fake_clock.advance(60.0)
    steps = DBOS.list_workflow_steps("timed")
    again = durable.TurnHandle(DBOS.fork_workflow("timed", len(steps) + 1)).result()
    assert again.metadata.duration == 2.0


def test_a_deadline_passed_during_a_tool_ends_the_turn_the_same_way(run: Any, napping: Any) -> None:
    """The nap passes the deadline on the test's clock (a loaded machine cannot pass it before the
    first request), then outlives its bound: both turns stop waiting for it the same way."""
    script = [reply(calls=[call("nap", {"seconds": 0.3}, id="c1")]), reply(calls=[call("submit", {"answer": "a"})])]
    with dspy.context(lm=ScriptedLM(script)), dspy_imp.deadline(seconds=0.2):
        plain = run(PROGRAMS["nap"], question="Rest?")
    with dspy.context(lm=ScriptedLM(script)), dspy_imp.deadline(seconds=0.2):
        recorded = run(AGENTS["nap"], question="Rest?")
    assert (
        (recorded.metadata.termination_reason, recorded.metadata.termination_cause)
        == (
            plain.metadata.termination_reason,
            plain.metadata.termination_cause,
        )
        == ("incomplete", "deadline_exceeded")
    )
    assert _timeless(recorded.metadata.history) == _timeless(plain.metadata.history)


# -- records ------------------------------------------------------------------------------------


class Opaque:
    def __init__(self, value: int):
        self.value = value

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Opaque) and other.value == self.value


class Fussy(Exception):
    """Its message needs a lock, which is not recorded (it does not pickle)."""

    def __init__(self, lock: Any):
        super().__init__("fussy")
        self.lock = lock

    def __str__(self) -> str:
        return f"fussy, locked={self.lock.locked()}"


def _through_json(record: dict[str, Any]) -> Any:
    return decode_outcome(json.loads(json.dumps(record)))


def test_replies_and_results_come_back_as_they_were() -> None:
    answer = Reply(
        "thinking",
        (RawCall("c1", "look", {"thing": "shelf"}), RawCall(None, None, "{not json", received={"raw": (1, 2)})),
        reasoning_content="because",
        reasoning_details=[{"type": "thinking", "signature": "abc"}],
        finish_reason="tool_calls",
    )
    assert _through_json(encode_outcome(answer)) == answer
    for value in ({"a": [1, 2.5, None, True]}, (1, 2), {"k": (1, [2, (3,)])}, dspy.History(messages=[])):
        assert _through_json(encode_outcome(Returned(value))) == Returned(value)
        assert type(_through_json(encode_outcome(Returned(value))).value) is type(value)
    for value in (Opaque(3), {"k": Opaque(4)}, b"\x00\xff"):  # no pickle (issue 23): what the model was shown
        assert _through_json(encode_outcome(Returned(value))).value == to_json(value)
    assert _through_json(encode_outcome(Extracted({"answer": (1, 2)}))) == Extracted({"answer": (1, 2)})
    assert encode_value({"a": 1}) == {"json": {"a": 1}}
    assert encode_value((1, 2)) == {"tuple": [{"json": 1}, {"json": 2}]}


def test_a_value_that_does_not_pickle_comes_back_as_the_model_saw_it() -> None:
    lock = __import__("threading").Lock()
    assert decode_value(json.loads(json.dumps(encode_value({"lock": lock})))) == {"lock": str(lock)}


def test_errors_come_back_with_class_message_state_and_cause_chain() -> None:
    try:
        try:
            raise KeyError("inner")
        except KeyError as inner:
            raise LMRateLimitError("slow down", retry_after=3.0) from inner
    except LMRateLimitError as error:
        caught = error
    back = _through_json(encode_outcome(Failed(caught))).error
    assert type(back) is LMRateLimitError and str(back) == str(caught)
    assert getattr(back, "retry_after", None) == getattr(caught, "retry_after", None)
    assert type(back.__cause__) is KeyError and back.__cause__.args == ("inner",)

    class Local(Exception):
        def __init__(self, a: int, b: int):
            super().__init__(f"{a}+{b}")

    raised = _through_json(encode_outcome(Raised(Local(1, 2)))).error
    assert isinstance(raised, RecordedError) and type(raised).__name__ == "Local" and str(raised) == "1+2"
    with pytest.raises(Exception):  # noqa: B017 - pickle itself cannot carry it
        pickle.loads(pickle.dumps(Local(1, 2)))

    fussy = decode_error(json.loads(json.dumps(encode_error(Fussy(threading.Lock())))))
    assert isinstance(fussy, RecordedError) and str(fussy) == "fussy, locked=False"
    context = ValueError("outer")
    context.__context__ = TypeError("during")
    assert type(decode_error(encode_error(context)).__context__) is TypeError


def test_config_defaults_to_sqlite_next_to_the_program_and_reads_the_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    program = tmp_path / "agent.py"
    program.write_text("")
    monkeypatch.setattr("sys.argv", [str(program)])
    monkeypatch.delenv("DBOS_SYSTEM_DATABASE_URL", raising=False)
    assert durable.config("support")["system_database_url"] == f"sqlite:///{tmp_path / 'support.sqlite'}"
    monkeypatch.setenv("DBOS_SYSTEM_DATABASE_URL", "postgresql://u@db:5432/agents")
    configured = durable.config("support", executor_id="w1")
    assert isinstance(configured.pop("serializer"), DBOSPortableJSONSerializer)  # records are JSON, never pickles
    assert configured == {
        "name": "support",
        "system_database_url": "postgresql://u@db:5432/agents",
        "executor_id": "w1",
    }


def test_a_failing_host_hook_ends_a_durable_turn_as_the_plain_one(run: Any) -> None:
    """A context counter answering None at the second request: the same StepError, with the
    history of the tool that ran, from the durable turn as from the plain one."""
    script = [reply(calls=[call("look", {"thing": "shelf"}, id="c1")]), reply("On the shelf.")]
    failed = []
    for program in (PROGRAMS["miscounted"], AGENTS["miscounted"]):
        with dspy.context(lm=ScriptedLM(script)), pytest.raises(dspy_imp.StepError) as caught:
            run(program, question="Where is the key?")
        failed.append(caught.value)
    plain, recorded = failed
    assert (
        str(recorded.reason)
        == str(plain.reason)
        == "`context.counter` returned None, not a token count (a number >= 0)"
    )
    assert str(recorded) == str(plain) and recorded.hook == plain.hook == ""  # a host hook's, not the model's
    assert str(recorded).startswith("ReActV2 turn stopped: a host hook failed (not the model): ")
    assert _timeless(recorded.history) == _timeless(plain.history)
    assert [r["result"] for r in _timeless(plain.history)[0]["tool_call_results"]] == [{"seen": "shelf"}]
