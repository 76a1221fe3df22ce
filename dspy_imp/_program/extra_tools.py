"""A program that offers, for one turn, tools someone else runs: a web client's declared tools.

``with_external_tools(agent, tools)`` is a copy of ``agent`` whose roster also lists ``tools``
after its own, each in ``external_tools``: a call of one is checked (its arguments against the
tool's schema), then the turn pauses on it, and the caller resumes it with ``results=``. Nothing
else changes: the copy shares the agent's predictors, LM, demos and gates (``needs_approval``,
``tool_policy`` and the guardrails still apply to every call, and the agent's own tools keep
their own gates, since no extra tool may take an own tool's name or ``submit``'s).
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping
from typing import Any

import dspy

from dspy_imp._prompt.signature import SUBMIT
from dspy_imp._records.errors import ConfigurationError


def with_external_tools(agent: Any, tools: Mapping[str, dspy.Tool]) -> Any:
    """``agent`` (a ``dspy_imp.ReActV2``) with ``tools`` added as external tools, for one call."""
    if not tools:
        return agent
    taken = sorted(set(tools) & {*agent.own_tools, SUBMIT})
    if taken:
        raise ConfigurationError(f"the extra tools {taken!r} take the names of the agent's own tools (or submit)")
    extended = copy.copy(agent)
    react = copy.copy(agent.react)
    options = agent.react.options
    react.options = dataclasses.replace(options, external_tools=(*options.external_tools, *tools))
    react.tool_names = (*agent.react.tool_names, *tools)
    extended.__dict__["react"] = react
    extended.__dict__["own_tools"] = {**agent.own_tools, **tools}
    return extended
