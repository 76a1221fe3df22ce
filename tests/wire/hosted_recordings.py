"""Anthropic server-tool replies, from third-party recordings.

The web search blocks (``cassettes/hosted/anthropic_web_search.json``, shared with
``examples/hosted_tools.py``) are pydantic-ai's recording ``tests/models/cassettes/test_anthropic/
test_anthropic_text_parts_ahead_of_built_in_tool_call.yaml`` (a live ``web_search_20250305`` call,
recorded 2026-09-29): its ``server_tool_use`` block, its ``web_search_tool_result`` (the first two of
its ten results, each with its ``encrypted_content`` and ``page_age`` as served, and the result's
``caller``), its text block with the ``web_search_result_location`` citation, and its usage
(``server_tool_use.web_search_requests: 1``). That recording was streamed; here the blocks are
assembled into the non-streaming body shape of Anthropic's Messages API (the same blocks, whole).
The ``tool_use`` of a function tool after them is ours (the recording had none).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parents[2] / "cassettes" / "hosted"

RECORDING: dict[str, Any] = json.loads((HERE / "anthropic_web_search.json").read_text())
SERVER_TOOL_USE: dict[str, Any]
SEARCH_RESULT: dict[str, Any]
CITED_TEXT: dict[str, Any]
SERVER_TOOL_USE, SEARCH_RESULT, CITED_TEXT = RECORDING["content"]
SEARCH_ID: str = SERVER_TOOL_USE["id"]
CITATION: dict[str, Any] = CITED_TEXT["citations"][0]
USAGE: dict[str, Any] = RECORDING["usage"]

SEARCH_ERROR: dict[str, Any] = {  # Anthropic's documented error shape (web search tool docs)
    "type": "web_search_tool_result",
    "tool_use_id": "srvtoolu_01Cd8zMpxR1XbqGk9wFEiZtQ",
    "content": {"type": "web_search_tool_result_error", "error_code": "max_uses_exceeded"},
}


# pydantic-ai's ``tests/models/cassettes/test_anthropic/test_anthropic_code_execution_tool.yaml``: two
# non-streamed ``code_execution_20250825`` replies with thinking on, as recorded (content, usage).
CODE_REPLY_1: dict[str, Any] = {
    "container": {"expires_at": "2025-09-17T00:24:43.124581Z", "id": "container_011CTCwceSoRxi8Pf16Fb7Tn"},
    "content": [
        {
            "signature": (
                "EvsDCkYIBxgCKkCSFDXODoOrOHU14Yv7+TNxuR4sDsJKw9y9C1gGPIWqslF6apNZ1xwJ94E9KsQBfXlZ/ELoBSTj3YT0liwueN6k"
                "EgxrakXTN1a+YafcnckaDC2EYhQsezxdE/P7XSIwczAl/PquNGpiOLqC5DnYKvD2+F0JhBQsbLe1bQi/VR0XCQdd+4DZ5dBU5Amu"
                "DcntKuICIMg145F3vP8bFnTdUMOIQY0NASypKRnHj6owIkuqWJ+pwu6OdpDt2a+Lr7R1dw860hcPjEp65eg5nwtyi8bw1pzfQJmC"
                "48DoiQn/OYeiXMWeNv5HoKEK/lkikqVPcTnD03MytUsNGRqUBfDvr4bxNgxqeAENi5pZ21ySnjxhC879gN0G3uriEM8o4LXj/X2D"
                "otKO1lvIEL/2RQZGrFulDLq5I2FW51YBY3kzHerK7zwFgs3t39VLsy7Q3T6sLi4yh4BbFxF4RaSOCicTRbMYC8UO85uhArSSm/0E"
                "DDhX+kxIGJZ91F6Vv0vSS4qLy+55buZ8Jj4/P86t9YMxBeylQ/tUNGzhISqc1+CZeQ4aZKiRyQmlfkA6bcM42JAFQT/c0EbM2JmD"
                "siSpkM8d021E9hqrr2eIhasaOo4vG5yUz7f9aSaRc/Muy02mckNxxxS7UshBCxr8veoMa0HYnB/rBNFeGAE="
            ),
            "thinking": (
                "The user is asking for a simple multiplication: 3 * 12390. This is a mathematical calculation, and "
                "according to my guidelines, I should always use the code execution tool for math. Even though this "
                "is a relatively simple calculation that could be done mentally, the instruction is clear that I "
                "should use the code execution tool for math."
            ),
            "type": "thinking",
        },
        {
            "id": "srvtoolu_01Pc4vcD1JPUDcVhHaskFUfn",
            "input": {"code": 'result = 3 * 12390\nprint(f"3 * 12390 = {result}")'},
            "name": "code_execution",
            "type": "server_tool_use",
        },
        {
            "content": {
                "content": [],
                "return_code": 0,
                "stderr": "",
                "stdout": "3 * 12390 = 37170\n",
                "type": "code_execution_result",
            },
            "tool_use_id": "srvtoolu_01Pc4vcD1JPUDcVhHaskFUfn",
            "type": "code_execution_tool_result",
        },
        {"text": "3 * 12390 = 37170", "type": "text"},
    ],
    "id": "msg_018bVTPr9khzuds31rFDuqW4",
    "model": "claude-sonnet-4-20250514",
    "role": "assistant",
    "stop_reason": "end_turn",
    "stop_sequence": None,
    "type": "message",
    "usage": {
        "cache_creation": {"ephemeral_1h_input_tokens": 0, "ephemeral_5m_input_tokens": 0},
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
        "input_tokens": 1771,
        "output_tokens": 171,
        "server_tool_use": {"web_fetch_requests": 0, "web_search_requests": 0},
        "service_tier": "standard",
    },
}
