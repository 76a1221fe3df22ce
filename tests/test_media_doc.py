"""``docs/media.md`` runs as written: its Python blocks, in order, in one namespace."""

from __future__ import annotations

import re
from pathlib import Path

import dspy

DOC = Path(__file__).parents[1] / "docs" / "media.md"


def test_every_example_in_the_media_page_runs() -> None:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)
    assert len(blocks) == 4
    namespace: dict = {}
    with dspy.context(lm=None):
        for block in blocks:
            exec(compile(block, str(DOC), "exec", dont_inherit=True), namespace)
