"""What a call pays once, whatever its length: counted in calls, not timed (the machine's speed never matters).

A 10-step turn against pydantic-ai's spent part of its fixed cost on things only ours did: a new
signature class (a pydantic model) for the default summary predictor on every call, to read one
constant instruction; the output validators (a pydantic ``TypeAdapter`` per output) built again on
every call; and, at the end of the call, a copy of the whole history for every step's trace
entry, so that a turn of N steps copied about N²/2 entries.
"""

from __future__ import annotations

import gc
import sys
from typing import Any, ClassVar

import dspy
import pydantic
import pytest
from dspy.lm15 import Message, TextPart, ToolCallPart

import dspy_imp
from dspy_imp._program import module, predictor
from dspy_imp._prompt import demos, signature
from dspy_imp._prompt.memo import RenderMemo
from dspy_imp._records.steps import Step, ToolCall
from dspy_imp._records.window import Window
from dspy_imp._routes import chat_extras, local_servers
from dspy_imp._routes.route import Route, replays_state
from dspy_imp._turn.effects import carried
from dspy_imp.testing import ScriptedLM, call, reply

STEPS = 8


def look(where: str) -> str:
    """Look somewhere."""
    return f"nothing at {where}"


def _script(steps: int = STEPS) -> list:
    looks = [reply(calls=[call("look", {"where": f"place {i}"})]) for i in range(steps)]
    return [*looks, reply(calls=[call("submit", {"answer": "found", "confidence": 0.9})])]


def _counted(monkeypatch: pytest.MonkeyPatch, owner: object, name: str) -> list[int]:
    seen = [0]
    original = getattr(owner, name)

    def counting(*args: object, **kwargs: object) -> object:
        seen[0] += 1
        return original(*args, **kwargs)

    monkeypatch.setattr(owner, name, counting)
    return seen


def _run(program: dspy_imp.ReActV2, steps: int = STEPS) -> dspy.Prediction:
    with dspy.context(lm=ScriptedLM(_script(steps))):
        return program(question="Where is the thing?")


def test_a_call_builds_no_signature_class_and_its_validators_once(monkeypatch):
    class Task(dspy.Signature):
        """Find the thing."""

        question: str = dspy.InputField()
        answer: str = dspy.OutputField()
        confidence: float = dspy.OutputField()

    program = dspy_imp.ReActV2(Task, tools=[look], max_iters=STEPS + 2)
    _run(program)  # the first call may build what every later one reuses
    summaries = _counted(monkeypatch, predictor.SummaryPredictor, "__init__")
    specs = _counted(monkeypatch, signature.OutputSpec, "__init__")
    made = _counted(monkeypatch, dspy.Signature, "with_instructions")
    for _ in range(3):
        prediction = _run(program)
        assert (prediction.answer, prediction.confidence) == ("found", 0.9)
    assert (summaries[0], specs[0], made[0]) == (0, 0, 0)


def test_the_trace_copies_each_history_entry_once(monkeypatch):
    """Each traced step's ``history`` loses its results' times in a copy (demos must not depend on
    when they were made); the steps share their entries, so each is copied once, not once a step."""
    program = dspy_imp.ReActV2("question -> answer, confidence: float", tools=[look], max_iters=STEPS + 2)
    copies = _counted(monkeypatch, demos, "_timeless")
    with dspy.context(trace=[]):
        prediction = _run(program)
        trace = list(dspy.settings.trace)
    assert prediction.metadata.termination_reason == "submit"
    histories = [
        inputs["history"].messages for _, inputs, _ in trace if isinstance(inputs.get("history"), dspy.History)
    ]
    assert len(histories) == STEPS + 1
    assert copies[0] == len(histories[-1]) == STEPS  # the last step's history holds every entry before it
    for messages in histories:
        for entry in messages:
            for result in entry.get("tool_call_results") or ():
                assert "returned_at" not in result


def _calls_completing_the_trace(monkeypatch: pytest.MonkeyPatch, steps: int) -> int:
    """Python function calls made while ``complete_trace`` gives a traced turn's steps their results."""
    seen = [0]
    original = module.complete_trace

    def counted(*args: Any, **kwargs: Any) -> None:
        def profile(_frame: Any, event: str, _arg: Any) -> None:
            seen[0] += event == "call"

        gc.disable()  # a collection would count its callbacks (other libraries' Python code) here
        sys.setprofile(profile)
        try:
            original(*args, **kwargs)
        finally:
            sys.setprofile(None)
            gc.enable()

    program = dspy_imp.ReActV2("question -> answer, confidence: float", tools=[look], max_iters=steps + 2)
    with monkeypatch.context() as patched, dspy.context(trace=[]):
        patched.setattr(module, "complete_trace", counted)
        assert _run(program, steps).metadata.termination_reason == "submit"
    return seen[0]


def test_completing_the_trace_costs_the_same_for_every_step(monkeypatch):
    """Step k's traced ``history`` holds the k entries before it; looking each one up in Python (to
    share its timeless copy) made the end of an N-step turn cost N²/2 calls."""
    calls = {steps: _calls_completing_the_trace(monkeypatch, steps) for steps in (8, 16, 32)}
    assert calls[32] - calls[16] <= 2 * (calls[16] - calls[8]) + 16, calls  # linear, give or take a stray call


