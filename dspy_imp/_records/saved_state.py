"""Checks on the ``dspy.Predict`` part of a saved step predictor, before anything is applied.

A saved file is data an attacker may have edited. DSPy's own ``Predict.load_state`` trusts
its shape (wrong-typed demos load, then every call fails; a malformed ``signature`` or
``lm`` block raises a raw ``TypeError``/``KeyError``) and rebuilds the ``lm`` block into the
predictor's LM, so a file could send the turn to another model with another key. Here every
DSPy key is checked first and refused with ``ConfigurationError`` naming the field:

- ``demos``/``train``/``traces`` must be lists; demos must be dicts (``Example`` dumps);
- ``signature`` must be ``{"instructions": str, "fields": [{"prefix": str, "description": str}]}``
  with no more fields than the program's signature;
- ``lm`` must be ``None`` or a dict; unless the host opts in (``allow_unsafe_lm_state=True``)
  it may not carry credentials, headers or endpoints, and may only name the model of the LM
  the host already set on the predictor.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import dspy

from dspy_imp._records.errors import ConfigurationError

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
