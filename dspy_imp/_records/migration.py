"""A state file saved by another loop (stock ``dspy.ReActV2``, the classic ``dspy.ReAct``), made one
``dspy_imp.ReActV2`` can load: a migration with a report of what was kept, rewritten and dropped.

Both stock loops write their protocol into the step predictor's instructions (``__init__`` builds
the sentences: "call `submit` with ...", "interleave next_thought, next_tool_name, and
next_tool_args", a numbered tool list with ``finish``). Loaded as they are, every request would ask
for a tool or a field this loop does not offer. Here, a ``react`` block is foreign when its
instructions hold those sentences or its fields are the classic loop's (``Trajectory:``,
``Next Tool Name:``); then:

- instructions: the sentences DSPy generated are removed, the task's own (and an optimizer's) kept;
  a file whose remaining instructions still name the old protocol is refused;
- field labels: those of the task inputs kept, the step fields' dropped (ours are other fields);
- demos: a labeled example (task inputs and outputs only) kept, a step of the old loop dropped;
  the classic extractor's demos (``extract.predict``) become labeled examples, the block dropped.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dspy_imp._records.errors import ConfigurationError

CLASSIC, STOCK_V2 = "classic dspy.ReAct", "stock dspy.ReActV2"

_V2_LINES = (
    re.compile(r"You are an Agent\. Use the supplied tools to produce .* from .*\."),
    re.compile(r"Call tools when more information is needed\."),
    re.compile(r"When the final answer is ready, call `submit` with .*\."),
    re.compile(r"The available tools are: .*\."),
)
_CLASSIC_START = "You are an Agent. In each episode, you will be given the fields "
_CLASSIC_END = "When providing `next_tool_args`, the value inside the field must be in JSON format"
_CLASSIC_PREFIXES = frozenset({"Trajectory:", "Next Tool Name:", "Next Tool Args:"})
_OLD_PROTOCOL = re.compile(r"next_tool_name|next_tool_args|`submit`|`finish`|\bfinish tool\b")
_OLD_STEP_KEYS = frozenset({"trajectory", "next_tool_name", "next_tool_args", "next_thought", "tool_calls", "history"})


@dataclass
class Report:
    """What a migration did, each item a short phrase."""

    source: str
    kept: list[str] = field(default_factory=list)
    rewritten: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        parts = [f"{name}: {'; '.join(items)}" for name, items in self._sections() if items]
        return (
            f"this state file was saved by {self.source}, not dspy_imp; migrated it ({'. '.join(parts)}). "
            "Save the program again to keep the migrated state (docs/migrating.md#state-files-from-another-loop)"
        )

    def _sections(self) -> list[tuple[str, list[str]]]:
        return [("kept", self.kept), ("rewritten", self.rewritten), ("dropped", self.dropped)]


def migrate_state(
    state: Mapping[str, Any], inputs: Sequence[str], outputs: Sequence[str]
) -> tuple[dict, Report | None]:
    """``state`` (a program's, keys ``react``...) made loadable, and the report; ``None`` for one of ours."""
    react = state.get("react")
    source = _source(react, "extract.predict" in state) if isinstance(react, Mapping) else None
    if source is None:
        return dict(state), None
    assert isinstance(react, Mapping)
    report = Report(source)
    migrated = dict(state)
    migrated["react"] = _migrate_react(react, inputs, outputs, report)
    extract = migrated.pop("extract.predict", None)
    if extract is not None:
        _take_extract(extract, migrated["react"], inputs, outputs, report)
    return migrated, report


def _source(react: Mapping[str, Any], has_extract: bool) -> str | None:
    signature = react.get("signature")
    if not isinstance(signature, Mapping) or "dspy_imp" in react:
        return None
    instructions = signature.get("instructions")
    lines = instructions.split("\n") if isinstance(instructions, str) else []
    fields = signature.get("fields")
    prefixes = {
        f.get("prefix")
        for f in (fields if isinstance(fields, list) else ())
        if isinstance(f, Mapping) and isinstance(f.get("prefix"), str)
    }
    if has_extract or prefixes & _CLASSIC_PREFIXES or any(line.startswith(_CLASSIC_START) for line in lines):
        return CLASSIC
    if any(p.fullmatch(line.strip()) for p in _V2_LINES for line in lines):
        return STOCK_V2
    return None


def _migrate_react(react: Mapping[str, Any], inputs: Sequence[str], outputs: Sequence[str], report: Report) -> dict:
    block = dict(react)
    signature = dict(block["signature"])
    if isinstance(signature.get("instructions"), str):
        signature["instructions"] = _instructions(signature["instructions"], report)
    fields = signature.get("fields")
    if isinstance(fields, list) and len(fields) > len(inputs):
        signature["fields"] = fields[: len(inputs)]
        labels = [str(f.get("prefix")) for f in fields[len(inputs) :] if isinstance(f, Mapping)]
        report.dropped.append(f"the old step fields' labels {labels!r}")
    block["signature"] = signature
    if isinstance(block.get("demos"), list):
        block["demos"] = _demos(block["demos"], report)
    return block


def _instructions(text: str, report: Report) -> str:
    if report.source == CLASSIC:
        start, end = text.find(_CLASSIC_START), text.find(_CLASSIC_END)
        if start < 0 or end < start:
            _refuse(text, "the classic loop's protocol paragraph is not whole")
        kept = "\n".join(p for p in (text[:start].strip(), text[end + len(_CLASSIC_END) :].strip()) if p)
    else:
        kept = "\n".join(line for line in text.split("\n") if not any(p.fullmatch(line.strip()) for p in _V2_LINES))
        kept = kept.strip()
    left = _OLD_PROTOCOL.search(kept)
    if left is not None:
        _refuse(text, f"what is left still names {left.group()!r}")
    report.rewritten.append(
        f"the instructions: the sentences {report.source} generated for its protocol removed, "
        + (f"the task's own kept ({kept!r})" if kept else "no other instructions were left")
    )
    return kept


def _refuse(text: str, why: str) -> None:
    raise ConfigurationError(
        f"saved `react.signature.instructions` name the protocol of the loop that saved them ({why}): {text!r}. "
        "Edit them in the file to describe the task alone (dspy_imp adds its own protocol), then load it again"
    )


def _demos(demos: list[Any], report: Report) -> list[Any]:
    kept = [d for d in demos if not (isinstance(d, Mapping) and _OLD_STEP_KEYS & set(d))]
    if len(kept) < len(demos):
        report.dropped.append(f"{len(demos) - len(kept)} demo(s) of the old loop's steps (they name its tools)")
    if kept:
        report.kept.append(f"{len(kept)} labeled demo(s)")
    return kept


def _take_extract(extract: Any, react: dict, inputs: Sequence[str], outputs: Sequence[str], report: Report) -> None:
    demos = extract.get("demos") if isinstance(extract, Mapping) else None
    wanted = (*inputs, *outputs)
    converted = [
        {name: demo[name] for name in wanted}
        for demo in (demos if isinstance(demos, list) else ())
        if isinstance(demo, Mapping) and all(name in demo for name in wanted)
    ]
    existing = react.get("demos")
    if existing is not None and not isinstance(existing, list):
        return  # a malformed `react.demos`: left for the step predictor's check to refuse, naming it
    have = [d for d in existing or () if isinstance(d, Mapping)]
    new = [d for d in converted if not any(all(h.get(k) == v for k, v in d.items()) for h in have)]
    if new:
        react["demos"] = [*(existing or ()), *new]
        report.rewritten.append(f"{len(new)} demo(s) of the extractor `extract.predict` made labeled demos")
    report.dropped.append("the extractor `extract.predict` (dspy_imp's extractor keeps its own instructions)")
