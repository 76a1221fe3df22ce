"""The parts of a program: the DSPy modules it is given, which DSPy walks as its own.

DSPy finds a program's predictors by walking its attributes (``BaseModule.named_parameters``);
every optimizer, ``save``/``load``, ``set_lm`` and ``deepcopy`` work on what that walk finds. A
``ReActV2`` also holds modules where that walk does not look: the programs of its sub-agent tools
(``agent.as_tool()``) and its guardrail modules (an LM judge). They are its *parts*, each under a
name (``part_name``: the tool's name, the guardrail's, with any character that is not a letter, a
digit or ``_`` made ``_``; an input and an output guardrail of one name are ``input_<name>`` and
``output_<name>``), so the program's parameters include ``researcher.react`` and, a level down,
``researcher.coder.react``.

- ``named_parameters``: DSPy's walk, then each part's parameters under its name, each parameter
  once (the first path found names it, as DSPy names a module reached twice); a part that was
  compiled on its own (``_compiled``) stays frozen, as DSPy keeps a compiled sub-module.
- ``named_sub_modules``: DSPy's breadth-first walk, into parts too.
- ``part``: a part by name, for ``agent.researcher`` (so DSPy's ``map_named_predictors`` and any
  dotted path reach it, from a wrapper module too).
- ``load_state``: a file without a part's state (saved before the part existed, by a 0.x release,
  by stock ``dspy.ReActV2``, or without a context policy) leaves that part as it is; so does a
  wrapper module's (``optional_ids``, through ``dspy_private.install_part_tolerant_loading``).
"""

from __future__ import annotations

import logging
import re
from collections import deque
from collections.abc import Iterator
from typing import Any

import dspy

from dspy_imp._records.errors import ConfigurationError, brief
from dspy_imp._records.history import check_depth
from dspy_imp._records.migration import migrate_state
from dspy_imp._records.saved_state import check_predict_state
from dspy_imp._routes.state_loading import load_except

logger = logging.getLogger("dspy_imp")

_NOT_NAME = re.compile(r"[^A-Za-z0-9_]")

OPTIONAL = ("summarizer",)
"""The program's own parameters a saved file may lack (``react`` it must have)."""


def part_name(name: str) -> str:
    """The attribute name a part goes by: letters, digits and ``_`` (``web-search`` -> ``web_search``)."""
    cleaned = _NOT_NAME.sub("_", name)
    return f"_{cleaned}" if cleaned[:1].isdigit() else cleaned


def parts(program: Any) -> list[tuple[str, dspy.Module]]:
    """The program's parts by name, in order: its sub-agents (tool order), then its guardrail modules."""
    held = program.__dict__
    found: list[tuple[str, dspy.Module]] = []
    for tool in (held.get("own_tools") or {}).values():
        child = getattr(tool, "program", None) if getattr(tool, "runs_agent", False) else None
        if isinstance(child, dspy.Module):
            found.append((part_name(tool.name), child))
    react = held.get("react")
    options = getattr(react, "options", None)
    guards = [
        (stage, guardrail.name, guardrail.check)
        for stage in ("input", "output")
        for guardrail in getattr(options, f"{stage}_guardrails", ())
        if guardrail.module and isinstance(guardrail.check, dspy.Module)
    ]
    for stage, name, check in guards:  # a name an input and an output guardrail share: prefixed by stage
        shared = any(n == name and c is not check for _, n, c in guards)
        found.append((part_name(f"{stage}_{name}" if shared else name), check))
    return found


def check_parts(program: Any) -> None:
    """Each part name names one part, and none hides an attribute of the program."""
    named: dict[str, int] = {}
    for name, child in parts(program):
        if named.setdefault(name, id(child)) != id(child):
            raise ConfigurationError(
                f"two different modules (sub-agents or guardrail modules) would be the part {name!r} of this "
                "program; give them different names (as_tool(name=...), dspy_imp.Guardrail(name=...))"
            )
        if name in program.__dict__ or hasattr(type(program), name):
            raise ConfigurationError(
                f"the part name {name!r} (a sub-agent tool or guardrail module) is an attribute of ReActV2; "
                "give it another name (as_tool(name=...), dspy_imp.Guardrail(name=...))"
            )


def part(program: Any, name: str) -> dspy.Module | None:
    return next((child for held, child in parts(program) if held == name), None)


