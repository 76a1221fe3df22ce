"""The notebooks are kept in git without outputs.

They run top to bottom, offline, once per test session: the documentation build executes them
(mkdocs-jupyter, a failing cell fails the build) and ``tests/test_site.py`` checks their pages,
the HTML view and the live progress of ``streaming.ipynb`` included.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parent.parent / "notebooks").glob("*.ipynb"))


def test_there_are_notebooks() -> None:
    assert {path.name for path in NOTEBOOKS} >= {"tour.ipynb", "optimizing.ipynb", "streaming.ipynb"}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda path: path.name)
def test_the_notebook_is_stored_without_outputs(path: Path) -> None:
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    dirty = [n for n, cell in enumerate(cells) if cell.get("outputs") or cell.get("execution_count")]
    assert not dirty, f"{path.name}: cells {dirty} carry outputs; clear them before committing"
