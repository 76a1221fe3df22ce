"""Media values (``dspy.Image``, ``dspy.Audio``, ``dspy.File``) as records: recognised, dumped and revived.

How media are *shown* to a model (placed beside tool results, attached after them) is ``_prompt.media``.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import dspy
import pydantic

from dspy_imp._records.errors import ConfigurationError

Part = dict[str, Any]


MEDIA_TAG = "media"


_KIND = {"image_url": "image", "input_audio": "audio", "file": "file"}


def media_parts(value: Any) -> tuple[Part, ...] | None:
    """The content parts of a media value, or ``None`` for anything else."""
    if not isinstance(value, dspy.Type) or isinstance(value, dspy.ToolCalls | dspy.Tool | dspy.History):
        return None
    try:
        formatted = value.format()
    except NotImplementedError:
        return None
    if not isinstance(formatted, list):
        return None
    return tuple(p if isinstance(p, dict) else {"type": "text", "text": str(p)} for p in formatted)


def is_media(value: Any) -> bool:
    return media_parts(value) is not None


def contains_media(value: Any, depth: int = 0) -> bool:
    """Whether a media value sits anywhere in ``value`` (dicts, lists, tuples and pydantic models walked)."""
    if depth > 50:  # deeper than any real result (and a circular one ends here)
        return False
    if isinstance(value, dict):
        return any(contains_media(v, depth + 1) for v in value.values())
    if isinstance(value, list | tuple):
        return any(contains_media(v, depth + 1) for v in value)
    if is_media(value):
        return True
    if isinstance(value, pydantic.BaseModel) and not isinstance(value, dspy.Type):
        return any(contains_media(getattr(value, k), depth + 1) for k in type(value).model_fields)
    return False


def kind_of(part: Part) -> str:
    """``image``, ``audio``, ``file`` or ``media`` (a part type the loop does not name)."""
    return _KIND.get(str(part.get("type")), "media")


def dump_media(value: Any) -> dict[str, Any]:
    """A media value as JSON-safe data: its class and its fields, exactly as held."""
    cls = type(value)
    fields = {name: getattr(value, name) for name in cls.model_fields}
    return {"__imp_type__": MEDIA_TAG, "class": _class_name(cls), "fields": fields}


def _builtin() -> dict[str, type[dspy.Type]]:
    return {"dspy.Image": dspy.Image, "dspy.Audio": dspy.Audio, "dspy.File": dspy.File}


def _class_name(cls: type) -> str:
    short = next((name for name, known in _builtin().items() if known is cls), None)
    return short or f"{cls.__module__}.{cls.__qualname__}"


def is_dumped_media(value: Any) -> bool:
    return isinstance(value, Mapping) and value.get("__imp_type__") == MEDIA_TAG


def revive(value: Any) -> Any:
    """``value`` with every dumped media value restored (containers walked; nothing else changed)."""
    if is_dumped_media(value):
        return _restore(value)
    if isinstance(value, list):
        return [revive(v) for v in value]
    if isinstance(value, Mapping):
        return {k: revive(v) for k, v in value.items()}
    return value


def _restore(data: Mapping[str, Any]) -> Any:
    name = data.get("class")
    cls = _media_classes().get(str(name))
    fields = data.get("fields")
    if cls is None or not isinstance(fields, Mapping):
        raise ConfigurationError(
            f"history holds media of class {name!r}, which is not a dspy.Type defined in this process; "
            "import the module that defines it before load_history"
        )
    unknown = sorted(set(fields) - set(cls.model_fields))
    if unknown:
        raise ConfigurationError(f"dumped media of class {name!r} has unknown field(s) {unknown!r}")
    for field_name, spec in cls.model_fields.items():
        _check_field(name, field_name, spec, fields)
    value = cls.model_construct(**fields)  # as given: no validator re-encodes or downloads
    try:
        parts = media_parts(value)
    except Exception as exc:  # a user type's format() refusing what it was given
        raise ConfigurationError(f"dumped media of class {name!r} cannot be shown: {exc!r}") from exc
    if parts is None:
        raise ConfigurationError(f"dumped value of class {name!r} is not media; refusing to load it")
    return value


def _check_field(name: Any, field_name: str, spec: Any, fields: Mapping[str, Any]) -> None:
    """Each field of the class's own type, strictly (``url=123`` is not a URL); required ones present."""
    if field_name not in fields:
        if spec.is_required():
            raise ConfigurationError(f"dumped media of class {name!r} has no `{field_name}`; refusing to load it")
        return
    try:
        _adapter(spec.annotation).validate_python(fields[field_name], strict=True)
    except pydantic.ValidationError as exc:
        raise ConfigurationError(
            f"dumped media of class {name!r} has `{field_name}` = {fields[field_name]!r}, not a {spec.annotation}"
        ) from exc


@functools.lru_cache(maxsize=256)
def _adapter(annotation: Any) -> pydantic.TypeAdapter[Any]:
    return pydantic.TypeAdapter(annotation)


def _media_classes() -> dict[str, type[dspy.Type]]:
    """Media classes by name: DSPy's (and their subclasses) and user ``dspy.Type``s, never DSPy's other
    types (``dspy.Tool``, ``dspy.ToolCalls``, ``dspy.History``...), which a history never holds as media."""
    found: dict[str, type[dspy.Type]] = _builtin()
    builtin = tuple(found.values())
    pending: list[type[dspy.Type]] = [dspy.Type]
    while pending:
        cls = pending.pop()
        for sub in cls.__subclasses__():
            pending.append(sub)
            if sub.__module__.partition(".")[0] == "dspy" and not issubclass(sub, builtin):
                continue
            found[f"{sub.__module__}.{sub.__qualname__}"] = sub
    return found
