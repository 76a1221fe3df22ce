"""Issue 9, holes 2 and 5: host code at the tool boundary never escapes raw or loses what ran.

A raising ``tool_policy``, exceptions whose ``str()`` itself fails (from a tool or a
``finish_on`` hook) and results that cannot be rendered (a circular dict, a raising
``__str__``, a lone surrogate) all become observations the model reads; the turn goes on,
its history keeps every tool that ran, dumps as strict JSON and resumes.
"""

from __future__ import annotations

import json
from typing import Any

import dspy
import pytest
from helpers import TA, tool, user

import dspy_imp
from dspy_imp.testing import ScriptedLM, call, reply


class Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("__str__ failed too")


class Payments:
    def __init__(self) -> None:
        self.paid: list[int] = []

    def pay(self, amount: int) -> str:
        """Pay an amount."""
        self.paid.append(amount)
        return f"paid {amount}"


def agent_with(tools: list[Any], **options: Any) -> dspy_imp.ReActV2:
    return dspy_imp.ReActV2(TA, tools=tools, **options)


def pay_then(other: str, other_args: dict[str, Any] | None = None) -> list[Any]:
    return [
        reply(calls=[call("pay", {"amount": 5}, id="p1"), call(other, other_args or {}, id="o1")]),
        reply("Done."),
    ]


def tool_messages(request: Any) -> list[dict[str, Any]]:
    return [m for m in request.messages if m["role"] == "tool"]


def assert_dumpable_and_resumable(history: dspy.History, run: Any) -> None:
    text = json.dumps(dspy_imp.dump_history(history), allow_nan=False)
    reloaded = dspy_imp.load_history(json.loads(text))
    lm = ScriptedLM([reply("Still done.")])
    with dspy.context(lm=lm):
        pred = run(agent_with([Payments().pay]), history=reloaded, intent="And now?")
    assert pred.answer == "Still done."
    sent = lm.requests[0].messages
    assert sent[-1] == user("[[ ## intent ## ]]\nAnd now?")
    assert json.dumps(sent, ensure_ascii=False).encode("utf-8")  # every message can be sent as UTF-8


def test_a_raising_tool_policy_refuses_that_call_and_the_paid_call_stays_recorded(run):
    payments = Payments()

    def policy(name: str, args: dict[str, Any]) -> bool:
        return {"pay": True}[name]  # KeyError for any other tool

    def refund() -> str:
        """Refund."""
        return "refunded"

    lm = ScriptedLM(pay_then("refund"))
    with dspy.context(lm=lm):
        pred = run(agent_with([payments.pay, refund], tool_policy=policy), intent="Pay then refund.")

    assert payments.paid == [5]
    assert pred.answer == "Done."
    assert tool_messages(lm.requests[1]) == [
        tool("p1", "paid 5"),
        tool("o1", "Error: refund is not allowed: the tool policy failed: 'refund'"),
    ]
    results = pred.metadata.history.messages[0]["tool_call_results"]
    assert [(r["name"], r["error"], r.get("error_kind")) for r in results] == [
        ("pay", False, None),
        ("refund", True, "tool_denied"),
    ]
    assert_dumpable_and_resumable(pred.metadata.history, run)


def test_a_tool_raising_an_exception_whose_str_fails_is_an_observation(run):
    payments = Payments()

    def explode() -> str:
        """Explode."""
        raise Unprintable()

    lm = ScriptedLM(pay_then("explode"))
    with dspy.context(lm=lm):
        pred = run(agent_with([payments.pay, explode]), intent="Pay then explode.")

    assert payments.paid == [5]
    assert tool_messages(lm.requests[1]) == [tool("p1", "paid 5"), tool("o1", "Error: explode failed: Unprintable")]
    assert_dumpable_and_resumable(pred.metadata.history, run)


def test_a_finish_on_hook_raising_an_exception_whose_str_fails_is_an_observation(run):
    payments = Payments()

    def hook(args: dict[str, Any], result: Any, inputs: dict[str, Any]) -> Any:
        raise Unprintable()

    lm = ScriptedLM([reply(calls=[call("pay", {"amount": 5}, id="p1")]), reply("Done.")])
    with dspy.context(lm=lm):
        pred = run(agent_with([payments.pay], finish_on={"pay": hook}), intent="Pay.")

    assert payments.paid == [5]
    assert pred.metadata.termination_reason == "answered"
    assert tool_messages(lm.requests[1]) == [tool("p1", "Error: pay failed: Unprintable")]


class BadStr:
    def __str__(self) -> str:
        raise RuntimeError("no text")

    __repr__ = __str__


UNREAD = "Error: fetch ran, but its result could not be read: "


