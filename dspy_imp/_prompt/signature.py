"""What the task signature means for the loop.

Classification (text-answer or submit signature), the reserved ``submit`` tool, the fixed
step signature of the inner predictor, and the validation every set of final outputs goes
through (``submit`` arguments, ``finish_on`` results and the extractor's outputs alike).
Everything here is computed once, at construction, and is I/O free.
"""

from __future__ import annotations

import enum
import types
import weakref
from dataclasses import dataclass
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import dspy
import pydantic
from dspy.adapters.utils import parse_value
from pydantic.fields import FieldInfo

from dspy_imp._prompt import sentences
from dspy_imp._routes import dspy_private

SUBMIT = "submit"


STEP_TEXT = "next_thought"


STEP_CALLS = "tool_calls"


def is_text_answer(signature: type[dspy.Signature]) -> bool:
    """One output, of type ``str``, with no constraints (no enum, pattern or bound)."""
    outputs = list(signature.output_fields.values())
    if len(outputs) != 1:
        return False
    field = outputs[0]
    return field.annotation is str and not field.metadata and not dspy_extra(field).get("constraints")


def dspy_extra(field: FieldInfo) -> dict[str, Any]:
    """DSPy's per-field extras (``desc``, ``constraints``, ...)."""
    extra = field.json_schema_extra
    return extra if isinstance(extra, dict) else {}


def field_description(name: str, field: FieldInfo) -> str | None:
    """The field's own description, or ``None`` for DSPy's ``${name}`` placeholder."""
    desc = dspy_extra(field).get("desc")
    if not desc or desc == f"${{{name}}}":
        return None
    return str(desc)


def _constrained(field: FieldInfo) -> Any:
    return Annotated[(field.annotation, *field.metadata)] if field.metadata else field.annotation


def _output_schema(name: str, field: FieldInfo) -> dict[str, Any]:
    try:
        schema = pydantic.TypeAdapter(_constrained(field)).json_schema()
    except (pydantic.PydanticSchemaGenerationError, pydantic.PydanticUserError, TypeError):
        schema = {"type": "string"}
    schema = dspy_private.resolve_json_schema_reference(schema)
    schema.pop("title", None)
    desc = field_description(name, field)
    if desc is not None:
        schema["description"] = desc
    return schema


class SubmitFunction:
    """The callable behind ``submit``: a module-level class, so demos and programs pickle.

    The loop validates ``submit`` arguments itself (``OutputSpec.validate``); calling this
    directly returns the outputs it was given, as DSPy's ``submit`` does.
    """

    def __init__(self, output_names: tuple[str, ...]):
        self.output_names = output_names

    def __call__(self, **kwargs: Any) -> dict[str, Any]:
        return {name: kwargs[name] for name in self.output_names if name in kwargs}

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SubmitFunction) and other.output_names == self.output_names

    def __hash__(self) -> int:
        return hash(self.output_names)


class SubmitTool(dspy.Tool):
    """``submit`` as the provider sees it: every output is required, defaults or not."""

    def format_as_litellm_function_call(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.desc,
                "parameters": {"type": "object", "properties": self.args, "required": list(self.args)},
            },
        }


def make_submit_tool(signature: type[dspy.Signature]) -> SubmitTool:
    outputs = signature.output_fields
    return SubmitTool(
        SubmitFunction(tuple(outputs)),
        name=SUBMIT,
        desc=sentences.SUBMIT_DESCRIPTION,
        args={name: _output_schema(name, field) for name, field in outputs.items()},
        arg_types={name: field.annotation for name, field in outputs.items()},
    )


def make_step_signature(signature: type[dspy.Signature]) -> type[dspy.Signature]:
    """The inner predictor's signature, fixed for the program's life.

    Task inputs (all optional, so continuation steps may omit them), then ``history`` and
    ``tools`` (the roster as text lines), then ``next_thought`` and ``tool_calls``. The
    instructions are the task's own: the loop's guidance is added when rendering, so an
    optimizer that rewrites them cannot remove it.
    """
    fields: dict[str, Any] = {}
    for name, field in signature.input_fields.items():
        annotation = field.annotation
        optional = annotation if type(None) in get_args(annotation) else annotation | None
        fields[name] = (optional, dspy.InputField(desc=dspy_extra(field).get("desc")))
    fields["history"] = (dspy.History, dspy.InputField())
    fields["tools"] = (list[str] | None, dspy.InputField(desc=sentences.TOOLS_FIELD_DESCRIPTION))
    fields[STEP_TEXT] = (str | None, dspy.OutputField())
    fields[STEP_CALLS] = (list[dict[str, Any]], dspy.OutputField(desc=sentences.CALLS_FIELD_DESCRIPTION))
    return dspy.Signature(fields, signature.instructions)


