"""``agent.as_tool()``: a program as a ``dspy.Tool`` whose call is the program's turn.

The tool's arguments are the program's inputs (their types and descriptions, as DSPy reads a
function's), its result the prediction. Run by a ``dspy_imp.ReActV2``, the call is a sub-agent
call (``_turn.agents``): the driver sets the child call the program reads (``_drivers.child``),
to resume a paused child from its recorded history or to start a new turn on the arguments.
Called by anything else (a stock ``dspy.ReAct``, your code), it is a plain turn on the arguments.

The program is a part of the caller's (``_program.parts``): ``copy.deepcopy`` of the tool (as of
the caller, in every optimizer's first step) binds the copy's runner to a copy of the program, in
the same memo, so a child shared by two tools or by a wrapper module stays one child in the copy.
"""

from __future__ import annotations

import copy
import inspect
import re
from typing import Any, ClassVar

import dspy

from dspy_imp._drivers.child import current
from dspy_imp._prompt.signature import SUBMIT
from dspy_imp._records.errors import ConfigurationError

_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
_GENERIC = "StringSignature"


class AgentTool(dspy.Tool):
    """A sub-agent tool: ``program`` is the agent whose turn the call runs."""

    runs_agent: ClassVar[bool] = True

    @property
    def program(self) -> Any:
        return self.func.program

    def __deepcopy__(self, memo: dict[int, Any]) -> AgentTool:
        """A tool whose runner calls the copied program (a function is never copied by ``deepcopy``)."""
        twin = agent_tool(copy.deepcopy(self.program, memo), self.name, self.desc or None)
        memo[id(self)] = twin
        return twin


def agent_tool(program: Any, name: str | None, description: str | None) -> AgentTool:
    name = _name(program, name)
    if description is not None and (not isinstance(description, str) or not description.strip()):
        raise ConfigurationError(f"as_tool `description` must be a non-blank string, got {description!r}")
    fields = program.signature.input_fields

    def run(**inputs: Any) -> Any:
        child = current(program)
        kwargs = (child.resume() if child is not None else None) or inputs
        if child is not None and child.asynchronous:
            return program.acall(**kwargs)
        return program(**kwargs)

    parameters = [
        inspect.Parameter(k, inspect.Parameter.KEYWORD_ONLY, annotation=f.annotation) for k, f in fields.items()
    ]
    run.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
    run.__annotations__ = {k: f.annotation for k, f in fields.items()}
    run.program = program  # type: ignore[attr-defined]
    descriptions = {k: d for k, f in fields.items() if (d := _described(f))}
    return AgentTool(run, name=name, desc=description or program.signature.instructions, arg_desc=descriptions)


def _name(program: Any, name: str | None) -> str:
    if name is None:
        generic = program.signature.__name__ == _GENERIC
        if generic:
            raise ConfigurationError("as_tool needs a `name` for an agent with a string signature")
        name = re.sub(r"(?<!^)(?=[A-Z])", "_", program.signature.__name__).lower()
    if not isinstance(name, str) or not _NAME.fullmatch(name) or name == SUBMIT:
        raise ConfigurationError(
            f"as_tool `name` must be 1-64 letters, digits, '_' or '-' (and not {SUBMIT!r}), got {name!r}"
        )
    return name


def _described(field: Any) -> str | None:
    desc = (field.json_schema_extra or {}).get("desc")
    return desc if isinstance(desc, str) and not desc.startswith("${") else None