class _CountedStep(Step):
    """A step that counts how often its ``reasoning_content`` is read."""

    reads: ClassVar[list[int]] = []

    def __getattribute__(self, name: str) -> Any:
        if name == "reasoning_content":
            _CountedStep.reads.append(1)
        return super().__getattribute__(name)


def test_a_request_to_a_server_of_your_own_reads_each_steps_reasoning_once_per_turn():
    """Natively, a server of your own (any ``api_base`` that is no hosted provider's, such as a
    local one) reads ``reasoning_content`` back; whether the request must carry it was worked out
    from the whole history on every request, N²/2 reads in an N-step turn."""
    route = Route("native", "openai-chat", reads_reasoning=True)
    memo, recorded = RenderMemo(), []
    _CountedStep.reads.clear()
    for index in range(STEPS):
        recorded.append(_CountedStep(calls=(ToolCall(f"c{index}", "look", {"where": "x"}),)))
        assert not replays_state(route, Window(recorded), memo)
    assert len(_CountedStep.reads) == STEPS
    recorded.append(_CountedStep(reasoning_content="because"))
    assert replays_state(route, Window(recorded), memo)
    assert replays_state(route, tuple(recorded), memo)  # not a window: read whole


def test_the_chat_writer_reads_no_assistant_message_of_a_stateless_history(monkeypatch):
    """lm15 writes every Chat Completions request's whole history (twice); our patch of its writer
    (``_routes.chat_extras``) read each assistant message's state, three calls a message, on every
    request, although only ``route.canonical_request`` ever attaches any."""
    readers = [_counted(monkeypatch, chat_extras, name) for name in ("_details_of", "_signatures_of")]
    readers.append(_counted(monkeypatch, chat_extras, "reasoning_of"))
    messages = [Message(role="user", parts=(TextPart(text="Where is the thing?"),))]
    items: list[dict[str, Any]] = [{"role": "user", "content": "Where is the thing?"}]
    for index in range(STEPS):
        calls = (ToolCallPart(id=f"c{index}", name="look", input={"where": "x"}),)
        messages.append(Message(role="assistant", parts=calls))
        items.append({"role": "assistant", "tool_calls": [{"id": f"c{index}", "type": "function"}]})
    assert chat_extras.with_extras(items, messages) is items
    assert [reader[0] for reader in readers] == [0, 0, 0]
    stated = Message(role="assistant", parts=(TextPart(text="hm"),), continuation=(local_servers.reasoning_state("t"),))
    assert chat_extras.with_extras([*items, {"role": "assistant"}], [*messages, stated])[-1]["reasoning_content"] == "t"


def test_a_turn_writes_its_inputs_once(monkeypatch):
    """A turn's inputs went through DSPy's field formatting (a pydantic ``TypeAdapter`` per value)
    three times: for the first request, then as the first step's, unsettled and settled."""
    program = dspy_imp.ReActV2("question -> answer, confidence: float", tools=[look], max_iters=STEPS + 2)
    written = _counted(monkeypatch, dspy.ChatAdapter, "format_user_message_content")
    prediction = _run(program)
    assert (prediction.answer, written[0]) == ("found", 1)


def test_a_tool_call_asks_no_tool_for_what_it_cannot_hold(monkeypatch):
    """Each tool call asked the tool (a ``dspy.Tool``: a pydantic model) six times for what only some
    tools carry (``parameters_schema``, ``arguments_bound``, ``runs_agent`` twice...); for a name a
    pydantic model cannot hold, ``getattr`` with a default pays for pydantic raising inside."""
    program = dspy_imp.ReActV2("question -> answer, confidence: float", tools=[look], max_iters=STEPS + 2)
    _run(program)
    original = pydantic.BaseModel.__getattr__
    ours: list[str] = []

    def counting(self: pydantic.BaseModel, name: str) -> Any:
        try:
            return original(self, name)
        except AttributeError:
            if "dspy_imp" in sys._getframe(1).f_code.co_filename:
                ours.append(name)
            raise

    monkeypatch.setattr(pydantic.BaseModel, "__getattr__", counting)
    assert _run(program).answer == "found"
    assert ours == []


def test_what_a_tool_carries_reads_as_getattr_reads_it():
    class Carrying(dspy.Tool):
        parameters_schema: dict[str, Any] = pydantic.Field(default_factory=dict)
        _bound: Any = pydantic.PrivateAttr(default=2.0)

        @property
        def arguments_bound(self) -> float:
            return self._bound

    class Open(pydantic.BaseModel):
        model_config = pydantic.ConfigDict(extra="allow")

    plain, carrying, extra = dspy.Tool(look), Carrying(look), Open(runs_agent=True)
    carrying.parameters_schema = {"type": "object"}
    object.__setattr__(plain, "any_loop", True)  # past pydantic's check, as a library might
    names = ("parameters_schema", "arguments_bound", "runs_agent", "any_loop", "_bound", "counts_model_calls")
    for tool in (plain, carrying, extra, None, object()):
        for name in names:
            assert carried(tool, name, "absent") == getattr(tool, name, "absent"), (tool, name)