def make_extraction_signature(signature: type[dspy.Signature], instructions: str) -> type[dspy.Signature]:
    """The extractor's signature: task inputs (optional) and the history as text -> task outputs.

    Its instructions are the task's own followed by the extraction paragraph (reference
    Appendix A); ``dspy.ChainOfThought`` adds ``reasoning`` before the outputs.
    """
    fields: dict[str, Any] = {}
    for name, field in signature.input_fields.items():
        fields[name] = (field.annotation | None, dspy.InputField(desc=dspy_extra(field).get("desc")))
    fields["history"] = (str, dspy.InputField())
    fields.update({name: (field.annotation, field) for name, field in signature.output_fields.items()})
    return dspy.Signature(fields, f"{instructions}\n\n{sentences.EXTRACTION_INSTRUCTIONS}".strip())


@dataclass(frozen=True)
class Rejection:
    """Why a set of outputs was refused; ``sentence`` is what the model reads after ``Error:``."""

    kind: str
    sentence: str


class OutputSpec:
    """Validates final outputs against the task signature (reference §11.1).

    Every output must be present by name, optional and defaulted ones included; values are
    coerced like a parsed completion (enum strings stripped of quotes, numbers from strings,
    JSON for lists and objects) and checked against their type and constraints.
    """

    def __init__(self, signature: type[dspy.Signature]):
        self.names: tuple[str, ...] = tuple(signature.output_fields)
        self._fields = dict(signature.output_fields)
        self._adapters = {n: pydantic.TypeAdapter(_constrained(f)) for n, f in self._fields.items()}

    @classmethod
    def of(cls, signature: type[dspy.Signature]) -> OutputSpec:
        """The signature's spec, built once per signature class: building it is a pydantic
        ``TypeAdapter`` per output, and a program asks for it on every call. A signature class never
        changes (DSPy's ``with_*`` make new ones), nor does a spec once built; the specs are held
        weakly, so a signature made per call leaves with its spec."""
        spec = _SPECS.get(signature)
        if spec is None:
            spec = _SPECS[signature] = cls(signature)
        return spec

    def validate(self, arguments: Any) -> dict[str, Any] | Rejection:
        if not isinstance(arguments, dict):
            return Rejection("invalid_submit_arguments", sentences.INVALID_SUBMIT_ARGUMENTS)
        missing = [name for name in self.names if name not in arguments]
        if missing:
            return Rejection("missing_output_fields", sentences.missing_outputs(missing))
        values: dict[str, Any] = {}
        for name in self.names:
            try:
                values[name] = self._coerce(name, arguments[name])
            except (ValueError, TypeError) as exc:
                return Rejection("invalid_submit_outputs", sentences.invalid_outputs(name, exc))
        return values

    def _coerce(self, name: str, value: Any) -> Any:
        annotation = self._fields[name].annotation
        if isinstance(value, str) and not _accepts_text(annotation):
            value = parse_value(value, annotation)
        return self._adapters[name].validate_python(value)


def _accepts_text(annotation: Any) -> bool:
    if annotation is str:
        return True
    if get_origin(annotation) in (Union, types.UnionType):
        return str in get_args(annotation)
    return False


def type_words(annotation: Any) -> str:
    """Plain words for a type, as the guidance's outputs list shows them."""
    origin = get_origin(annotation)
    if origin is Literal:
        return "one of: " + ", ".join(str(v) for v in get_args(annotation))
    if isinstance(annotation, enum.EnumMeta):
        return "one of: " + ", ".join(str(m.value) for m in annotation)  # type: ignore[var-annotated]
    if origin in (Union, types.UnionType):
        args = [a for a in get_args(annotation) if a is not type(None)]
        return type_words(args[0]) if len(args) == 1 else " or ".join(type_words(a) for a in args)
    if origin in (list, tuple, set, frozenset):
        items = get_args(annotation)
        return "list of " + _plural(type_words(items[0])) if items else "list"
    simple = {str: "string", int: "integer", float: "number", bool: "true or false", dict: "object"}
    if annotation in simple:
        return simple[annotation]
    if origin is dict or (isinstance(annotation, type) and issubclass(annotation, pydantic.BaseModel)):
        return "object"
    return getattr(annotation, "__name__", str(annotation))


def _plural(words: str) -> str:
    irregular = {"true or false": "true or false values", "list": "lists"}
    return irregular.get(words, words + "s" if " " not in words else words)


_SPECS: weakref.WeakKeyDictionary[type, OutputSpec] = weakref.WeakKeyDictionary()
