"""Issue 9: a property-based suite over generated scripts of replies and faults.

Hypothesis generates a program (signature kind, finish mode, history replay, adapter, driver,
with or without a prior history and a deadline) and a script of replies and faults (text,
whitespace, valid/unknown/nameless/invalid/parallel calls, a raising tool, unreadable results,
a raising ``tool_policy`` and ``finish_on`` hook, valid and invalid submits, a ``finish_on``
tool, provider errors, rate limits with ``Retry-After: 0``, context-window refusals, a
content-filtered reply, an auth refusal, slow replies and a slow tool under a deadline), across
signature kinds (text answer, structured outputs, a ``Literal`` output), finish modes, replay
modes, adapters (Chat, JSON, XML) and both drivers. After every run it checks the invariants of the loop:

1. the turn ended with a documented reason and cause, or raised ``StepError`` (nothing else);
2. the request count is within the documented bound (docs/reliability.md, "Threat model");
3. no request was handed to the LM client after the deadline's end;
4. every tool message answers a call of the assistant message right before it;
5. the returned history (or ``StepError.history``) holds every tool that ran exactly once, and
   resumes;
6. dump -> load of that history sends the same requests as the history itself;
7. the caller's history is untouched.

Time is a fake clock (``Clock``): the deadline, the loop's retry pauses, slow replies and a slow
tool all read or advance it, so invariant 3 is exact and no example waits. The real clock and
the real wire are measured by the HTTP tests in ``test_threat_deadline.py``.

The example budget is fixed and derandomized, so the suite runs the same examples in the same
time on every machine (well under a minute).
"""

from __future__ import annotations

import asyncio
import copy
import json
from dataclasses import dataclass
from typing import Any, Literal

import dspy
import pytest
from dspy.utils.callback import BaseCallback
from helpers import TA, SubmitSig
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dspy_imp
import dspy_imp._records.clock as deadline_state
from dspy_imp.testing import ScriptedLM, call, fail, reply

REASONS = {"answered", "submit", "finished_by_tool", "last_text", "forced_submit", "extracted", "incomplete"}
CAUSES = {
    None,
    "max_iters",
    "parse_error",
    "prediction_error",
    "empty_tool_calls",
    "context_window_exceeded",
    "deadline_exceeded",
    "repeated_calls",
}  # fmt: skip  (repeated_calls: issue 25's repeat_limit=3)
DEADLINE = 10.0
SLOW = 6.0  # two slow things pass the deadline, one does not


