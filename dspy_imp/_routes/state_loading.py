"""Loading a DSPy module's state parameter by parameter, leaving out the ones a file has none for.

DSPy's ``BaseModule.load_state`` reads ``state[name]`` for every parameter its walk finds; a
program made of parts (sub-agents, guardrail modules, a context policy's summarizer) must load a
file saved before a part existed, the part keeping its defaults. As DSPy's, it runs on a copy first,
so a file that fails applies nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import dspy


def load_except(module: Any, state: dict[str, Any], skip: Callable[[str], bool], allow_unsafe_lm_state: bool) -> None:
    """``module.load_state(state)`` by parameter, leaving as they are those whose name ``skip`` holds."""

    def apply(target: Any) -> None:
        for name, param in target.named_parameters():
            if skip(name):
                continue
            if isinstance(param, dspy.Module):
                param.load_state(state[name], allow_unsafe_lm_state=allow_unsafe_lm_state)
            else:
                param.load_state(state[name])

    apply(module.deepcopy())
    apply(module)
