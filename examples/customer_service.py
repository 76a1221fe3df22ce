"""Agent evals that feed the optimizers, end to end, on a tiny tau-bench-style customer-service task set.

A shop's policy says: ask the `researcher` sub-agent before any refund, and refund only the
duplicate charge; the researcher's own says: look the order up with `lookup_order`. A triage agent
serves customers, a simulated user plays each customer (a goal and private facts, over several
turns), and `dspy_imp.evals` scores the whole conversation: did the refund the customer needed
happen, and did the team's tool calls follow the policy? Then one compile with GEPA (the trajectory
metric's feedback is what it reflects on) and one with BootstrapFewShot, each on the triage agent
alone: the researcher is a part of it, so the compile teaches both agents. Scored again on held-out
customers, with pass^k over repeated trials.

Offline, the scripted model follows an agent's policy only when that agent's prompt teaches it (the
policy in its instructions, as GEPA proposes, or a worked example, as BootstrapFewShot adds).
Untaught, triage refunds what the customer claims at once, and the researcher answers without
looking; a team with only triage taught still refunds the wrong amount.

    python examples/customer_service.py          # offline, scripted agent, user and reflection model
    python examples/customer_service.py --live   # DSPY_IMP_MODEL plays all three
"""

from __future__ import annotations

import json
import logging
import re
from typing import Any

import dspy
from _shared import choose_model

import dspy_imp
from dspy_imp import evals
from dspy_imp.testing import RecordedRequest, ScriptedLM, call, reply

ORDERS = {"A-17": 19.90, "B-22": 5.00, "C-31": 12.50, "D-44": 7.25, "E-58": 30.00, "F-63": 3.10}
"""Each order was charged twice by mistake; the duplicate charge is its price."""
POLICY = "Look the order up with the researcher before any refund, and refund only the duplicate charge."
RESEARCH_POLICY = "Look the order up with `lookup_order` before you answer, and report its duplicate charge."


def lookup_order(order_id: str) -> dict:
    """Look an order up: its charges."""
    price = ORDERS.get(order_id)
    return {"order_id": order_id, "charges": [price, price]} if price else {"error": f"no order {order_id}"}


def refund(order_id: str, amount: float) -> str:
    """Refund an amount on an order."""
    return f"refunded {amount:.2f} on {order_id}"


def make_triage() -> dspy_imp.ReActV2:
    researcher = dspy_imp.ReActV2("question -> findings", tools=[lookup_order])
    return dspy_imp.ReActV2(
        "message -> reply",
        tools=[researcher.as_tool(name="researcher", description="Find out the facts of an order."), refund],
        max_iters=4,
    )


def task(order_id: str) -> dspy.Example:
    """One customer: a goal, private facts, and what the team should do (the policy's trajectory)."""
    price = ORDERS[order_id]
    return dspy.Example(
        goal="Get the duplicate charge on your last order refunded.",
        facts=f"Your last order is {order_id}. You paid {2 * price:.2f} in total.",
        message=f"I was charged twice on order {order_id}, {2 * price:.2f} in total.",
        expected_calls=[
            evals.Call("researcher"),
            evals.Call("lookup_order", {"order_id": order_id}, agent="researcher"),
            evals.Call("refund", {"order_id": order_id, "amount": price}),
        ],
        refund=price,
    )


TRAIN = [task(o).with_inputs("message") for o in ("A-17", "B-22", "C-31")]
HELD_OUT = [task(o).with_inputs("goal", "facts") for o in ("D-44", "E-58", "F-63")]

# The metrics: the policy's trajectory (feedback in the team's terms), and the customer's goal.
TRAJECTORY = evals.ToolTrajectory("in_order", args={"amount": lambda got, want: abs(got - want) < 0.005})


def refunded(example: dspy.Example, conversation: evals.Conversation) -> tuple[float, str]:
    done = [c.args.get("amount") for c in evals.read(example, conversation.last).calls if c.name == "refund"]
    right = done == [example.refund]
    return float(right), f"Refunds made: {done}; the customer was owed {example.refund}."


CONVERSATION = evals.Weighted({evals.GoalReached(refunded): 1, TRAJECTORY: 1, evals.TurnsTaken(3): 1})


# -- the scripted models (offline) ---------------------------------------------------------------


def _taught(messages: list[dict[str, Any]], policy: str, tool: str) -> bool:
    """The agent's policy is in its instructions, or a worked example shows its ``tool`` called first."""
    if policy in (messages[0].get("content") or ""):
        return True
    return any(c["function"]["name"] == tool for m in messages for c in m.get("tool_calls") or ())


