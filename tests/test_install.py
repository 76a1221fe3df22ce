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

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest
from test_examples import EXPECTED as EXAMPLE_LINES
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


# A .pth line of the fresh venv: each of its processes writes, at exit, where dspy_imp came from.
TELL = (
    "import atexit, sys; atexit.register(lambda: sys.stderr.write("
    '"dspy_imp from: %s\\n" % getattr(sys.modules.get("dspy_imp"), "__file__", None)))\n'
)


@dataclass(frozen=True)
class WheelVenv:
    """The wheel `make dist` builds, installed with ``[web]`` in a fresh venv: its ``python``, its
    ``site`` (site-packages) and a ``folder`` outside the clone to run from."""

    python: Path
    site: Path
    folder: Path


@pytest.fixture(scope="module")
def wheel_venv(tmp_path_factory: pytest.TempPathFactory) -> WheelVenv:
    tmp_path = tmp_path_factory.mktemp("wheel")
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
    # Every process of this venv says, at exit, where it imported dspy_imp from (stderr).
    (site / "zz_dspy_imp_from.pth").write_text(TELL, encoding="utf-8")
    folder = tmp_path / "outside"
    folder.mkdir()
    return WheelVenv(python, site, folder)


@pytest.mark.slow  # about 30 s on 2 busy cores: a build and an install; `make test` runs it
def test_the_built_wheel_installs_with_web_into_a_fresh_venv(wheel_venv: WheelVenv) -> None:
    python, site, tmp_path = wheel_venv.python, wheel_venv.site, wheel_venv.folder
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


def _outside_copy(venv: WheelVenv) -> Path:
    """``examples/``, ``notebooks/`` and ``cassettes/`` copied outside the clone (a notebook reads
    ``../examples``; the offline examples read the recordings in ``../cassettes``)."""
    for folder in ("examples", "notebooks", "cassettes"):
        if not (venv.folder / folder).exists():
            shutil.copytree(
                ROOT / folder, venv.folder / folder, ignore=shutil.ignore_patterns("__pycache__", "*.sqlite")
            )
    return venv.folder


def _imported_from_the_wheel(stderr: str, venv: WheelVenv) -> None:
    """Every process that imported dspy_imp (the example, and any it started) had the wheel's copy."""
    said = [line.removeprefix("dspy_imp from: ") for line in stderr.splitlines() if line.startswith("dspy_imp from: ")]
    files = [Path(f) for f in said if f != "None"]
    assert files, stderr[-2000:]
    for file in files:
        assert file.is_relative_to(venv.site) and not file.is_relative_to(ROOT), file


@pytest.mark.slow  # each example imports DSPy in a fresh interpreter: minutes in all; `make test` runs them
@pytest.mark.parametrize("script", sorted(EXAMPLE_LINES))
def test_every_example_runs_from_a_fresh_process_on_the_built_wheel(wheel_venv: WheelVenv, script: str) -> None:
    folder = _outside_copy(wheel_venv)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "DSPY_IMP_MODEL")}
    done = subprocess.run(
        [wheel_venv.python, Path("examples") / script], cwd=folder, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "model: scripted" in done.stdout
    missing = [line for line in EXAMPLE_LINES[script] if line not in done.stdout]
    assert not missing, f"{script} printed:\n{done.stdout}"
    _imported_from_the_wheel(done.stderr, wheel_venv)


@pytest.mark.slow  # each notebook starts a kernel that imports DSPy; `make test` runs them
@pytest.mark.parametrize("name", sorted(p.name for p in (ROOT / "notebooks").glob("*.ipynb")))
def test_every_notebook_runs_from_a_fresh_process_on_the_built_wheel(
    wheel_venv: WheelVenv, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import nbformat
    from nbclient import NotebookClient

    folder = _outside_copy(wheel_venv)
    kernels = folder / "jupyter" / "kernels" / "wheel"  # a kernel on the fresh venv's python
    kernels.mkdir(parents=True, exist_ok=True)
    argv = [str(wheel_venv.python), "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    (kernels / "kernel.json").write_text(json.dumps({"argv": argv, "display_name": "wheel", "language": "python"}))
    monkeypatch.setenv("JUPYTER_PATH", str(folder / "jupyter"))
    monkeypatch.delenv("PYTHONPATH", raising=False)
    monkeypatch.delenv("DSPY_IMP_MODEL", raising=False)
    notebook = nbformat.read(folder / "notebooks" / name, as_version=4)
    notebook.cells.append(nbformat.v4.new_code_cell("import dspy_imp\nprint(dspy_imp.__file__)"))
    NotebookClient(
        notebook, kernel_name="wheel", timeout=300, resources={"metadata": {"path": str(folder / "notebooks")}}
    ).execute()  # a failing cell raises CellExecutionError
    printed = "".join(o.get("text", "") for o in notebook.cells[-1].outputs).strip()
    assert Path(printed).is_relative_to(wheel_venv.site) and not Path(printed).is_relative_to(ROOT), printed