def named_parameters(program: Any, own: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
    """``own`` (DSPy's walk of the program's attributes), then each part's parameters."""
    found = list(own)
    seen = {id(param) for _, param in found}
    for name, child in parts(program):
        if getattr(child, "_compiled", False):  # compiled on its own: frozen, as DSPy keeps a sub-module
            continue
        for sub, param in child.named_parameters():
            if id(param) not in seen:
                seen.add(id(param))
                found.append((f"{name}.{sub}", param))
    return found


def named_sub_modules(program: Any, type_: Any = None, skip_compiled: bool = False) -> Iterator[tuple[str, Any]]:
    """DSPy's breadth-first walk of the attributes, which also walks into each program's parts."""
    wanted = dspy.BaseModule if type_ is None else type_
    queue: deque[tuple[str, Any]] = deque([("self", program)])
    seen = {id(program)}

    def add(name: str, item: Any) -> None:
        if id(item) not in seen:
            seen.add(id(item))
            queue.append((name, item))

    while queue:
        name, item = queue.popleft()
        if isinstance(item, wanted):
            yield name, item
        if not (skip_compiled and isinstance(item, dspy.BaseModule) and getattr(item, "_compiled", False)):
            for sub, value in _held(name, item):
                add(sub, value)


def _held(name: str, item: Any) -> Iterator[tuple[str, Any]]:
    """What the walk goes on to from ``item``: a module's attributes (and a program's parts), a
    list's or a dict's items."""
    if isinstance(item, dspy.BaseModule):
        yield from ((f"{name}.{sub}", value) for sub, value in item.__dict__.items())
        if callable(getattr(type(item), "program_parts", None)):
            yield from ((f"{name}.{sub}", child) for sub, child in item.program_parts())
    elif isinstance(item, list | tuple):
        yield from ((f"{name}[{index}]", value) for index, value in enumerate(item))
    elif isinstance(item, dict):
        yield from ((f"{name}[{key}]", value) for key, value in item.items())


def optional_ids(module: Any) -> frozenset[int]:
    """The parameters a file may lack, of every program ``module`` holds: its parts' and its summarizer."""
    found: set[int] = set()
    for _, program in module.named_sub_modules():
        if not callable(getattr(type(program), "program_parts", None)):
            continue
        prefixes = tuple(f"{name}." for name, _ in parts(program))
        found.update(id(p) for n, p in program.named_parameters() if n in OPTIONAL or n.startswith(prefixes))
    return frozenset(found)


def load_state(program: Any, state: dict[str, Any], allow_unsafe_lm_state: bool) -> None:
    """DSPy's ``load_state``, where a part (or the summarizer) the file has no state for keeps its own.

    As DSPy's: a trial run on a copy first, so a file that fails applies nothing. A file is data
    anyone may have edited: its shape is checked first (a dict of parts, each a dict, none nested
    past ``MAX_DEPTH``, every part the program requires present, a plain ``dspy.Predict`` part's
    block as strict as the step predictor's), and whatever DSPy's own loading raises on what is
    left is a ``ConfigurationError`` naming the part.
    """
    if not isinstance(state, dict):
        raise ConfigurationError(f"saved state must be a dict of the program's parts, got {brief(state)}")
    check_depth(state, "state")
    signature = program.signature
    state, report = migrate_state(state, tuple(signature.input_fields), tuple(signature.output_fields))
    _check_known(program, state)
    optional = tuple(f"{name}." for name, _ in parts(program))

    def skip(name: str) -> bool:  # saved without this part: it keeps its defaults
        return name not in state and (name in OPTIONAL or name.startswith(optional))

    _check_blocks(program, state, skip, allow_unsafe_lm_state)
    try:
        load_except(program, state, skip, allow_unsafe_lm_state)
    except ConfigurationError:
        raise
    except (TypeError, KeyError, ValueError, AttributeError, ImportError, NotImplementedError) as exc:
        raise ConfigurationError(f"saved state could not be loaded ({type(exc).__name__}: {brief(exc)})") from exc
    if report is not None:
        logger.warning("%s", report)


def _check_blocks(program: Any, state: dict[str, Any], skip: Any, allow_unsafe_lm_state: bool) -> None:
    """Each part's block present and a dict; a plain ``dspy.Predict``'s checked as the step predictor's."""
    for name, param in program.named_parameters():
        if skip(name):
            continue
        block = state.get(name)
        if not isinstance(block, dict):
            found = "has none" if name not in state else f"has {brief(block)}"
            raise ConfigurationError(f"saved state needs a dict for the part `{name}`, {found}; refusing to load")
        if isinstance(param, dspy.Predict) and type(param).load_state is dspy.Predict.load_state:  # DSPy's own
            unknown = sorted(set(block) - _PREDICT_KEYS)
            if unknown:
                raise ConfigurationError(f"saved `{name}` has key(s) DSPy does not write: {unknown!r}; not loaded")
            try:
                check_predict_state(block, param.signature, param.lm, trusted=allow_unsafe_lm_state)
            except ConfigurationError as refused:
                raise ConfigurationError(f"saved `{name}`: {refused}") from None


_PREDICT_KEYS = frozenset({"traces", "train", "demos", "signature", "lm", "fields"})


def _check_known(program: Any, state: dict[str, Any]) -> None:
    """Refuse a key naming no parameter of the program (a renamed sub-agent), as every unknown key is."""
    names = {name for name, _ in program.named_parameters()}
    held = tuple(f"{name}." for name, _ in parts(program))  # a compiled part is not among the parameters
    unknown = sorted(k for k in state if k != "metadata" and k not in names and not k.startswith(held))
    if unknown:
        raise ConfigurationError(
            f"saved state has key(s) this program has no part for: {unknown!r}; its parts are "
            f"{[name for name, _ in parts(program)]!r} (a renamed sub-agent or guardrail module keeps its "
            "old name in the file: rename it back, or the key in the file); refusing to load it"
        )
