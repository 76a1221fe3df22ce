"""A newcomer's first hour: the quickstart's first program runs offline as written and prints what
the page says; a real model without its key fails in one line naming the variable; ``make example``
runs any example; ``python -m dspy_imp.web`` refuses a wrong ``module:attribute`` in one line."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import traceback
from pathlib import Path
from typing import Any

import dspy
import pytest

import dspy_imp
from dspy_imp.web.__main__ import main as web_main

ROOT = Path(__file__).resolve().parent.parent
QUICKSTART = ROOT / "docs" / "quickstart.md"


def first_program(page: Path = QUICKSTART) -> tuple[str, str]:
    """The page's first ``python`` block and the ``text`` block after it that says what it prints."""
    text = page.read_text(encoding="utf-8")
    found = re.search(
        r"^```python\n(?P<code>.*?)^```\n\n(?:It prints:\n\n)?```text\n(?P<out>.*?)^```", text, re.M | re.S
    )
    assert found is not None, f"{page.name}: the first block is followed by its output"
    first = re.search(r"^```python\n", text, re.M)
    assert first is not None and first.start() == found.start()  # the first block, not a later one
    return found["code"], found["out"]


def offline_env() -> dict[str, str]:
    """The environment of a machine with no provider key set."""
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env["PYTHONPATH"] = str(ROOT)
    return env


@pytest.mark.parametrize("page", ["quickstart.md", "index.md"])
def test_the_first_program_of_the_page_runs_offline_and_prints_what_the_page_says(page: str, tmp_path: Path) -> None:
    code, printed = first_program(ROOT / "docs" / page)
    assert "dspy.LM(" not in code.split("#")[0]  # no real model before its comment
    script = tmp_path / "first.py"
    script.write_text(code, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, env=offline_env(), capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == printed


def test_a_real_model_without_its_key_fails_in_one_line_naming_the_variable(
    run: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    agent = dspy_imp.ReActV2("question -> answer", tools=[])
    with dspy.context(lm=dspy.LM("openai/gpt-4o-mini")), pytest.raises(dspy_imp.StepError) as caught:
        run(agent, question="What's the weather in Paris?")
    error = caught.value
    assert type(error.reason).__name__ == "LMNotConfiguredError"
    # No chain: what a reader sees is the turn's own frames and one message naming the variable.
    assert error.__cause__ is None and error.__suppress_context__
    shown = "".join(traceback.format_exception(error))
    assert "direct cause" not in shown and "During handling" not in shown
    last = shown.rstrip("\n").split("\n")
    message = next(line for line in last if line.startswith("dspy_imp._records.step_error.StepError: "))
    assert "Set OPENAI_API_KEY in the environment" in message
    assert error.usage is not None and error.usage.requests == {"step": 1} and error.usage.input_tokens == 0


def test_other_failures_keep_their_chain(run: Any) -> None:
    from dspy.utils.exceptions import LMAuthError

    from dspy_imp.testing import ScriptedLM, fail

    lm = ScriptedLM([fail.raises(LMAuthError("invalid x-api-key", model="openai/gpt-4o-mini"))])
    with dspy.context(lm=lm), pytest.raises(dspy_imp.StepError) as caught:
        run(dspy_imp.ReActV2("question -> answer", tools=[]), question="hi")
    assert caught.value.__cause__ is caught.value.reason


def make(*args: str) -> subprocess.CompletedProcess[str]:
    # The venv running the tests stands in for .venv; its install stamp is taken as made.
    venv = sys.prefix
    return subprocess.run(
        ["make", "--no-print-directory", f"VENV={venv}", "-o", f"{venv}/.installed-dev", *args],
        cwd=ROOT,
        env=offline_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )


EXAMPLES = sorted(p.stem for p in (ROOT / "examples").glob("[a-z]*.py") if p.stem != "mcp_server")


def test_make_example_runs_the_named_example_with_the_venvs_python() -> None:
    done = make("example", "NAME=router")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"{sys.prefix}/bin/python examples/router.py \n")
    assert "team" in done.stdout  # the router's own output follows


@pytest.mark.parametrize("name", ["", "nosuch"])
def test_make_example_without_a_known_name_lists_the_examples(name: str) -> None:
    done = make("example", f"NAME={name}")
    assert done.returncode == 2
    first = done.stdout.splitlines()[0]
    lead = "make example NAME=<script>: one of " if not name else "no examples/nosuch.py: one of "
    assert first == lead + " ".join(EXAMPLES) + " "


@pytest.mark.parametrize(
    ("target", "said"),
    [
        ("nosuch.module:agent", "no module named 'nosuch.module' (from {cwd}): run from the folder that holds it"),
        ("examples.nosuch:agent", "no module named 'examples.nosuch' (from {cwd}): run from the folder that holds it"),
        ("json:nosuch", "json has no attribute 'nosuch'"),
        ("examples.router", "expected module:attribute, got 'examples.router'"),
    ],
)
def test_the_web_server_refuses_a_wrong_target_in_one_line(
    target: str, said: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ROOT)
    with pytest.raises(SystemExit) as refused:
        web_main([target])
    assert refused.value.code == said.format(cwd=ROOT)


def test_a_module_that_fails_its_own_import_shows_its_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "broken_agent.py").write_text("import nosuch_dependency\n", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ModuleNotFoundError) as missing:
        web_main(["broken_agent:agent"])
    assert missing.value.name == "nosuch_dependency"