class Clock:
    """A fake ``time.monotonic`` for the deadline; slow things and pauses advance it."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds

    async def asleep(self, seconds: float) -> None:
        self.now += seconds


CLOCK = Clock()
BUDGET = settings(
    max_examples=200, deadline=None, derandomize=True, database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)  # fmt: skip

# -- the program's tools: each run is counted ---------------------------------------------------------


class Runs:
    def __init__(self) -> None:
        self.counts: dict[str, int] = {}

    def tools(self) -> list[Any]:
        def look(where: str) -> dict[str, Any]:
            """Look somewhere."""
            self._ran("look")
            return {"seen": where}

        def boom() -> str:
            """Always fails."""
            self._ran("boom")
            raise RuntimeError("boom: token=tk-live-123456")

        def odd() -> Any:
            """Returns something that cannot be rendered."""
            self._ran("odd")
            loop: dict[str, Any] = {"v": "caf\udce9"}
            loop["self"] = loop
            return loop

        def raw() -> Any:
            """Returns values JSON has no form for."""
            self._ran("raw")
            return {"v": float("nan"), "w": [float("inf")], (1, 2): b"\xff\xfe", "s": "\ud800"}

        def slow() -> str:
            """Takes a while."""
            self._ran("slow")
            CLOCK.sleep(SLOW)
            return "finally"

        def done(note: str) -> str:
            """Finish with a note."""
            self._ran("done")
            return f"noted {note}"

        return [look, boom, odd, raw, slow, done]

    def _ran(self, name: str) -> None:
        self.counts[name] = self.counts.get(name, 0) + 1


class Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no text either")


def finishing(**outputs: Any) -> Any:
    def hook(args: dict[str, Any], result: Any, inputs: dict[str, Any]) -> Any:
        if args.get("note") == "explode":
            raise Unprintable()
        return dspy_imp.Finish(**{k: (args.get("note") if v is None else v) for k, v in outputs.items()})

    return hook


def policy(name: str, args: dict[str, Any]) -> bool:
    if args.get("where") == "vault":
        raise KeyError("vault")  # buggy host code
    return True


# -- scripts ------------------------------------------------------------------------------------------


def _items() -> dict[str, Any]:
    return {
        "text": lambda: reply("The key is on the shelf."),
        "whitespace": lambda: reply("  \n "),
        "empty": lambda: reply(""),
        "look": lambda: reply("Looking.", calls=[call("look", {"where": "desk"})]),
        "unknown": lambda: reply(calls=[call("nope", {})]),
        "bad_args": lambda: reply(calls=[call("look", {"where": 5, "extra": 1})]),
        "boom": lambda: reply(calls=[call("boom", {})]),
        "odd": lambda: reply(calls=[call("odd", {})]),
        "raw": lambda: reply(calls=[call("raw", {})]),
        "parallel": lambda: reply(calls=[call("look", {"where": "a"}, id="p1"), call("look", {"where": "b"}, id="p1")]),
        "done": lambda: reply(calls=[call("done", {"note": "finished"})]),
        "done_hook_raises": lambda: reply(calls=[call("done", {"note": "explode"})]),
        "policy_raises": lambda: reply(calls=[call("look", {"where": "vault"}), call("look", {"where": "desk"})]),
        "nameless": lambda: reply(calls=[call("", {"x": 1}), call("look", {"where": "desk"})]),
        "submit_ok": lambda: reply(calls=[call("submit", {"answer": "shelf", "confidence": 0.5})]),
        "submit_text": lambda: reply(calls=[call("submit", {"answer": "shelf"})]),
        "submit_bad": lambda: reply(calls=[call("submit", {"confidence": "very"})]),
        "submit_team": lambda: reply(calls=[call("submit", {"team": "atlas"})]),
        "server": lambda: fail.server_error(),
        "rate_now": lambda: fail.rate_limit(retry_after=0),
        "context": lambda: fail.context_window(),
        "auth": lambda: fail.server_error(401, "Incorrect API key provided: sk-live-abcdef123456"),
        "filtered": lambda: reply("", finish_reason="content_filter"),
        "slow_reply": lambda: "slow_reply",
        "slow_tool": lambda: reply(calls=[call("slow", {})]),
    }


ITEMS = _items()


@dataclass(frozen=True)
class Case:
    signature: str
    finish: str
    replay: str
    adapter: str
    mode: str
    max_iters: int
    prior: bool
    with_deadline: bool
    script: tuple[str, ...]


cases = st.builds(
    Case,
    signature=st.sampled_from(["text", "submit", "enum"]),
    finish=st.sampled_from(["auto", "submit", "tools"]),
    replay=st.sampled_from(["trajectory", "actions"]),
    adapter=st.sampled_from(["chat", "json", "xml"]),
    mode=st.sampled_from(["sync", "async"]),
    max_iters=st.integers(min_value=0, max_value=3),
    prior=st.booleans(),
    with_deadline=st.booleans(),
    script=st.lists(st.sampled_from(sorted(ITEMS)), min_size=0, max_size=7).map(tuple),
)

PRIOR = [
    {"intent": "Earlier question", "next_thought": "Earlier answer", "answer": "Earlier answer",
     "tool_calls": [], "tool_call_results": []},
    {"intent": "Look first", "tool_calls": [{"id": "h1", "name": "look", "args": {"where": "hall"}}],
     "tool_call_results": [{"id": "h1", "name": "look", "result": {"seen": "hall"}, "error": False,
                            "returned_at": "2026-01-01T00:00:00.000Z"}], "answer": "In the hall."},
]  # fmt: skip


# -- running one case -----------------------------------------------------------------------------------


class Wire(BaseCallback):
    """A responder for ScriptedLM: the script, then plain text.

    As a callback on the LM it records when (on the fake clock) each request was handed to the
    LM client (``on_lm_start``). What follows on the real clock (DSPy's dispatch, a thread hop
    on the async path, the socket) is measured at the server by the HTTP tests in
    ``test_threat_deadline.py``.
    """

    def __init__(self, script: tuple[str, ...]) -> None:
        self.items = [ITEMS[name]() for name in script]
        self.handed: list[float] = []

    def on_lm_start(self, call_id: str, instance: Any, inputs: dict[str, Any]) -> None:
        self.handed.append(CLOCK.monotonic())

    def __call__(self, request: Any) -> Any:
        item = self.items.pop(0) if self.items else reply("Out of script.")
        if item == "slow_reply":
            CLOCK.sleep(SLOW)
            return reply("Slow thought.")
        return item


class RouteSig(dspy.Signature):
    """Route the request to a team."""

    intent: str = dspy.InputField()
    team: Literal["atlas", "harbor"] = dspy.OutputField()


def build(case: Case, runs: Runs) -> dspy_imp.ReActV2:
    signature = {"text": TA, "submit": SubmitSig, "enum": RouteSig}[case.signature]
    hook = {
        "text": finishing(answer=None),
        "submit": finishing(answer=None, confidence=1.0),
        "enum": finishing(team="harbor"),
    }[case.signature]
    return dspy_imp.ReActV2(
        signature, tools=runs.tools(), max_iters=case.max_iters, finish=case.finish,
        finish_on={"done": hook}, history_replay=case.replay, tool_policy=policy,
    )  # fmt: skip


def call_agent(case: Case, agent: dspy_imp.ReActV2, lm: ScriptedLM, **kwargs: Any) -> Any:
    adapter = {"chat": None, "json": dspy.JSONAdapter(), "xml": dspy.XMLAdapter()}[case.adapter]
    with dspy.context(lm=lm, adapter=adapter):
        try:
            if case.mode == "sync":
                return agent(**kwargs)
            return asyncio.run(agent.acall(**kwargs))
        except dspy_imp.StepError as error:
            return error


def requests_bound(case: Case) -> int:
    """docs/reliability.md: at most max_iters + 4 sends (steps, the "tools" retry, forced submit,
    its "required" retry, extraction), each at most 2 x (1 + 3 retries + 8 recoveries) requests."""
    return (case.max_iters + 4) * 2 * (1 + 3 + 8)


def check_tool_messages(request: Any) -> None:
    answered: set[str] = set()
    for message in request.messages:
        if message["role"] == "assistant":
            answered = {c["id"] for c in message.get("tool_calls") or []}
        elif message["role"] == "tool":
            assert message["tool_call_id"] in answered, request.messages
            answered.discard(message["tool_call_id"])
        else:
            answered = set()


def check_runs_recorded(history: dspy.History, runs: Runs) -> None:
    recorded: dict[str, int] = {}
    for entry in history.messages[len(PRIOR) :] if runs.prior else history.messages:
        for result in entry.get("tool_call_results") or []:
            if result["name"] in runs.counts and (not result["error"] or result.get("error_kind") == "tool_error"):
                recorded[result["name"]] = recorded.get(result["name"], 0) + 1
    assert recorded == runs.counts


def resumed_requests(case: Case, history: Any) -> list[Any]:
    lm = ScriptedLM(lambda request: reply("Resumed."))
    outcome = call_agent(case, build(case, Runs()), lm, history=history, intent="And now?")
    assert isinstance(outcome, dspy_imp.Prediction), outcome  # the model answers: nothing may fail
    return [(r.messages, r.tool_names, r.tool_choice) for r in lm.requests]


def run_case(case: Case) -> None:
    runs = Runs()
    runs.prior = case.prior  # type: ignore[attr-defined]
    wire = Wire(case.script)
    lm = ScriptedLM(wire, callbacks=[wire])
    caller_history = dspy.History(messages=copy.deepcopy(PRIOR)) if case.prior else None
    snapshot = copy.deepcopy(caller_history.messages) if caller_history else None
    kwargs: dict[str, Any] = {"intent": "Where is the key?", "history": caller_history}
    agent = build(case, runs)

    end = None
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(deadline_state, "time", CLOCK)
        patch.setattr(deadline_state, "asleep", CLOCK.asleep)  # the loop's retry pauses move it too
        if case.with_deadline:
            with dspy_imp.deadline(seconds=DEADLINE):
                end = deadline_state._end()
                outcome = call_agent(case, agent, lm, **kwargs)
        else:
            outcome = call_agent(case, agent, lm, **kwargs)

    # 1. a documented ending, or StepError
    assert isinstance(outcome, dspy_imp.Prediction | dspy_imp.StepError), outcome
    if isinstance(outcome, dspy_imp.Prediction):
        meta = outcome.metadata
        assert meta.termination_reason in REASONS and meta.termination_cause in CAUSES
        assert meta.termination_reason != "incomplete" or all(v is None for v in outcome.values())
        history = meta.history
    else:
        history = outcome.history
    # 2. the request count bound; 3. nothing after the deadline
    assert len(lm.requests) <= requests_bound(case)
    if end is not None:
        assert all(handed <= end for handed in wire.handed)
    # 4. every tool message answers a call right before it
    for request in lm.requests:
        check_tool_messages(request)
    # 5. every tool that ran, exactly once; the history resumes
    check_runs_recorded(history, runs)
    sent = resumed_requests(case, history)
    # 6. dump -> load sends the same requests
    dumped = json.dumps(dspy_imp.dump_history(history), allow_nan=False)
    assert resumed_requests(case, dspy_imp.load_history(json.loads(dumped))) == sent
    # 7. the caller's history is untouched
    if caller_history is not None:
        assert caller_history.messages == snapshot


# 200 generated turns, each resumed twice: about 20 s of CPU, so in the slow set (`make test`, and
# so CI, runs it; `make check` does not).
@pytest.mark.slow
@BUDGET
@given(case=cases)
def test_every_generated_turn_keeps_the_loops_invariants(case: Case) -> None:
    run_case(case)
