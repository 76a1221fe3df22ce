"""``dspy_imp.mcp.from_config``: the ``mcpServers`` JSON of Claude Desktop, Cursor and VS Code."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import dspy_imp
from dspy_imp import mcp


def written(tmp_path: Path, data: Any) -> Path:
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps(data) if not isinstance(data, str) else data)
    return path


def test_claude_desktop_servers_with_variables_and_defaults(tmp_path: Path) -> None:
    path = written(
        tmp_path,
        {
            "mcpServers": {
                "files": {"command": "npx", "args": ["-y", "server-filesystem", "${HOME_DIR:-/srv}"],
                          "env": {"TOKEN": "${TOKEN}", "EMPTY": "${EMPTY:-fallback}"}},
                "crm": {"url": "https://${HOST}/mcp", "headers": {"Authorization": "Bearer ${TOKEN}"}},
                "off": {"command": "nothing", "disabled": True},
            }
        },
    )  # fmt: skip
    files, crm = mcp.from_config(path, environ={"TOKEN": "t0k", "HOST": "crm.example.com", "EMPTY": ""}, prefix="x")
    assert (files.name, crm.name) == ("files", "crm")
    assert files.prefix == crm.prefix == "x"
    parameters = files.connects_to
    assert parameters.command == "npx"
    assert parameters.args == ["-y", "server-filesystem", "/srv"]
    assert parameters.env == {"TOKEN": "t0k", "EMPTY": "fallback"}


def test_vs_code_servers_with_types(tmp_path: Path) -> None:
    path = written(
        tmp_path,
        {
            "servers": {
                "local": {"type": "stdio", "command": "python", "args": ["-m", "mcp_server_time"]},
                "remote": {"type": "http", "url": "http://127.0.0.1:9/mcp"},
            },
            "inputs": [],
        },
    )
    local, remote = mcp.from_config(path, environ={})
    assert (local.name, local.connects_to.args) == ("local", ["-m", "mcp_server_time"])
    assert (remote.name, remote.connects_to) == ("remote", "http://127.0.0.1:9/mcp")


@pytest.mark.parametrize(
    ("data", "said"),
    [
        ({"mcpServers": {"a": {"command": "x", "env": {"K": "${NOT_SET}"}}}},
         r"`mcpServers\.a\.env\.K` uses \$\{NOT_SET\}"),
        ({"mcpServers": {"a": {"command": "x", "args": ["${input:key}"]}}},
         r"`mcpServers\.a\.args\[0\]` uses \$\{input:key\}"),
        ({"mcpServers": {"a": {"type": "ws", "url": "ws://h/ws"}}},
         r"`mcpServers\.a\.type` must be 'stdio', 'http' or 'sse', got 'ws'"),
        ({"mcpServers": {"a": {"command": "x", "transport": "x"}}},
         r"`mcpServers\.a` has unknown field\(s\) \['transport'\]"),
        ({"mcpServers": {"a": {"args": []}}}, r"`mcpServers\.a` has neither a `command` nor a `url`"),
        ({"mcpServers": {"a": "npx"}}, r"`mcpServers\.a` must be an object"),
        ({"other": {}}, r"holds no `mcpServers`"),
        ("{not json", r"is not JSON"),
        ({"mcpServers": {"a": {"command": "x", "args": "--flag"}}}, r"`args` must be a list of strings"),
    ],
)  # fmt: skip
def test_a_bad_file_names_the_field(tmp_path: Path, data: Any, said: str) -> None:
    with pytest.raises(dspy_imp.ConfigurationError, match=said):
        mcp.from_config(written(tmp_path, data), environ={})


def test_a_missing_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(dspy_imp.ConfigurationError, match=r"cannot read .*nothing\.json"):
        mcp.from_config(tmp_path / "nothing.json")
