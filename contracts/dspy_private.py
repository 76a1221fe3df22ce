"""An import-linter contract of our own: DSPy's private API is touched in the provider routes only.

import-linter squashes an external package into one node (``dspy``), so its ``forbidden``
contract cannot name ``dspy.clients.execution``. This contract reads the import lines that
grimp recorded for each of our modules' imports of ``dspy`` and refuses the private ones
outside the allowed packages: a private module (a ``_``-prefixed part, or one of DSPy's
internal client modules) or a ``_``-prefixed name imported from any DSPy module.
"""

from __future__ import annotations

import re

import grimp
from importlinter import Contract, ContractCheck, fields, output

# DSPy modules that are not its public API (dspy_notes.md): the engine plumbing behind dspy.LM.
_INTERNAL = (
    "clients.execution",
    "clients.backend_selection",
    "clients.call_result",
    "clients.capabilities",
    "clients.engines",
)
_PRIVATE_MODULE = re.compile(r"\bdspy((?:\.\w+)*)")
_PRIVATE_NAME = re.compile(r"^\s*from\s+dspy[\w.]*\s+import\s+\(?\s*(?:[\w\s,]*,\s*)?_\w+")


def is_private(line: str) -> bool:
    """Whether an import line reaches DSPy's private API."""
    if _PRIVATE_NAME.search(line):
        return True
    for match in _PRIVATE_MODULE.finditer(line.split("#")[0]):
        path = match.group(1).lstrip(".")
        if any(part.startswith("_") for part in path.split(".") if part):
            return True
        if any(path == m or path.startswith(m + ".") for m in _INTERNAL):
            return True
    return False


class DspyPrivateApiContract(Contract):
    """Only ``allowed_importers`` (and their descendants) import DSPy's private API."""

    type_name = "dspy_private"

    source_package = fields.StringField()
    allowed_importers = fields.ListField(subfield=fields.StringField())

    def check(self, graph: grimp.ImportGraph, verbose: bool) -> ContractCheck:
        allowed = tuple(self.allowed_importers)  # type: ignore[arg-type]
        found = []
        for module in sorted(graph.find_descendants(str(self.source_package)) | {str(self.source_package)}):
            if any(module == a or module.startswith(a + ".") for a in allowed):
                continue
            for detail in graph.get_import_details(importer=module, imported="dspy"):
                if is_private(detail["line_contents"]):
                    found.append((module, detail["line_number"], detail["line_contents"]))
        return ContractCheck(kept=not found, metadata={"found": found})

    def render_broken_contract(self, check: ContractCheck) -> None:
        for module, line, contents in check.metadata["found"]:
            output.print_error(f"{module}:{line}: {contents}  (DSPy private API outside the routes)")
            output.new_line()
