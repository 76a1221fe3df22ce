"""``docs/streaming.md`` is runnable: its Python blocks run in order, in one namespace."""

from __future__ import annotations

import pathlib
import re

import dspy_imp

DOC = pathlib.Path(__file__).parent.parent / "docs" / "streaming.md"


def test_every_python_block_of_the_streaming_page_runs(capsys):
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)
    assert len(blocks) >= 8
    namespace: dict = {"__name__": "streaming_doc"}
    try:
        for block in blocks:
            exec(compile(block, str(DOC), "exec"), namespace)
    finally:
        dspy_imp.show_progress(True)
    printed = capsys.readouterr().out
    assert 'Calling lookup({"city": "Paris"})\nlookup returned: station-paris\n' in printed
    assert "use dspy_imp.StreamListener('next_thought') instead" in printed
    assert "Metadata(termination_reason='answered', history: 3 entries)" in printed