def _tool_name(messages: list[dict[str, Any]], call_id: str) -> str:
    calls = [c for m in messages for c in m.get("tool_calls") or ()]
    return next(c["function"]["name"] for c in calls if c["id"] == call_id)


def _researcher(messages: list[dict[str, Any]]) -> Any:
    if messages[-1]["role"] == "tool":
        found = json.loads(messages[-1]["content"])
        price = found["charges"][0]
        return reply(f"Order {found['order_id']} was charged {price:.2f} twice; the duplicate is {price:.2f}.")
    if not _taught(messages, RESEARCH_POLICY, "lookup_order"):
        return reply("I did not look the order up; the customer's own numbers are all we have.")
    order = re.findall(r"[A-F]-\d\d", messages[-1]["content"])[-1]
    return reply(calls=[call("lookup_order", {"order_id": order})])


def _live(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages after the worked examples (demos) a prompt may show before the conversation."""
    demo = [i for i, m in enumerate(messages) if str(m.get("tool_call_id", "")).startswith("demo")]
    return messages[demo[-1] + 1 :] if demo else messages


def _triage(messages: list[dict[str, Any]]) -> Any:
    live = _live(messages)
    said = " ".join(m["content"] for m in live if m["role"] == "user" and isinstance(m.get("content"), str))
    orders = re.findall(r"\b[A-F]-\d\d\b", said)
    last = messages[-1]
    if last["role"] == "tool" and _tool_name(messages, last["tool_call_id"]) == "refund":
        return reply(f"Done: {last['content']}.")
    total = float(re.findall(r"(\d+\.\d\d) in total", said)[-1]) if "in total" in said else None
    if last["role"] == "tool":  # the researcher's findings: the duplicate, or nothing better than the claim
        duplicate = re.search(r"the duplicate is (\d+\.\d+)", last["content"])
        amount = float(duplicate.group(1)) if duplicate else total
        return reply(calls=[call("refund", {"order_id": orders[-1], "amount": amount})])
    if not orders:
        return reply("Which order was it?")
    if _taught(messages, POLICY, "researcher"):
        return reply(calls=[call("researcher", {"question": f"What was charged on order {orders[-1]}?"})])
    return reply(calls=[call("refund", {"order_id": orders[-1], "amount": total})])  # what was claimed


def _user(messages: list[dict[str, Any]]) -> Any:
    seen = messages[-1]["content"]
    facts = re.search(r"Your last order is (\S+)\. You paid (\S+) in total", seen)
    agent_lines = re.findall(r"^agent: (.*)$", seen, re.MULTILINE)
    if not agent_lines:
        message, done = f"I was charged twice for my last order, {facts.group(2)} in total.", False
    elif "Which order" in agent_lines[-1]:
        message, done = f"It's order {facts.group(1)}", False
    else:
        message, done = "Thanks, bye!", True
    return reply(f"[[ ## message ## ]]\n{message}\n\n[[ ## done ## ]]\n{done}\n\n[[ ## completed ## ]]")


def _reflection(request: RecordedRequest) -> Any:
    """GEPA's reflection model proposes the agent's policy as its new instruction (JSON or chat format):
    the researcher's when the instruction it improves is the researcher's (its `findings`)."""
    asked = request.messages[-1]["content"]
    current = asked.split("current_instruction", 1)[-1].split("[[ ##", 1)[0]
    policy = RESEARCH_POLICY if "`findings`" in current or RESEARCH_POLICY in current else POLICY
    if "JSON" in asked:
        return reply(json.dumps({"new_instruction": policy}))
    return reply(f"[[ ## new_instruction ## ]]\n{policy}\n\n[[ ## completed ## ]]")


def scripted(request: RecordedRequest) -> Any:
    """One model for every request of the offline run: agents, user and reflection."""
    system = request.messages[0].get("content") or ""
    if "`new_instruction`" in system:
        return _reflection(request)
    if "`goal`" in system:
        return _user(request.messages)
    if "`findings`" in system:
        return _researcher(request.messages)
    return _triage(request.messages)


# -- evaluating and compiling ----------------------------------------------------------------------


def score(agent: dspy.Module, user: evals.SimulatedUser) -> Any:
    """``dspy.Evaluate`` over the held-out customers, one whole conversation each."""
    evaluate = dspy.Evaluate(devset=HELD_OUT, metric=CONVERSATION, num_threads=1, display_progress=False)
    return evaluate(evals.Conversing(agent, user, max_turns=4))


def compile_gepa(lm: dspy.LM, reflection: dspy.LM) -> dspy.Module:
    """GEPA on the triage agent: each round reflects on every agent of the team (``"all"``)."""
    optimizer = dspy.GEPA(
        metric=TRAJECTORY,
        reflection_lm=reflection,
        max_metric_calls=20,
        num_threads=1,
        reflection_minibatch_size=2,
        component_selector="all",
        use_merge=False,
        track_stats=True,  # its candidates on `detailed_results`
    )
    with dspy.context(lm=lm):
        return optimizer.compile(make_triage(), trainset=TRAIN, valset=TRAIN)


def compile_bootstrap(lm: dspy.LM, teacher: dspy.LM) -> dspy.Module:
    """BootstrapFewShot on the triage agent: each agent of the team keeps its own steps as a demo."""
    optimizer = dspy.BootstrapFewShot(
        metric=TRAJECTORY, max_bootstrapped_demos=1, max_labeled_demos=0, teacher_settings={"lm": teacher}
    )
    with dspy.context(lm=lm):
        return optimizer.compile(make_triage(), trainset=TRAIN)


def teacher_lm() -> ScriptedLM:
    """Offline, the teacher is the scripted model with both policies in mind (it always follows them)."""

    def follows_policy(request: RecordedRequest) -> Any:
        system = f"{request.messages[0].get('content') or ''}\n{POLICY}\n{RESEARCH_POLICY}"
        first = dict(request.messages[0], content=system)
        return scripted(RecordedRequest(**{**vars(request), "messages": [first, *request.messages[1:]]}))

    return ScriptedLM(follows_policy)


def taught(program: dspy.Module) -> dict[str, str]:
    """What a compile changed on each agent of the team (by predictor): its instruction, or its demos."""
    untaught = dict(make_triage().named_predictors())
    changed = {}
    for name, predictor in program.named_predictors():
        if predictor.signature.instructions != untaught[name].signature.instructions:
            changed[name] = f"instruction {predictor.signature.instructions!r}"
        elif predictor.demos:
            changed[name] = f"{len(predictor.demos)} demo(s)"
    return changed


def main() -> None:
    logging.getLogger("dspy").setLevel(logging.WARNING)
    dspy_imp.show_progress(False)
    lm, live = choose_model(__doc__, scripted)
    user = evals.SimulatedUser()
    user.set_lm(lm)
    print(f"the team's predictors: {[name for name, _ in make_triage().named_predictors()]}")
    with dspy.context(lm=lm):
        before = score(make_triage(), user)
    report = evals.report(before, CONVERSATION)
    print(f"before compiling: held-out conversations score {before.score:.0f}%")
    passed = len(report.rows) - len(report.failing().rows)
    print(f"  {passed} of {len(report.rows)} conversations succeeded: the score is the turns-taken third alone")
    print("  first failing conversation's feedback:")
    print("    " + report.failing().rows[0].verdict.feedback.replace("\n", "\n    "))

    compiled = {"GEPA": compile_gepa(lm, lm), "BootstrapFewShot": compile_bootstrap(lm, lm if live else teacher_lm())}
    for name, program in compiled.items():
        print(f"{name} taught the team:")
        for predictor, change in taught(program).items():
            print(f"  {predictor}: {change}")
    print("GEPA's candidates on the training tickets (the trajectory metric):")
    found = compiled["GEPA"].detailed_results
    for candidate, value in zip(found.candidates, found.val_aggregate_scores, strict=True):
        print(f"  {value:.2f} with {' and '.join(taught(candidate)) or 'no agent'} taught")
    with dspy.context(lm=lm):
        for name, program in compiled.items():
            print(f"after {name}: held-out conversations score {score(program, user).score:.0f}%")
        trials = {
            name: evals.repeat(evals.Conversing(program, user, max_turns=4), HELD_OUT, CONVERSATION, trials=3)
            for name, program in {"before": make_triage(), **compiled}.items()
        }
    for k in (1, 3):
        after = ", ".join(f"{trials[name].pass_hat(k):.2f} after {name}" for name in compiled)
        print(f"pass^{k} over 3 trials: {trials['before'].pass_hat(k):.2f} before, {after}")


if __name__ == "__main__":
    main()
