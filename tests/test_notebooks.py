"""The notebooks run top to bottom, offline, and are kept in git without outputs."""

from __future__ import annotations

import json
import os
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = sorted((Path(__file__).resolve().parent.parent / "notebooks").glob("*.ipynb"))


def test_there_are_notebooks() -> None:
    assert {path.name for path in NOTEBOOKS} >= {"tour.ipynb", "optimizing.ipynb", "streaming.ipynb"}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda path: path.name)
def test_the_notebook_is_stored_without_outputs(path: Path) -> None:
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    dirty = [n for n, cell in enumerate(cells) if cell.get("outputs") or cell.get("execution_count")]
    assert not dirty, f"{path.name}: cells {dirty} carry outputs; clear them before committing"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda path: path.name)
def test_the_notebook_runs_top_to_bottom(path: Path, tmp_path: Path) -> None:
    notebook = nbformat.read(path, as_version=4)
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "PYTHONWARNINGS": "ignore"}
    env.pop("DSPY_IMP_MODEL", None)
    client = NotebookClient(
        notebook,
        timeout=120,
        kernel_name="python3",
        resources={"metadata": {"path": str(path.parent)}},
        extra_arguments=[f"--HistoryManager.hist_file={tmp_path / 'history.sqlite'}"],
    )
    client.execute(env=env, cwd=str(path.parent))  # raises CellExecutionError on the first failing cell
    outputs = [output for cell in notebook.cells for output in cell.get("outputs", [])]
    assert outputs and not [output for output in outputs if output.output_type == "error"]
    if path.name == "streaming.ipynb":
        assert_streaming_outputs(outputs)


def assert_streaming_outputs(outputs: list) -> None:
    """streaming.ipynb shows the HTML view of a prediction and its metadata, and live progress."""
    html = [o.data["text/html"] for o in outputs if o.output_type == "execute_result" and "text/html" in o.data]
    assert len(html) == 2 and all("dspy-imp-termination" in h for h in html)
    progress = [o for o in outputs if o.output_type == "display_data" and "text/plain" in o.data]
    assert progress, "a plain call in a notebook shows live progress"
