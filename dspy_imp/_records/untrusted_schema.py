"""The one gate for a JSON schema someone else wrote (a web client's tool, next an MCP server's).

``gate(schema, at)`` checks it once, at declaration, and returns the validator its calls are
checked with; a schema it refuses raises ``UntrustedSchema`` naming the field at fault
(``tools[0].parameters.properties.x.pattern``). What it guarantees:

- No ``$ref`` is ever fetched: only local refs (``#/...``) are accepted, and the validator's
  ``referencing.Registry`` refuses to retrieve anything. ``$id``, anchors and dynamic refs are
  refused (they would move the base a local ref resolves against).
- The schema is walked iteratively with its local refs expanded: a ``$ref`` cycle is refused, and
  so are nesting deeper than ``MAX_DEPTH`` and more than ``MAX_NODES`` nodes once expanded.
- ``pattern`` and ``patternProperties`` run on RE2 (linear time, no backtracking); a pattern RE2
  cannot compile is refused. Needs ``google-re2`` (the ``web`` extra).
- A call is checked off the event loop within ``CHECK_SECONDS`` by the tool that carries the
  validator (``arguments_bound``; the drivers' ``CheckArguments``): a check that takes longer is a
  bad call the model reads, naming the tool.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any
from urllib.parse import unquote

import re2
from jsonschema import SchemaError, ValidationError, validators
from jsonschema.protocols import Validator
from referencing import Registry, Resource
from referencing.exceptions import NoSuchResource

MAX_DEPTH = 32
"""The deepest a schema may nest, its local refs expanded."""
MAX_NODES = 10_000
"""The most nodes a schema may hold, its local refs expanded (a ref reused many times counts each time)."""
CHECK_SECONDS = 2.0
"""The longest a call's check against an untrusted schema may take (the drivers run it in a worker
thread, off the event loop: ``_turn.effects.CheckArguments``); longer is a bad call the model reads."""

_DATA = frozenset({"const", "enum", "default", "examples", "description", "title", "$comment", "format"})
_NAMED = frozenset({"properties", "patternProperties", "$defs", "definitions", "dependentSchemas", "dependencies"})
_MOVING = frozenset({"$id", "$anchor", "$dynamicRef", "$dynamicAnchor", "$recursiveRef", "$recursiveAnchor"})
_UNKNOWN = object()


class UntrustedSchema(ValueError):
    """A schema the gate refuses. ``field``: where (``tools[0].parameters.properties.x``)."""

    def __init__(self, field: str, problem: str):
        super().__init__(f"`{field}` {problem}")
        self.field = field


MAX_JSON_DEPTH = 4 * MAX_DEPTH
"""The deepest a schema's JSON may nest before it is measured (a schema level is two JSON levels,
``properties`` then the name; data such as ``enum`` values adds more): JSON encoding recurses."""


def sized(schema: Any, at: str, most_chars: int) -> None:
    """Refuse ``schema`` (``UntrustedSchema``) when its JSON nests deeper than ``MAX_JSON_DEPTH``
    (walked iteratively) or is longer than ``most_chars`` as compact JSON: what every gate's caller
    asks first, so that a hostile nesting ends as a refusal, never as a ``RecursionError``."""
    stack: list[tuple[Any, int]] = [(schema, 0)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, Mapping):
            children: Any = node.values()
        elif isinstance(node, list | tuple):
            children = node
        else:
            continue
        if depth >= MAX_JSON_DEPTH:
            raise UntrustedSchema(at, f"nests deeper than {MAX_JSON_DEPTH} levels")
        stack.extend((child, depth + 1) for child in children)
    if len(json.dumps(schema, separators=(",", ":"), default=str)) > most_chars:
        raise UntrustedSchema(at, f"is longer than {most_chars} characters")


def _refuse_retrieval(uri: str) -> Resource[Any]:
    raise NoSuchResource(ref=uri)  # type: ignore[call-arg]


_NO_RETRIEVAL: Registry[Any] = Registry(retrieve=_refuse_retrieval)  # type: ignore[call-arg]


def gate(schema: Any, at: str) -> Validator:
    """``schema`` checked (see the module) and its validator, RE2-backed and fetching nothing."""
    if not isinstance(schema, dict | bool):
        raise UntrustedSchema(at, "must be a JSON schema (an object)")
    base = _draft(schema, at)
    _walk(schema, at)
    try:
        base.check_schema(schema)
    except SchemaError as error:
        raise UntrustedSchema(at, f"is not a valid JSON schema: {error.message}") from None
    cls = validators.extend(
        base,
        {"pattern": _pattern, "patternProperties": _pattern_properties, "additionalProperties": _additional},
    )
    return cls(schema, registry=_NO_RETRIEVAL)


def _draft(schema: Any, at: str) -> Any:
    if not isinstance(schema, dict) or "$schema" not in schema:
        return validators.Draft202012Validator
    declared = schema["$schema"]
    found = validators.validator_for(schema, default=_UNKNOWN) if isinstance(declared, str) else _UNKNOWN
    if found is _UNKNOWN:
        raise UntrustedSchema(f"{at}.$schema", f"names no draft this server knows: {declared!r}")
    return found


def _walk(root: Any, at: str) -> None:
    """Every node of ``root``, its local refs expanded, without recursion (a deep schema cannot overflow)."""
    stack: list[tuple[Any, str, int, tuple[str, ...]]] = [(root, at, 0, ())]
    count = 0
    patterned = False
    while stack:
        node, where, depth, chain = stack.pop()
        count += 1
        if count > MAX_NODES:
            raise UntrustedSchema(at, f"holds more than {MAX_NODES} nodes once its $refs are expanded")
        if depth > MAX_DEPTH:
            raise UntrustedSchema(where, f"nests deeper than {MAX_DEPTH} levels (its $refs expanded)")
        if isinstance(node, list):
            stack.extend((item, f"{where}[{i}]", depth + 1, chain) for i, item in enumerate(node))
        elif isinstance(node, dict):
            patterned = patterned or "patternProperties" in node
            stack.extend(_children(root, node, where, depth, chain))
    if patterned and _has_key(root, "unevaluatedProperties"):
        raise UntrustedSchema(at, "may not combine `unevaluatedProperties` with `patternProperties`")


def _children(root: Any, node: dict[Any, Any], where: str, depth: int, chain: tuple[str, ...]) -> Iterator[Any]:
    for key, value in node.items():
        here = f"{where}.{key}"
        if key in _DATA:
            continue
        if key in _MOVING:
            raise UntrustedSchema(here, "is not accepted (only local `$ref`s to `#/...`)")
        if key == "$ref":
            target = _resolve(root, value, here)
            if value in chain:
                raise UntrustedSchema(here, f"makes a $ref cycle: {' -> '.join((*chain, value))}")
            yield target, here, depth + 1, (*chain, value)
        elif key == "pattern" and isinstance(value, str):
            _compile(value, here)
        elif key in _NAMED and isinstance(value, dict):
            for name, sub in value.items():
                if key == "patternProperties" and isinstance(name, str):
                    _compile(name, f"{here}.{name}")
                yield sub, f"{here}.{name}", depth + 1, chain
        elif isinstance(value, dict | list):
            yield value, here, depth + 1, chain


def _resolve(root: Any, ref: Any, here: str) -> Any:
    if not isinstance(ref, str) or not (ref == "#" or ref.startswith("#/")):
        raise UntrustedSchema(here, f"must be a local reference (`#/...`); nothing is fetched, got {ref!r}")
    node = root
    for part in ref[2:].split("/") if ref != "#" else ():
        step = unquote(part).replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and step in node:
            node = node[step]
        elif isinstance(node, list) and step.isdigit() and int(step) < len(node):
            node = node[int(step)]
        else:
            raise UntrustedSchema(here, f"points at nothing in the schema: {ref!r}")
    if not isinstance(node, dict | bool):
        raise UntrustedSchema(here, f"points at something that is not a schema: {ref!r}")
    return node


def _has_key(root: Any, key: str) -> bool:
    stack = [root]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if key in node:
                return True
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return False


def _compile(pattern: str, here: str) -> Any:
    try:
        return _re2(pattern)
    except re2.error as error:
        raise UntrustedSchema(here, f"is a pattern RE2 cannot run (linear time, no backreferences): {error}") from None


_COMPILED: dict[str, Any] = {}


def _re2(pattern: str) -> Any:
    compiled = _COMPILED.get(pattern)
    if compiled is None:
        if len(_COMPILED) >= 4096:
            _COMPILED.clear()
        compiled = _COMPILED[pattern] = re2.compile(pattern)
    return compiled


def _pattern(validator: Any, pattern: str, instance: Any, schema: Mapping[str, Any]) -> Iterator[ValidationError]:
    if validator.is_type(instance, "string") and not _re2(pattern).search(instance):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


def _pattern_properties(validator: Any, patterns: Mapping[str, Any], instance: Any, schema: Any) -> Iterator[Any]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        for key, value in instance.items():
            if _re2(pattern).search(key):
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _additional(validator: Any, extra_schema: Any, instance: Any, schema: Mapping[str, Any]) -> Iterator[Any]:
    if not validator.is_type(instance, "object"):
        return
    known = schema.get("properties", {})
    patterns = [_re2(p) for p in schema.get("patternProperties", {})]
    extras = sorted(k for k in instance if k not in known and not any(p.search(k) for p in patterns))
    if validator.is_type(extra_schema, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], extra_schema, path=extra)
    elif extra_schema is False and extras:
        verb = "was" if len(extras) == 1 else "were"
        yield ValidationError(
            f"Additional properties are not allowed ({', '.join(map(repr, extras))} {verb} unexpected)"
        )
