"""Generate docs/why.md from real runs: the same model, dspy.ReActV2 beside dspy_imp.ReActV2.

Each scenario is a *model* (a function from the request to a reply, served by
``dspy_imp.testing.ScriptedLM``) that behaves the way real models do, run through both loops. The
page shows every request each loop sent, what the model did, and how the turn ended, exactly as it
happened: nothing on the page is typed by hand except the prose in ``why.template.md``.

    python docs/generate/why.py           # rewrite docs/why.md
    python docs/generate/why.py --check   # exit 1 when docs/why.md is stale (the test suite runs this)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
warnings.filterwarnings("ignore")

import dspy  # noqa: E402

import dspy_imp  # noqa: E402
from dspy_imp.testing import RecordedRequest, Reply, ScriptedLM, call, fail, reply  # noqa: E402

HERE = Path(__file__).resolve().parent
TEMPLATE = HERE / "why.template.md"
PAGE = HERE.parent / "why.md"

Model = Callable[[RecordedRequest], Any]


def lookup(query: str) -> str:
    """Look something up."""
    return f"{query}: Paris is the capital of France."


def send(text: str) -> str:
    """Send the reply to the customer."""
    return "delivered"


def refund(order_id: str) -> str:
    """Refund an order."""
    return f"refunded {order_id}"


def _forced(request: RecordedRequest) -> bool:
    return request.tool_choice not in (None, "auto")


def _has_result(request: RecordedRequest) -> bool:
    return any(message["role"] == "tool" for message in request.messages)


def _assistant_turns(request: RecordedRequest) -> int:
    return sum(message["role"] == "assistant" for message in request.messages)


def narrator(request: RecordedRequest) -> Any:
    """Says what it is about to do before doing it, as many models do."""
    if _forced(request):
        return reply(calls=[call("submit", {"answer": "Paris"})])
    if _has_result(request):
        return reply(calls=[call("submit", {"answer": "Paris"})]) if "submit" in request.tool_names else reply("Paris.")
    if _assistant_turns(request) == 0:
        return reply("Let me look that up first.")
    return reply(calls=[call("lookup", {"query": "capital of France"})])


def flaky(request: RecordedRequest) -> Any:
    """Refunds, then the provider fails once (an HTTP 500) before the model answers."""
    if _forced(request):
        return reply(calls=[call("submit", {"answer": "Your order 42 was refunded."})])
    if not _has_result(request):
        return reply(calls=[call("refund", {"order_id": "42"})])
    flaky.failures = getattr(flaky, "failures", 0) + 1  # type: ignore[attr-defined]
    if flaky.failures % 2:  # type: ignore[attr-defined]
        return fail.server_error()
    return reply("Your order 42 was refunded.")


def support(request: RecordedRequest) -> Any:
    """Acts through `send`, then says goodbye in text, as a support agent would."""
    if _forced(request):
        return reply(calls=[call("submit", {"reply": "Your parcel arrives Tuesday."})])
    if not _has_result(request):
        return reply(calls=[call("send", {"text": "Your parcel arrives Tuesday."})])
    return reply("I have answered the customer.")


@dataclass
class Run:
    loop: str
    rows: list[tuple[str, str]] = field(default_factory=list)
    ending: str = ""


def _describe_request(request: RecordedRequest) -> str:
    choice = request.tool_choice
    if isinstance(choice, dict):
        choice = f"`{choice['function']['name']}` forced"
    elif choice is None:
        choice = "not set"
    last = request.messages[-1]
    tail = f"ends on a `{last['role']}` message"
    tools = ", ".join(f"`{name}`" for name in request.tool_names) or "none"
    return f"{len(request.messages)} messages ({tail}); tools {tools}; tool_choice {choice}"


def _describe_reply(item: Any) -> str:
    if not isinstance(item, Reply):
        return "fails: HTTP 500"
    if item.calls:
        return "calls " + ", ".join(f"`{c.name}({json.dumps(c.args)})`" for c in item.calls)
    return f"writes {item.text!r}"


def _ending(pred: Any) -> str:
    meta = getattr(pred, "metadata", None)
    if meta is None:  # dspy.ReActV2
        outputs = {k: v for k, v in pred.items() if k not in ("history", "termination_reason")}
        return f"returns {outputs}, `termination_reason={pred.termination_reason!r}`"
    outputs = dict(pred.items())
    cause = f", cause `{meta.termination_cause}`" if meta.termination_cause else ""
    tool = f", by `{meta.finished_by_tool}`" if meta.finished_by_tool else ""
    return f"returns {outputs}, `termination_reason={meta.termination_reason!r}`{cause}{tool}"


def run(loop: str, build: Callable[[], dspy.Module], model: Model, **inputs: Any) -> Run:
    """One turn of ``build()`` against ``model``; every request and reply is recorded."""
    result = Run(loop)
    seen: list[Any] = []

    def respond(request: RecordedRequest) -> Any:
        item = model(request)
        seen.append(item)
        return item

    if hasattr(model, "failures"):
        model.failures = 0  # type: ignore[attr-defined]
    lm = ScriptedLM(respond)
    with dspy.context(lm=lm, adapter=dspy.ChatAdapter(use_native_function_calling=True)):
        try:
            result.ending = _ending(build()(**inputs))
        except Exception as error:  # what the caller of that loop gets
            history = getattr(error, "history", None)
            kept = f", `error.history` holds {len(history.messages)} step(s)" if history is not None else ""
            result.ending = f"raises `{type(error).__name__}`{kept}"
    result.rows = [(_describe_request(r), _describe_reply(i)) for r, i in zip(lm.requests, seen, strict=True)]
    return result


def table(runs: list[Run]) -> str:
    lines = []
    for item in runs:
        lines += [f"**{item.loop}**", "", "| # | request | the model |", "| ---: | --- | --- |"]
        lines += [f"| {n} | {request} | {answer} |" for n, (request, answer) in enumerate(item.rows, 1)]
        lines += ["", f"Then it {item.ending}.", ""]
    return "\n".join(lines).rstrip() + "\n"


def scenarios() -> dict[str, str]:
    question = {"question": "What is the capital of France?"}
    stock = "dspy.ReActV2"
    return {
        "narrator": table(
            [
                run(stock, lambda: dspy.ReActV2("question -> answer", tools=[lookup]), narrator, **question),
                run(
                    'dspy_imp.ReActV2, finish="submit"',
                    lambda: dspy_imp.ReActV2("question -> answer", tools=[lookup], finish="submit"),
                    narrator,
                    **question,
                ),
            ]
        ),
        "failure": table(
            [
                run(stock, lambda: dspy.ReActV2("request -> answer", tools=[refund]), flaky, request="Refund order 42"),
                run(
                    "dspy_imp.ReActV2",
                    lambda: dspy_imp.ReActV2("request -> answer", tools=[refund]),
                    flaky,
                    request="Refund order 42",
                ),
            ]
        ),
        "support": table(
            [
                run(stock, lambda: dspy.ReActV2("message -> reply", tools=[send]), support, message="Where is it?"),
                run(
                    'dspy_imp.ReActV2, finish="tools"',
                    lambda: dspy_imp.ReActV2(
                        "message -> reply",
                        tools=[send],
                        finish="tools",
                        finish_on={"send": lambda args, result, inputs: dspy_imp.Finish(reply=args["text"])},
                    ),
                    support,
                    message="Where is it?",
                ),
            ]
        ),
    }


def render() -> str:
    page = TEMPLATE.read_text(encoding="utf-8")
    for name, text in scenarios().items():
        page = page.replace(f"{{{{ {name} }}}}", text.rstrip("\n"))
    return page


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="fail when docs/why.md differs from a fresh run")
    check = parser.parse_args().check
    page = render()
    if check:
        if PAGE.read_text(encoding="utf-8") != page:
            print("docs/why.md is stale: run `python docs/generate/why.py`", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(page, encoding="utf-8")
    print(f"wrote {PAGE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
