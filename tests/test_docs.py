"""The documentation runs: every Python block of the README and of ``docs/``, offline.

See ``docs_runner`` for how a page runs. The API reference is checked to name every public name;
``test_site`` builds the site (``mkdocs build --strict``, the notebooks executed) and checks it.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from docs_runner import python_blocks, run_page

import dspy_imp
import dspy_imp.durable
import dspy_imp.testing
import dspy_imp.tracing

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_every_python_block_of_the_page_runs(page: Path) -> None:
    run_page(page)


def test_the_runner_finds_blocks_and_fails_on_a_broken_one(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("text\n\n```python\nx = 1\n```\n\n```bash\nexit 1\n```\n\n```python\nassert x == 2\n```\n")
    assert [block.line for block in python_blocks(page)] == [4, 12]
    with pytest.raises(AssertionError, match=r"page\.md, block at line 12 failed"):
        run_page(page)


def test_the_runner_calls_the_tests_a_page_defines(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("```python\ndef test_shown():\n    assert False, 'ran'\n```\n")
    with pytest.raises(AssertionError, match="ran"):
        run_page(page)


def test_pages_use_the_example_model_instead_of_the_network(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "```python\nimport dspy, dspy_imp\n"
        "dspy.configure(lm=dspy.LM('openai/gpt-4o-mini'))\n"
        "pred = dspy_imp.ReActV2('question -> answer, confidence: float', tools=[])(question='q')\n"
        "assert (pred.answer, pred.confidence) == ('an example', 1.0)\n"
        "pred = await dspy_imp.ReActV2('question -> answer', tools=[]).acall(question='q')\n"
        "assert pred.answer == 'An example answer.'\n```\n"
    )
    run_page(page)


def test_the_api_reference_names_every_public_name() -> None:
    reference = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    names = [f"dspy_imp.{name}" for name in dspy_imp.__all__]
    names += [f"dspy_imp.testing.{name}" for name in dspy_imp.testing.__all__]
    names += [f"dspy_imp.durable.{name}" for name in dspy_imp.durable.__all__]
    names += [f"dspy_imp.tracing.{name}" for name in dspy_imp.tracing.__all__]
    missing = [name for name in names if f"::: {name}\n" not in reference]
    assert not missing, f"docs/api.md does not document {missing}"


def test_every_page_is_in_the_site_navigation() -> None:
    config = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    missing = [page.name for page in sorted((ROOT / "docs").glob("*.md")) if f" {page.name}" not in config]
    assert not missing, f"mkdocs.yml nav lacks {missing}"


def test_the_why_page_is_generated_from_real_runs() -> None:
    generated = subprocess.run(
        [sys.executable, str(ROOT / "docs" / "generate" / "why.py"), "--check"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert generated.returncode == 0, generated.stdout + generated.stderr


def test_a_block_that_changes_the_process_runs_alone(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "```python\nimport sys\nsys.shown = 1\n```\n\n<!-- docs-test: own-process -->\n"
        "```python\nimport sys\nassert not hasattr(sys, 'shown'), 'not alone'\nraise SystemExit('ran alone')\n```\n"
    )
    with pytest.raises(AssertionError, match=r"block at line 8 failed.*ran alone"):
        run_page(page)
    assert python_blocks(page)[1].own_process
    del sys.shown  # type: ignore[attr-defined]
