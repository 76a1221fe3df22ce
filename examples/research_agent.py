"""A research agent that thinks before it submits a typed answer (finish="submit").

Under `finish="submit"` text is never the answer: a message without a tool call is a *thought*.
The loop tells the model its message was not sent and gives it one more ordinary step; the answer
arrives as validated `submit` arguments (a `float` stays a float).

    python examples/research_agent.py          # offline, scripted model
    python examples/research_agent.py --live   # DSPY_IMP_MODEL, e.g. openai/gpt-4o-mini
"""

from __future__ import annotations

import dspy
from _shared import choose_model, show_turn

import dspy_imp
from dspy_imp.testing import call, reply

PAPERS = {
    "attention": "Vaswani et al. (2017) introduced the Transformer; 8 authors.",
    "dspy": "Khattab et al. (2023) introduced DSPy; 13 authors.",
}


def search_papers(query: str) -> str:
    """Search a small paper index; returns matching summaries."""
    hits = [summary for key, summary in PAPERS.items() if key in query.lower()]
    return "\n".join(hits) or "no results"


class Research(dspy.Signature):
    """Answer the research question from the paper index. Cite the paper you used."""

    question: str = dspy.InputField()
    answer: str = dspy.OutputField()
    citation: str = dspy.OutputField()
    confidence: float = dspy.OutputField(desc="between 0 and 1")


agent = dspy_imp.ReActV2(Research, tools=[search_papers], finish="submit", max_iters=6)

SCRIPT = [
    reply("The question is about DSPy's paper; I should search the index before answering."),
    reply(calls=[call("search_papers", {"query": "DSPy"}, id="c1")]),
    reply(
        calls=[
            call(
                "submit",
                {"answer": "13 authors", "citation": "Khattab et al. (2023)", "confidence": 0.9},
                id="c2",
            )
        ]
    ),
]


def main() -> None:
    lm, _ = choose_model(__doc__, SCRIPT)
    question = "How many authors does the DSPy paper have?"
    print(f"question: {question}")
    with dspy.context(lm=lm):
        pred = agent(question=question)
    show_turn(pred)
    print(f"confidence is a {type(pred.confidence).__name__}: {pred.confidence}")


if __name__ == "__main__":
    main()
