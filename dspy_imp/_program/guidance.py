"""What a call of the program shows the model, from its signature, tools and options: the
guidance of its requests, and the demo check a loaded file's demos go through (as a call would
show them)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import dspy

from dspy_imp._program import options as opts
from dspy_imp._prompt.demos import demo_examples
from dspy_imp._prompt.guidance import Guidance, Task
from dspy_imp._prompt.signature import is_text_answer
from dspy_imp._turn.plan import ProgramOptions


def program_guidance(
    signature: type[dspy.Signature],
    own_tools: Mapping[str, dspy.Tool],
    submit_tool: dspy.Tool,
    options: ProgramOptions,
    task: Task,
) -> Guidance:
    with_submit = opts.has_submit(signature, options.finish)
    own = tuple(own_tools.values())
    roster = (*own, submit_tool) if with_submit else own
    return Guidance(
        task=task,
        finish=options.finish,
        has_submit=with_submit,
        roster=tuple(roster),
        ending_tools=tuple(name for name in own_tools if name in options.finish_on),
        unsent_note=options.unsent_note,
        history_replay=options.history_replay,
        result_renderer=options.tool_result_renderer,
        toolset_instructions=options.toolset_instructions,
    )


def check_demos(
    signature: type[dspy.Signature],
    guidance_of: Callable[[ProgramOptions, Task], Guidance],
    options: ProgramOptions,
    demos: Any,
) -> None:
    """Raise ``ConfigurationError`` for a demo a call could not show (as each call would).

    ``guidance_of``: ``program_guidance`` bound to the program's signature and tools.
    """
    task = Task.of(signature, is_text_answer(signature))
    demo_examples(guidance_of(options, task), demos)
