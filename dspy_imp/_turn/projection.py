"""Context-window recovery: which oldest prior episodes a request leaves out (reference §9).

At call start the prior history is cut into episodes: each entry that carries every task
output ends one, and a trailing unfinished group is kept together. On each context-window
refusal the oldest half of the remaining episodes is left out of the prompt (at least one;
on the eighth and last retry, all of them). Entries of the current call are never left
out, and a resume with nothing new keeps its last group. Only prompts shrink: the returned
history keeps everything.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from dspy_imp._records.steps import Step

MAX_RECOVERIES = 8


class Projection:
    def __init__(self, prior: Sequence[Step], output_names: Sequence[str]):
        self.prior = len(prior)
        self.boundaries = episode_ends(prior, output_names)
        self.omitted = 0
        self.recoveries = 0

    def leave_out_more(self, something_new: bool) -> bool:
        """After a refusal: leave out more, and say whether a retry is worth sending."""
        remaining = [b for b in self.boundaries if b > self.omitted and (b < self.prior or something_new)]
        if not remaining or self.recoveries >= MAX_RECOVERIES:
            return False
        self.recoveries += 1
        last = self.recoveries == MAX_RECOVERIES
        drop = len(remaining) if last else max(1, math.ceil(len(remaining) / 2))
        self.omitted = remaining[drop - 1]
        return True

    def metadata(self) -> dict[str, Any] | None:
        """``metadata.context_projection``, or ``None`` when nothing was left out."""
        if not self.omitted:
            return None
        return {
            "reason": "context_window_exceeded",
            "omitted_prior_entries": self.omitted,
            "omitted_prior_groups": sum(1 for b in self.boundaries if b <= self.omitted),
            "recovery_requests": self.recoveries,
        }


def episode_ends(prior: Sequence[Step], output_names: Sequence[str]) -> list[int]:
    """1-based ends of prior episodes: entries carrying every output, and the last prior entry."""
    ends = [
        i
        for i, step in enumerate(prior, start=1)
        if output_names and step.outputs is not None and all(n in step.outputs for n in output_names)
    ]
    if prior and (not ends or ends[-1] != len(prior)):
        ends.append(len(prior))
    return ends
