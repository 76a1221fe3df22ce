"""The layers of docs/architecture.md hold, and the contracts that say so can fail.

``lint-imports`` (import-linter, in ``make lint``) checks the contracts in pyproject.toml. Each
case below copies the package, adds one import a contract forbids, and expects that contract
to break: a contract that cannot fail proves nothing.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
LINT_IMPORTS = pathlib.Path(sys.executable).parent / "lint-imports"


def lint_imports(where: pathlib.Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"],
        cwd=where,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "COLUMNS": "300"},  # one line per contract name
    )


@pytest.fixture
def copy(tmp_path: pathlib.Path) -> pathlib.Path:
    """The package, its contracts and our contract type, copied where a test may break them."""
    shutil.copytree(ROOT / "dspy_imp", tmp_path / "dspy_imp", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "contracts", tmp_path / "contracts", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def add_line(module: pathlib.Path, line: str) -> None:
    """Add ``line`` after the module's ``from __future__`` import (every module of ours has one)."""
    text = module.read_text()
    anchor = "from __future__ import annotations\n"
    assert anchor in text, module
    module.write_text(text.replace(anchor, anchor + line + "\n", 1))


def test_the_package_keeps_every_contract() -> None:
    result = lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


@pytest.mark.parametrize(
    ("module", "line", "broken"),
    [
        pytest.param(
            "_records/steps.py",
            "from dspy_imp._program.module import ReActV2",
            "Layers",
            id="records-reach-up-to-the-program",
        ),
        pytest.param(
            "_prompt/render.py",
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from dspy_imp._turn.machine import Turn",
            "Layers",
            id="a-type-only-import-up-a-floor",
        ),
        pytest.param(
            "_watch/reading.py",
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from dspy_imp._watch.streaming import Watch",
            "No import circles",
            id="a-type-only-circle-within-a-subpackage",
        ),
        pytest.param("_turn/machine.py", "import dspy", "The turn imports no DSPy", id="the-turn-imports-dspy"),
        pytest.param(
            "_prompt/render.py",
            "from dspy.clients.execution import prepare",
            "DSPy's private API",
            id="a-private-dspy-import-outside-the-routes",
        ),
        pytest.param(
            "_routes/route.py",
            "from dspy.adapters.base import _provider_tool_call_to_tool_call_dict",
            "DSPy's private API",
            id="a-private-name-in-the-routes-but-not-in-dspy-private",
        ),
        pytest.param(
            "testing/__init__.py",
            "from dspy_imp._records.steps import Step",
            "doubles stand alone",
            id="testing-reaches-in",
        ),
        pytest.param(
            "testing/_engine.py",
            "from dspy_imp._records.steps import Step",
            "doubles stand alone",
            id="a-part-of-testing-reaches-in",
        ),
    ],
)
def test_a_forbidden_import_breaks_its_contract(copy: pathlib.Path, module: str, line: str, broken: str) -> None:
    add_line(copy / "dspy_imp" / module, line)
    result = lint_imports(copy)
    assert result.returncode != 0, result.stdout
    broken_rows = [row for row in result.stdout.splitlines() if row.endswith(" BROKEN")]
    assert any(broken in row for row in broken_rows), result.stdout
