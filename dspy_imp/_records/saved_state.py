"""Checks on the ``dspy.Predict`` part of a saved step predictor, before anything is applied.

A saved file is data an attacker may have edited. DSPy's own ``Predict.load_state`` trusts
its shape (wrong-typed demos load, then every call fails; a malformed ``signature`` or
``lm`` block raises a raw ``TypeError``/``KeyError``) and rebuilds the ``lm`` block into the
predictor's LM, so a file could send the turn to another model with another key. Here every
DSPy key is checked first and refused with ``ConfigurationError`` naming the field:

- ``demos``/``train``/``traces`` must be lists; demos must be dicts (``Example`` dumps);
- ``signature`` must be ``{"instructions": str, "fields": [{"prefix": str, "description": str}]}``
  with no more fields than the program's signature;
- no text may hold a lone surrogate (every request would fail);
- ``lm`` must be ``None`` or a dict; unless the host opts in (``allow_unsafe_lm_state=True``)
  it may not carry credentials, headers or endpoints, and may only name the model of the LM
  the host already set on the predictor.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import dspy
from dspy.utils.saving import get_dependency_versions

from dspy_imp._records.errors import ConfigurationError, brief

logger = logging.getLogger("dspy_imp")

# Words of a key that could carry a credential, a header or an endpoint (DSPy never writes
# ``api_key``; ``max_tokens`` has the word ``tokens``, not ``token``).
_SENSITIVE_WORDS = frozenset(
    {"key", "token", "secret", "password", "passwd", "credential", "credentials", "auth", "authorization",
     "header", "headers", "url", "base", "endpoint", "host", "proxy", "organization", "project", "deployment",
     "region", "location", "tenant", "cert", "client", "list"}
)  # fmt: skip


def _sensitive(key: str) -> bool:
    words = re.split(r"[_\-]+|(?<=[a-z])(?=[A-Z])", key)
    return any(word.lower() in _SENSITIVE_WORDS for word in words)


def check_predict_state(state: Mapping[str, Any], signature: type[dspy.Signature], lm: Any, *, trusted: bool) -> None:
    """Raise ``ConfigurationError`` naming the first field of ``state`` that cannot be loaded safely."""
    _check_unicode(state, "")
    for key in ("demos", "train", "traces"):
        if key in state and not isinstance(state[key], list):
            raise ConfigurationError(f"saved `{key}` must be a list, got {state[key]!r}; refusing to load")
    for index, demo in enumerate(state.get("demos", [])):
        if not isinstance(demo, Mapping):
            raise ConfigurationError(f"saved `demos[{index}]` must be a dict of fields, got {demo!r}; refusing to load")
    if "signature" not in state:
        raise ConfigurationError("saved state has no `signature` block; refusing to load")
    _check_signature(state["signature"], signature)
    _check_lm(state.get("lm"), lm, trusted)


def _check_unicode(value: Any, path: str) -> None:
    """Text no provider can receive (a lone surrogate, which JSON's ``\\udcff`` escape can hold)
    would fail every later request of the program: refused here, naming where it is."""
    stack = [(value, path)]
    while stack:
        item, at = stack.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                raise ConfigurationError(
                    f"saved `{at.lstrip('.')}` holds text that is not valid Unicode (a lone surrogate); not loaded"
                ) from None
        elif isinstance(item, Mapping):
            stack += [(k, f"{at}.<key>") for k in item if isinstance(k, str)]
            stack += [(v, f"{at}.{k}") for k, v in item.items()]
        elif isinstance(item, list | tuple):
            stack += [(v, f"{at}[{i}]") for i, v in enumerate(item)]


def _check_signature(saved: Any, signature: type[dspy.Signature]) -> None:
    if not isinstance(saved, Mapping) or not isinstance(saved.get("instructions"), str):
        raise ConfigurationError(
            f"saved `signature` must be a dict with string `instructions`, got {saved!r}; refusing to load"
        )
    fields = saved.get("fields")
    if not isinstance(fields, list) or len(fields) > len(signature.fields):
        raise ConfigurationError(
            f"saved `signature.fields` must be a list of at most {len(signature.fields)} fields, got {fields!r}"
        )
    for index, field in enumerate(fields):
        if not isinstance(field, Mapping) or not all(isinstance(field.get(k), str) for k in ("prefix", "description")):
            raise ConfigurationError(
                f"saved `signature.fields[{index}]` must have string `prefix` and `description`, got {field!r}"
            )


def _check_lm(saved: Any, current: Any, trusted: bool) -> None:
    if saved is None:
        return
    if not isinstance(saved, Mapping):
        raise ConfigurationError(f"saved `lm` must be a dict or null, got {saved!r}; refusing to load")
    if not isinstance(saved.get("model"), str):
        raise ConfigurationError(f"saved `lm.model` must be a string, got {saved.get('model')!r}; refusing to load")
    if trusted:
        return
    for key in saved:
        if key != "model" and _sensitive(str(key)):
            raise ConfigurationError(
                f"saved `lm.{key}` would choose credentials, headers or an endpoint; a saved file never does. "
                "Remove it, or pass allow_unsafe_lm_state=True for a file you trust"
            )
    model = getattr(current, "model", None)
    if saved["model"] != model:
        raise ConfigurationError(
            f"saved `lm.model` {saved['model']!r} differs from the LM this program was given ({model!r}); "
            "a saved file never chooses the model. Set the LM yourself, or pass allow_unsafe_lm_state=True"
        )


def read_state_file(path: str | Path) -> dict[str, Any]:
    """A ``.json`` state file's state, or ``ConfigurationError`` naming the file and what is wrong: not
    strict JSON (as DSPy's ``orjson`` reads it: no ``NaN``, no nesting past the parser's limit), not
    an object, a malformed ``metadata`` block.

    A version of a dependency that differs from this environment's is logged, as DSPy logs it; one
    this environment does not have is ignored (DSPy's own ``load`` raises ``KeyError`` there)."""
    try:
        state = json.loads(Path(path).read_bytes(), parse_constant=_no_constant)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise ConfigurationError(f"state file `{path}` is not JSON ({brief(str(exc))}); refusing to load") from None
    if not isinstance(state, dict):
        raise ConfigurationError(f"state file `{path}` must hold a JSON object, got {brief(state)}; refusing to load")
    metadata = state.get("metadata", {})
    versions = metadata.get("dependency_versions", {}) if isinstance(metadata, dict) else None
    if not isinstance(versions, dict) or not all(isinstance(v, str) for v in versions.values()):
        raise ConfigurationError(
            f'state file `{path}`: `metadata` must be {{"dependency_versions": {{name: version}}}}, '
            f"got {brief(metadata)}; refusing to load"
        )
    current = get_dependency_versions()
    for name, saved in versions.items():
        if name in current and current[name] != saved:
            logger.warning(
                "state file %s was saved with %s==%s; this environment has %s", path, name, saved, current[name]
            )
    return state


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")
