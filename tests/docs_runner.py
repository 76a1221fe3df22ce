"""Run the Python code blocks of a Markdown page, offline, the way a reader would.

Every fenced block whose info string is exactly ``python`` runs, in page order, in one namespace
per page (later blocks see what earlier ones defined). A block may use top-level ``await``. After
the page has run, every ``test_*`` function it defined is called too, so a test shown in the docs
is a test that passes.

A page's ``dspy.configure(...)`` holds until the page ends and no longer: it sets DSPy's context
overrides (the same store ``dspy.context`` uses; ``dspy.configure`` itself would change the
process-wide settings, which the test suite's ``dspy.context`` hides anyway), so pages cannot leak
settings into each other or into the tests.

Nothing reaches the network: a page starts with an *example model* configured, and while it runs
``dspy.LM(...)`` builds another. An example model is a
``ScriptedLM`` that answers every request plausibly (it calls ``submit`` with values of the right
type when ``submit`` is offered, and otherwise answers in text). Pages that need a particular
conversation script it themselves with ``ScriptedLM``, as readers would in their tests.

Blocks that are not meant to run (shell commands, signatures, output) use another info string:
``bash``, ``text``, ``json``, ``pycon``. A block that changes the whole process (instrumenting a
tracer, say) is preceded by ``<!-- docs-test: own-process -->`` and runs alone in a fresh
interpreter, in a temporary directory.
"""

from __future__ import annotations

import ast
import asyncio
import inspect
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dspy
from dspy.dsp.utils.settings import thread_local_overrides  # the one private DSPy name here: see Page
from dspy.dsp.utils.utils import dotdict

from dspy_imp.testing import RecordedRequest, Reply, ScriptedLM, call, reply

_FENCE = re.compile(
    r"(?P<own><!-- docs-test: own-process[^>]*-->\n)?^```python[ \t]*\n(?P<code>.*?)^```[ \t]*$",
    re.MULTILINE | re.DOTALL,
)


@dataclass(frozen=True)
class Block:
    page: Path
    line: int
    code: str
    own_process: bool = False


def python_blocks(page: Path) -> list[Block]:
    """The page's ``python`` blocks with the line each starts on."""
    text = page.read_text(encoding="utf-8")
    return [
        Block(page, text.count("\n", 0, match.start("code")) + 1, match.group("code"), bool(match.group("own")))
        for match in _FENCE.finditer(text)
    ]


def _example_value(schema: dict[str, Any]) -> Any:
    """A value that satisfies a (simple) JSON schema: what an example model would submit."""
    if "enum" in schema:
        return schema["enum"][0]
    if "const" in schema:
        return schema["const"]
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return _example_value(schema[key][0])
    kind = schema.get("type", "string")
    samples: dict[str, Any] = {"string": "an example", "integer": 1, "number": 1.0, "boolean": True, "null": None}
    if kind == "array":
        return []
    if kind == "object":
        properties = schema.get("properties", {})
        return {name: _example_value(sub) for name, sub in properties.items() if name in schema.get("required", [])}
    return samples.get(kind, "an example")


def example_reply(request: RecordedRequest) -> Reply:
    """How the example model answers: ``submit`` with typed values when offered, else text."""
    for tool in request.tools or ():
        function = tool["function"]
        if function["name"] == "submit":
            return reply(calls=[call("submit", _example_value(function.get("parameters") or {}))])
    return reply("An example answer.")


def example_lm(model: str = "openai/example", *args: Any, **kwargs: Any) -> ScriptedLM:
    """What ``dspy.LM(...)`` builds while a docs page runs: no network, plausible replies."""
    native = kwargs.get("model_type", "chat") == "chat"
    return ScriptedLM(example_reply, native=native, model=model if "/" in model else f"openai/{model}")


@dataclass
class Page:
    """One page's run: its namespace and what its ``dspy.configure(...)`` calls set."""

    path: Path
    namespace: dict[str, Any]
    configured: dict[str, Any]

    def settings(self) -> dict[str, Any]:
        """A page starts with an example model configured, as a reader's program would have a model."""
        return {"lm": example_lm(), "adapter": None, **self.configured}

    def configure(self, **kwargs: Any) -> None:
        """``dspy.configure`` for a page: effective at once, and for the page's later blocks."""
        self.configured.update(kwargs)
        overrides = thread_local_overrides.get()
        thread_local_overrides.set(dotdict({**overrides, **kwargs}))


@contextmanager
def offline(page: Page) -> Iterator[None]:
    """While a page runs: ``dspy.LM`` builds example models, ``dspy.configure`` is the page's."""
    real_lm, real_configure = dspy.LM, dspy.configure
    dspy.LM, dspy.configure = example_lm, page.configure  # type: ignore[assignment,misc]
    try:
        yield
    finally:
        dspy.LM, dspy.configure = real_lm, real_configure  # type: ignore[misc]


def _run_alone(block: Block) -> None:
    with tempfile.TemporaryDirectory() as folder:
        env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
        done = subprocess.run(
            [sys.executable, "-c", block.code], cwd=folder, env=env, capture_output=True, text=True, check=False
        )
    if done.returncode:
        raise RuntimeError(done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "failed")


def _run_block(block: Block, page: Page) -> None:
    if block.own_process:
        return _run_alone(block)
    # dont_inherit: this module's `from __future__ import annotations` must not turn a page's
    # annotations into strings (DSPy cannot resolve `dspy.Image` from a page's namespace).
    code = compile(
        block.code, f"{block.page.name}:{block.line}", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT, dont_inherit=True
    )
    with dspy.context(**page.settings()):
        if code.co_flags & inspect.CO_COROUTINE:
            asyncio.run(eval(code, page.namespace))
        else:
            exec(code, page.namespace)


def run_page(path: Path) -> list[str]:
    """Run every block, then every ``test_*`` function the page defined; return those tests' names."""
    page = Page(path, {"__name__": f"docs_{path.stem.replace('-', '_')}"}, {})
    with offline(page):
        for block in python_blocks(path):
            try:
                _run_block(block, page)
            except Exception as error:
                raise AssertionError(f"{block.page.name}, block at line {block.line} failed: {error!r}") from error
        tests = [name for name, value in page.namespace.items() if name.startswith("test_") and callable(value)]
        with dspy.context(**page.settings()):
            for name in tests:
                result = page.namespace[name]()
                if inspect.iscoroutine(result):
                    asyncio.run(result)
    return tests
