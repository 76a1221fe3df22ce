"""docs/architecture.md stays true to the package: its picture, its table of modules, old records."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest

from dspy_imp._durable.codec import decode_error, encode_error
from dspy_imp._records.clock import DeadlinePassed
from dspy_imp._records.errors import ConfigurationError
from dspy_imp._routes.failures import ContentFiltered

ROOT = pathlib.Path(__file__).resolve().parents[1]
PAGE = (ROOT / "docs" / "architecture.md").read_text()


def test_the_picture_is_drawn_from_todays_imports() -> None:
    result = subprocess.run(
        [sys.executable, "docs/generate/architecture.py", "--check"], cwd=ROOT, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr


FOLDERS = sorted(p.parent.name for p in (ROOT / "dspy_imp").glob("_*/__init__.py"))


def test_the_package_has_its_folders() -> None:
    assert FOLDERS == ["_drivers", "_durable", "_program", "_prompt", "_records", "_routes", "_turn", "_watch"]


@pytest.mark.parametrize("folder", FOLDERS)
def test_every_module_of_every_folder_is_in_the_table(folder: str) -> None:
    row = next(line for line in PAGE.splitlines() if line.startswith(f"| `{folder}/` |"))
    modules = sorted(p.stem for p in (ROOT / "dspy_imp" / folder).glob("*.py") if p.stem != "__init__")
    assert [m for m in modules if f"`{m}`" not in row] == []


@pytest.mark.parametrize(
    ("recorded", "cls"),
    [
        ("dspy_imp._errors:ConfigurationError", ConfigurationError),
        ("dspy_imp._deadline:DeadlinePassed", DeadlinePassed),
        ("dspy_imp._failures:ContentFiltered", ContentFiltered),
    ],
)
def test_an_error_recorded_before_the_move_revives_as_its_class(recorded: str, cls: type[BaseException]) -> None:
    data = encode_error(cls("recorded earlier"))
    data["chain"][0]["type"] = recorded  # what a DBOS database written by 0.1 holds
    revived = decode_error(data)
    assert type(revived) is cls and str(revived) == "recorded earlier"


def test_a_step_error_recorded_before_the_move_revives_as_a_step_error() -> None:
    import dspy

    from dspy_imp import StepError

    data = encode_error(StepError("no reply", dspy.History(messages=[])))
    data["chain"][0]["type"] = "dspy_imp._errors:StepError"
    revived = decode_error(data)
    assert type(revived) is StepError and revived.history.messages == []
