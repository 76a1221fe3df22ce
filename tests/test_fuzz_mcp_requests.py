"""What an MCP server sends that this client parses, fuzzed where it is parsed: a URL elicitation's
URL (``_turn.elicitation.url_problem``, before anything is shown to a person) and a sampling
request with tools (``mcp._sampling.asked``, before any model is called).

The property: a URL is refused with a reason or accepted, and an accepted one is an absolute
http/https URL with a host, no spaces, control characters or credentials, within the bound; a
sampling request the SDK's own types accept becomes one model call or is ``Refused`` (the error
the server reads); never another exception or a hang.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import mcp_types as types
from fuzz_helpers import HOSTILE, JSONABLE, bounded, budget, mutated, nested, realize
from hypothesis import example, given
from hypothesis import strategies as st
from pydantic import ValidationError

from dspy_imp._turn.elicitation import MAX_URL_CHARS, URL_SCHEMES, url_problem
from dspy_imp.mcp._sampling import Asked, Refused, asked

PIECES = st.sampled_from(
    ["http", "https", "javascript", "data", "file", "HTTPS", ":", "//", "/", "@", "[", "]", "::1", "%00", "%2F",
     "\x00", "\t", " ", "\u202e", "\udcff", "example.com", "user:pw", ":99999", ":-1", "?", "#", "a" * 300]
)  # fmt: skip
URLS = st.lists(PIECES | st.text(max_size=6), max_size=12).map("".join) | st.text(max_size=40) | HOSTILE


@budget(400)
@given(URLS)
@example("https://vault.example.com/login")
@example("javascript:alert(1)")
@example("https://trusted.example@evil.example/")
@example("http://[::1")
@example("https://" + "a" * MAX_URL_CHARS)
@example("https://example.com:99999/")
def test_a_url_is_refused_with_a_reason_or_is_one_a_person_may_open(url: Any) -> None:
    value = realize(url)
    why = bounded(lambda: url_problem(value))
    if why is not None:
        assert isinstance(why, str) and why
        return
    assert isinstance(value, str) and 0 < len(value) <= MAX_URL_CHARS
    assert not any(ch.isspace() or ord(ch) < 32 or ord(ch) == 127 for ch in value)
    parts = urlsplit(value)
    assert parts.scheme.lower() in URL_SCHEMES and parts.hostname and "@" not in parts.netloc


VALID = {
    "messages": [
        {"role": "user", "content": {"type": "text", "text": "Weather in Oslo?"}},
        {"role": "assistant",
         "content": [{"type": "tool_use", "id": "t1", "name": "weather", "input": {"city": "Oslo"}}]},
        {"role": "user",
         "content": [{"type": "tool_result", "toolUseId": "t1", "content": [{"type": "text", "text": "4 C"}]}]},
    ],
    "maxTokens": 100,
    "systemPrompt": "Be brief.",
    "tools": [
        {"name": "weather", "description": "The weather.",
         "inputSchema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}},
    ],
    "toolChoice": {"mode": "auto"},
}  # fmt: skip


DEEP_SCHEMA = {**VALID, "tools": [{**VALID["tools"][0], "inputSchema": {"type": "object", "x": nested(5000)}}]}


@budget(300)
@given(mutated(VALID, JSONABLE))
@example(VALID)
@example(DEEP_SCHEMA)  # was a RecursionError in the schema's length check
def test_a_sampling_request_is_one_model_call_or_refused(doc: Any) -> None:
    try:
        params = types.CreateMessageRequestParams.model_validate(realize(doc))
    except (ValidationError, RecursionError):  # the SDK refuses it before it reaches the client
        return
    try:
        made = bounded(lambda: asked("openai/gpt-4o-mini", params))
    except Refused as refused:
        assert refused.error.code == types.INVALID_PARAMS and refused.error.message
        return
    assert isinstance(made, Asked)
    assert made.offered <= {tool.name for tool in made.request.tools}
