"""The prefix consecutive requests share in a long conversation under a context policy.

A scripted model (no network) reads three 20 kB pages per call of the program and answers, for
``calls`` calls, under a 32k-token window with ``dspy_imp.Context(window=32_000)``. For every request
in the order sent (summary requests included) we measure the leading messages it shares with the
request before it. A request *breaks the prefix* when it shares less than the previous request's
messages but the last (a trailing user message, which the next request may answer differently:
the pending inputs, or a summary request's instruction). The promise (issue 24): at most one request
breaks the prefix in each tier change (``metadata.context`` records each change).

Run: ``.venv/bin/python -m benchmarks.context_prefix`` (``make bench`` runs it too).
"""

from __future__ import annotations

import itertools
import json
import os
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import dspy

import dspy_imp
from dspy_imp.testing import ScriptedLM, call, reply

WINDOW = 32_000
_WORDS = [
    "the",
    "report",
    "lists",
    "every",
    "shipment",
    "by",
    "date",
    "and",
    "carrier",
    "with",
    "its",
    "weight",
    "and",
    "destination",
]
_SUMMARY_MARK = "Summarize the conversation"


def read(page: int) -> str:
    """Read one page of the shipment report (about 20 kB)."""
    words = itertools.islice(itertools.cycle(_WORDS), page % 7, None)
    return f"page {page}: " + " ".join(itertools.islice(words, 3_400))


READS_PER_CALL = 3


def model(request: Any) -> Any:
    """Three reads per call, then an answer; a summary for a summary request (also the scripted
    model of ``tests/test_context_long_conversation.py``, which adds the window's refusal)."""
    last = request.messages[-1]
    if _SUMMARY_MARK in str(last.get("content")):
        return reply("Each call asked about the report; I read three pages and answered.")
    since_user = list(itertools.takewhile(lambda m: m["role"] != "user", reversed(request.messages)))
    if sum(1 for m in since_user if m["role"] == "tool") < READS_PER_CALL:
        return reply("", calls=[call("read", {"page": len(request.messages)})])
    return reply("The report lists the shipments.")


def shared(previous: Any, current: Any) -> int:
    """Leading messages ``current`` shares with ``previous`` (none when the tool lists differ)."""
    if previous.tools != current.tools:
        return 0
    return sum(
        1
        for _ in itertools.takewhile(
            lambda pair: pair[0] == pair[1], zip(previous.messages, current.messages, strict=False)
        )
    )


def run(calls: int = 40) -> dict[str, Any]:
    lm = ScriptedLM(model)
    agent = dspy_imp.ReActV2("intent -> answer", tools=[read], context=dspy_imp.Context(window=WINDOW))
    history, changes = None, {"clear": 0, "summarize": 0, "leave_out": 0}
    with dspy.context(lm=lm):
        for index in range(calls):
            pred = agent(intent=f"What does page set {index} say?", history=history)
            history = pred.metadata.history
            for record in pred.metadata.context:
                for applied in record.get("applied", ()):
                    changes[applied["tier"]] += 1
    requests = lm.requests
    breaks, shares = 0, []
    for previous, current in itertools.pairwise(requests):
        common = shared(previous, current)
        shares.append(common / len(previous.messages))
        breaks += common < len(previous.messages) - 1
    fitted = sum(changes.values())
    return {
        "calls": calls,
        "requests": len(requests),
        "summary_requests": sum(1 for r in requests if _SUMMARY_MARK in str(r.messages[-1].get("content"))),
        "tier_changes": changes,
        "prefix_breaks": breaks,
        "breaks_per_change": breaks / fitted if fitted else 0.0,
        "mean_shared_share": sum(shares) / len(shares) if shares else 1.0,
        "history_entries": len(history.messages) if history is not None else 0,
        "tier_changes_total": fitted,
    }


def table(result: dict[str, Any]) -> str:
    rows = [
        ("calls of the program", result["calls"]),
        ("requests (summary requests)", f"{result['requests']} ({result['summary_requests']})"),
        ("tier changes (clear / summarize / leave out)", " / ".join(str(v) for v in result["tier_changes"].values())),
        ("requests that broke the prefix", result["prefix_breaks"]),
        ("breaks per tier change", f"{result['breaks_per_change']:.2f}"),
        ("mean share of the previous request's messages kept", f"{result['mean_shared_share']:.1%}"),
        ("history entries (all kept)", result["history_entries"]),
    ]
    return "\n".join(["| context policy, 32k window | |", "|---|---|", *(f"| {k} | {v} |" for k, v in rows)])


if __name__ == "__main__":
    outcome = run()
    print(table(outcome))
    print(json.dumps(outcome, indent=2))
