"""A long conversation kept within the context window.

Three ideas keep a many-turn conversation small and cheap:

- `history_replay="actions"` shows earlier turns as what was done (inputs, tool calls, results,
  answers) without the narration and reasoning written beside the calls;
- when the provider still refuses a request as too long, the loop retries with the oldest
  earlier turns left out of the prompt (the returned history keeps everything, and
  `metadata.context_projection` says what was left out);
- a turn that runs out of steps gets one last request, and `last_request_note` asks for a summary
  of what was found instead of a bare "I ran out of steps".

    python examples/long_conversation.py          # offline, scripted model
    python examples/long_conversation.py --live   # DSPY_IMP_MODEL, e.g. openai/gpt-4o-mini
"""

from __future__ import annotations

import dspy
from _shared import choose_model, show_turn

import dspy_imp
from dspy_imp.testing import call, fail, reply

NOTES = {
    "standup": "Standup moved to 9:30.",
    "budget": "Q3 budget approved: 120k.",
    "hiring": "Two offers out; one accepted.",
}


def read_note(topic: str) -> str:
    """Read the team's note on a topic."""
    return NOTES.get(topic, f"no note on {topic}")


agent = dspy_imp.ReActV2(
    "question -> answer",
    tools=[read_note],
    max_iters=2,
    history_replay="actions",
    last_request_note="You are out of steps: summarize what you found so far in one or two sentences.",
)

QUESTIONS = ["When is standup?", "Was the budget approved?", "Give me the hiring status and anything else new."]
SCRIPT = [
    # Turn 1: one lookup, then the answer.
    reply("Let me check.", calls=[call("read_note", {"topic": "standup"}, id="c1")]),
    reply("Standup is at 9:30 now."),
    # Turn 2: the provider refuses the first request as too long; the retry leaves turn 1 out.
    fail.context_window(),
    reply(calls=[call("read_note", {"topic": "budget"}, id="c2")]),
    reply("Yes: 120k for Q3."),
    # Turn 3: two lookups use up max_iters=2; the last request (with the note) gets the summary.
    reply(calls=[call("read_note", {"topic": "hiring"}, id="c3")]),
    reply(calls=[call("read_note", {"topic": "offsite"}, id="c4")]),
    reply("Hiring: two offers out, one accepted. Nothing new on an offsite."),
]


def main() -> None:
    lm, _ = choose_model(__doc__, SCRIPT)
    history = None
    for question in QUESTIONS:
        before = len(history.messages) if history else 0
        print(f"user: {question}")
        with dspy.context(lm=lm):
            pred = agent(question=question, history=history)
        show_turn(pred, since=before)
        if pred.metadata.context_projection:
            print(f"  context_projection: {pred.metadata.context_projection}")
        history = pred.metadata.history
    print(f"history: {len(history.messages)} steps recorded, all kept")


if __name__ == "__main__":
    main()
