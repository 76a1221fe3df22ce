"""A ``module:attribute`` a command line names (``python -m dspy_imp.web``, ``python -m dspy_imp.mcp
serve``), imported from the current folder; each thing that can be wrong is one line on exit, not a
traceback, except an import error inside the named module (its traceback says what is missing)."""

from __future__ import annotations

import importlib
import os
import sys
from types import ModuleType
from typing import Any


def load_target(target: str, what: str = "attribute") -> tuple[ModuleType, Any]:
    """The module and the object ``target`` (``module:attribute``) names; else exit with one line.
    ``what`` names the attribute in the message (``expected module:program``)."""
    name, _, attribute = target.partition(":")
    if not name or not attribute:
        sys.exit(f"expected module:{what}, got {target!r}")
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(name)
    except ModuleNotFoundError as missing:
        if missing.name is None or not (name == missing.name or name.startswith(missing.name + ".")):
            raise  # the module exists; something it imports does not: its traceback says what
        sys.exit(f"no module named {name!r} (from {os.getcwd()}): run from the folder that holds it")
    try:
        return module, getattr(module, attribute)
    except AttributeError:
        sys.exit(f"{name} has no attribute {attribute!r}")
