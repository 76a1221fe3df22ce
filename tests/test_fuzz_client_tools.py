"""Client tools, fuzzed where they are parsed (without the app around them, so many more examples
fit the budget than ``test_fuzz_web.py`` sends): a request's tool declarations
(``_client_tools.declared``, AG-UI's ``parameters`` and the AI SDK's ``inputSchema``), the model's
calls to a declared tool checked against its schema (``_turn.arguments.check_arguments``), and the
results a client sends back (``Offered.results``).

The property: a declaration is refused with a 422 naming the field (``tools[0].parameters...``) or
becomes tools the model can be offered; a call's arguments are accepted or an observation the
model reads; a result is refused with a 422 or kept as bounded text; never another exception or a
hang (patterns run on RE2).
"""

from __future__ import annotations

import json
from typing import Any

from fuzz_helpers import JSONABLE, Deep, bounded, budget, mutated, realize
from hypothesis import example, given
from hypothesis import strategies as st

from dspy_imp._records.errors import ConfigurationError
from dspy_imp._records.history import check_depth
from dspy_imp._turn.arguments import check_arguments
from dspy_imp.web._client_tools import MAX_RESULT_CHARS, Offered, declared
from dspy_imp.web._guard import MAX_DEPTH, Refused

OWN = frozenset({"lookup_order", "submit"})
SCHEMA = {
    "type": "object",
    "properties": {
        "zone": {"type": "string", "pattern": "^[A-Z][a-z]+/[A-Za-z_]+$", "maxLength": 40},
        "hours": {"type": "integer", "minimum": 0, "maximum": 48},
        "at": {"$ref": "#/$defs/when"},
        "tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b"]}, "uniqueItems": True},
        "extra": {"anyOf": [{"type": "null"}, {"type": "object", "patternProperties": {"^x-": {"type": "number"}}}]},
    },
    "required": ["zone"],
    "$defs": {"when": {"type": "string", "format": "date-time"}},
    "additionalProperties": False,
}
DECLARATIONS = [
    [{"name": "browser_time", "description": "The time.", "parameters": SCHEMA}],
    [{"name": "a", "parameters": {"type": "object"}}, {"name": "b", "description": "", "parameters": None}],
]
ARGS = st.dictionaries(st.sampled_from(["zone", "hours", "at", "tags", "extra", "x"]), JSONABLE, max_size=4) | JSONABLE


def declares(items: Any, schema_key: str, args: Any) -> None:
    try:  # the app reads no body nested deeper than the guard's bound (the model's arguments: any depth)
        check_depth(items, "tools", MAX_DEPTH)
    except ConfigurationError:
        return
    try:
        tools = declared(items, OWN, "tools", schema_key)
    except Refused as refused:
        assert refused.status == 422 and "`tools" in refused.message, refused.message
        return
    for tool in tools.values():
        json.dumps(tool.format_as_litellm_function_call())  # what the model is offered
        rejection = check_arguments(tool, args)
        assert rejection is None or (isinstance(rejection.sentence, str) and rejection.sentence), rejection


def renamed(items: Any, key: str) -> Any:
    """The AI SDK's spelling of a declaration list: ``inputSchema`` for ``parameters``."""
    if not isinstance(items, list):
        return items
    return [{(key if k == "parameters" else k): v for k, v in i.items()} if isinstance(i, dict) else i for i in items]


@budget(150)
@given(st.sampled_from(DECLARATIONS).flatmap(lambda d: mutated(d, JSONABLE)), st.booleans(), ARGS)
@example([{"name": "t", "parameters": {"type": "object", "properties": {"x": {"$ref": "#"}}}}], False, {"x": {}})
@example(DECLARATIONS[0], False, {"zone": "Europe/Paris", "hours": Deep(5000, "list")})  # RecursionError (a repr)
def test_a_declaration_and_its_calls_are_refused_naming_the_field_or_checked(
    items: Any, ai_sdk: bool, args: Any
) -> None:
    key = "inputSchema" if ai_sdk else "parameters"
    bounded(lambda: declares(renamed(realize(items), key), key, realize(args)))


PENDING = {
    "k1": {"id": "k1", "name": "browser_time", "args": {}, "kind": "external"},
    "c9": {"id": "c9", "name": "refund", "args": {}, "kind": "approval"},
}


def answers(given_results: Any) -> None:
    try:  # the app reads no body nested deeper than the guard's bound
        check_depth(given_results, "results", MAX_DEPTH)
    except ConfigurationError:
        return
    tools = declared(DECLARATIONS[0], OWN, "tools", "parameters")
    try:
        results = Offered(OWN, tools).results(PENDING, given_results)
    except Refused as refused:
        assert refused.status == 422 and refused.message, refused.message
        return
    for value in results.values():
        assert isinstance(value, BaseException) or len(value) <= MAX_RESULT_CHARS


@budget(100)
@given(st.dictionaries(st.sampled_from(["k1", "c9", "zz", ""]), JSONABLE, max_size=3))
@example({"k1": "x" * (MAX_RESULT_CHARS + 1)})
def test_a_client_tools_result_is_refused_or_kept_as_bounded_text(given_results: dict[str, Any]) -> None:
    bounded(lambda: answers(realize(given_results)))
