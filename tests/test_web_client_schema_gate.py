"""The untrusted-schema gate (``_records.untrusted_schema``) a client tool's declared schema goes
through: no ``$ref`` fetched, ``$ref`` cycles and deep nesting refused at declaration (422 naming
the field), patterns run on RE2 (no catastrophic backtracking), and nothing else ever raised."""

from __future__ import annotations

import asyncio
import re
import socket
import threading
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from web_helpers import agui_events
from web_scenarios import client, run_input, text_agent, with_lm

import dspy_imp.web
from dspy_imp._records import untrusted_schema
from dspy_imp._records.untrusted_schema import MAX_DEPTH, UntrustedSchema, gate
from dspy_imp.testing import call, reply
from dspy_imp.web import _client_tools


@pytest.fixture
def no_fetching(monkeypatch: pytest.MonkeyPatch) -> None:
    def fetched(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError(f"the gate fetched something: {args!r}")

    monkeypatch.setattr(urllib.request, "urlopen", fetched)
    monkeypatch.setattr(socket, "create_connection", fetched)


def tool(parameters: dict[str, Any]) -> dict[str, Any]:
    return {"name": "browser_time", "description": "The time.", "parameters": parameters}


def chained(length: int) -> dict[str, Any]:
    """A flat body whose schema nests ``length`` deep once its refs are expanded (d0 -> d1 -> ...)."""
    defs = {f"d{i}": {"$ref": f"#/$defs/d{i + 1}"} for i in range(length)}
    defs[f"d{length}"] = {"type": "string"}
    return {"type": "object", "$defs": defs, "properties": {"x": {"$ref": "#/$defs/d0"}}}


REMOTE = {"type": "object", "properties": {"x": {"$ref": "http://169.254.169.254/latest/meta-data/iam"}}}
FILE = {"type": "object", "properties": {"x": {"$ref": "file:///etc/passwd"}}}
CYCLE = {
    "type": "object",
    "$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"allOf": [{"$ref": "#/$defs/a"}]}},
    "properties": {"x": {"$ref": "#/$defs/a"}},
}


@pytest.mark.usefixtures("no_fetching")
@pytest.mark.parametrize(
    ("parameters", "error"),
    [
        (
            REMOTE,
            "`tools[0].parameters.properties.x.$ref` must be a local reference (`#/...`); nothing is fetched, "
            "got 'http://169.254.169.254/latest/meta-data/iam'",
        ),
        (
            FILE,
            "`tools[0].parameters.properties.x.$ref` must be a local reference (`#/...`); nothing is fetched, "
            "got 'file:///etc/passwd'",
        ),
        (
            {"type": "object", "properties": {"x": {"$id": "http://evil/", "$ref": "#/a"}}},
            "`tools[0].parameters.properties.x.$id` is not accepted (only local `$ref`s to `#/...`)",
        ),
        (
            CYCLE,
            "`tools[0].parameters.properties.x.$ref.$ref.allOf[0].$ref` makes a $ref cycle: "
            "#/$defs/a -> #/$defs/b -> #/$defs/a",
        ),
        (
            {"type": "object", "properties": {"x": {"$ref": "#"}}},
            "`tools[0].parameters.properties.x.$ref.properties.x.$ref` makes a $ref cycle: # -> #",
        ),
        (
            {"type": "object", "properties": {"x": {"type": "string", "pattern": "(a)\\1"}}},
            "`tools[0].parameters.properties.x.pattern` is a pattern RE2 cannot run",
        ),
        (
            {"type": "object", "patternProperties": {"(?=a)": {}}},
            "`tools[0].parameters.patternProperties.(?=a)` is a pattern RE2 cannot run",
        ),
        (chained(MAX_DEPTH), f"nests deeper than {MAX_DEPTH} levels (its $refs expanded)"),
    ],
    ids=["remote-ref", "file-ref", "id", "ref-cycle", "root-cycle", "backreference", "lookahead", "deep"],
)
async def test_a_dangerous_schema_is_refused_at_declaration(parameters: dict[str, Any], error: str) -> None:
    agent = text_agent()
    lm = with_lm(agent, [reply("no")])
    app = dspy_imp.web.app(agent, client_tools=True)
    async with client(app) as http:
        response = await http.post("/ag-ui", json=run_input("Hi", tools=[tool(parameters)]))
    assert response.status_code == 422
    assert error in response.json()["error"]
    assert lm.requests == []


EVIL = {"type": "object", "properties": {"x": {"type": "string", "pattern": "^(a+)+$"}}, "required": ["x"]}


async def test_a_call_against_an_evil_pattern_is_checked_by_re2_and_the_model_reads_the_refusal() -> None:
    agent = text_agent()
    script = [reply(calls=[call("browser_time", {"x": "a" * 100 + "!"}, id="k0")]), reply("I cannot.")]
    with_lm(agent, script)
    app = dspy_imp.web.app(agent, client_tools=True)
    async with client(app) as http:
        response = await http.post("/ag-ui", json=run_input("Hi", tools=[tool(EVIL)]))
    assert response.status_code == 200, response.text
    assert f"'{'a' * 100}!' does not match '^(a+)+$'" in response.text


def test_the_gates_validator_runs_patterns_on_re2(monkeypatch: pytest.MonkeyPatch) -> None:
    used: list[str] = []
    real = untrusted_schema.re2.compile
    monkeypatch.setattr(untrusted_schema.re2, "compile", lambda p: used.append(p) or real(p))
    monkeypatch.setattr(untrusted_schema, "_COMPILED", {})
    schema = {**EVIL, "patternProperties": {"^b(c+)+$": {}}, "additionalProperties": False}
    validator = gate(schema, "parameters")
    errors = [e.message for e in validator.iter_errors({"x": "a" * 5000 + "!", "b" + "c" * 5000 + "!": 1})]
    assert sorted(used) == ["^(a+)+$", "^b(c+)+$"]
    assert len(errors) == 2


def test_the_registry_retrieves_nothing(no_fetching: None) -> None:
    validator = gate(
        {"type": "object", "$defs": {"a": {"type": "integer"}}, "properties": {"n": {"$ref": "#/$defs/a"}}}, "p"
    )
    assert [e.message for e in validator.iter_errors({"n": "1"})] == ["'1' is not of type 'integer'"]
    with pytest.raises(Exception, match=re.escape("http://169.254.169.254/x")):
        validator._resolver.lookup("http://169.254.169.254/x")


SCHEMAS = st.recursive(
    st.one_of(
        st.booleans(),
        st.integers(-3, 3),
        st.sampled_from(["string", "#", "#/$defs/a", "^(a+)+$", "(?=x)", "http://x/"]),
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(
            st.sampled_from(
                [
                    "type",
                    "properties",
                    "$ref",
                    "$defs",
                    "a",
                    "pattern",
                    "patternProperties",
                    "allOf",
                    "items",
                    "additionalProperties",
                    "$id",
                    "$schema",
                    "required",
                    "not",
                ]
            ),
            inner,
            max_size=4,
        ),
    ),
    max_leaves=30,
)


@settings(max_examples=200, derandomize=True, deadline=None)
@given(SCHEMAS)
def test_the_gate_accepts_or_refuses_naming_a_field_never_anything_else(schema: Any) -> None:
    try:
        validator = gate(schema, "parameters")
    except UntrustedSchema as error:
        assert error.field.startswith("parameters")
        return
    list(validator.iter_errors({"x": "a" * 40 + "!"}))


# -- a call's check: off the event loop, within a bound ------------------------------------------

GUARD = 30.0  # s: a hang guard only, never reached when the check runs where it should
ZONE = {"type": "object", "properties": {"zone": {"type": "string"}}, "required": ["zone"]}


class Blocking:
    """The call's validator, blocking every check until ``release`` (as a slow schema would);
    ``entered`` when a check starts, ``released`` whether each was released (not the guard)."""

    def __init__(self) -> None:
        self.entered, self.release = threading.Event(), threading.Event()
        self.released: list[bool] = []
        self.real: Any = None

    def iter_errors(self, instance: Any) -> Any:
        self.entered.set()
        self.released.append(self.release.wait(GUARD))
        return self.real.iter_errors(instance)


@pytest.fixture
def blocking(monkeypatch: pytest.MonkeyPatch) -> Iterator[Blocking]:
    validator = Blocking()
    real_gate = _client_tools.gate

    def gated(schema: Any, at: str) -> Any:
        checked = real_gate(schema, at)
        if at != "parameters":  # the declaration's check (named by its field): as it is
            return checked
        validator.real = checked
        return validator

    monkeypatch.setattr(_client_tools, "gate", gated)
    yield validator
    validator.release.set()  # an abandoned check finishes


async def test_a_calls_check_runs_off_the_event_loop(blocking: Blocking) -> None:
    """While a call's check blocks, the server answers another request; then the call is checked."""
    agent = text_agent()
    with_lm(agent, [reply(calls=[call("browser_time", {"zone": "UTC"}, id="k0")])])
    app = dspy_imp.web.app(agent, client_tools=True)
    async with client(app) as http:
        turn = asyncio.ensure_future(http.post("/ag-ui", json=run_input("What time is it?", tools=[tool(ZONE)])))
        assert await asyncio.to_thread(blocking.entered.wait, GUARD)
        info = await http.get("/api/info")  # served while the check blocks
        blocking.release.set()
        response = await turn
    assert info.status_code == 200
    assert blocking.released == [True]  # still blocked when the other request was answered
    assert agui_events(response.text)[-1]["outcome"]["type"] == "interrupt"  # a good call: the turn waits on it


@pytest.mark.parametrize("sync", [False, True], ids=["async", "sync"])
async def test_a_check_over_its_bound_is_a_bad_call_naming_the_tool(
    blocking: Blocking, monkeypatch: pytest.MonkeyPatch, sync: bool
) -> None:
    """The check blocks until the turn has ended: its bound passes first, whatever the machine's speed."""
    monkeypatch.setattr(untrusted_schema, "CHECK_SECONDS", 0.05, raising=False)
    agent = text_agent()
    lm = with_lm(agent, [reply(calls=[call("browser_time", {"zone": "UTC"}, id="k0")]), reply("I cannot tell.")])
    app = dspy_imp.web.app(agent, client_tools=True, sync=sync)
    async with client(app) as http:
        response = await http.post("/ag-ui", json=run_input("What time is it?", tools=[tool(ZONE)]))
    assert blocking.entered.is_set() and blocking.released == []  # the turn ended; the check was left blocked
    blocking.release.set()
    events = agui_events(response.text)
    told = (
        "invalid arguments: the arguments of browser_time could not be checked against its schema "
        "(not within 0.05 s); call it again with simpler arguments"
    )
    assert [e["content"] for e in events if e["type"] == "TOOL_CALL_RESULT"] == [told]
    assert events[-1]["result"]["outputs"] == {"answer": "I cannot tell."}
    assert any(told in str(m["content"]) for m in lm.requests[1].messages if m["role"] == "tool")


async def test_a_schema_the_gate_cannot_check_at_declaration_is_a_422_naming_the_field(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def broken(schema: Any, at: str) -> Any:
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr(_client_tools, "gate", broken)
    agent = text_agent()
    lm = with_lm(agent, [reply("no")])
    async with client(dspy_imp.web.app(agent, client_tools=True)) as http:
        response = await http.post("/ag-ui", json=run_input("Hi", tools=[tool(ZONE)]))
    assert response.status_code == 422
    assert response.json() == {
        "error": "`tools[0].parameters` could not be checked as a JSON schema: "
        "RecursionError: maximum recursion depth exceeded"
    }
    assert lm.requests == []