def circular() -> dict[str, Any]:
    loop: dict[str, Any] = {"a": 1}
    loop["self"] = loop
    return loop


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        pytest.param(circular, f"{UNREAD}Circular reference detected", id="circular"),
        pytest.param(BadStr, f"{UNREAD}no text", id="raising-str"),
        pytest.param(lambda: "caf\udce9 au lait", "caf\ufffd au lait", id="lone-surrogate"),
        pytest.param(lambda: {"name": "\ud800x"}, '{"name": "\ufffdx"}', id="lone-surrogate-in-a-dict"),
    ],
)
def test_an_unrenderable_result_becomes_a_readable_observation(run, value, shown):
    payments = Payments()

    def fetch() -> Any:
        """Fetch a record."""
        return value()

    lm = ScriptedLM(pay_then("fetch"))
    with dspy.context(lm=lm):
        pred = run(agent_with([payments.pay, fetch]), intent="Pay then fetch.")

    assert payments.paid == [5]
    assert pred.answer == "Done."
    assert tool_messages(lm.requests[1]) == [tool("p1", "paid 5"), tool("o1", shown)]
    assert_dumpable_and_resumable(pred.metadata.history, run)


# -- host hooks without an observation of their own end the turn with StepError and the history -----


class LibraryStop(BaseException):
    """A library's own BaseException (not an interrupt, not the caller's cancellation)."""


def paid_then(count: Any) -> tuple[dspy_imp.ReActV2, Payments, ScriptedLM]:
    """An agent whose context counter is ``count``: one paid call, then a second request to measure."""
    payments = Payments()
    context = dspy_imp.Context(trigger=10_000, window=100_000, counter=count)
    lm = ScriptedLM([reply(calls=[call("pay", {"amount": 5}, id="p1")]), reply("Paid.")])
    return agent_with([payments.pay], context=context), payments, lm


@pytest.mark.parametrize(
    "failing",
    [
        pytest.param(lambda: (_ for _ in ()).throw(RuntimeError("counting service returned 503")), id="raises"),
        pytest.param(lambda: (_ for _ in ()).throw(LibraryStop("counting service gone")), id="base-exception"),
        pytest.param(lambda: None, id="returns-None"),
        pytest.param(lambda: "abc", id="returns-text"),
        pytest.param(lambda: float("nan"), id="returns-NaN"),
    ],
)
def test_a_failing_context_counter_ends_the_turn_with_step_error_and_the_history(run, failing):
    counted: list[int] = []

    def count(messages: Any, tools: Any, model: str) -> Any:
        counted.append(len(messages))
        return 100 if len(counted) == 1 else failing()  # the first request is measured, the second fails

    agent, payments, lm = paid_then(count)
    with dspy.context(lm=lm), pytest.raises(dspy_imp.StepError) as caught:
        run(agent, intent="pay 5")
    error = caught.value
    assert payments.paid == [5] and len(lm.requests) == 1  # the paid call ran; nothing more was sent
    [step] = error.history.messages
    assert step["intent"] == "pay 5"
    assert [(r["id"], r["result"]) for r in step["tool_call_results"]] == [("p1", "paid 5")]
    assert error.usage is not None and error.usage.total_requests == 1
    assert "no model response" not in str(error) and str(error).startswith("ReActV2 turn stopped: ")
    assert ".<locals>.count' failed (not the model)" in str(error) or "a host hook failed" in str(error)
    if isinstance(error.reason, TypeError):
        assert str(error.reason).startswith("`context.counter` returned ")
        assert str(error.reason).endswith(", not a token count (a number >= 0)")
    else:
        assert type(error.reason) in (RuntimeError, LibraryStop)


def test_a_guardrail_raising_a_librarys_base_exception_blocks_like_any_failing_guardrail(run):
    def strict(inputs: Any) -> Any:
        raise LibraryStop("policy engine unreachable")

    lm = ScriptedLM([])
    agent = agent_with([], input_guardrails=[dspy_imp.Guardrail(strict, name="strict")])
    with dspy.context(lm=lm):
        pred = run(agent, intent="hello")
    assert pred.metadata.termination_reason == "blocked"
    assert pred.metadata.guardrail["name"] == "strict"
    assert "policy engine unreachable" in pred.metadata.guardrail["reason"]
    assert lm.requests == []


def test_a_tool_policy_raising_a_librarys_base_exception_ends_the_turn_with_step_error(run):
    payments = Payments()

    def policy(name: str, args: Any) -> bool:
        if args.get("amount") == 99:
            raise LibraryStop("policy engine gone")
        return True

    lm = ScriptedLM([reply(calls=[call("pay", {"amount": 5}, id="p1")]), reply(calls=[call("pay", {"amount": 99})])])
    agent = agent_with([payments.pay], tool_policy=policy)
    with dspy.context(lm=lm), pytest.raises(dspy_imp.StepError) as caught:
        run(agent, intent="pay")
    assert isinstance(caught.value.reason, LibraryStop)
    assert str(caught.value).startswith("ReActV2 turn stopped: host hook 'test_a_tool_policy_raising_a_librarys")
    assert ".<locals>.policy' failed (not the model): " in str(caught.value)
    assert payments.paid == [5]
    [first, *_] = caught.value.history.messages
    assert [(r["id"], r["result"]) for r in first["tool_call_results"]] == [("p1", "paid 5")]
