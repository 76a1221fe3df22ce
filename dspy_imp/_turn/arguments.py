"""Checking a call's arguments against its tool's JSON schema (reference §2.6 step 5).

A refusal is an observation the model reads (``sentences``); validators are built once per
tool argument.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from jsonschema import ValidationError, validators
from jsonschema.exceptions import best_match
from jsonschema.protocols import Validator

from dspy_imp._prompt import sentences
from dspy_imp._prompt.signature import Rejection
from dspy_imp._records.errors import ConfigurationError
from dspy_imp._records.history import MAX_DEPTH, check_depth
from dspy_imp._turn.effects import Tool, carried


def check_arguments(tool: Tool, args: Any) -> Rejection | None:
    """The call's arguments against the tool's JSON schema (reference §2.6 step 5)."""
    if not isinstance(args, Mapping):
        return Rejection("schema_validation", sentences.invalid_arguments(["arguments must be a JSON object"]))
    try:  # the validators (and their messages' reprs) recurse into the value
        check_depth(args, "arguments")
    except ConfigurationError:
        return Rejection("schema_validation", sentences.invalid_arguments([f"arguments nest deeper than {MAX_DEPTH}"]))
    whole = carried(tool, "parameters_schema")
    if isinstance(whole, dict):
        return _check_whole(tool, whole, args)
    schema = tool.args or {}
    missing = [k for k, s in schema.items() if k not in args and not (isinstance(s, dict) and "default" in s)]
    if missing:
        return Rejection("missing_required", sentences.missing_arguments(missing))
    problems = []
    for key, value in args.items():
        if key not in schema:
            if not tool.has_kwargs:
                problems.append(f"{key} is not an argument of {tool.name}")
            continue
        spec = schema[key]
        if isinstance(spec, dict) and spec.get("type") not in (None, "Any"):
            error = best_match(argument_validator(spec).iter_errors(value))
            if isinstance(error, ValidationError):
                problems.append(f"{key} {error.message}")
    return Rejection("schema_validation", sentences.invalid_arguments(problems)) if problems else None


def unchecked(tool: Tool, why: str) -> Rejection:
    """The refusal of a call whose arguments could not be checked against its schema (``why``: not
    in time, or the check's error): an observation naming the tool (``_drivers.tools.check_job``)."""
    return Rejection("schema_validation", sentences.unchecked_arguments(tool.name, why))


def _check_whole(tool: Tool, schema: dict[str, Any], args: Mapping[str, Any]) -> Rejection | None:
    """A tool that carries its arguments' whole JSON schema (``parameters_schema``: a tool a web
    client declared) is checked against all of it: ``required``, ``additionalProperties``, ``$defs``,
    with the validator it carries when it has one (``parameters_validator``: the untrusted-schema
    gate's, RE2 patterns and no ``$ref`` fetched)."""
    required = schema.get("required") or ()
    missing = [k for k in required if isinstance(k, str) and k not in args]
    if missing:
        return Rejection("missing_required", sentences.missing_arguments(missing))
    validator = getattr(tool, "parameters_validator", None) or argument_validator(schema)
    errors = sorted(validator.iter_errors(dict(args)), key=lambda e: list(e.absolute_path))
    problems = [f"{'.'.join(map(str, e.absolute_path)) or 'arguments'} {e.message}" for e in errors[:5]]
    return Rejection("schema_validation", sentences.invalid_arguments(problems)) if problems else None


_VALIDATORS: dict[int, tuple[dict[str, Any], Validator]] = {}


_MAX_VALIDATORS = 4096


def argument_validator(spec: dict[str, Any]) -> Validator:
    """One argument's validator, built (and its schema checked) once per tool argument.

    ``jsonschema.validate`` re-checks the schema against its meta-schema on every call; this
    gives the same verdicts and messages. Keyed by the schema object, which the entry keeps
    alive (so its id is not reused); a long-lived process building tools endlessly clears it.
    """
    entry = _VALIDATORS.get(id(spec))
    if entry is not None and entry[0] is spec:
        return entry[1]
    cls = validators.validator_for(spec)
    cls.check_schema(spec)
    validator = cls(spec)
    if len(_VALIDATORS) >= _MAX_VALIDATORS:
        _VALIDATORS.clear()
    _VALIDATORS[id(spec)] = (spec, validator)
    return validator
