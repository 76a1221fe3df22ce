"""``docs/controls.md`` runs as written: its Python blocks, in order, in one namespace."""

from __future__ import annotations

import re
from pathlib import Path

import dspy

DOC = Path(__file__).parents[1] / "docs" / "controls.md"


def test_every_example_in_the_controls_page_runs():
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)
    assert len(blocks) == 7
    namespace: dict = {}
    with dspy.context(lm=None):
        for block in blocks:
            exec(compile(block, str(DOC), "exec"), namespace)
