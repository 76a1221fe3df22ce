"""Every install line a reader can copy works today, and the wheel `make dist` builds installs.

dspy-imp is not on PyPI, so an install by name (``pip install 'dspy-imp[web]'``) fails, or worse,
installs whatever someone registered under that name. Two forms work: an editable install from
a clone's root (``pip install -e ".[web]"``) and the wheel of ``make dist``
(``pip install "dist/dspy_imp-<version>-py3-none-any.whl[web]"``). The first test reads every
``pip install`` the README, the docs, the package's error messages and docstrings, the examples
and the notebooks write; the second builds the wheel and installs it with ``[web]`` into a new
virtual environment, offline, where the quickstart's first program then runs.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from test_first_hour import first_program

import dspy_imp

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
EXTRAS = set(PYPROJECT["project"]["optional-dependencies"])
WHEEL = f"dist/dspy_imp-{dspy_imp.__version__}-py3-none-any.whl"

# The files a reader copies install lines from. CHANGELOG.md is history and keeps its old lines.
SOURCES = [
    ROOT / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
    *sorted((ROOT / "dspy_imp").rglob("*.py")),
    *sorted((ROOT / "examples").glob("*.py")),
    *sorted((ROOT / "notebooks").glob("*.ipynb")),
]

# `pip install`, an optional `-e`, and the one target: a quoted string or a bare word. In an
# error message the line sits inside a string, so a bare word stops at a quote.
INSTALL = re.compile(r"""pip install\s+(?P<args>(?:-e\s+)?(?:"[^"\n]*"|'[^'\n]*'|[^\s`'")]+))""")


def _well_formed(args: str) -> bool:
    words = args.split()
    quoted = re.fullmatch(r"""(['"])(?P<inner>.*)\1""", words[-1])
    target = quoted["inner"] if quoted else words[-1]
    match = re.fullmatch(r"(?P<base>[^\[\]]+)(?:\[(?P<extras>[a-z,]+)\])?", target)
    if match is None or not set((match["extras"] or "").split(",")) - {""} <= EXTRAS:
        return False
    if match["extras"] and not quoted:  # zsh expands unquoted brackets
        return False
    if words[0] == "-e":
        return len(words) == 2 and match["base"] == "."
    return len(words) == 1 and match["base"] == WHEEL


def _install_lines() -> list[tuple[str, str]]:
    return [
        (str(path.relative_to(ROOT)), m["args"])
        for path in SOURCES
        for m in INSTALL.finditer(path.read_text(encoding="utf-8"))
    ]


def test_every_install_line_has_a_form_that_works_today() -> None:
    lines = _install_lines()
    files = {path for path, _ in lines}
    # The lines this test exists for: the two Installing sections, the docs pages of each extra,
    # and the error messages of the two optional modules.
    assert {"README.md", "docs/quickstart.md", "docs/web.md", "docs/durable.md"} <= files
    assert {"dspy_imp/web/__init__.py", "dspy_imp/durable.py"} <= files
    wrong = [(path, args) for path, args in lines if not _well_formed(args)]
    assert wrong == []


@pytest.mark.parametrize(
    ("args", "works"),
    [
        ('-e ".[web]"', True),
        ("-e .", True),
        ("-e '.[dbos,web]'", True),
        (f'"{WHEEL}[web]"', True),
        ("'dspy-imp[web]'", False),  # by name: not on PyPI
        ("dspy-imp", False),
        ('-e ".[nosuchextra]"', False),
        ("-e .[web]", False),  # unquoted: zsh expands the brackets
        ('"/path/to/dspy-imp[dbos]"', False),
        ('"dist/dspy_imp-0.0.1-py3-none-any.whl[web]"', False),  # another version than the package's
    ],
)
def test_the_install_line_check_tells_working_lines_from_broken_ones(args: str, works: bool) -> None:
    assert _well_formed(args) is works


def test_the_version_is_written_in_one_place() -> None:
    assert "version" not in PYPROJECT["project"]
    assert PYPROJECT["project"]["dynamic"] == ["version"]
    assert PYPROJECT["tool"]["hatch"]["version"] == {"path": "dspy_imp/__init__.py"}


def _run(*cmd: str | Path, cwd: Path = ROOT) -> str:
    # No PYTHONPATH: the fresh venv must find the wheel's copy, not a checkout on the path.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


@pytest.mark.slow  # about 30 s on 2 busy cores: a build and an install; `make test` runs it
def test_the_built_wheel_installs_with_web_into_a_fresh_venv(tmp_path: Path) -> None:
    # The wheel as `make dist` builds it (without build isolation: no network here).
    _run(sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", tmp_path / "dist", ROOT)
    wheel = tmp_path / WHEEL
    assert wheel.is_file()
    # A fresh venv that sees this interpreter's installed packages (the dependencies) through a
    # .pth file, but not its dspy_imp: a .pth directory's own .pth files (the editable install's
    # finder) are not read, and the venv's own site-packages comes first.
    venv = tmp_path / "venv"
    _run(sys.executable, "-m", "venv", "--without-pip", venv)
    python = venv / "bin" / "python"
    site = Path(_run(python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))").strip())
    shared = [p for p in sys.path if p.endswith("site-packages") and Path(p).is_dir()]
    (site / "shared.pth").write_text("\n".join(shared) + "\n", encoding="utf-8")
    # pip from the shared environment, pointed at the new one; --no-index: the dependencies of
    # [web] must already be there, nothing is downloaded.
    _run(
        python, "-m", "pip", "install", "--no-index", "--no-build-isolation", "--disable-pip-version-check",
        "--quiet", f"{wheel}[web]",
    )  # fmt: skip
    out = _run(
        python,
        "-c",
        "import dspy_imp, dspy_imp.web; from importlib.resources import files;"
        "print(dspy_imp.__file__); print(dspy_imp.__version__);"
        "print(sorted(p.name for p in files('dspy_imp.web').joinpath('static').iterdir()))",
        cwd=tmp_path,
    )
    file, version, static = out.splitlines()
    assert Path(file).is_relative_to(site)  # the wheel's copy, not the clone's
    assert version == dspy_imp.__version__
    assert static == str(sorted(p.name for p in (ROOT / "dspy_imp" / "web" / "static").iterdir()))
    # The quickstart's first program, pasted into that venv, runs offline and prints what the page says.
    code, printed = first_program()
    (tmp_path / "first.py").write_text(code, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH" and not k.endswith("_API_KEY")}
    done = subprocess.run([python, "first.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert (done.returncode, done.stdout) == (0, printed), done.stderr
